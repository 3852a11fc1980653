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
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb

from stepwatch.collector.store import address, files, objectstore
from stepwatch.collector.store.errors import NoStoreError, StoreError
from stepwatch.collector.store.tables import (
    DDL,
    DERIVED,
    KEPT_TABLES,
    LAYOUT,
    LOG_COLUMNS,
    LOG_TABLES,
    RAW_LOGS,
    STATE_TABLES,
    STORE_VERSION,
    carry_state,
    ensure_schema,
    has_table,
    meta,
    missing_columns,
    refuse_newer,
    run_id_index,
    store_kind,
    store_version,
    tables_in,
    update_derived,
)

MAX_DELTAS = 8
COMPACT_SHARE = 0.1
WRITE = "w"  # the catalog a write goes into; its ``runs`` and ``samples`` hold only the new rows
_ATTACH_TRIES = 20


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Moved(Exception):
    """The store changed while a snapshot was being attached."""


@dataclass
class Snapshot:
    """A consistent read-only view of a store: the base and its delta chain attached to ``con`` as catalogs
    s0 (the base), s1, ... in order, with every table reachable by its name."""

    con: duckdb.DuckDBPyConnection
    chain: list[files.Delta]
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


def _log_views(
    con: duckdb.DuckDBPyConnection,
    catalogs: list[str],
    prefix: str = "",
    kind: str = "",
    tables: tuple[str, ...] = LOG_TABLES,
) -> None:
    """Views of the log tables across ``catalogs``: in the in-memory catalog for a reader (so that its cursors
    see them too), ``kind="TEMP"`` for a writer (searched before the delta it writes). Columns by name in one
    order (a migrated base may hold them in another), in a plain UNION ALL through which DuckDB pushes filters
    and projections down to each file. A column that a file written by an earlier stepwatch lacks (a metric added
    since; the file gains it at the next write's compaction) reads as NULL there."""
    found = con.execute(
        "SELECT database_name, table_name, list(column_name) FROM duckdb_columns() "
        "WHERE list_contains(?, database_name) AND list_contains(?, table_name) GROUP BY ALL",
        [list(catalogs), list(tables)],
    ).fetchall()
    present = {(catalog, table): set(names) for catalog, table, names in found}

    def columns(catalog: str, table: str) -> str:
        have = present.get((catalog, table), set())
        return ", ".join(_quote(c) if c in have else f"NULL AS {_quote(c)}" for c in LOG_COLUMNS[table])

    for table in tables:
        having = [c for c in catalogs if (c, table) in present]  # a file older than a table lacks it
        union = " UNION ALL ".join(f"SELECT {columns(c, table)} FROM {c}.{table}" for c in having)
        if not having:
            empty = next(d for d in DDL if f"TABLE IF NOT EXISTS {table} " in d)
            con.execute(
                empty.replace(
                    f"CREATE TABLE IF NOT EXISTS {table} ", f"CREATE OR REPLACE {kind} TABLE {prefix}{table} ", 1
                )
            )
            continue
        con.execute(f"CREATE OR REPLACE {kind} VIEW {prefix}{table} AS {union}")


def _state_views(con: duckdb.DuckDBPyConnection, catalog: str) -> None:
    present = tables_in(con, catalog)
    for table in STATE_TABLES:
        if table in present:
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM {catalog}.{table}")
        else:  # an older file: the table as it would be, empty
            con.execute(next(d for d in DDL if f"TABLE IF NOT EXISTS {table} " in d))


def snapshot(db: Path, views: bool = True) -> Snapshot | None:
    """Attach the store read-only (None while it does not exist), with views of its tables unless ``views`` is
    False (then only the attached catalogs). Retries while a write replaces files."""
    for _ in range(_ATTACH_TRIES):
        identity = files.store_identity(db)
        if identity is None:
            return None
        con = duckdb.connect()
        try:
            con.execute("ATTACH ? AS s0 (READ_ONLY)", [str(db)])
            version = store_version(con, "s0")
            merged = int(meta(con, "merged_through", "s0") or 0)
            chain = files.delta_chain(files.deltas(db), merged)
            for i, delta in enumerate(chain, 1):
                con.execute(f"ATTACH ? AS s{i} (READ_ONLY)", [str(delta.path)])
            if files.identity(db) != identity[0]:
                raise _Moved
        except (_Moved, duckdb.IOException):
            con.close()  # a compaction replaced the base, or deleted a delta we listed: attach the new store
            continue
        except duckdb.Error as error:
            con.close()
            raise StoreError(f"cannot open the store {db}: {files.one_line(error)}") from None
        except StoreError:
            con.close()
            raise
        snap = Snapshot(con, chain, identity, version, merged)
        if views and version == STORE_VERSION:
            _log_views(con, snap.catalogs)
            _state_views(con, snap.catalogs[-1])
        return snap
    raise StoreError(f"cannot open the store {db}: it kept changing while being opened")


def _publish(con: duckdb.DuckDBPyConnection, catalog: str, tmp: Path, final: Path) -> None:
    """Checkpoint the attached ``catalog`` (written to ``tmp``), detach it, fsync and rename it to ``final``."""
    con.execute(f"CHECKPOINT {catalog}")
    con.execute("USE memory")
    con.execute(f"DETACH {catalog}")
    files.replace(tmp, final)


@contextlib.contextmanager
def _failures(db: Path) -> Iterator[None]:
    """Any failure of a write as one StoreError line; the store is as it was."""
    try:
        yield
    except duckdb.Error as error:
        raise StoreError(f"cannot write {db}: {files.one_line(error)}; the store is unchanged") from None
    except objectstore.StorageError:
        raise  # already one line naming the object
    except OSError as error:
        raise StoreError(f"cannot write {db}: {error.strerror or error}; the store is unchanged") from None


@contextlib.contextmanager
def write(db: Path, kind: str, on_wait: Callable[[], None] = lambda: None, derived: bool = True) -> Iterator[Write]:
    """A write into the store, under the writer lock: a new delta (or, for a new store, the base) that is
    published only if the block ends cleanly. An older layout (or one missing a column of this schema) is
    compacted, and so migrated, first. The derived tables are brought up to date here, after the block (a new store
    written with ``derived`` False has none: the rows a shared store's ingest stages, read once and thrown away)."""
    with files.writer_lock(db, on_wait), _failures(db):
        files.clean_stale(db)
        snap = snapshot(db, views=False)
        if snap is not None and snap.version is not None and snap.version > STORE_VERSION:
            snap.con.close()
            refuse_newer(snap.version)
        if snap is not None and (snap.version != STORE_VERSION or missing_columns(snap.con, snap.catalogs[-1])):
            snap.con.close()
            compact(db, snap)
            snap = snapshot(db, views=False)
        try:
            yield from _write(db, kind, snap, derived)
        finally:
            if snap is not None:
                snap.con.close()
        try:
            _tidy(db)
        except (duckdb.Error, OSError) as error:
            detail = files.one_line(error) if isinstance(error, duckdb.Error) else error.strerror or error
            raise StoreError(f"the write into {db} is stored, but compacting its files failed: {detail}") from None


@dataclass(frozen=True)
class Write:
    """What a block of ``write`` is given. ``con`` sees the whole store (``runs`` and ``samples`` include the rows
    appended so far; ``stored_runs`` is the store before this write) and writes state tables by their names;
    log rows go in through ``append``."""

    con: duckdb.DuckDBPyConnection

    def append(self, table: str, select: str, params: list | None = None) -> None:
        """Add the rows of ``select`` (columns by name) to the log table ``table`` (runs or samples)."""
        if table not in LOG_TABLES:
            raise ValueError(f"{table} is not a log table")
        self.con.execute(f"INSERT INTO {WRITE}.{table} BY NAME {select}", params or [])


def _write(db: Path, kind: str, snap: Snapshot | None, derived: bool = True) -> Iterator[Write]:
    con = snap.con if snap is not None else duckdb.connect()
    if snap is None:
        tmp, final = files.tmp_name(db.parent, db.name), db
    else:
        seq = snap.last_seq + 1
        files.delta_dir(db).mkdir(exist_ok=True)
        final = files.delta_dir(db) / f"{seq:08d}-{seq:08d}.duckdb"
        tmp = files.tmp_name(files.delta_dir(db), final.name)
    try:
        # Once the delta is the default catalog, the state tables' names are its own (the reader's views of the
        # snapshot, in the in-memory catalog, are no longer searched).
        con.execute("ATTACH ? AS w", [str(tmp)])
        con.execute(f"USE {WRITE}")
        if snap is not None:
            carry_state(con, snap.catalogs[-1])
            _log_views(con, snap.catalogs, prefix="stored_", kind="TEMP", tables=("runs",))  # the store before it
        ensure_schema(con, kind)
        _log_views(con, [*(snap.catalogs if snap else []), WRITE], kind="TEMP", tables=RAW_LOGS)
        # No transaction: the new file is invisible until its rename, which is the commit. (Inside one, a
        # temporary table of more than one row group written in it read back empty: DuckDB 2.0.0.)
        yield Write(con)
        if snap is None:
            for statement in (*DERIVED, run_id_index(f"{WRITE}.runs")) if derived else ():
                con.execute(statement)
        else:
            update_derived(con, f"{WRITE}.runs")
        _publish(con, WRITE, tmp, final)
    finally:
        if snap is None:
            con.close()
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)


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
    """The rows of ``catalog``'s log tables, appended to those of ``into`` (a catalog prefix, or the default). (A
    file of an older layout may lack a derived log; the compaction that migrates it rebuilds them.)"""
    present = tables_in(con, catalog)
    for table in LOG_TABLES:
        if table in present:
            con.execute(f"INSERT INTO {into}{table} BY NAME SELECT * FROM {catalog}.{table}")


def merge_deltas(db: Path, deltas: list[files.Delta]) -> None:
    """Merge consecutive deltas into one file covering them all; readers switch to it on their next
    connection, and the merged files are deleted."""
    final = files.delta_dir(db) / f"{deltas[0].first:08d}-{deltas[-1].last:08d}.duckdb"
    tmp = files.tmp_name(files.delta_dir(db), final.name)
    con = duckdb.connect()
    try:
        names = [f"m{i}" for i in range(len(deltas))]
        for name, delta in zip(names, deltas):
            con.execute(f"ATTACH ? AS {name} (READ_ONLY)", [str(delta.path)])
        con.execute("ATTACH ? AS w", [str(tmp)])
        con.execute(f"USE {WRITE}")
        carry_state(con, names[-1])
        ensure_schema(con, meta(con, "kind") or "real")
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
    tmp = files.tmp_name(db.parent, db.name)
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
                    if has_table(con, newest, table):
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
            con.execute("INSERT OR REPLACE INTO store_meta VALUES ('layout', ?)", [LAYOUT])
            con.execute("COMMIT")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        files.replace(tmp, db)
    finally:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)
    for delta in files.deltas(db):
        if delta.last <= merged:
            delta.path.unlink(missing_ok=True)


@contextlib.contextmanager
def update(db: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[duckdb.DuckDBPyConnection]:
    """Write to an existing store's state (alerts) the way an ingest does: a delta published only if the
    whole block succeeds. Readers are never blocked."""
    require(db, StoreError)
    with write(db, "real", on_wait) as done:  # the store says what kind it is; "real" is only for a new one
        yield done.con


def require(db: Path, error: type[StoreError] = NoStoreError) -> None:
    if not db.exists():
        raise error(f"no store at {address.shown(db)}: run `stepwatch ingest` first")
