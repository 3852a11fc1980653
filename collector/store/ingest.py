"""Ingest: result parquet from folders, files or object storage into the store, validated, idempotent and
in one transaction (see ``collector.store.database`` for how readers never see half of it).

Files already ingested unchanged are skipped without being read; rows whose run_id is present are
skipped; a file that fails validation is quarantined beside where it was, and the rest goes on.
"""

from __future__ import annotations

import hashlib
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

from collector.schema import IDENTITY_COLUMNS, SYNTHETIC_SOURCE, SchemaError, conform, hostile_values
from collector.store import objectstore
from collector.store.database import (
    DERIVED,
    STORE_VERSION,
    WINDOW_COLUMNS,
    StoreError,
    ensure_schema,
    new_version,
    store_kind,
    store_version,
    writer_lock,
)

BATCH_ROWS = 200_000
READ_THREADS = 4
READ_AHEAD = 64  # files decoded ahead of the inserting thread
CLUSTER_TAIL = 0.1


def _known_files(db: Path) -> tuple[dict[str, tuple[int, int]], set[str], str | None, bool]:
    """(uri -> (size, mtime_ns), digests, kind, whether its layout is older than this stepwatch's) of the live
    store."""
    if not db.exists():
        return {}, set(), None, False
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as error:
        raise StoreError(f"cannot open the store {db}: {str(error).splitlines()[0]}") from None
    try:
        rows = con.execute("SELECT uri, size, mtime_ns, digest FROM ingested_files").fetchall()
        files = {uri: (size, mtime) for uri, size, mtime, _ in rows}
        digests = {digest for *_, digest in rows}
        version = store_version(con)
        return files, digests, store_kind(con), version is not None and version < STORE_VERSION
    except duckdb.Error as error:
        raise StoreError(f"{db} is not a stepwatch store: {str(error).splitlines()[0]}") from None
    finally:
        con.close()


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


class _Batch:
    """Conformed tables waiting to be inserted together, and their manifest rows."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []
        self.rows = 0
        self.manifest: list[dict] = []

    def add(self, table: pa.Table, uri: str) -> None:
        self.tables.append(table.append_column("source_uri", pa.array([uri] * table.num_rows, pa.string())))
        self.rows += table.num_rows


def _conflicts(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Files of ``staged`` holding a run_id that the store, or another file of the batch, holds with different
    content (IDENTITY_COLUMNS): {uri: why}. The same rows again (a copy, a resumed file) are no conflict."""
    differs = " OR ".join(f'a."{c}" IS DISTINCT FROM b."{c}"' for c in IDENTITY_COLUMNS)
    named = ", ".join(f'CASE WHEN a."{c}" IS DISTINCT FROM b."{c}" THEN \'{c}\' END' for c in IDENTITY_COLUMNS)
    found = con.execute(
        f"SELECT a.source_uri, a.run_id, 'the store', [{named}] FROM staged a JOIN runs b USING (run_id) "
        f"WHERE {differs} UNION ALL "
        f"SELECT a.source_uri, a.run_id, b.source_uri, [{named}] FROM staged a JOIN staged b USING (run_id) "
        f"WHERE a.source_uri <> b.source_uri AND ({differs}) ORDER BY 1, 2"
    ).fetchall()
    out: dict[str, str] = {}
    for uri, run_id, where, columns in found:
        differing = ", ".join(c for c in columns if c)
        out.setdefault(uri, f"run_id {run_id} is already in {where} with a different {differing}")
    return out


def _insert(con: duckdb.DuckDBPyConnection, batch: _Batch, now: datetime, report: IngestReport) -> int:
    """Insert the batch's rows whose run_id the store has not seen; returns how many were added. A file with a
    run_id the store (or another file) holds with different content is refused whole, and says so."""
    added = 0
    if batch.tables:
        staged = pa.concat_tables(batch.tables)
        con.register("staged", staged)
        conflicts = _conflicts(con)
        for uri, why in conflicts.items():
            report.refused.append((uri, f"conflict: {why}; nothing of it was stored"))
            report.files_ingested -= 1
        batch.manifest = [entry for entry in batch.manifest if entry["uri"] not in conflicts]
        if conflicts:
            con.unregister("staged")
            keep = pc.invert(pc.is_in(staged.column("source_uri"), pa.array(list(conflicts), pa.string())))
            con.register("staged", staged.filter(keep))
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


@dataclass
class _Read:
    data: bytes
    table: pa.Table | str  # the conformed rows that can be stored, or why the file cannot be ingested
    hostile: pa.Table | None = None  # rows whose values cannot be a measurement
    reasons: list[str] = field(default_factory=list)  # why, per hostile row


def _read(loc: objectstore.Location, entry: objectstore.Entry) -> _Read:
    """The file's bytes and its conformed table (rows with hostile values apart), or why it cannot be ingested."""
    data = objectstore.read_bytes(loc, entry.path)
    try:
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except (pa.ArrowException, OSError) as error:
        return _Read(data, f"not a readable parquet file ({' '.join(str(error).split())[:200]})")
    try:
        table = conform(table)
    except SchemaError as error:
        return _Read(data, str(error))
    reasons = hostile_values(table)
    if not any(reasons):
        return _Read(data, table)
    bad = pa.array([r is not None for r in reasons])
    return _Read(data, table.filter(pc.invert(bad)), table.filter(bad), [r for r in reasons if r is not None])


def _read_ahead(todo: list[tuple[objectstore.Location, objectstore.Entry]]) -> Iterator[_Read]:
    """``_read`` of each file in order, a few files ahead on worker threads (parquet decoding frees the GIL)."""
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        for start in range(0, len(todo), READ_AHEAD):
            yield from pool.map(lambda item: _read(*item), todo[start : start + READ_AHEAD])


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
        known, digests, kind, outdated = _known_files(db)
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
        if todo or outdated:  # an older store is upgraded even when nothing is new
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
    with new_version(db) as con:
        now = datetime.now(UTC)
        ensure_schema(con, kind)
        batch = _Batch()
        for (loc, entry), read in zip(todo, _read_ahead(todo)):
            data, table = read.data, read.table
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
            if read.hostile is not None:
                moved = objectstore.quarantine_rows(loc, entry, read.hostile, read.reasons)
                rows = f"{read.hostile.num_rows} row(s) with values that cannot be a measurement"
                report.quarantined.append((entry.uri, f"{rows} ({read.reasons[0]}; the rest ingested)", moved))
                on_file(entry.uri, "quarantined rows")
            digests.add(digest)
            batch.add(table, entry.uri)
            batch.manifest.append({**manifest, "rows_read": table.num_rows})
            report.files_ingested += 1
            report.rows_read += table.num_rows
            on_file(entry.uri, "read")
            if batch.rows >= BATCH_ROWS:
                report.rows_added += _insert(con, batch, now, report)
                batch = _Batch()
        report.rows_added += _insert(con, batch, now, report)
        _cluster(con)
        for statement in DERIVED:
            con.execute(statement)
