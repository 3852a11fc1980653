"""A store a whole organisation shares: Apache Iceberg tables, their catalog in PostgreSQL (pyiceberg's SQL
catalog) and their files in object storage (``s3://``, ``gs://``, or ``file://`` for one machine), named by an
address (``collector.store.address``). Many runners write it at once; Trino, Spark, Snowflake, BigQuery or DuckDB
read it without stepwatch.

Why Iceberg and not DuckLake: DuckLake is a DuckDB extension that must match DuckDB's version exactly, and is
fetched from DuckDB's extension site at run time (the package index holds it only for DuckDB 1.4 and 1.5, while
stepwatch runs on DuckDB 2.0); pyiceberg is a plain Python package, and its tables are read by every engine above.

Tables (namespace ``stepwatch`` by default): ``runs`` (one whole result row per trial, its windows and op table
included, as collector/schema.py defines it, with the file it came from and when it was ingested),
``ingested_files``, ``alerts`` and ``bisect_steps`` (as collector/store/tables.py defines them).

Writers. Each write is one Iceberg commit: the catalog moves the table's metadata pointer only if it still points
where the writer read it (a conditional UPDATE in PostgreSQL), so a commit lands whole or not at all, and a writer
killed at any moment leaves the table as it was (at most unreferenced files). pyiceberg's own retries are off
(``commit.retry.num-retries = 0``): a writer that loses a race reads the rows the winner added, drops the run_ids
now present and tries again, so nothing is lost and nothing is duplicated. Alerts and bisect steps are rewritten
whole under a PostgreSQL advisory lock (writers of state wait for each other) and committed the same conditional
way.

Readers. Every command reads a local copy: a DuckDB store of the usual kind in the cache folder, brought up to the
shared store's snapshot before a command and whenever a page finds the catalog moved (one query of the catalog
tells; the copy then reads only the files the new snapshots added). So pages read at the speed of a DuckDB file.
``as_of`` in the address reads the store as it was at a snapshot or a time, read-only.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
import shutil
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from stepwatch.collector.config import ADDED_DIMENSIONS
from stepwatch.collector.schema import SCHEMA
from stepwatch.collector.store import address as addresses
from stepwatch.collector.store import copies
from stepwatch.collector.store.copies import SYNCED
from stepwatch.collector.store.engine import require, snapshot, write
from stepwatch.collector.store.errors import NoStoreError, StoreError
from stepwatch.collector.store.files import one_line, writer_lock
from stepwatch.collector.store.ingest import IngestReport, add_rows, ingest, unseen
from stepwatch.collector.store.tables import DDL, STORE_VERSION, meta, store_kind, whole_rows

RUNS, FILES, ALERTS, BISECT = "runs", "ingested_files", "alerts", "bisect_steps"
TABLES = (RUNS, FILES, ALERTS, BISECT)
STATE = (ALERTS, BISECT)  # rewritten whole by ``update``
ATTEMPTS_ENV = "STEPWATCH_SHARED_ATTEMPTS"
POLL_ENV = "STEPWATCH_SHARED_POLL_S"
PROPERTIES = {"commit.retry.num-retries": "0", "stepwatch.store_version": str(STORE_VERSION)}


def _pyiceberg() -> Any:
    try:
        import pyiceberg.catalog.sql
        import pyiceberg.exceptions
    except ImportError:
        raise StoreError("a shared store needs pyiceberg: pip install 'stepwatch[shared]'") from None
    return pyiceberg


def _unreachable() -> tuple[type[BaseException], ...]:
    """What storage or a catalog that cannot be reached raises."""
    from sqlalchemy.exc import SQLAlchemyError

    return (OSError, SQLAlchemyError)


def _utc(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        f.with_type(pa.timestamp("us", "UTC")) if pa.types.is_timestamp(f.type) else f for f in schema
    ).remove_metadata()


@functools.cache
def schemas() -> dict[str, pa.Schema]:
    """Each shared table's Arrow schema: ``runs`` the result schema with its file and ingest time, the others as the
    store's DDL creates them."""
    con = duckdb.connect()
    try:
        for statement in DDL:
            con.execute(statement)
        ddl = {name: con.sql(f"SELECT * FROM {name} LIMIT 0").to_arrow_table().schema for name in TABLES}
    finally:
        con.close()
    runs = pa.schema([*SCHEMA, ddl[RUNS].field("source_uri"), ddl[RUNS].field("ingested_at")])
    return {RUNS: _utc(runs), **{name: _utc(ddl[name]) for name in TABLES if name != RUNS}}


def _io_properties() -> dict[str, str]:
    """Object storage settings from the environment stepwatch reads for buckets (collector.store.objectstore)."""
    env = os.environ
    found = {
        "s3.endpoint": env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
        "s3.region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
        "s3.access-key-id": env.get("AWS_ACCESS_KEY_ID"),
        "s3.secret-access-key": env.get("AWS_SECRET_ACCESS_KEY"),
        "s3.session-token": env.get("AWS_SESSION_TOKEN"),
    }
    return {key: value for key, value in found.items() if value}


def _attempts() -> int:
    return max(1, int(os.environ.get(ATTEMPTS_ENV, "30")))


def _backoff(attempt: int) -> None:
    """A random wait that grows with the attempt (up to about 2 s), so that racing writers spread out."""
    time.sleep(random.uniform(0.05, 0.2) * min(2**attempt, 10))


@dataclass
class Synced:
    """What the local copy holds: each shared table's metadata location, and the tables as loaded at them."""

    locations: dict[str, str]
    tables: dict[str, Any]


class SharedStore:
    def __init__(self, address: addresses.Address) -> None:
        self.address = address
        self._catalog: Any = None

    def _fail(self, error: BaseException, what: str) -> StoreError:
        return StoreError(f"{self.address.shown}: {what}: {one_line(error)[:300]}")

    @property
    def catalog(self) -> Any:
        if self._catalog is None:
            sql = _pyiceberg().catalog.sql
            for attempt in range(3):  # two first connections may race to create the catalog's own tables
                try:
                    self._catalog = sql.SqlCatalog(
                        "stepwatch", uri=self.address.catalog_uri, warehouse=self.address.warehouse,
                        **_io_properties(),
                    )  # fmt: skip
                    break
                except Exception as error:  # the driver's errors: unreachable, refused, no such database
                    if attempt == 2:
                        raise self._fail(error, "cannot open the catalog") from None
                    _backoff(attempt)
        return self._catalog

    def _name(self, table: str) -> tuple[str, str]:
        return (self.address.namespace, table)

    def locations(self) -> dict[str, str]:
        """Each shared table's current metadata location: one query of the catalog."""
        from sqlalchemy import text

        try:
            with self.catalog.engine.connect() as con:
                rows = con.execute(
                    text(
                        "SELECT table_name, metadata_location FROM iceberg_tables "
                        "WHERE catalog_name = :catalog AND table_namespace = :namespace"
                    ),
                    {"catalog": "stepwatch", "namespace": self.address.namespace},
                ).fetchall()
        except Exception as error:
            raise self._fail(error, "cannot read the catalog") from None
        return {name: location for name, location in rows if name in TABLES and location}

    def load(self, table: str) -> Any:
        try:
            return self.catalog.load_table(self._name(table))
        except Exception as error:
            raise self._fail(error, f"cannot load its {table} table") from None

    def ensure(self, kind: str) -> None:
        """The namespace and tables, made where missing; a runs table of an older stepwatch gains the new columns."""
        for attempt in range(3):  # writers making a new store at once race to insert its namespace's row
            try:
                self.catalog.create_namespace_if_not_exists(self.address.namespace)
                break
            except Exception as error:
                if attempt == 2:
                    raise self._fail(error, "cannot create its namespace") from None
                _backoff(attempt)
        for name, schema in schemas().items():
            properties = {**PROPERTIES, "stepwatch.kind": kind}
            try:
                table = self.catalog.create_table_if_not_exists(self._name(name), schema=schema, properties=properties)
            except Exception as error:
                raise self._fail(error, f"cannot create its {name} table") from None
            have = table.properties.get("stepwatch.kind", kind)
            if have != kind:
                raise StoreError(
                    f"{self.address.shown} holds {have} results; {kind} results go into a store of their own"
                )
            newer = int(table.properties.get("stepwatch.store_version", STORE_VERSION))
            if newer > STORE_VERSION:
                raise StoreError(f"{self.address.shown} was written by a newer stepwatch (layout {newer}): upgrade")
            missing = set(schema.names) - {f.name for f in table.schema().fields}
            for attempt in range(_attempts()) if missing else ():
                try:
                    with table.update_schema() as update:
                        update.union_by_name(schema)
                    break
                except _pyiceberg().exceptions.CommitFailedException:
                    _backoff(attempt)
                    table = self.load(name)

    # Reading: the local copy follows the shared store.

    def sync(self, cache: Path) -> Synced | None:
        """Bring the local copy at ``cache`` to the shared store's current snapshot (or its ``as_of``); None while the
        shared store has no tables yet."""
        locations = self.locations()
        if RUNS not in locations:
            return None
        if self.address.as_of is None and copies.holds(copies.held(cache), locations):
            return Synced(locations, {})
        tables = {name: self.load(name) for name in locations}
        locations = {name: table.metadata_location for name, table in tables.items()}
        at = self._as_of(tables)
        if self.address.as_of is not None:
            if copies.held(cache) is not None:
                return Synced(locations, tables)  # a snapshot never changes: the copy is made once
        kind = tables[RUNS].properties.get("stepwatch.kind", "real")
        with writer_lock(cache):
            held = copies.held(cache)
            if self.address.as_of is None and copies.holds(held, locations):  # another reader of this copy was first
                return Synced(locations, tables)
            rows = _rows_since(tables[RUNS], json.loads(held.get("runs_snapshot") or "null") if held else None, at)
            if rows is None:  # the table was rewritten (not only appended to): the copy is made again
                copies.remove(cache)
                held, rows = None, _read(tables[RUNS], at.get(RUNS, -1))
            cache.parent.mkdir(parents=True, exist_ok=True)
        with write(cache, kind) as done:
            con = done.con
            if rows is not None and rows.num_rows:
                add_rows(done, kind, _filled(rows))
            for name in (FILES, *STATE):
                if name in tables and (held is None or held.get(name) != locations[name]):
                    _replace(con, name, _read(tables[name], at.get(name, -1)))
            runs_snapshot = at.get(RUNS) if RUNS in at else _snapshot_id(tables[RUNS])
            state = {**locations, "runs_snapshot": json.dumps(runs_snapshot)}
            con.execute("INSERT OR REPLACE INTO store_meta VALUES (?, ?)", [SYNCED, json.dumps(state)])
        copies.remember(cache, state)
        return Synced(locations, tables)

    def _as_of(self, tables: dict[str, Any]) -> dict[str, int | None]:
        """Each table's snapshot id at the address's ``as_of`` ({} for the current one)."""
        as_of = self.address.as_of
        if as_of is None:
            return {}
        runs = tables[RUNS]
        if as_of.isdigit():
            found = runs.snapshot_by_id(int(as_of))
            if found is None:
                raise StoreError(f"{self.address.shown}: no snapshot {as_of} of its runs")
            ms = found.timestamp_ms
        else:
            # An address's "+" reads as a space: a zone offset written +01:00 arrives as " 01:00".
            text = re.sub(r" (\d\d:?\d\d)$", r"+\1", as_of)
            try:
                ms = int(datetime.fromisoformat(text).timestamp() * 1000)
            except ValueError:
                raise StoreError(f"as_of={as_of[:40]!r}: a snapshot id or an ISO time (2026-11-27T12:00Z)") from None
        out = {}
        for name, table in tables.items():
            found = table.snapshot_as_of_timestamp(ms)
            out[name] = found.snapshot_id if found is not None else None
        return out

    # Writing.

    def _writable(self) -> None:
        if self.address.as_of is not None:
            raise StoreError(f"{self.address.shown}: a store as of a snapshot is read-only (drop as_of to write)")

    def _current(self, cache: Path, names: tuple[str, ...]) -> Synced:
        """The copy synced, and ``names`` loaded exactly where the copy holds them."""
        while True:
            synced = self.sync(cache)
            if synced is None:
                raise NoStoreError(f"no store at {self.address.shown}: run `stepwatch ingest --db ...` first")
            tables = {name: synced.tables.get(name) or self.load(name) for name in names}
            if all(tables[name].metadata_location == synced.locations.get(name) for name in names):
                return Synced(synced.locations, tables)

    def ingest(self, sources: list[str], cache: Path, synthetic: bool, **options: Any) -> IngestReport:
        """Read and check the files as a local ingest does (into a store of their rows alone), then commit the rows
        the shared store lacks; on losing a race, again against what the winner added."""
        self._writable()
        start = time.perf_counter()
        errors = _pyiceberg().exceptions
        self.sync(cache)
        spool = Path(cache.parent / f".ingest-{os.getpid()}")
        shutil.rmtree(spool, ignore_errors=True)
        spool.mkdir(parents=True)
        try:
            scratch = spool / "rows.duckdb"
            report = ingest(sources, scratch, synthetic, known_from=cache, **options)
            if not scratch.exists():  # nothing new
                report.seconds = time.perf_counter() - start
                return report
            with contextlib.closing(duckdb.connect(str(scratch), read_only=True)) as con:
                rows = whole_rows(con, keep_source=True)
                manifest = con.sql(f"SELECT * FROM {FILES}").to_arrow_table()
                kind = store_kind(con) or "real"
        finally:
            shutil.rmtree(spool, ignore_errors=True)
        self.ensure(kind)
        schema = schemas()
        report.rows_added, conflicts = 0, {}
        for attempt in range(_attempts()):
            synced = self._current(cache, (RUNS,))
            snap = snapshot(cache)
            try:
                fresh, conflicts = unseen(snap.con, rows) if snap is not None else (rows, {})
            finally:
                if snap is not None:
                    snap.con.close()
            if not fresh.num_rows:
                break
            try:
                synced.tables[RUNS].append(_cast(fresh, schema[RUNS]))
                report.rows_added = fresh.num_rows
                self._hold_own(cache, synced.tables[RUNS], fresh, kind)
                break
            except errors.CommitFailedException:
                report.commit_retries += 1
                _backoff(attempt)
            except _unreachable() as error:  # storage or the catalog gone mid-commit
                raise self._fail(error, "its commit failed; none of these rows is in it (ingest again)") from None
        else:
            raise StoreError(f"{self.address.shown}: {_attempts()} commits lost to other writers; nothing was added")
        for uri, why in conflicts.items():
            report.refused.append((uri, f"conflict: {why}; nothing of it was stored"))
            report.files_ingested -= 1
        refused = pa.array(list(conflicts), pa.string())
        self._append(FILES, manifest.filter(pc.invert(pc.is_in(manifest["uri"], refused))))
        self.sync(cache)
        report.seconds = time.perf_counter() - start
        return report

    def _hold_own(self, cache: Path, runs: Any, fresh: pa.Table, kind: str) -> None:
        """The rows this writer just committed, into its copy from memory (not read back from the files): the commit
        landed only if the runs table was where the copy holds it, so the copy is then at the commit's snapshot."""
        with write(cache, kind) as done:
            add_rows(done, kind, _filled(fresh))
            state = {**json.loads(meta(done.con, SYNCED) or "{}"), RUNS: runs.metadata_location}
            state["runs_snapshot"] = json.dumps(_snapshot_id(runs))
            done.con.execute("INSERT OR REPLACE INTO store_meta VALUES (?, ?)", [SYNCED, json.dumps(state)])
        copies.remember(cache, state)

    def _append(self, name: str, rows: pa.Table) -> None:
        """Rows no one else's commit can make wrong (a file's record), appended on top of whatever lands first."""
        if not rows.num_rows:
            return
        table = self.load(name)
        for attempt in range(_attempts()):
            try:
                table.append(_cast(rows, schemas()[name]))
                return
            except _pyiceberg().exceptions.CommitFailedException:
                _backoff(attempt)
                table = self.load(name)
            except _unreachable() as error:
                raise self._fail(error, f"its {name} commit failed") from None
        raise StoreError(f"{self.address.shown}: {_attempts()} commits of {name} lost to other writers")

    @contextlib.contextmanager
    def update(self, cache: Path, on_wait: Any) -> Iterator[duckdb.DuckDBPyConnection]:
        """Change alerts and bisect steps as in a local store; the tables a block changed are committed whole,
        under the catalog's advisory lock, only if no one else changed them since they were read."""
        self._writable()
        with self._lock(on_wait):
            synced = self._current(cache, STATE)
            require(cache, StoreError)
            with write(cache, "real", on_wait) as done:
                con = done.con
                before = {name: con.sql(f"SELECT * FROM {name}").to_arrow_table() for name in STATE}
                yield con
                state = dict(synced.locations)
                # The block may leave a result of execute() unread, while which DuckDB 2.0's sql() will not start.
                con.execute("SELECT NULL").fetchall()
                for name in STATE:
                    after = con.sql(f"SELECT * FROM {name}").to_arrow_table()
                    if after.equals(before[name]):
                        continue
                    table = synced.tables[name]
                    try:
                        table.overwrite(_cast(after, schemas()[name]))
                    except _pyiceberg().exceptions.CommitFailedException:
                        raise StoreError(
                            f"{self.address.shown}: its {name} changed meanwhile; nothing of this was stored: "
                            "run it again"
                        ) from None
                    state[name] = table.metadata_location
                held = copies.held(cache) or {}
                state["runs_snapshot"] = held.get("runs_snapshot", "null")
                con.execute("INSERT OR REPLACE INTO store_meta VALUES (?, ?)", [SYNCED, json.dumps(state)])
            copies.remember(cache, state)

    @contextlib.contextmanager
    def _lock(self, on_wait: Any) -> Iterator[None]:
        """PostgreSQL's advisory lock on this store's state (other catalogs: the conditional commit alone)."""
        if self.address.dialect != "postgresql":
            yield
            return
        from sqlalchemy import text

        key = zlib.crc32(f"stepwatch:{self.address.namespace}".encode())
        with self.catalog.engine.connect() as con:
            if not con.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar():
                on_wait()
                con.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
            try:
                yield
            finally:
                con.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})


def _snapshot_id(table: Any) -> int | None:
    current = table.current_snapshot()
    return current.snapshot_id if current is not None else None


def _rows_since(table: Any, since: int | None, at: dict[str, int | None]) -> pa.Table | None:
    """The rows of the data files the snapshots after ``since`` added (all rows for a copy being made); None when
    one of those snapshots did more than append, or ``since`` is not behind the current one."""
    if at:  # a store as of a snapshot: read whole, once
        return _read(table, at.get(RUNS, -1))
    snap, chain = table.current_snapshot(), []
    while snap is not None and snap.snapshot_id != since:
        chain.append(snap)
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    if since is not None and snap is None:
        return None
    if not chain:
        return pa.table({})
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.manifest import ManifestEntryStatus
    from pyiceberg.table import FileScanTask

    tasks = []
    for step in reversed(chain):
        if step.summary is None or step.summary.operation.value != "append":
            return None
        for manifest in step.manifests(table.io):
            if manifest.added_snapshot_id != step.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.status == ManifestEntryStatus.ADDED:
                    tasks.append(FileScanTask(entry.data_file))
    return ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks)


def _read(table: Any, snapshot_id: int | None) -> pa.Table:
    """A table's rows at a snapshot (-1: its current one; None: before its first, so none)."""
    if snapshot_id is None:
        return pa.table({})
    scan = table.scan() if snapshot_id == -1 else table.scan(snapshot_id=snapshot_id)
    return scan.to_arrow()


def _filled(rows: pa.Table) -> pa.Table:
    """Rows written by an older stepwatch: the series dimensions added since, at their defaults."""
    for name, default in ADDED_DIMENSIONS.items():
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.array([default] * rows.num_rows, SCHEMA.field(name).type))
        else:
            index = rows.column_names.index(name)
            rows = rows.set_column(index, name, pc.fill_null(rows[name], default))
    return rows


def _cast(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = [rows[f.name] if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=pa.schema([f.with_nullable(True) for f in schema])).cast(schema)


def _replace(con: duckdb.DuckDBPyConnection, name: str, rows: pa.Table) -> None:
    """A state table of the copy, replaced by the shared one's rows (a file's newest record where it has several)."""
    con.execute(f"DELETE FROM {name}")
    if not rows.num_rows:
        return
    con.register("shared_rows", rows)
    newest = " QUALIFY row_number() OVER (PARTITION BY uri ORDER BY ingested_at DESC) = 1" if name == FILES else ""
    con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM shared_rows{newest}")
    con.unregister("shared_rows")


# The stores of this process, by their copies.

_STORES: dict[str, SharedStore] = {}


def store_of(db: Path) -> SharedStore | None:
    """The shared store ``db`` is the local copy of, if it is one."""
    address = addresses.attached(db)
    if address is None:
        return None
    return _STORES.setdefault(address.text, SharedStore(address))


def attach(text: str) -> Path:
    """The local copy of the shared store at ``text``, brought up to date; its path stands for the store."""
    address = addresses.parse(text)
    cache = address.cache()
    addresses.remember(cache, address)
    store = store_of(cache)
    assert store is not None
    store.sync(cache)
    return cache


class Poll:
    """A reader's check of the shared store, at most every $STEPWATCH_SHARED_POLL_S seconds (default 5)."""

    def __init__(self, store: SharedStore, cache: Path) -> None:
        self.store, self.cache, self.last = store, cache, 0.0

    def __call__(self) -> None:
        every = float(os.environ.get(POLL_ENV, "5"))
        if time.monotonic() - self.last >= every:
            self.store.sync(self.cache)
            self.last = time.monotonic()
