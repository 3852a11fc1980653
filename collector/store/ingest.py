"""Ingest: result parquet from folders, files or object storage into the store, validated, idempotent and
in one write (see ``collector.store.database`` for how readers never see half of it).

Files already ingested unchanged are skipped without being read; rows whose run_id is present are
skipped; a file that fails validation is quarantined beside where it was, and the rest goes on.

Every file is read whole (local or remote, the same way) and hashed. A file whose footer says it holds
exactly this stepwatch's schema goes the bulk way: DuckDB's multi-file reader loads a batch of them at
once (a remote file from a local copy of the bytes just read), and SQL checks every row as ``conform`` and
``hostile_values`` would. Files of another schema (an older stepwatch's, another writer's) go in bulk too,
grouped by their parquet schema: DuckDB's reader loads each group at once and ``conform`` migrates and
checks the group's rows together. A file without rows, and any file the reader, the checks or ``conform``
find fault with, goes the per-file way: pyarrow reads it, ``conform`` migrates it or says why not, and
hostile rows are quarantined with their reasons; so what lands and what is quarantined, and why, is the
per-file way's decision for every file (tests/test_store.py runs both ways on the same files).
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stepwatch.collector.config import ADDED_DIMENSIONS
from stepwatch.collector.schema import (
    IDENTITY_COLUMNS,
    NOT_NULL,
    SCHEMA_VERSION,
    SYNTHETIC_SOURCE,
    SchemaError,
    conform,
    has_current_schema,
    hostile_sql,
    hostile_values,
)
from stepwatch.collector.store import objectstore
from stepwatch.collector.store.address import shown
from stepwatch.collector.store.engine import Write, snapshot, write
from stepwatch.collector.store.errors import StoreError
from stepwatch.collector.store.files import clean, remove_dead_staging, staging_prefix
from stepwatch.collector.store.tables import (
    CHILD_TABLES,
    LIST_COLUMNS,
    STORE_VERSION,
    has_table,
    list_type,
    store_kind,
    unnest_children,
)

BATCH_FILES = 2_000  # files staged and inserted together (bounds the memory an ingest holds)
READ_THREADS = 4
READ_AHEAD = 64  # files read ahead of the thread that stages them


def _known_files(db: Path) -> tuple[dict[str, tuple[int, int]], set[str], str | None, bool]:
    """(uri -> (size, mtime_ns), digests, kind, whether its layout is older than this stepwatch's) of the live
    store."""
    snap = snapshot(db, views=False)
    if snap is None:
        return {}, set(), None, False
    newest = snap.catalogs[-1]
    try:
        rows = snap.con.execute(f"SELECT uri, size, mtime_ns, digest FROM {newest}.ingested_files").fetchall()
        files = {uri: (size, mtime) for uri, size, mtime, _ in rows}
        digests = {digest for *_, digest in rows}
        kind = store_kind(snap.con, newest)
        return files, digests, kind, snap.version is not None and snap.version < STORE_VERSION
    except duckdb.Error as error:
        raise StoreError(f"{db} is not a stepwatch store: {str(error).splitlines()[0]}") from None
    finally:
        snap.con.close()


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
    files_one_by_one: int = 0  # read the per-file way: no rows, or a fault the bulk reader or checks found
    commit_retries: int = 0  # a shared store's commits lost to another writer, then made again
    notes: list[str] = field(default_factory=list)  # what else a user should know (a shared store's outage waited out)


@dataclass
class _Read:
    """One file as read: its digest, and either a local path DuckDB can read in bulk, or its conformed rows
    (hostile ones apart), or why it cannot be ingested."""

    digest: str
    bulk_path: str | None = None
    group: str | None = None  # a file of another schema read in bulk: the schema it shares with its group
    table: pa.Table | str | None = None
    hostile: pa.Table | None = None  # rows whose values cannot be a measurement
    reasons: list[str] = field(default_factory=list)  # why, per hostile row


def _per_file(data: bytes, digest: str) -> _Read:
    """The file's conformed table (rows with hostile values apart), or why it cannot be ingested."""
    try:
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except (pa.ArrowException, OSError) as error:
        return _Read(digest, table=f"not a readable parquet file ({' '.join(str(error).split())[:200]})")
    try:
        table = conform(table)
    except SchemaError as error:
        return _Read(digest, table=str(error))
    reasons = hostile_values(table)
    if not any(reasons):
        return _Read(digest, table=table)
    bad = pa.array([r is not None for r in reasons])
    return _Read(digest, table=table.filter(pc.invert(bad)), hostile=table.filter(bad),
                 reasons=[r for r in reasons if r is not None])  # fmt: skip


def _schema_group(data: bytes) -> str | None:
    """The parquet schema a file of another schema (an older stepwatch's, another writer's) shares with the
    files it is read in bulk with, or None for a file that goes the per-file way at once: no readable footer,
    or no rows (its schema version is then its metadata's, which only the per-file way reads)."""
    try:
        meta = pq.read_metadata(pa.BufferReader(data))
    except (pa.ArrowException, OSError):
        return None
    return str(meta.schema).split("\n", 1)[-1] if meta.num_rows else None  # the schema's text, not its id


def _read(loc: objectstore.Location, entry: objectstore.Entry, spool: Path, bulk: bool = True) -> _Read:
    data = objectstore.read_bytes(loc, entry.path)
    digest = hashlib.sha256(data).hexdigest()
    current = bulk and has_current_schema(data)
    group = _schema_group(data) if bulk and not current else None
    if not current and group is None:
        return _per_file(data, digest)
    if objectstore.is_remote(entry.uri):  # DuckDB reads the bytes just read, from a local copy
        local = spool / f"{digest}.parquet"
        local.write_bytes(data)
        return _Read(digest, bulk_path=str(local), group=group)
    return _Read(digest, bulk_path=entry.path, group=group)


def _read_ahead(
    todo: list[tuple[objectstore.Location, objectstore.Entry]], spool: Path, bulk: bool = True
) -> Iterator[_Read]:
    """``_read`` of each file in order, a few files ahead on worker threads (I/O, hashing and parquet decoding
    free the GIL)."""
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        for start in range(0, len(todo), READ_AHEAD):
            yield from pool.map(lambda item: _read(*item, spool, bulk), todo[start : start + READ_AHEAD])


INDEX_LOOKUP_MAX = 2_048  # run ids looked up through the base's index; more are found by one scan


def _stored(con: duckdb.DuckDBPyConnection) -> None:
    """``known``: the stored rows (their IDENTITY_COLUMNS) whose run_id ``staged`` holds. A few run ids (a
    nightly file) are looked up through the base's index on run_id, so the cost follows what is new, not the
    store; a backfill's many are found by one scan of the run_id column."""
    ids = [run_id for (run_id,) in con.execute("SELECT DISTINCT run_id FROM staged").fetchall()]
    columns = ", ".join(f'"{c}"' for c in ("run_id", *IDENTITY_COLUMNS))
    if len(ids) <= INDEX_LOOKUP_MAX:
        marks = ", ".join("?" for _ in ids) or "NULL"
        con.execute(f"CREATE OR REPLACE TEMP TABLE known AS SELECT {columns} FROM runs WHERE run_id IN ({marks})", ids)
    else:
        con.execute(f"CREATE OR REPLACE TEMP TABLE known AS SELECT {columns} FROM runs SEMI JOIN staged USING (run_id)")


def _conflicts(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Files of ``staged`` holding a run_id that the store (``known``), or another file of the batch, holds with
    different content (IDENTITY_COLUMNS): {uri: why}. The same rows again (a copy, a resumed file) are no
    conflict."""
    differs = " OR ".join(f'a."{c}" IS DISTINCT FROM b."{c}"' for c in IDENTITY_COLUMNS)
    named = ", ".join(f'CASE WHEN a."{c}" IS DISTINCT FROM b."{c}" THEN \'{c}\' END' for c in IDENTITY_COLUMNS)
    found = con.execute(
        f"SELECT a.source_uri, a.run_id, 'the store', [{named}] FROM staged a JOIN known b USING (run_id) "
        f"WHERE {differs} UNION ALL "
        f"SELECT a.source_uri, a.run_id, b.source_uri, [{named}] FROM staged a JOIN staged b USING (run_id) "
        f"WHERE a.source_uri <> b.source_uri AND ({differs}) ORDER BY 1, 2"
    ).fetchall()
    out: dict[str, str] = {}
    for uri, run_id, where, columns in found:
        differing = ", ".join(c for c in columns if c)
        out.setdefault(uri, f"run_id {run_id} is already in {where} with a different {differing}")
    return out


class _Batch:
    """Files read and waiting to be staged together, and their manifest rows."""

    def __init__(self) -> None:
        self.bulk: dict[str, tuple[objectstore.Location, objectstore.Entry, dict]] = {}  # path -> file
        self.groups: dict[str, list[str]] = {}  # files of another schema: their parquet schema -> paths
        self.tables: list[pa.Table] = []
        self.manifest: list[dict] = []

    def add(self, table: pa.Table, uri: str) -> None:
        self.tables.append(table.append_column("source_uri", pa.array([uri] * table.num_rows, pa.string())))


@dataclass
class _Ingest:
    """One ingest's write: files in, rows staged per batch, checked, and inserted into the new delta."""

    write: Write
    kind: str
    digests: set[str]  # of every file the store holds or this ingest has taken
    report: IngestReport
    on_file: Callable[[str, str], None]
    spool: Path  # local copies of remote files, for DuckDB's reader
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    collect: bool = False  # keep the rows added (temp table ``committed``) and the files recorded (``records``)
    records: list[dict] = field(default_factory=list)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        return self.write.con

    def file(self, loc: objectstore.Location, entry: objectstore.Entry, read: _Read, batch: _Batch) -> None:
        report, on_file = self.report, self.on_file
        manifest = {"uri": entry.uri, "size": entry.size, "mtime_ns": entry.mtime_ns, "digest": read.digest}
        if read.digest in self.digests:
            batch.manifest.append({**manifest, "rows_read": 0})
            report.files_unchanged += 1
            on_file(entry.uri, "unchanged")
            return
        if read.bulk_path is None:
            report.files_one_by_one += 1
        else:
            self.digests.add(read.digest)
            if read.group is not None:
                batch.groups.setdefault(read.group, []).append(read.bulk_path)
            batch.bulk[read.bulk_path] = (loc, entry, manifest)
            return
        table = read.table
        if isinstance(table, str):
            moved = objectstore.quarantine(loc, entry, table)
            report.quarantined.append((entry.uri, table, moved))
            on_file(entry.uri, "quarantined")
            return
        if not self._belongs(entry.uri, bool(pc.any(pc.equal(table.column("source"), SYNTHETIC_SOURCE)).as_py())):
            return
        if read.hostile is not None:
            moved = objectstore.quarantine_rows(loc, entry, read.hostile, read.reasons)
            rows = f"{read.hostile.num_rows} row(s) with values that cannot be a measurement"
            report.quarantined.append((entry.uri, f"{rows} ({read.reasons[0]}; the rest ingested)", moved))
            on_file(entry.uri, "quarantined rows")
        self.digests.add(read.digest)
        batch.add(table, entry.uri)
        self._accepted(batch, manifest, table.num_rows)

    def _belongs(self, uri: str, synthetic_rows: bool) -> bool:
        if synthetic_rows != (self.kind == "synthetic"):
            why = "synthetic test data (ingest it with --synthetic)" if synthetic_rows else "real results"
            self.report.refused.append((uri, f"holds {why}, which does not belong in a {self.kind} store"))
            self.on_file(uri, "refused")
            return False
        return True

    def _accepted(self, batch: _Batch, manifest: dict, rows: int) -> None:
        batch.manifest.append({**manifest, "rows_read": rows})
        self.report.files_ingested += 1
        self.report.rows_read += rows
        self.on_file(manifest["uri"], "read")

    def stage(self, batch: _Batch) -> None:
        """``staged``: the batch's rows, bulk files through DuckDB's reader and checked in SQL; a bulk file
        that fails a check (or the reader) goes the per-file way."""
        con = self.con
        con.execute("CREATE OR REPLACE TEMP TABLE staged AS SELECT * FROM runs LIMIT 0")
        for name in LIST_COLUMNS:
            con.execute(f"ALTER TABLE staged ADD COLUMN {name} {list_type(name)}")
        grouped = {path for paths in batch.groups.values() for path in paths}
        retry = []
        if len(grouped) < len(batch.bulk):
            retry = self._stage_bulk(batch, [path for path in batch.bulk if path not in grouped])
        for paths in batch.groups.values():
            retry += self._stage_group(batch, paths)
        for path in retry:
            loc, entry, _ = batch.bulk[path]
            self.digests.discard(batch.bulk[path][2]["digest"])
            self.file(loc, entry, _read(loc, entry, self.spool, bulk=False), batch)
        for table in batch.tables:
            con.register("slow", table)
            con.execute("INSERT INTO staged BY NAME SELECT * FROM slow")
            con.unregister("slow")

    def _stage_group(self, batch: _Batch, paths: list[str]) -> list[str]:
        """Files of one older (or another writer's) schema: read together by DuckDB's multi-file reader, brought
        to today's schema by ``conform`` once for all of them (the migrations and checks the per-file way runs on
        each), and staged. Files the reader, ``conform`` or ``hostile_values`` find fault with go the per-file
        way, which decides what lands and what is quarantined, and says why, as it always did."""
        try:
            read = self.con.sql("SELECT * FROM read_parquet(?, filename = true)", params=[paths]).to_arrow_table()
        except duckdb.Error:
            return paths
        read = read.combine_chunks()  # a chunk a file: one for all, or every step below pays per chunk
        filenames = read.column("filename").to_pylist()
        try:
            table = conform(read.drop_columns(["filename"]))
        except SchemaError:
            return paths  # one of them is not what the others are: each says what on its own
        faulty = {filenames[i] for i, why in enumerate(hostile_values(table)) if why is not None}
        sources = table.column("source").to_pylist()  # conform keeps the rows' order
        synthetic = {name for name, source in zip(filenames, sources) if source == SYNTHETIC_SOURCE}
        counts = Counter(filenames)
        keep: dict[str, str] = {}  # path -> uri
        for path in paths:
            if path in faulty:
                continue
            _, entry, manifest = batch.bulk[path]
            if self._belongs(entry.uri, path in synthetic):
                keep[path] = entry.uri
                self._accepted(batch, manifest, counts.get(path, 0))
        if keep:
            mask = pa.array([name in keep for name in filenames])
            uris = pa.array([keep[name] for name in filenames if name in keep], pa.string())
            batch.tables.append(table.filter(mask).append_column("source_uri", uris))
        return [path for path in paths if path in faulty]

    def _stage_bulk(self, batch: _Batch, paths: list[str]) -> list[str]:
        con = self.con
        try:
            con.execute("SET preserve_insertion_order = false")  # lets DuckDB read the files in parallel
            con.execute("CREATE OR REPLACE TEMP TABLE bulk AS SELECT * FROM read_parquet(?, filename = true)", [paths])
        except duckdb.Error:
            return paths  # one of them is not what its footer says: read each on its own
        no_nulls = " AND ".join(f'"{c}" IS NOT NULL' for c in NOT_NULL)
        checks = con.execute(
            f"SELECT filename, count(*), bool_and(schema_version = ? AND {no_nulls}) AND NOT bool_or({hostile_sql()}), "
            "bool_or(source = ?) FROM bulk GROUP BY filename",
            [SCHEMA_VERSION, SYNTHETIC_SOURCE],
        ).fetchall()
        found = {path: (rows, ok, synthetic) for path, rows, ok, synthetic in checks}
        retry, good = [], []
        for path in paths:
            rows, ok, synthetic = found.get(path, (0, True, self.kind == "synthetic"))
            loc, entry, manifest = batch.bulk[path]
            if not ok:
                retry.append(path)
            elif self._belongs(entry.uri, synthetic):
                good.append((path, entry.uri))
                self._accepted(batch, manifest, rows)
        con.register("good", pa.table({"filename": [p for p, _ in good], "source_uri": [u for _, u in good]}))
        filled = ", ".join(f'coalesce("{name}", ?) AS "{name}"' for name in ADDED_DIMENSIONS)
        con.execute(
            f"INSERT INTO staged BY NAME SELECT * EXCLUDE (filename) REPLACE ({filled}) FROM bulk JOIN good "
            "USING (filename)",
            list(ADDED_DIMENSIONS.values()),
        )
        con.unregister("good")
        con.execute("DROP TABLE bulk")
        return retry

    def insert(self, batch: _Batch) -> None:
        """Insert the batch's rows whose run_id the store has not seen. A file with a run_id the store (or
        another file) holds with different content is refused whole, and says so."""
        con, report = self.con, self.report
        self.stage(batch)
        conflicts = fresh(con)
        for uri, why in conflicts.items():
            report.refused.append((uri, f"conflict: {why}; nothing of it was stored"))
            report.files_ingested -= 1
        batch.manifest = [entry for entry in batch.manifest if entry["uri"] not in conflicts]
        report.rows_added += con.execute("SELECT count(*) FROM fresh").fetchall()[0][0]
        excluded = ", ".join(LIST_COLUMNS)
        # A row copied from a shared store keeps when it was ingested there; a file's rows are ingested now.
        self.write.append(
            "runs",
            f"SELECT * EXCLUDE ({excluded}) REPLACE (coalesce(ingested_at, ?) AS ingested_at) FROM fresh",
            [self.now],
        )
        for table in CHILD_TABLES:
            self.write.append(table, unnest_children(table, "fresh"))
        if self.collect:
            kept = "SELECT * REPLACE (coalesce(ingested_at, ?) AS ingested_at) FROM fresh"
            if has_table(con, "temp", "committed"):
                con.execute(f"INSERT INTO committed BY NAME {kept}", [self.now])
            else:
                con.execute(f"CREATE TEMP TABLE committed AS {kept}", [self.now])
        con.execute("DROP TABLE fresh")
        if batch.manifest:
            for entry in batch.manifest:
                entry["ingested_at"] = self.now
            if self.collect:
                self.records += batch.manifest
            con.register("manifest", pa.Table.from_pylist(batch.manifest))
            con.execute("DELETE FROM ingested_files WHERE uri IN (SELECT uri FROM manifest)")
            con.execute("INSERT INTO ingested_files BY NAME SELECT * FROM manifest")
            con.unregister("manifest")


def fresh(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """``fresh``: the rows of ``staged`` (with their source_uri) whose run_id the store (``runs``) lacks, one per
    run_id; ``staged`` is used up. Returns the files refused for a conflict, {uri: why}: a run_id the store (or
    another file) holds with different content; none of their rows is fresh."""
    _stored(con)
    conflicts = _conflicts(con)
    if conflicts:
        con.register("conflicted", pa.table({"uri": list(conflicts)}))
        con.execute("DELETE FROM staged WHERE source_uri IN (SELECT uri FROM conflicted)")
        con.unregister("conflicted")
    # One row per run_id the store lacks: the last finished where the batch holds it twice (rare; a window
    # over all the wide rows would cost more than the rest of the write, so it runs over those alone).
    con.execute("CREATE OR REPLACE TEMP TABLE twice AS SELECT run_id FROM staged GROUP BY run_id HAVING count(*) > 1")
    con.execute(
        "CREATE OR REPLACE TEMP TABLE fresh AS SELECT * FROM staged ANTI JOIN twice USING (run_id) "
        "ANTI JOIN known USING (run_id)"
    )
    con.execute(
        "INSERT INTO fresh SELECT * FROM staged SEMI JOIN twice USING (run_id) ANTI JOIN known USING (run_id) "
        "QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY finished_at DESC NULLS LAST) = 1"
    )
    for table in ("twice", "staged", "known"):
        con.execute(f"DROP TABLE {table}")
    return conflicts


def unseen(con: duckdb.DuckDBPyConnection, rows: pa.Table) -> tuple[pa.Table, dict[str, str]]:
    """Of ``rows`` (whole result rows, with source_uri), those whose run_id the store that ``con`` reads lacks, and
    the files refused for a conflict (``fresh``)."""
    con.register("rows", rows)
    con.execute("CREATE OR REPLACE TEMP TABLE staged AS SELECT * FROM rows")
    con.unregister("rows")
    conflicts = fresh(con)
    out = con.sql("SELECT * FROM fresh").to_arrow_table()
    con.execute("DROP TABLE fresh")
    return out, conflicts


def add_rows(done: Write, kind: str, rows: pa.Table) -> int:
    """Add whole result rows (with source_uri and ingested_at: a shared store's) to the store ``done`` writes, those
    whose run_id it lacks; returns how many."""
    batch = _Batch()
    batch.tables.append(rows)
    work = _Ingest(done, kind, set(), IngestReport(), lambda uri, outcome: None, Path("."))
    work.insert(batch)
    return work.report.rows_added


def ingest(
    sources: list[str],
    db: Path,
    synthetic: bool = False,
    on_file: Callable[[str, str], None] = lambda uri, outcome: None,
    on_wait: Callable[[], None] = lambda: None,
    recursive: bool = False,
    bulk: bool = True,
    on_commit: Callable[[Write, pa.Table, list[dict]], None] | None = None,
    quarantined: list[tuple[str, str, str]] | None = None,
) -> IngestReport:
    """Ingest every *.parquet in ``sources`` (folders, files, s3:// or gs:// prefixes) into ``db``; with
    ``recursive``, those in the folders below them too (not in quarantine/). ``bulk`` False reads every file
    the per-file way: the reference the bulk ways are held to. ``on_commit``: called at the end of the write,
    before it is published, with the rows it added (whole result rows, with their file and ingest time) and the
    records of the files it read; an error there leaves ``db`` as it was (a shared store's copy: its commit).
    ``quarantined``: the list the report's quarantined files go to (kept across a shared store's attempts: a file
    moved to quarantine by an attempt whose commit lost is not there for the next).

    Files already ingested unchanged are skipped without being read; rows whose run_id is present are
    skipped; a file that fails validation is quarantined beside where it was, and the rest goes on.
    """
    start = time.perf_counter()
    report = IngestReport() if quarantined is None else IngestReport(quarantined=quarantined)
    listed = []
    for source in sources:
        try:
            listed.append(objectstore.list_parquet(source))
            listed += objectstore.parquet_below(source) if recursive else []
        except FileNotFoundError:
            raise StoreError(f"{source} does not exist") from None
    known, digests, kind, outdated = _known_files(db)
    if kind == "synthetic" and not synthetic:
        raise StoreError(f"{shown(db)} holds synthetic test data; pass --synthetic to add to it, or pick another --db")
    if kind == "real" and synthetic:
        raise StoreError(f"{shown(db)} holds real results; synthetic test data goes into a store of its own")
    todo = []
    for loc, entries in listed:
        for entry in entries:
            report.files_seen += 1
            if known.get(entry.uri) == (entry.size, entry.mtime_ns):
                report.files_unchanged += 1
            else:
                todo.append((loc, entry))
    if todo or outdated:  # an older store is upgraded even when nothing is new
        kind = kind or ("synthetic" if synthetic else "real")
        remove_dead_staging(db.parent)  # what a killed ingest left
        with (
            write(db, kind, on_wait) as done,
            tempfile.TemporaryDirectory(dir=db.parent, prefix=staging_prefix()) as spool,
        ):
            # A store written meanwhile by another ingest: what it added is known to this one now.
            digests |= {d for (d,) in done.con.execute("SELECT digest FROM ingested_files").fetchall()}
            work = _Ingest(done, kind, digests, report, on_file, Path(spool), collect=on_commit is not None)
            for start_at in range(0, len(todo), BATCH_FILES):
                chunk = todo[start_at : start_at + BATCH_FILES]
                batch = _Batch()
                for (loc, entry), read in zip(chunk, _read_ahead(chunk, Path(spool), bulk)):
                    work.file(loc, entry, read, batch)
                work.insert(batch)
            if on_commit is not None:
                rows = pa.table({})
                if has_table(done.con, "temp", "committed"):
                    rows = done.con.sql("SELECT * FROM committed").to_arrow_table()
                    done.con.execute("DROP TABLE committed")
                on_commit(done, rows, work.records)
    else:
        clean(db, on_wait)
    report.seconds = time.perf_counter() - start
    return report
