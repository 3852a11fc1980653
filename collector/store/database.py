"""The DuckDB store: result parquet ingested into tables the analysis and the dashboard query.

DuckDB lets one process write a database file, and a process that has it open read-write locks every
other process out, readers included. So no process ever opens the live file read-write. An ingest,
holding an exclusive lock file (one ingest at a time; a second waits), copies the live file to a
temporary name, writes all new rows into the copy in one transaction, checkpoints, fsyncs and renames
the copy over the live file. Readers open the live file read-only and keep the snapshot they opened
until they reconnect (``StoreReader`` reconnects when the file changes). A kill at any moment leaves
the live file as before (the rename did not happen) or as after (it did), never half.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

import duckdb
import pyarrow as pa

from collector.config import ADDED_DIMENSIONS, SERIES_FIELDS
from collector.schema import SCHEMA
from collector.store import objectstore
from collector.store.selection import as_fields

DEFAULT_DB = Path("data/stepwatch.duckdb")
SYNTHETIC_DB = Path("data/stepwatch-synthetic.duckdb")
DB_ENV = "STEPWATCH_DB"
# The tables' layout; a store written by a newer layout is refused, never rewritten. 2: Keras backends (runs'
# ``backend`` column becomes ``device``; earlier runs are TensorFlow runs; compiler from xla_effective).
STORE_VERSION = 2
WINDOW_COLUMNS = ("window_step_times_s", "window_losses")

_DUCK_TYPES = {"int64": "BIGINT", "double": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN"}


class StoreError(RuntimeError):
    """A store that cannot be read or written, in one line."""


class NoStoreError(StoreError):
    """The store a command reads does not exist yet (a usage error: ingest first, or name another --db)."""


def default_db(synthetic: bool = False) -> Path:
    """``STEPWATCH_DB`` if set, else data/stepwatch.duckdb (data/stepwatch-synthetic.duckdb for synthetic data)."""
    if synthetic:
        return SYNTHETIC_DB
    return Path(os.environ.get(DB_ENV) or DEFAULT_DB)


def _duck_type(dtype: pa.DataType) -> str:
    if pa.types.is_timestamp(dtype):
        return "TIMESTAMPTZ"
    return _DUCK_TYPES[str(dtype)]


RUN_COLUMNS = tuple(f for f in SCHEMA if f.name not in WINDOW_COLUMNS)

# Tables. Every column of ``runs`` comes from collector/schema.py; new schema columns are added
# to an older store on its next ingest.
DDL = (
    "CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    "CREATE TABLE IF NOT EXISTS runs ("
    + ", ".join(f'"{f.name}" {_duck_type(f.type)}' for f in RUN_COLUMNS)
    + ", source_uri VARCHAR, ingested_at TIMESTAMPTZ)",
    "CREATE TABLE IF NOT EXISTS samples (run_id VARCHAR, window_index INTEGER, step_time_s DOUBLE, loss DOUBLE)",
    "CREATE TABLE IF NOT EXISTS ingested_files (uri VARCHAR, size BIGINT, mtime_ns BIGINT, digest VARCHAR, "
    "rows_read BIGINT, ingested_at TIMESTAMPTZ)",
    "CREATE SEQUENCE IF NOT EXISTS alert_ids",
    "CREATE TABLE IF NOT EXISTS alerts (id BIGINT DEFAULT nextval('alert_ids') PRIMARY KEY, "
    "created_at TIMESTAMPTZ, updated_at TIMESTAMPTZ, series_key VARCHAR, metric VARCHAR, status VARCHAR, "
    "change_at TIMESTAMPTZ, suite_run_id VARCHAR, before_value DOUBLE, after_value DOUBLE, ratio DOUBLE, "
    "ci_low DOUBLE, ci_high DOUBLE, versions_changed VARCHAR, note VARCHAR)",
)

# Derived tables, rebuilt by every ingest in its transaction, so that readers never aggregate all of ``runs``
# for the overview (at 1M rows that is the difference between a few and a few hundred milliseconds).
DERIVED = (
    # One row per series: its dimensions (config fields under their own names) and how much history it has.
    f"CREATE OR REPLACE TABLE series AS SELECT series_key, any_value(config_key) AS config_key, "
    f"{as_fields(SERIES_FIELDS)}, any_value(accelerator) AS accelerator, any_value(unit) AS unit, "
    "count(*) AS trials, count(DISTINCT suite_run_id) AS suite_runs, min(started_at) AS first_at, "
    "max(started_at) AS last_at FROM runs GROUP BY series_key",
    # Every trial of each series' most recent suite run.
    "CREATE OR REPLACE TABLE latest_runs AS SELECT r.* FROM runs r JOIN "
    "(SELECT series_key, arg_max(suite_run_id, started_at) AS suite_run_id FROM runs GROUP BY series_key) l "
    "USING (series_key, suite_run_id)",
)


# STORE_MIGRATIONS[v] brings the tables of store version v to v + 1 (new columns are already added). The
# same change as the results schema's migration (collector.schema), for rows ingested before it.
STORE_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "UPDATE runs SET device = backend WHERE device IS NULL",
        # keras_backend is filled with its default like every added dimension (ensure_schema, ADDED_DIMENSIONS).
        "UPDATE runs SET compiler = CASE WHEN xla_effective THEN 'xla' ELSE 'none' END "
        "WHERE compiler IS NULL AND xla_effective IS NOT NULL",
        "ALTER TABLE runs DROP COLUMN backend",
    )
}


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def writer_lock(db: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[None]:
    """One ingest at a time per store; the lock dies with its process, so a killed ingest never wedges it."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_schema(con: duckdb.DuckDBPyConnection, kind: str) -> None:
    """Create missing tables and columns in a writable store; refuse one of a newer layout."""
    for statement in DDL:
        con.execute(statement)
    version = store_version(con)
    if version is not None and version > STORE_VERSION:
        raise StoreError(
            f"the store was written by a newer stepwatch (store version {version}, this one writes up to "
            f"{STORE_VERSION}); upgrade stepwatch or pick another --db"
        )
    present = {
        row[0] for row in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'runs'").fetchall()
    }
    for column in RUN_COLUMNS:
        if column.name not in present:
            con.execute(f'ALTER TABLE runs ADD COLUMN "{column.name}" {_duck_type(column.type)}')
            if column.name in ADDED_DIMENSIONS:  # every run before this dimension existed had its default
                con.execute(f'UPDATE runs SET "{column.name}" = ?', [ADDED_DIMENSIONS[column.name]])
    for step in range(version or STORE_VERSION, STORE_VERSION):
        for statement in (*STORE_MIGRATIONS[step], *DERIVED):
            con.execute(statement)
    con.execute("INSERT OR IGNORE INTO store_meta VALUES ('kind', ?)", [kind])
    con.execute("INSERT OR REPLACE INTO store_meta VALUES ('store_version', ?)", [str(STORE_VERSION)])


def store_version(con: duckdb.DuckDBPyConnection) -> int | None:
    """The layout version a store was written with (None for a store being created)."""
    rows = con.execute("SELECT value FROM store_meta WHERE key = 'store_version'").fetchall()
    return int(rows[0][0]) if rows else None


def store_kind(con: duckdb.DuckDBPyConnection) -> str:
    """'real' or 'synthetic': a store made for synthetic test data says so, so it is never taken for real."""
    rows = con.execute("SELECT value FROM store_meta WHERE key = 'kind'").fetchall()
    return rows[0][0] if rows else "real"


def _clean_stale(db: Path) -> None:
    """Temporary copies left by a killed ingest (safe: we hold the writer lock)."""
    for stale in db.parent.glob(f".{db.name}.*.tmp*"):
        stale.unlink(missing_ok=True)


@contextlib.contextmanager
def new_version(db: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write copy of the store in one transaction; when the block ends cleanly the copy is committed,
    checkpointed, fsynced and renamed over the live file. The caller holds the writer lock."""
    _clean_stale(db)
    tmp = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    try:
        if db.exists():
            shutil.copyfile(db, tmp)
        con = duckdb.connect(str(tmp))
    except (OSError, duckdb.Error) as error:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write a new version of {db}: {error}") from None
    try:
        con.execute("BEGIN")
        yield con
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
        con.close()
        _fsync(tmp)
        os.replace(tmp, db)
        _fsync(db.parent)
    except duckdb.Error as error:
        raise StoreError(f"cannot write {db}: {str(error).splitlines()[0]}") from None
    except objectstore.StorageError:
        raise  # already one line naming the object
    except OSError as error:
        raise StoreError(f"cannot write {db}: {error.strerror or error}; the store is unchanged") from None
    finally:
        with contextlib.suppress(duckdb.Error):
            con.close()
        for leftover in db.parent.glob(f".{db.name}.{os.getpid()}.tmp*"):
            leftover.unlink(missing_ok=True)


@contextlib.contextmanager
def update(db: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[duckdb.DuckDBPyConnection]:
    """Write to an existing store (alerts) the way an ingest does: under the writer lock, into a
    copy that replaces the live file only if the whole block succeeds. Readers are never blocked."""
    _require(db, StoreError)
    with writer_lock(db, on_wait), new_version(db) as con:
        ensure_schema(con, store_kind(con))
        yield con


class StoreReader:
    """A read-only connection to the live store that follows it: when an ingest has replaced the file,
    the next ``connection()`` closes the old snapshot and opens the new one."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self._identity: tuple[int, int, int] | None = None
        self._con: duckdb.DuckDBPyConnection | None = None

    def identity(self) -> tuple[int, int, int] | None:
        try:
            stat = self.db.stat()
        except FileNotFoundError:
            return None
        return stat.st_ino, stat.st_mtime_ns, stat.st_size

    def connection(self) -> duckdb.DuckDBPyConnection | None:
        """The current snapshot, or None while no store exists yet."""
        identity = self.identity()
        if identity != self._identity or self._con is None:
            self.close()
            if identity is None:
                return None
            try:
                con = duckdb.connect(str(self.db), read_only=True)
                version = store_version(con)
            except duckdb.Error as error:
                raise StoreError(f"cannot open the store {self.db}: {str(error).splitlines()[0]}") from None
            if version is not None and version != STORE_VERSION:
                con.close()
                newer = version > STORE_VERSION
                raise StoreError(
                    f"the store {self.db} has layout version {version}, this stepwatch reads {STORE_VERSION}: "
                    + ("upgrade stepwatch" if newer else "run `stepwatch ingest` once to upgrade it")
                )
            self._con, self._identity = con, identity
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
        self._con, self._identity = None, None

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def open_store(db: Path) -> StoreReader:
    """A reader of an existing store; StoreError (naming the command that makes one) when there is none."""
    _require(db)
    return StoreReader(db)


def _require(db: Path, error: type[StoreError] = NoStoreError) -> None:
    if not db.exists():
        raise error(f"no store at {db}: run `stepwatch ingest` first")
