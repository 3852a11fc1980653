"""A user's own SQL against the live store, read-only: the base and its deltas seen as one store, through the
same snapshot every reader uses. Opening the base file with DuckDB directly would show the runs up to the last
compaction only; this is how the store is read from outside stepwatch (``stepwatch query``, or in Python
``from collector.store.user_sql import query``).

Only reads run: one SELECT (``WITH``, ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``) or EXPLAIN, on a connection that
can touch no file but the store's, with its settings locked.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from stepwatch.collector.errors import UsageError
from stepwatch.collector.store.database import open_store
from stepwatch.collector.store.errors import StoreError
from stepwatch.collector.store.files import one_line

READS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
TABLES = ("runs", "samples", "ops", "series", "latest_runs", "summaries", "alerts", "bisect_steps", "ingested_files")


class QueryError(UsageError):
    """SQL that is not one read of the store, or that DuckDB refuses, in one line."""


def query(db: Path, sql: str) -> pa.Table:
    """The result of one read-only statement over the store at ``db`` (its tables: ``TABLES``)."""
    try:
        statements = duckdb.connect().extract_statements(sql)
    except duckdb.Error as error:
        raise QueryError(one_line(error)) from None
    if len(statements) != 1:
        raise QueryError(f"expected one SQL statement, got {len(statements)}")
    if statements[0].type not in READS:
        kind = statements[0].type.name
        raise QueryError(f"the store is read-only here: {kind} is refused (SELECT or EXPLAIN only)")
    with open_store(db) as reader:
        con = reader.connection()
        if con is None:
            raise StoreError(f"no store at {db}: run `stepwatch ingest` first")
        cursor = con.cursor()
        cursor.execute("SET enable_external_access = false")
        cursor.execute("SET lock_configuration = true")
        try:
            return cursor.sql(sql).to_arrow_table()
        except duckdb.Error as error:
            raise QueryError(one_line(error)) from None
