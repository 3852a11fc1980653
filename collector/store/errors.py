"""The store's errors: each one line a user can act on."""

from stepwatch.collector.errors import Failure, UsageError


class StoreError(RuntimeError, Failure):
    """A store that cannot be read or written, in one line."""


class NoStoreError(StoreError, UsageError):
    """The store a command reads does not exist yet (a usage error: ingest first, or name another --db)."""


class Unreachable(StoreError):
    """A shared store's storage or catalog that did not answer (``where``: "storage" or "the catalog")."""

    def __init__(self, message: str, where: str) -> None:
        super().__init__(message)
        self.where = where


class CommitUnknownError(StoreError):
    """A commit sent to a shared store's catalog that did not answer: whether it landed is not known (exit 5)."""

    outcome_unknown = True
