"""The store's errors: each one line a user can act on."""


class StoreError(RuntimeError):
    """A store that cannot be read or written, in one line."""


class NoStoreError(StoreError):
    """The store a command reads does not exist yet (a usage error: ingest first, or name another --db)."""
