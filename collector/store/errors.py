"""The store's errors: each one line a user can act on."""

from stepwatch.collector.errors import Failure, UsageError


class StoreError(RuntimeError, Failure):
    """A store that cannot be read or written, in one line."""


class NoStoreError(StoreError, UsageError):
    """The store a command reads does not exist yet (a usage error: ingest first, or name another --db)."""
