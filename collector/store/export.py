"""Export: the selected runs of a store as CSV (one flat row per trial) or as parquet of the result schema,
which another store can ingest."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from stepwatch.collector.store.selection import Selection, SelectionError
from stepwatch.collector.store.tables import RUN_COLUMNS, whole_rows

EXPORT_FORMATS = ("csv", "parquet")


def write(con: duckdb.DuckDBPyConnection, selection: Selection, fmt: str, out: Path) -> int:
    """Write the selected runs to ``out``. Parquet keeps the lists (windows, op tables) and the result schema, so an
    exported file can be ingested into another store; CSV has one flat row per trial. Returns rows written."""
    where, params = selection.where("r")
    if fmt == "parquet":
        table = whole_rows(con, where, params)
        pq.write_table(table, out, compression="zstd")
    elif fmt == "csv":
        # A list kept in the run's row (a script's qualities) as its text, "[0.5, 0.25]": a CSV cell holds no list.
        present = set(con.sql("SELECT * FROM runs LIMIT 0").columns)
        lists = [f.name for f in RUN_COLUMNS if pa.types.is_list(f.type) and f.name in present]
        texts = f" REPLACE ({', '.join(f'CAST({n} AS VARCHAR) AS {n}' for n in lists)})" if lists else ""
        table = con.sql(
            f"SELECT r.* EXCLUDE (source_uri, ingested_at){texts} FROM runs r WHERE {where} "
            "ORDER BY r.started_at, r.run_id",
            params=params,
        ).to_arrow_table()
        pacsv.write_csv(table, out)
    else:
        raise SelectionError(f"format {fmt!r} is not one of {', '.join(EXPORT_FORMATS)}")
    return table.num_rows
