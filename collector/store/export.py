"""Export: the selected runs of a store as CSV (one flat row per trial) or as parquet of the result schema,
which another store can ingest."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from collector.schema import SCHEMA
from collector.store.selection import Selection, SelectionError

EXPORT_FORMATS = ("csv", "parquet")


def write(con: duckdb.DuckDBPyConnection, selection: Selection, fmt: str, out: Path) -> int:
    """Write the selected runs to ``out``. Parquet keeps the window arrays and the result schema, so an
    exported file can be ingested into another store; CSV has one flat row per trial. Returns rows written."""
    where, params = selection.where("r")
    if fmt == "parquet":
        table = con.sql(
            f"""
            WITH picked AS (SELECT r.* EXCLUDE (source_uri, ingested_at) FROM runs r WHERE {where}),
            windows AS (
                SELECT run_id,
                       list(step_time_s ORDER BY window_index) FILTER (WHERE step_time_s IS NOT NULL)
                           AS window_step_times_s,
                       list(loss ORDER BY window_index) FILTER (WHERE loss IS NOT NULL) AS window_losses
                FROM samples WHERE run_id IN (SELECT run_id FROM picked) GROUP BY run_id
            )
            SELECT * FROM picked LEFT JOIN windows USING (run_id) ORDER BY started_at, run_id
            """,
            params=params,
        ).to_arrow_table()
        table = table.select(SCHEMA.names).cast(SCHEMA).replace_schema_metadata(SCHEMA.metadata)
        pq.write_table(table, out, compression="zstd")
    elif fmt == "csv":
        table = con.sql(
            f"SELECT r.* EXCLUDE (source_uri, ingested_at) FROM runs r WHERE {where} ORDER BY r.started_at, r.run_id",
            params=params,
        ).to_arrow_table()
        pacsv.write_csv(table, out)
    else:
        raise SelectionError(f"format {fmt!r} is not one of {', '.join(EXPORT_FORMATS)}")
    return table.num_rows
