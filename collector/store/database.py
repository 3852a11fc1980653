"""The store's interface: where a store lives, reading it, and the errors it gives. A store is one DuckDB base
file and a folder of deltas beside it (``collector.store.engine``), holding the tables of
``collector.store.tables``. Everything that reads or writes a store goes through ``collector.store``: runs
through ``ingest``, alerts and bisect steps through ``records``, reads through ``queries``, and a user's own
SQL through ``query``, which sees the base and the deltas as one store.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from stepwatch.collector.store import address, engine, shared
from stepwatch.collector.store import ingest as ingesting
from stepwatch.collector.store.engine import Snapshot, Write, compact, require, snapshot, write
from stepwatch.collector.store.errors import NoStoreError, StoreError
from stepwatch.collector.store.files import (
    DB_ENV,
    DEFAULT_DB,
    SYNTHETIC_DB,
    clean,
    delta_dir,
    store_identity,
    writer_lock,
)
from stepwatch.collector.store.tables import DERIVED, STORE_VERSION, run_id_index

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "DERIVED",
    "STORE_VERSION",
    "SYNTHETIC_DB",
    "NoStoreError",
    "StoreError",
    "StoreReader",
    "Write",
    "clean",
    "compact",
    "default_db",
    "delta_dir",
    "ingest",
    "open_store",
    "resolve",
    "run_id_index",
    "snapshot",
    "update",
    "write",
    "writer_lock",
]


class StoreReader:
    """A read-only snapshot of the live store that follows it: when a write has changed the store, the
    next ``connection()`` closes the old snapshot and opens the new one."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self._snap: Snapshot | None = None
        store = shared.store_of(db)
        self._poll = shared.Poll(store, db) if store is not None else None

    def identity(self) -> tuple | None:
        if self._poll is not None:  # a shared store's copy follows it
            self._poll()
        return store_identity(self.db)

    def connection(self) -> duckdb.DuckDBPyConnection | None:
        """The current snapshot, or None while no store exists yet."""
        identity = self.identity()
        if self._snap is None or identity != self._snap.identity:
            self.close()
            if identity is None:
                return None
            snap = snapshot(self.db)
            if snap is None:
                return None
            if snap.version is not None and snap.version != STORE_VERSION:
                snap.con.close()
                newer = snap.version > STORE_VERSION
                raise StoreError(
                    f"the store {address.shown(self.db)} has layout version {snap.version}, this stepwatch reads "
                    f"{STORE_VERSION}: "
                    + ("upgrade stepwatch" if newer else "run `stepwatch ingest` once to upgrade it")
                )
            self._snap = snap
        return self._snap.con

    def close(self) -> None:
        if self._snap is not None:
            self._snap.con.close()
        self._snap = None

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def open_store(db: Path) -> StoreReader:
    """A reader of an existing store; StoreError (naming the command that makes one) when there is none."""
    require(db)
    return StoreReader(db)


def resolve(db: str | Path, follow: bool = True) -> Path:
    """The path a command works on for the store ``db`` names: a DuckDB file's, or a shared store's local copy,
    brought up to date unless not ``follow`` (an ingest brings it up to date itself) (``collector.store.shared``)."""
    if address.is_shared(db):
        return shared.attach(str(db), follow)
    return Path(db)


def default_db(synthetic: bool = False, follow: bool = True) -> Path:
    """``STEPWATCH_DB`` if set (a path or a shared store's address), else data/stepwatch.duckdb
    (data/stepwatch-synthetic.duckdb for synthetic data)."""
    if synthetic:
        return SYNTHETIC_DB
    return resolve(os.environ.get(DB_ENV) or DEFAULT_DB, follow)


def ingest(
    sources: list[str],
    db: Path,
    synthetic: bool = False,
    on_file: Callable[[str, str], None] = lambda uri, outcome: None,
    on_wait: Callable[[], None] = lambda: None,
    recursive: bool = False,
) -> ingesting.IngestReport:
    """Ingest result files into the store (``collector.store.ingest``), or commit them to the shared store ``db`` is
    the copy of."""
    store = shared.store_of(db)
    if store is not None:
        return store.ingest(sources, db, synthetic, on_file=on_file, on_wait=on_wait, recursive=recursive)
    return ingesting.ingest(sources, db, synthetic, on_file, on_wait, recursive)


@contextlib.contextmanager
def update(db: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[duckdb.DuckDBPyConnection]:
    """Change the store's state (alerts, bisect steps) in one write that lands whole or not at all; on a shared
    store, committed there."""
    store = shared.store_of(db)
    if store is None:
        with engine.update(db, on_wait) as con:
            yield con
        return
    with store.update(db, on_wait) as con:
        yield con
