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
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from collector import objectstore
from collector.schema import SCHEMA, SchemaError, conform

DEFAULT_DB = Path("data/stepwatch.duckdb")
SYNTHETIC_DB = Path("data/stepwatch-synthetic.duckdb")
DB_ENV = "STEPWATCH_DB"
STORE_VERSION = 1
SYNTHETIC_SOURCE = "synthetic-test-data"
WINDOW_COLUMNS = ("window_step_times_s", "window_losses")
BATCH_ROWS = 200_000
READ_THREADS = 4
READ_AHEAD = 64  # files decoded ahead of the inserting thread
CLUSTER_TAIL = 0.1

_DUCK_TYPES = {"int64": "BIGINT", "double": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN"}


class StoreError(RuntimeError):
    """A store that cannot be read or written, in one line."""


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
    "CREATE SEQUENCE IF NOT EXISTS annotation_ids",
    "CREATE TABLE IF NOT EXISTS annotations (id BIGINT DEFAULT nextval('annotation_ids') PRIMARY KEY, "
    "created_at TIMESTAMPTZ, series_key VARCHAR, happened_at TIMESTAMPTZ, text VARCHAR, author VARCHAR)",
    "CREATE SEQUENCE IF NOT EXISTS alert_ids",
    "CREATE TABLE IF NOT EXISTS alerts (id BIGINT DEFAULT nextval('alert_ids') PRIMARY KEY, "
    "created_at TIMESTAMPTZ, updated_at TIMESTAMPTZ, series_key VARCHAR, metric VARCHAR, status VARCHAR, "
    "change_at TIMESTAMPTZ, suite_run_id VARCHAR, before_value DOUBLE, after_value DOUBLE, ratio DOUBLE, "
    "ci_low DOUBLE, ci_high DOUBLE, versions_changed VARCHAR, note VARCHAR)",
)

# Derived tables, rebuilt by every ingest in its transaction, so that readers never aggregate all of ``runs``
# for the overview (at 1M rows that is the difference between a few and a few hundred milliseconds).
DERIVED = (
    # One row per series: the key's parts and how much history it has.
    "CREATE OR REPLACE TABLE series AS SELECT series_key, any_value(config_key) AS config_key, "
    "any_value(model) AS model, any_value(preset) AS preset, any_value(backend) AS backend, "
    "any_value(num_devices) AS num_devices, any_value(strategy) AS strategy, any_value(xla_requested) AS xla, "
    "any_value(precision) AS precision, any_value(per_device_batch) AS per_device_batch, "
    "any_value(steps_per_execution) AS steps_per_execution, any_value(loop) AS loop, any_value(data) AS data, "
    "any_value(accelerator) AS accelerator, any_value(unit) AS unit, count(*) AS trials, "
    "count(DISTINCT suite_run_id) AS suite_runs, min(started_at) AS first_at, max(started_at) AS last_at "
    "FROM runs GROUP BY series_key",
    # Every trial of each series' most recent suite run.
    "CREATE OR REPLACE TABLE latest_runs AS SELECT r.* FROM runs r JOIN "
    "(SELECT series_key, arg_max(suite_run_id, started_at) AS suite_run_id FROM runs GROUP BY series_key) l "
    "USING (series_key, suite_run_id)",
)


@dataclass
class IngestReport:
    files_seen: int = 0
    files_unchanged: int = 0
    files_ingested: int = 0
    rows_read: int = 0
    rows_added: int = 0
    quarantined: list[tuple[str, str, str]] = field(default_factory=list)  # (uri, reason, moved to)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (uri, reason): left where they are
    seconds: float = 0.0


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


def _ensure_schema(con: duckdb.DuckDBPyConnection, kind: str) -> None:
    for statement in DDL:
        con.execute(statement)
    present = {
        row[0] for row in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'runs'").fetchall()
    }
    for column in RUN_COLUMNS:
        if column.name not in present:
            con.execute(f'ALTER TABLE runs ADD COLUMN "{column.name}" {_duck_type(column.type)}')
    con.execute("INSERT OR IGNORE INTO store_meta VALUES ('kind', ?), ('store_version', ?)", [kind, str(STORE_VERSION)])


def store_kind(con: duckdb.DuckDBPyConnection) -> str:
    """'real' or 'synthetic': a store made for synthetic test data says so, so it is never taken for real."""
    rows = con.execute("SELECT value FROM store_meta WHERE key = 'kind'").fetchall()
    return rows[0][0] if rows else "real"


def _known_files(db: Path) -> tuple[dict[str, tuple[int, int]], set[str], str | None]:
    """(uri -> (size, mtime_ns), digests, kind) of what the live store has ingested."""
    if not db.exists():
        return {}, set(), None
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as error:
        raise StoreError(f"cannot open the store {db}: {str(error).splitlines()[0]}") from None
    try:
        rows = con.execute("SELECT uri, size, mtime_ns, digest FROM ingested_files").fetchall()
        files = {uri: (size, mtime) for uri, size, mtime, _ in rows}
        digests = {digest for *_, digest in rows}
        return files, digests, store_kind(con)
    except duckdb.Error as error:
        raise StoreError(f"{db} is not a stepwatch store: {str(error).splitlines()[0]}") from None
    finally:
        con.close()


class _Batch:
    """Conformed tables waiting to be inserted together, and their manifest rows."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []
        self.rows = 0
        self.manifest: list[dict] = []

    def add(self, table: pa.Table, uri: str) -> None:
        self.tables.append(table.append_column("source_uri", pa.array([uri] * table.num_rows, pa.string())))
        self.rows += table.num_rows


def _insert(con: duckdb.DuckDBPyConnection, batch: _Batch, now: datetime) -> int:
    """Insert the batch's rows whose run_id the store has not seen; returns how many were added."""
    added = 0
    if batch.tables:
        staged = pa.concat_tables(batch.tables)
        con.register("staged", staged)
        con.execute(
            "CREATE OR REPLACE TEMP TABLE fresh AS SELECT * FROM staged s "
            "WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = s.run_id) "
            "QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY finished_at DESC NULLS LAST) = 1"
        )
        con.unregister("staged")
        added = con.execute("SELECT count(*) FROM fresh").fetchall()[0][0]
        excluded = ", ".join(WINDOW_COLUMNS)
        con.execute(f"INSERT INTO runs BY NAME SELECT * EXCLUDE ({excluded}), ? AS ingested_at FROM fresh", [now])
        con.execute(
            "INSERT INTO samples SELECT run_id, unnest(range(greatest(len(window_step_times_s), "
            "len(window_losses)))) AS window_index, unnest(window_step_times_s), unnest(window_losses) FROM fresh"
        )
        con.execute("DROP TABLE fresh")
    if batch.manifest:
        for entry in batch.manifest:
            entry["ingested_at"] = now
        con.register("manifest", pa.Table.from_pylist(batch.manifest))
        con.execute("DELETE FROM ingested_files WHERE uri IN (SELECT uri FROM manifest)")
        con.execute("INSERT INTO ingested_files BY NAME SELECT * FROM manifest")
        con.unregister("manifest")
    return added


def _cluster(con: duckdb.DuckDBPyConnection) -> None:
    """Keep ``runs`` ordered by series, so one series' history reads a few row groups instead of all of
    them (at 1M rows: about 10 ms instead of 40). Rewriting the table costs seconds at that size, so it
    is re-sorted only once rows appended since the last sort exceed a tenth of it; the unsorted tail
    in between is small and still found by the scan."""
    total = con.execute("SELECT count(*) FROM runs").fetchall()[0][0]
    row = con.execute("SELECT value FROM store_meta WHERE key = 'sorted_rows'").fetchall()
    sorted_rows = int(row[0][0]) if row else 0
    if total - sorted_rows <= CLUSTER_TAIL * total:
        return
    con.execute("CREATE TABLE runs_sorted AS SELECT * FROM runs ORDER BY series_key, started_at, trial")
    con.execute("DROP TABLE runs")
    con.execute("ALTER TABLE runs_sorted RENAME TO runs")
    con.execute("INSERT OR REPLACE INTO store_meta VALUES ('sorted_rows', ?)", [str(total)])


def _read(loc: objectstore.Location, entry: objectstore.Entry) -> tuple[bytes, pa.Table | str]:
    """The file's bytes and its conformed table, or the reason it cannot be ingested."""
    data = objectstore.read_bytes(loc, entry.path)
    try:
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except (pa.ArrowException, OSError) as error:
        return data, f"not a readable parquet file ({' '.join(str(error).split())[:200]})"
    try:
        return data, conform(table)
    except SchemaError as error:
        return data, str(error)


def _read_ahead(todo: list[tuple[objectstore.Location, objectstore.Entry]]) -> Iterator[tuple[bytes, pa.Table | str]]:
    """``_read`` of each file in order, a few files ahead on worker threads (parquet decoding frees the GIL)."""
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        for start in range(0, len(todo), READ_AHEAD):
            yield from pool.map(lambda item: _read(*item), todo[start : start + READ_AHEAD])


def _clean_stale(db: Path) -> None:
    """Temporary copies left by a killed ingest (safe: we hold the writer lock)."""
    for stale in db.parent.glob(f".{db.name}.*.tmp*"):
        stale.unlink(missing_ok=True)


def ingest(
    sources: list[str],
    db: Path,
    synthetic: bool = False,
    on_file: Callable[[str, str], None] = lambda uri, outcome: None,
    on_wait: Callable[[], None] = lambda: None,
) -> IngestReport:
    """Ingest every *.parquet under ``sources`` (folders, files, s3:// or gs:// prefixes) into ``db``.

    Files already ingested unchanged are skipped without being read; rows whose run_id is present are
    skipped; a file that fails validation is quarantined beside where it was, and the rest goes on.
    """
    start = time.perf_counter()
    report = IngestReport()
    listed = []
    for source in sources:
        try:
            listed.append(objectstore.list_parquet(source))
        except FileNotFoundError:
            raise StoreError(f"{source} does not exist") from None
    with writer_lock(db, on_wait):
        known, digests, kind = _known_files(db)
        if kind == "synthetic" and not synthetic:
            raise StoreError(f"{db} holds synthetic test data; pass --synthetic to add to it, or pick another --db")
        if kind == "real" and synthetic:
            raise StoreError(f"{db} holds real results; synthetic test data goes into a store of its own")
        todo = []
        for loc, entries in listed:
            for entry in entries:
                report.files_seen += 1
                if known.get(entry.uri) == (entry.size, entry.mtime_ns):
                    report.files_unchanged += 1
                else:
                    todo.append((loc, entry))
        if todo:
            _write(db, todo, digests, kind or ("synthetic" if synthetic else "real"), report, on_file)
    report.seconds = time.perf_counter() - start
    return report


def _write(
    db: Path,
    todo: list[tuple[objectstore.Location, objectstore.Entry]],
    digests: set[str],
    kind: str,
    report: IngestReport,
    on_file: Callable[[str, str], None],
) -> None:
    with _new_version(db) as con:
        now = datetime.now(UTC)
        _ensure_schema(con, kind)
        batch = _Batch()
        for (loc, entry), (data, table) in zip(todo, _read_ahead(todo)):
            digest = hashlib.sha256(data).hexdigest()
            manifest = {"uri": entry.uri, "size": entry.size, "mtime_ns": entry.mtime_ns, "digest": digest}
            if digest in digests:
                batch.manifest.append({**manifest, "rows_read": 0})
                report.files_unchanged += 1
                on_file(entry.uri, "unchanged")
                continue
            if isinstance(table, str):
                moved = objectstore.quarantine(loc, entry, table)
                report.quarantined.append((entry.uri, table, moved))
                on_file(entry.uri, "quarantined")
                continue
            synthetic_rows = bool(pc.any(pc.equal(table.column("source"), SYNTHETIC_SOURCE)).as_py())
            if synthetic_rows != (kind == "synthetic"):
                why = "synthetic test data (ingest it with --synthetic)" if synthetic_rows else "real results"
                report.refused.append((entry.uri, f"holds {why}, which does not belong in a {kind} store"))
                on_file(entry.uri, "refused")
                continue
            digests.add(digest)
            batch.add(table, entry.uri)
            batch.manifest.append({**manifest, "rows_read": table.num_rows})
            report.files_ingested += 1
            report.rows_read += table.num_rows
            on_file(entry.uri, "read")
            if batch.rows >= BATCH_ROWS:
                report.rows_added += _insert(con, batch, now)
                batch = _Batch()
        report.rows_added += _insert(con, batch, now)
        _cluster(con)
        for statement in DERIVED:
            con.execute(statement)


@contextlib.contextmanager
def _new_version(db: Path) -> Iterator[duckdb.DuckDBPyConnection]:
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
    """Write to an existing store (alerts, annotations) the way an ingest does: under the writer lock, into a
    copy that replaces the live file only if the whole block succeeds. Readers are never blocked."""
    if not db.exists():
        raise StoreError(f"no store at {db}: run `stepwatch ingest` first")
    with writer_lock(db, on_wait), _new_version(db) as con:
        _ensure_schema(con, store_kind(con))
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
                self._con = duckdb.connect(str(self.db), read_only=True)
            except duckdb.Error as error:
                raise StoreError(f"cannot open the store {self.db}: {str(error).splitlines()[0]}") from None
            self._identity = identity
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
        self._con, self._identity = None, None
