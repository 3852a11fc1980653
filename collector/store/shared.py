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
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from stepwatch.collector.store import address as addresses
from stepwatch.collector.store import copies, iceberg, shared_rows
from stepwatch.collector.store.copies import SYNCED
from stepwatch.collector.store.engine import require, snapshot, write
from stepwatch.collector.store.errors import CommitUnknownError, NoStoreError, StoreError, Unreachable
from stepwatch.collector.store.files import one_line, writer_lock
from stepwatch.collector.store.ingest import IngestReport, add_rows, ingest
from stepwatch.collector.store.shared_rows import ALERTS, BISECT, FILES, RUNS, TABLES
from stepwatch.collector.store.tables import STORE_VERSION

STATE = (ALERTS, BISECT)  # rewritten whole by ``update``
ATTEMPTS_ENV = "STEPWATCH_SHARED_ATTEMPTS"
POLL_ENV = "STEPWATCH_SHARED_POLL_S"
OUTAGE_ENV = "STEPWATCH_SHARED_OUTAGE_S"  # how long a writer waits out storage or a catalog that does not answer
STORAGE_TIMEOUT_ENV = "STEPWATCH_SHARED_STORAGE_TIMEOUT_S"
PROPERTIES = {"commit.retry.num-retries": "0", "stepwatch.store_version": str(STORE_VERSION)}


def _pyiceberg() -> Any:
    try:
        import pyiceberg.catalog.sql
        import pyiceberg.exceptions
    except ImportError:
        raise StoreError("a shared store needs pyiceberg: pip install 'stepwatch[shared]'") from None
    return pyiceberg


def _io_properties() -> dict[str, str]:
    """Object storage settings from the environment stepwatch reads for buckets (collector.store.objectstore)."""
    env = os.environ
    found = {
        "s3.endpoint": env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
        "s3.region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
        "s3.access-key-id": env.get("AWS_ACCESS_KEY_ID"),
        "s3.secret-access-key": env.get("AWS_SECRET_ACCESS_KEY"),
        "s3.session-token": env.get("AWS_SESSION_TOKEN"),
        "s3.connect-timeout": "5",
        "s3.request-timeout": str(_storage_timeout()),
    }
    return {key: value for key, value in found.items() if value}


def _storage_timeout() -> float:
    """Seconds a request to the store's storage may go unanswered before it counts as stalled."""
    return float(os.environ.get(STORAGE_TIMEOUT_ENV, "30"))


def _outage_s() -> float:
    return float(os.environ.get(OUTAGE_ENV, "60"))


def _attempts() -> int:
    return max(1, int(os.environ.get(ATTEMPTS_ENV, "30")))


def _backoff(attempt: int) -> None:
    """A random wait that grows with the attempt (up to about 2 s), so that racing writers spread out."""
    time.sleep(random.uniform(0.05, 0.2) * min(2**attempt, 10))


class _Outage:
    """A writer waiting out storage or a catalog that does not answer: up to $STEPWATCH_SHARED_OUTAGE_S seconds from
    the first failure, then one line that says what landed."""

    def __init__(self, store: SharedStore) -> None:
        self.store, self.since, self.notes = store, None, []

    def _waited(self) -> float:
        now = time.monotonic()
        self.since = self.since if self.since is not None else now
        return now - self.since

    def wait(self, where: str, error: BaseException) -> None:
        """After a failure that left nothing landed: wait and try again, or say so."""
        waited = self._waited()
        detail = self.store.storage_said(error) if where == "storage" else one_line(error)[:300]
        if isinstance(error, Unreachable):
            detail = str(error).removeprefix(f"{self.store.address.shown}: ")
        if waited >= _outage_s():
            raise StoreError(
                f"{self.store.address.shown}: nothing of this ingest is in the store: {where} did not answer for "
                f"{waited:.0f} s ({detail}); ingest again"
            )
        time.sleep(min(2.0, 0.25 + waited / 4))

    def landed(self, staged: list[iceberg.Staged], detail: str) -> bool:
        """Whether a commit the catalog did not answer landed, asking it until it answers or the wait is over."""
        while True:
            waited = self._waited()
            try:
                if iceberg.landed(self.store.catalog, staged):
                    self.notes.append(f"the catalog did not answer the commit ({detail}); after {waited:.0f} s it "
                                      "said the commit had landed")  # fmt: skip
                    return True
                return False
            except (*iceberg.catalog_failures(), *iceberg.storage_failures(), StoreError):
                if waited >= _outage_s():
                    raise CommitUnknownError(
                        f"{self.store.address.shown}: not known whether this ingest landed: the catalog went away "
                        f"while committing ({detail}) and did not answer for {waited:.0f} s; ingest again (it adds "
                        "only what the store lacks)"
                    ) from None
                time.sleep(1.0)


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
        """One line naming the store once, and whether its storage or its catalog failed."""
        if isinstance(error, StoreError):
            return error
        if isinstance(error, iceberg.catalog_failures()):
            return Unreachable(f"{self.address.shown}: {what}: its catalog: {one_line(error)[:300]}", "the catalog")
        if isinstance(error, iceberg.storage_failures()):
            return Unreachable(f"{self.address.shown}: {what}: {self.storage_said(error)}", "storage")
        return StoreError(f"{self.address.shown}: {what}: {one_line(error)[:300]}")

    def storage_said(self, error: BaseException) -> str:
        """What storage's error means: a stall (no answer in time) named as such."""
        detail = one_line(error)[:300]
        if re.search(r"timeout was reached|timed out|curlcode: 28", detail, re.IGNORECASE):
            return f"its storage ({self.address.warehouse}) stalled: no answer in {_storage_timeout():g} s ({detail})"
        return f"its storage ({self.address.warehouse}) failed: {detail}"

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

        for attempt in range(3):  # a connection the catalog dropped (a restart) is made again
            try:
                with self.catalog.engine.connect() as con:
                    rows = con.execute(
                        text(
                            "SELECT table_name, metadata_location FROM iceberg_tables "
                            "WHERE catalog_name = :catalog AND table_namespace = :namespace"
                        ),
                        {"catalog": "stepwatch", "namespace": self.address.namespace},
                    ).fetchall()
                break
            except Exception as error:
                if attempt == 2 or not isinstance(error, iceberg.catalog_failures()):
                    raise self._fail(error, "cannot read the catalog") from None
                time.sleep(0.5 * 2**attempt)
        return {name: location for name, location in rows if name in TABLES and location}

    def load(self, table: str) -> Any:
        try:
            return self.catalog.load_table(self._name(table))
        except Exception as error:
            raise self._fail(error, f"cannot load its {table} table") from None

    def ensure(self, kind: str) -> None:
        """The namespace and tables, made where missing (a table that exists is not touched: making it anew writes a
        metadata file first); the runs table checked (``_check``)."""
        for attempt in range(3):  # writers making a new store at once race to insert its namespace's row
            try:
                self.catalog.create_namespace_if_not_exists(self.address.namespace)
                break
            except Exception as error:
                if attempt == 2:
                    raise self._fail(error, "cannot create its namespace") from None
                _backoff(attempt)
        have = self.locations()
        runs = None
        for name, schema in shared_rows.schemas().items():
            if name in have:
                continue
            properties = {**PROPERTIES, "stepwatch.kind": kind}
            try:
                table = self.catalog.create_table_if_not_exists(self._name(name), schema=schema, properties=properties)
            except Exception as error:
                raise self._fail(error, f"cannot create its {name} table") from None
            runs = table if name == RUNS else runs
        self._check(runs or self.load(RUNS), kind)

    def _check(self, table: Any, kind: str) -> bool:
        """The runs table holds ``kind`` results and a layout this stepwatch reads; it gains the columns this
        stepwatch writes where it lacks them (True then: the table moved)."""
        have = table.properties.get("stepwatch.kind", kind)
        if have != kind:
            raise StoreError(f"{self.address.shown} holds {have} results; {kind} results go into a store of their own")
        newer = int(table.properties.get("stepwatch.store_version", STORE_VERSION))
        if newer > STORE_VERSION:
            raise StoreError(f"{self.address.shown} was written by a newer stepwatch (layout {newer}): upgrade")
        schema = shared_rows.schemas()[RUNS]
        missing = set(schema.names) - {f.name for f in table.schema().fields}
        for attempt in range(_attempts()) if missing else ():
            try:
                with table.update_schema() as update:
                    update.union_by_name(schema)
                return True
            except _pyiceberg().exceptions.CommitFailedException:
                _backoff(attempt)
                table = self.load(RUNS)
        return False

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
            rows = shared_rows.rows_since(
                tables[RUNS], json.loads(held.get("runs_snapshot") or "null") if held else None, at
            )
            if rows is None:  # the table was rewritten (not only appended to): the copy is made again
                copies.remove(cache)
                held, rows = None, shared_rows.read(tables[RUNS], at.get(RUNS, -1))
            cache.parent.mkdir(parents=True, exist_ok=True)
        with write(cache, kind) as done:
            con = done.con
            if rows is not None and rows.num_rows:
                add_rows(done, kind, shared_rows.filled(rows))
            for name in (FILES, *STATE):
                if name in tables and (held is None or held.get(name) != locations[name]):
                    shared_rows.replace(con, name, shared_rows.read(tables[name], at.get(name, -1)))
            runs_snapshot = at.get(RUNS) if RUNS in at else shared_rows.snapshot_id(tables[RUNS])
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

    def writable(self) -> None:
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
        """Ingest into the local copy as a local ingest does and, before that write is published, commit the rows it
        added and the records of its files to the shared store in one commit (``collector.store.iceberg``): both land
        or neither. A commit lost to another writer is made again against what the winner added. Storage or the
        catalog lost is waited out for $STEPWATCH_SHARED_OUTAGE_S seconds, then said in one line: nothing of the
        ingest landed (StoreError), or whether it landed is not known (CommitUnknownError)."""
        self.writable()
        start = time.perf_counter()
        errors = _pyiceberg().exceptions
        outage, retries, quarantined = _Outage(self), 0, []
        for attempt in range(_attempts()):
            self._state, self._landed = None, None
            try:
                synced, held = self._ready(cache, "synthetic" if synthetic else "real")
                commit = functools.partial(self._commit, synced, held, outage)
                report = ingest(sources, cache, synthetic, on_commit=commit, quarantined=quarantined, **options)
                break
            except errors.CommitFailedException:
                retries += 1
                _backoff(attempt)
            except iceberg.Lost as lost:
                outage.wait(lost.where, lost.error)
            except Unreachable as lost:
                outage.wait(lost.where, lost)
            except Exception as error:
                if self._landed is None or isinstance(error, CommitUnknownError):
                    raise
                rows, files = self._landed  # the commit landed; the copy's write after it did not
                report = IngestReport(files_ingested=files, rows_added=rows, rows_read=rows, quarantined=quarantined)
                report.notes.append(f"the local copy could not be written ({one_line(error)[:200]}); the next command "
                                    "reads these rows from the store")  # fmt: skip
                self._state = None
                break
        else:
            raise StoreError(f"{self.address.shown}: {_attempts()} commits lost to other writers; nothing was added")
        if self._state is not None:
            copies.remember(cache, self._state)
        report.quarantined[:] = list(dict.fromkeys(report.quarantined))  # rows quarantined again by a later attempt
        report.commit_retries, report.notes = retries, report.notes + outage.notes
        report.seconds = time.perf_counter() - start
        return report

    _state: dict[str, str] | None = None  # what the copy holds after this process's last commit
    _landed: tuple[int, int] | None = None  # that commit's rows and file records, once it landed

    def _ready(self, cache: Path, kind: str) -> tuple[Synced, dict[str, tuple]]:
        """The copy at the shared store's snapshot, its runs and files tables loaded there (the store and its tables
        made if missing), and the records of files it holds: {uri: (size, mtime_ns, digest)}."""
        synced = self.sync(cache)
        if synced is None or not set(TABLES) <= set(synced.locations):
            self.ensure(kind)
        synced = self._current(cache, (RUNS, FILES))
        if self._check(synced.tables[RUNS], kind):  # the runs table gained this stepwatch's columns
            synced = self._current(cache, (RUNS, FILES))
        snap = snapshot(cache, views=False)
        held: dict[str, tuple] = {}
        if snap is not None:
            try:
                found = snap.con.execute(f"SELECT uri, size, mtime_ns, digest FROM {snap.catalogs[-1]}.{FILES}")
                held = {uri: tuple(rest) for uri, *rest in found.fetchall()}
            finally:
                snap.con.close()
        return synced, held

    def _commit(
        self, synced: Synced, held: dict[str, tuple], outage: _Outage, done: Any, rows: pa.Table, records: list[dict]
    ) -> None:
        """The rows an ingest added to the copy and the records of its files, committed to the shared store in one
        commit, before the copy's write is published (``ingest``'s ``on_commit``); the copy then holds the commit."""
        from pyiceberg.expressions import In

        self._state = None
        fresh = [r for r in records if held.get(r["uri"]) != (r["size"], r["mtime_ns"], r["digest"])]
        staged = []
        try:
            if rows.num_rows:
                runs = synced.tables[RUNS].transaction()
                runs.append(shared_rows.cast(rows, shared_rows.schemas()[RUNS]))
                staged.append(iceberg.Staged(synced.tables[RUNS], runs))
            if fresh:
                files = synced.tables[FILES].transaction()
                again = [r["uri"] for r in fresh if r["uri"] in held]
                if again:  # a file changed since it was recorded: its record replaced, one row per file
                    files.delete(In("uri", again))
                files.append(shared_rows.cast(pa.Table.from_pylist(fresh), shared_rows.schemas()[FILES]))
                staged.append(iceberg.Staged(synced.tables[FILES], files))
        except iceberg.storage_failures() as error:
            raise iceberg.Lost("storage", error) from None
        if not staged:
            return
        try:
            locations = iceberg.commit(self.catalog, staged)
        except iceberg.Unsure as unsure:
            if not outage.landed(staged, str(unsure)):
                raise iceberg.Lost("the catalog", unsure) from None
            self._landed = (rows.num_rows, len(fresh))
            return  # landed; the copy keeps its old state, so its next sync reads the commit (adding nothing twice)
        self._landed = (rows.num_rows, len(fresh))
        state = {**synced.locations, **locations}
        runs_snapshot = staged[0].snapshot_id if rows.num_rows else shared_rows.snapshot_id(synced.tables[RUNS])
        state["runs_snapshot"] = json.dumps(runs_snapshot)
        done.con.execute("INSERT OR REPLACE INTO store_meta VALUES (?, ?)", [SYNCED, json.dumps(state)])
        self._state = state

    @contextlib.contextmanager
    def update(self, cache: Path, on_wait: Any) -> Iterator[duckdb.DuckDBPyConnection]:
        """Change alerts and bisect steps as in a local store; the tables a block changed are committed whole,
        under the catalog's advisory lock, only if no one else changed them since they were read."""
        self.writable()
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
                    wanted = shared_rows.schemas()[name]
                    try:
                        if set(wanted.names) - {f.name for f in table.schema().fields}:  # an older stepwatch's
                            table.update_schema().union_by_name(wanted).commit()
                        table.overwrite(shared_rows.cast(after, wanted))
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


# The stores of this process, by their copies.

_STORES: dict[str, SharedStore] = {}


def store_of(db: Path) -> SharedStore | None:
    """The shared store ``db`` is the local copy of, if it is one."""
    address = addresses.attached(db)
    if address is None:
        return None
    return _STORES.setdefault(address.text, SharedStore(address))


def attach(text: str, follow: bool = True) -> Path:
    """The local copy of the shared store at ``text``, brought up to date (unless not ``follow``); its path stands for
    the store."""
    address = addresses.parse(text)
    cache = address.cache()
    addresses.remember(cache, address)
    store = store_of(cache)
    assert store is not None
    if follow:
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
