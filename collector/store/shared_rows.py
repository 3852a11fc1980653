"""The rows of a shared store's Iceberg tables as the local copy takes them in (``collector.store.shared``): each
table's Arrow schema, a table's rows at a snapshot or since one, and rows cast to a table's schema."""

from __future__ import annotations

import functools
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from stepwatch.collector.config import ADDED_DIMENSIONS
from stepwatch.collector.schema import SCHEMA
from stepwatch.collector.store.tables import DDL

RUNS, FILES, ALERTS, BISECT = "runs", "ingested_files", "alerts", "bisect_steps"
TABLES = (RUNS, FILES, ALERTS, BISECT)
COMPACTED = "stepwatch.operation"  # a snapshot property: "compact" marks a rewrite of files that adds no rows


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


def snapshot_id(table: Any) -> int | None:
    current = table.current_snapshot()
    return current.snapshot_id if current is not None else None


def rows_since(table: Any, since: int | None, at: dict[str, int | None]) -> pa.Table | None:
    """The rows of the data files the snapshots after ``since`` added (all rows for a copy being made); None when
    one of those snapshots did more than append (a compaction's rewrite adds no rows), or ``since`` is not behind the
    current one (an expired snapshot, say)."""
    if at:  # a store as of a snapshot: read whole, once
        return read(table, at.get(RUNS, -1))
    if since is None:  # a copy being made: the current snapshot whole (its ancestors may be expired)
        return read(table, -1)
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
        if step.summary is not None and step.summary[COMPACTED] == "compact":
            continue  # the same rows in fewer files (``collector.store.maintain``)
        if step.summary is None or step.summary.operation.value != "append":
            return None
        for manifest in step.manifests(table.io):
            if manifest.added_snapshot_id != step.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.status == ManifestEntryStatus.ADDED:
                    tasks.append(FileScanTask(entry.data_file))
    return ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks)


def read(table: Any, snapshot_id: int | None) -> pa.Table:
    """A table's rows at a snapshot (-1: its current one; None: before its first, so none)."""
    if snapshot_id is None:
        return pa.table({})
    scan = table.scan() if snapshot_id == -1 else table.scan(snapshot_id=snapshot_id)
    return scan.to_arrow()


def filled(rows: pa.Table) -> pa.Table:
    """Rows written by an older stepwatch: the series dimensions added since, at their defaults."""
    for name, default in ADDED_DIMENSIONS.items():
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.array([default] * rows.num_rows, SCHEMA.field(name).type))
        else:
            index = rows.column_names.index(name)
            rows = rows.set_column(index, name, pc.fill_null(rows[name], default))
    return rows


def cast(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = [rows[f.name] if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=pa.schema([f.with_nullable(True) for f in schema])).cast(schema)


def replace(con: duckdb.DuckDBPyConnection, name: str, rows: pa.Table) -> None:
    """A state table of the copy, replaced by the shared one's rows (a file's newest record where it has several)."""
    con.execute(f"DELETE FROM {name}")
    if not rows.num_rows:
        return
    con.register("shared_rows", rows)
    newest = " QUALIFY row_number() OVER (PARTITION BY uri ORDER BY ingested_at DESC) = 1" if name == FILES else ""
    con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM shared_rows{newest}")
    con.unregister("shared_rows")
