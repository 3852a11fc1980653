"""The DuckDB store: result parquet ingested into tables the analysis and the dashboard query.

DuckDB lets one process write a database file, and a process that has it open read-write locks every
other process out, readers included. So no process ever opens a live file read-write, and no write costs
more than what it adds.

Layout. A store is a base file (``data/stepwatch.duckdb``) and a folder of delta files beside it
(``data/stepwatch.duckdb.d/``), each named ``FIRST-LAST.duckdb`` by the write sequence numbers it holds.
The log tables (``runs``, ``samples``) are split across them: the base holds the rows up to the
sequence number it records as ``merged_through``, each delta the rows its writes added. The state tables
(``store_meta``, ``ingested_files``, ``alerts``, ``bisect_steps``, ``series``, ``latest_runs``: small, one
row per file, alert, bisect step or series) are whole in every file, and the newest file's are the store's.

Writes. A write (an ingest, an alert update), holding an exclusive lock file (one at a time; a second
waits), creates a new delta under a temporary name: its new rows, and the state tables carried forward
and updated. It checkpoints, fsyncs and renames it into the folder; the rename is the commit. A kill at
any moment leaves the store as before (no rename) or as after (the rename), never half. A write costs what
it adds plus the small state tables, not the store's size. The first write of a store writes the base.

Compaction keeps the number of files small: when there are more than MAX_DELTAS deltas, the newest ones
are merged into one (a size-tiered merge, so a row is rewritten about log(n) times); when the deltas hold
more than COMPACT_SHARE of the base's rows, they are merged into a new base (copied, appended, re-sorted
by series, renamed over the old one), after which the merged deltas are deleted.

Reads. A reader attaches the base and the chain of deltas after it read-only, in an in-memory DuckDB,
and sees the tables through views of the same names. It keeps that snapshot until it reconnects
(``StoreReader`` reconnects when the base or the folder changes). Files a write replaces or deletes stay
readable to readers that have them open; a reader that finds the store changed while it attached tries
again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import duckdb
import pyarrow as pa

from collector.config import ADDED_DIMENSIONS, SERIES_FIELDS
from collector.metrics import RSS_KIND
from collector.schema import SCHEMA
from collector.store import objectstore
from collector.store.selection import as_fields

DEFAULT_DB = Path("data/stepwatch.duckdb")
SYNTHETIC_DB = Path("data/stepwatch-synthetic.duckdb")
DB_ENV = "STEPWATCH_DB"
# The tables' layout; a store written by a newer layout is refused, never rewritten. 2: Keras backends (runs'
# ``backend`` column becomes ``device``; earlier runs are TensorFlow runs; compiler from xla_effective).
# 3: a base file and delta files (a stepwatch that reads only the base must not read a store with deltas).
STORE_VERSION = 4
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
    # The path of each ``stepwatch bisect``: one row per measured step and target series (a skipped step has
    # no series). ``applied`` is the step's changes as JSON [[package, good version, bad version], ...].
    "CREATE TABLE IF NOT EXISTS bisect_steps (bisect_id VARCHAR, step INTEGER, created_at TIMESTAMPTZ, "
    "good VARCHAR, bad VARCHAR, why VARCHAR, applied VARCHAR, outcome VARCHAR, reason VARCHAR, "
    "series_key VARCHAR, metric VARCHAR, verdict VARCHAR, ratio DOUBLE, ci_low DOUBLE, ci_high DOUBLE, "
    "baseline_suite_run_id VARCHAR, candidate_suite_run_id VARCHAR)",
)


def series_of(source: str) -> str:
    """One row per series of ``source`` (a table of runs): its dimensions (config fields under their own
    names) and how much history it has."""
    return (
        f"SELECT series_key, any_value(config_key) AS config_key, {as_fields(SERIES_FIELDS)}, "
        "any_value(accelerator) AS accelerator, any_value(unit) AS unit, count(*) AS trials, "
        "count(DISTINCT suite_run_id) AS suite_runs, min(started_at) AS first_at, max(started_at) AS last_at "
        f"FROM {source} GROUP BY series_key"
    )


# How two rows of ``series`` for one series (what the store had, what a write adds) combine; other columns
# are the series' dimensions, equal in both.
SERIES_TOTALS = {"trials": "sum", "suite_runs": "sum", "first_at": "min", "last_at": "max"}

# Derived tables, so that readers never aggregate all of ``runs`` for the overview (at 1M rows that is the
# difference between a few and a few hundred milliseconds). A compaction rebuilds them; a delta updates the
# series it touches (``_update_derived``).
DERIVED = (
    f"CREATE OR REPLACE TABLE series AS {series_of('runs')}",
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
    ),
    2: (),  # the tables are unchanged; the deltas folder is new
    3: (  # a CPU row's ru_maxrss is no longer its peak memory (collector.schema, version 4)
        f"UPDATE runs SET peak_rss_bytes = coalesce(peak_rss_bytes, peak_memory_bytes), peak_memory_bytes = NULL "
        f"WHERE peak_memory_kind = '{RSS_KIND}' OR (peak_memory_kind IS NULL AND device = 'cpu')",
    ),
}


def run_id_index(table: str = "runs") -> str:
    """The base's index on run_id: an ingest looks up a night's run ids in it instead of scanning the store."""
    return f"CREATE INDEX IF NOT EXISTS runs_run_id ON {table} (run_id)"


LOG_TABLES = ("runs", "samples")
STATE_TABLES = ("store_meta", "ingested_files", "alerts", "bisect_steps", "series", "latest_runs")
KEPT_TABLES = ("ingested_files", "alerts", "bisect_steps")  # state a write carries forward as it was
MAX_DELTAS = 8
COMPACT_SHARE = 0.1
WRITE = "w"  # the catalog a write goes into; its ``runs`` and ``samples`` hold only the new rows
_DELTA_NAME = re.compile(r"(\d{8})-(\d{8})\.duckdb")
_ATTACH_TRIES = 20


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _one_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


@contextlib.contextmanager
def writer_lock(db: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[None]:
    """One write at a time per store; the lock dies with its process, so a killed write never wedges it."""
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
        _refuse_newer(version)
    present = {
        row[0]
        for row in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'runs' AND database_name = current_database()"
        ).fetchall()
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


def _refuse_newer(version: int) -> None:
    raise StoreError(
        f"the store was written by a newer stepwatch (store version {version}, this one writes up to "
        f"{STORE_VERSION}); upgrade stepwatch or pick another --db"
    )


def _meta(con: duckdb.DuckDBPyConnection, key: str, catalog: str = "") -> str | None:
    table = f"{catalog}.store_meta" if catalog else "store_meta"
    rows = con.execute(f"SELECT value FROM {table} WHERE key = ?", [key]).fetchall()
    return rows[0][0] if rows else None


def store_version(con: duckdb.DuckDBPyConnection, catalog: str = "") -> int | None:
    """The layout version a store was written with (None for a store being created)."""
    value = _meta(con, "store_version", catalog)
    return int(value) if value is not None else None


def store_kind(con: duckdb.DuckDBPyConnection, catalog: str = "") -> str:
    """'real' or 'synthetic': a store made for synthetic test data says so, so it is never taken for real."""
    return _meta(con, "kind", catalog) or "real"


def delta_dir(db: Path) -> Path:
    """The folder of a store's delta files."""
    return db.with_name(db.name + ".d")


@dataclass(frozen=True)
class Delta:
    first: int  # the write sequence numbers it holds, inclusive
    last: int
    path: Path


def _deltas(db: Path) -> list[Delta]:
    try:
        names = os.listdir(delta_dir(db))
    except FileNotFoundError:
        return []
    found = (_DELTA_NAME.fullmatch(name) for name in names)
    return [Delta(int(m[1]), int(m[2]), delta_dir(db) / m[0]) for m in found if m]


def delta_chain(deltas: list[Delta], merged_through: int) -> list[Delta]:
    """The deltas after the base, oldest first: from the newest sequence number down, each time the widest
    file ending where the last one taken begins. Files already merged (into the base or a wider delta) are
    left out; a missing number is a broken store."""
    widest: dict[int, Delta] = {}
    for delta in deltas:
        if delta.last > merged_through and (delta.last not in widest or delta.first < widest[delta.last].first):
            widest[delta.last] = delta
    chain, upto = [], max(widest, default=merged_through)
    while upto > merged_through:
        if upto not in widest:
            raise StoreError(f"the store's delta files have a gap: no file ends at write {upto}")
        chain.append(widest[upto])
        upto = widest[upto].first - 1
    return chain[::-1]


def _identity(db: Path) -> tuple[int, int, int] | None:
    try:
        stat = db.stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Moved(Exception):
    """The store changed while a snapshot was being attached."""


@dataclass
class Snapshot:
    """A consistent read-only view of a store: the base and its delta chain attached to ``con`` as catalogs
    s0 (the base), s1, ... in order, with every table reachable by its name."""

    con: duckdb.DuckDBPyConnection
    chain: list[Delta]
    identity: tuple
    version: int | None
    merged_through: int

    @property
    def catalogs(self) -> list[str]:
        return [f"s{i}" for i in range(len(self.chain) + 1)]

    @property
    def last_seq(self) -> int:
        return self.chain[-1].last if self.chain else self.merged_through

    def rows(self, catalog: str) -> int:
        return self.con.execute(f"SELECT count(*) FROM {catalog}.runs").fetchall()[0][0]


LOG_COLUMNS = {
    "runs": (*(f.name for f in RUN_COLUMNS), "source_uri", "ingested_at"),
    "samples": ("run_id", "window_index", "step_time_s", "loss"),
}  # as DDL creates them; every file of a store is at this layout (an older base is compacted first)


def _log_views(con: duckdb.DuckDBPyConnection, catalogs: list[str], prefix: str = "", kind: str = "") -> None:
    """Views of the log tables across ``catalogs``: in the in-memory catalog for a reader (so that its cursors
    see them too), ``kind="TEMP"`` for a writer (searched before the delta it writes). Columns by name in one
    order (a migrated base may hold them in another), in a plain UNION ALL through which DuckDB pushes filters
    and projections down to each file."""
    for table, names in LOG_COLUMNS.items():
        columns = ", ".join(_quote(c) for c in names)
        union = " UNION ALL ".join(f"SELECT {columns} FROM {c}.{table}" for c in catalogs)
        con.execute(f"CREATE OR REPLACE {kind} VIEW {prefix}{table} AS {union}")


def _has_table(con: duckdb.DuckDBPyConnection, catalog: str, table: str) -> bool:
    """Whether ``catalog`` holds ``table`` (a file written before the table existed does not)."""
    found = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = ?", [catalog, table]
    ).fetchall()
    return bool(found[0][0])


def _state_views(con: duckdb.DuckDBPyConnection, catalog: str) -> None:
    for table in STATE_TABLES:
        if _has_table(con, catalog, table):
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM {catalog}.{table}")
        else:  # an older file: the table as it would be, empty
            con.execute(next(d for d in DDL if f"TABLE IF NOT EXISTS {table} " in d))


def store_identity(db: Path) -> tuple | None:
    """What identifies the store's current contents: the base file and the names of the delta files."""
    base = _identity(db)
    if base is None:
        return None
    return base, tuple(sorted(d.path.name for d in _deltas(db)))


def snapshot(db: Path, views: bool = True) -> Snapshot | None:
    """Attach the store read-only (None while it does not exist), with views of its tables unless ``views`` is
    False (then only the attached catalogs). Retries while a write replaces files."""
    for _ in range(_ATTACH_TRIES):
        identity = store_identity(db)
        if identity is None:
            return None
        con = duckdb.connect()
        try:
            con.execute("ATTACH ? AS s0 (READ_ONLY)", [str(db)])
            version = store_version(con, "s0")
            merged = int(_meta(con, "merged_through", "s0") or 0)
            chain = delta_chain(_deltas(db), merged)
            for i, delta in enumerate(chain, 1):
                con.execute(f"ATTACH ? AS s{i} (READ_ONLY)", [str(delta.path)])
            if _identity(db) != identity[0]:
                raise _Moved
        except (_Moved, duckdb.IOException):
            con.close()  # a compaction replaced the base, or deleted a delta we listed: attach the new store
            continue
        except duckdb.Error as error:
            con.close()
            raise StoreError(f"cannot open the store {db}: {_one_line(error)}") from None
        except StoreError:
            con.close()
            raise
        snap = Snapshot(con, chain, identity, version, merged)
        if views and version == STORE_VERSION:
            _log_views(con, snap.catalogs)
            _state_views(con, snap.catalogs[-1])
        return snap
    raise StoreError(f"cannot open the store {db}: it kept changing while being opened")


def _clean_stale(db: Path) -> None:
    """Temporary files left by a killed write, and deltas a finished compaction had not yet deleted (safe:
    we hold the writer lock)."""
    for stale in [*db.parent.glob(f".{db.name}.*.tmp*"), *delta_dir(db).glob(".*.tmp*")]:
        stale.unlink(missing_ok=True)


def clean(db: Path, on_wait: Callable[[], None] = lambda: None) -> None:
    """Remove what a killed write left behind (a write does this itself; this is for when there is nothing to
    write)."""
    if db.exists() or delta_dir(db).exists():
        with writer_lock(db, on_wait):
            _clean_stale(db)


def _publish(con: duckdb.DuckDBPyConnection, catalog: str, tmp: Path, final: Path) -> None:
    """Checkpoint the attached ``catalog`` (written to ``tmp``), detach it, fsync and rename it to ``final``."""
    con.execute(f"CHECKPOINT {catalog}")
    con.execute("USE memory")
    con.execute(f"DETACH {catalog}")
    _replace(tmp, final)


def _replace(tmp: Path, final: Path) -> None:
    """Make a finished file durable, then put it in place in one rename (the commit), and make that durable."""
    _fsync(tmp)
    os.replace(tmp, final)
    _fsync(final.parent)


@contextlib.contextmanager
def _failures(db: Path) -> Iterator[None]:
    """Any failure of a write as one StoreError line; the store is as it was."""
    try:
        yield
    except duckdb.Error as error:
        raise StoreError(f"cannot write {db}: {_one_line(error)}; the store is unchanged") from None
    except objectstore.StorageError:
        raise  # already one line naming the object
    except OSError as error:
        raise StoreError(f"cannot write {db}: {error.strerror or error}; the store is unchanged") from None


def _tmp(folder: Path, name: str) -> Path:
    return folder / f".{name}.{os.getpid()}.tmp"


@contextlib.contextmanager
def write(db: Path, kind: str, on_wait: Callable[[], None] = lambda: None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A write into the store, under the writer lock: a new delta (or, for a new store, the base) that is
    published only if the block ends cleanly. An older layout is compacted (and migrated) first.

    The connection sees the whole store (``runs`` and ``samples`` include the rows written so far;
    ``stored_runs`` is the store before this write); new rows go into ``{WRITE}.runs`` and ``{WRITE}.samples``,
    state tables are written by their names. The derived tables are brought up to date here, after the block."""
    with writer_lock(db, on_wait), _failures(db):
        _clean_stale(db)
        snap = snapshot(db, views=False)
        if snap is not None and snap.version is not None and snap.version > STORE_VERSION:
            snap.con.close()
            _refuse_newer(snap.version)
        if snap is not None and snap.version != STORE_VERSION:
            snap.con.close()
            compact(db, snap)
            snap = snapshot(db, views=False)
        try:
            yield from _write(db, kind, snap)
        finally:
            if snap is not None:
                snap.con.close()
        try:
            _tidy(db)
        except (duckdb.Error, OSError) as error:
            detail = _one_line(error) if isinstance(error, duckdb.Error) else error.strerror or error
            raise StoreError(f"the write into {db} is stored, but compacting its files failed: {detail}") from None


def _write(db: Path, kind: str, snap: Snapshot | None) -> Iterator[duckdb.DuckDBPyConnection]:
    con = snap.con if snap is not None else duckdb.connect()
    if snap is None:
        tmp, final = _tmp(db.parent, db.name), db
    else:
        seq = snap.last_seq + 1
        delta_dir(db).mkdir(exist_ok=True)
        final = delta_dir(db) / f"{seq:08d}-{seq:08d}.duckdb"
        tmp = _tmp(delta_dir(db), final.name)
    try:
        # Once the delta is the default catalog, the state tables' names are its own (the reader's views of the
        # snapshot, in the in-memory catalog, are no longer searched).
        con.execute("ATTACH ? AS w", [str(tmp)])
        con.execute(f"USE {WRITE}")
        if snap is not None:
            _carry_state(con, snap.catalogs[-1])
            _log_views(con, snap.catalogs, prefix="stored_", kind="TEMP")  # the store before this write
        ensure_schema(con, kind)
        _log_views(con, [*(snap.catalogs if snap else []), WRITE], kind="TEMP")
        # No transaction: the new file is invisible until its rename, which is the commit. (Inside one, a
        # temporary table of more than one row group written in it read back empty: DuckDB 2.0.0.)
        yield con
        if snap is None:
            for statement in (*DERIVED, run_id_index(f"{WRITE}.runs")):
                con.execute(statement)
        else:
            _update_derived(con)
        _publish(con, WRITE, tmp, final)
    finally:
        if snap is None:
            con.close()
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)


def _update_derived(con: duckdb.DuckDBPyConnection) -> None:
    """Bring ``series`` and ``latest_runs`` up to date with the rows of this delta (``WRITE.runs``), touching
    only the series it adds to: what it costs follows what was added, not the store."""
    new = f"{WRITE}.runs"
    con.execute(f"CREATE OR REPLACE TEMP TABLE touched AS {series_of(new)}")
    # Suite runs of touched series that the store already had (a resumed file): not counted twice.
    # (Constant lists, so that the base, sorted by series, is read only where those series are.)
    keys = [k for (k,) in con.execute(f"SELECT DISTINCT series_key FROM {new}").fetchall()]
    suites = [k for (k,) in con.execute(f"SELECT DISTINCT suite_run_id FROM {new}").fetchall()]
    marks = ", ".join("?" for _ in keys) or "NULL"
    suite_marks = ", ".join("?" for _ in suites) or "NULL"
    con.execute(
        "CREATE OR REPLACE TEMP TABLE seen AS SELECT DISTINCT series_key, suite_run_id FROM stored_runs "
        f"SEMI JOIN (SELECT DISTINCT series_key, suite_run_id FROM {new}) USING (series_key, suite_run_id) "
        f"WHERE series_key IN ({marks}) AND suite_run_id IN ({suite_marks})",
        [*keys, *suites],
    )
    con.execute(
        "UPDATE touched t SET suite_runs = t.suite_runs - "
        "(SELECT count(*) FROM seen s WHERE s.series_key = t.series_key)"
    )
    columns = [
        c
        for (c,) in con.execute(
            f"SELECT column_name FROM duckdb_columns() WHERE database_name = '{WRITE}' AND table_name = 'series' "
            "ORDER BY column_index"
        ).fetchall()
    ]
    merged = ", ".join(f'{SERIES_TOTALS.get(c, "any_value")}("{c}") AS "{c}"' for c in columns if c != "series_key")
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE combined AS SELECT series_key, {merged} FROM (SELECT s.* FROM series s "
        "SEMI JOIN touched USING (series_key) UNION ALL BY NAME SELECT * FROM touched) GROUP BY series_key"
    )
    con.execute("DELETE FROM series WHERE series_key IN (SELECT series_key FROM touched)")
    con.execute("INSERT INTO series BY NAME SELECT * FROM combined")
    # Each touched series' latest suite run: the stored latest one or one of the new rows, whichever started last.
    con.execute(
        "CREATE OR REPLACE TEMP TABLE pick AS SELECT series_key, arg_max(suite_run_id, started_at) AS suite_run_id "
        "FROM (SELECT series_key, suite_run_id, started_at FROM latest_runs SEMI JOIN touched USING (series_key) "
        f"UNION ALL SELECT series_key, suite_run_id, started_at FROM {new}) GROUP BY series_key"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE latest_new AS SELECT l.* FROM latest_runs l JOIN pick USING (series_key, "
        f"suite_run_id) UNION ALL BY NAME SELECT r.* FROM {new} r JOIN pick USING (series_key, suite_run_id)"
    )
    # A picked suite run whose stored rows were not the latest (an older run continued later): rare, looked up.
    con.execute(
        "CREATE OR REPLACE TEMP TABLE rare AS SELECT * FROM pick SEMI JOIN seen USING (series_key, suite_run_id) "
        "ANTI JOIN (SELECT DISTINCT series_key, suite_run_id FROM latest_runs) USING (series_key, suite_run_id)"
    )
    if con.execute("SELECT count(*) FROM rare").fetchall()[0][0]:
        con.execute(
            "INSERT INTO latest_new BY NAME SELECT r.* FROM stored_runs r JOIN rare USING (series_key, suite_run_id)"
        )
    con.execute("DELETE FROM latest_runs WHERE series_key IN (SELECT series_key FROM touched)")
    con.execute("INSERT INTO latest_runs BY NAME SELECT * FROM latest_new")
    for table in ("touched", "seen", "combined", "pick", "latest_new", "rare"):
        con.execute(f"DROP TABLE {table}")


def _carry_state(con: duckdb.DuckDBPyConnection, catalog: str) -> None:
    """The state tables of the store's newest file, into the new delta (alert ids continue after its last)."""
    next_id = con.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {catalog}.alerts").fetchall()[0][0]
    con.execute(f"CREATE SEQUENCE alert_ids START {int(next_id)}")
    for statement in DDL:
        con.execute(statement)
    for table in STATE_TABLES:
        if table in ("series", "latest_runs"):
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM {catalog}.{table}")
        elif _has_table(con, catalog, table):
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {catalog}.{table}")


def _tidy(db: Path) -> None:
    """After a write: merge deltas into the base when they hold more than COMPACT_SHARE of its rows, else
    merge the newest deltas into one when there are more than MAX_DELTAS."""
    snap = snapshot(db, views=False)
    if snap is None or not snap.chain:
        if snap is not None:
            snap.con.close()
        return
    try:
        sizes = [snap.rows(c) for c in snap.catalogs]
    except BaseException:
        snap.con.close()
        raise
    base, deltas = sizes[0], sizes[1:]
    if sum(deltas) > COMPACT_SHARE * base:
        compact(db, snap)  # closes it
        return
    snap.con.close()
    if len(deltas) > MAX_DELTAS:
        start = len(deltas) - 2
        total = deltas[-1] + deltas[-2]
        while start > 0 and total >= deltas[start - 1]:
            start -= 1
            total += deltas[start]
        merge_deltas(db, snap.chain[start:])


def _append_logs(con: duckdb.DuckDBPyConnection, catalog: str, into: str = "") -> None:
    """The rows of ``catalog``'s log tables, appended to those of ``into`` (a catalog prefix, or the default)."""
    for table in LOG_TABLES:
        con.execute(f"INSERT INTO {into}{table} BY NAME SELECT * FROM {catalog}.{table}")


def merge_deltas(db: Path, deltas: list[Delta]) -> None:
    """Merge consecutive deltas into one file covering them all; readers switch to it on their next
    connection, and the merged files are deleted."""
    final = delta_dir(db) / f"{deltas[0].first:08d}-{deltas[-1].last:08d}.duckdb"
    tmp = _tmp(delta_dir(db), final.name)
    con = duckdb.connect()
    try:
        names = [f"m{i}" for i in range(len(deltas))]
        for name, delta in zip(names, deltas):
            con.execute(f"ATTACH ? AS {name} (READ_ONLY)", [str(delta.path)])
        con.execute("ATTACH ? AS w", [str(tmp)])
        con.execute(f"USE {WRITE}")
        _carry_state(con, names[-1])
        ensure_schema(con, _meta(con, "kind") or "real")
        for name in names:
            _append_logs(con, name, f"{WRITE}.")
        _publish(con, WRITE, tmp, final)
    finally:
        con.close()
        tmp.unlink(missing_ok=True)
    for delta in deltas:
        delta.path.unlink(missing_ok=True)


def compact(db: Path, snap: Snapshot | None) -> None:
    """A new base: the old one copied, brought to this layout, with the deltas' rows appended and the newest
    state tables, re-sorted by series; renamed over the old base, after which the deltas are deleted. The
    caller holds the writer lock. Costs the store's size: it runs when the deltas have grown to a share of it."""
    if snap is None:
        return
    chain, merged = snap.chain, snap.last_seq
    snap.con.close()
    tmp = _tmp(db.parent, db.name)
    try:
        shutil.copyfile(db, tmp)
        con = duckdb.connect(str(tmp))
        try:
            con.execute("BEGIN")
            kind = store_kind(con)
            ensure_schema(con, kind)
            for i, delta in enumerate(chain):
                con.execute(f"ATTACH ? AS d{i} (READ_ONLY)", [str(delta.path)])
                _append_logs(con, f"d{i}")
            if chain:
                newest = f"d{len(chain) - 1}"
                for table in KEPT_TABLES:
                    if _has_table(con, newest, table):
                        con.execute(f"DELETE FROM {table}")
                        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {newest}.{table}")
                con.execute(f"INSERT OR REPLACE INTO store_meta SELECT * FROM {newest}.store_meta")
            con.execute("CREATE TABLE runs_sorted AS SELECT * FROM runs ORDER BY series_key, started_at, trial")
            con.execute("DROP TABLE runs")
            con.execute("ALTER TABLE runs_sorted RENAME TO runs")
            con.execute(run_id_index())
            for statement in DERIVED:
                con.execute(statement)
            con.execute("INSERT OR REPLACE INTO store_meta VALUES ('merged_through', ?)", [str(merged)])
            con.execute("INSERT OR REPLACE INTO store_meta VALUES ('store_version', ?)", [str(STORE_VERSION)])
            con.execute("COMMIT")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        _replace(tmp, db)
    finally:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)
    for delta in _deltas(db):
        if delta.last <= merged:
            delta.path.unlink(missing_ok=True)


@contextlib.contextmanager
def update(db: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[duckdb.DuckDBPyConnection]:
    """Write to an existing store's state (alerts) the way an ingest does: a delta published only if the
    whole block succeeds. Readers are never blocked."""
    _require(db, StoreError)
    with write(db, "real", on_wait) as con:  # the store says what kind it is; "real" is only for a new one
        yield con


class StoreReader:
    """A read-only snapshot of the live store that follows it: when a write has changed the store, the
    next ``connection()`` closes the old snapshot and opens the new one."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self._snap: Snapshot | None = None

    def identity(self) -> tuple | None:
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
                    f"the store {self.db} has layout version {snap.version}, this stepwatch reads {STORE_VERSION}: "
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
    _require(db)
    return StoreReader(db)


def _require(db: Path, error: type[StoreError] = NoStoreError) -> None:
    if not db.exists():
        raise error(f"no store at {db}: run `stepwatch ingest` first")
