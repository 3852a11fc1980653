"""The profiled trials' reads: every profiled ok trial's op table, by side and pair (what ``stepwatch explain``
diffs), and why a side's profiles failed where none was read."""

from __future__ import annotations

import duckdb
import pandas as pd

from stepwatch.collector.store.queries import (
    ALIASES,
    SERIES_COLUMNS,
    SERIES_DIMENSIONS,
    SelectionError,
    _frame,
    contrast,
    named,
)
from stepwatch.collector.store.selection import Selection

OP_KEYS = ("op_type", "op_name")  # what ``stepwatch explain`` aligns the two sides' ops by


def profile_errors(con: duckdb.DuckDBPyConnection, baseline: Selection, candidate: Selection) -> dict[str, list[str]]:
    """Per side, the distinct reasons its trials' profiles failed (``profile_error`` in a row's extras)."""
    error, found = "json_extract_string(extras, '$.profile_error')", {}
    for side, selection in (("baseline", baseline), ("candidate", candidate)):
        where, params = selection.where()
        rows = con.execute(f"SELECT DISTINCT {error} FROM runs WHERE ({where}) AND {error} IS NOT NULL ORDER BY 1",
                           params).fetchall()  # fmt: skip
        if rows:
            found[side] = [row[0] for row in rows]
    return found


def profiled_ops(
    con: duckdb.DuckDBPyConnection, baseline: Selection, candidate: Selection, by: str = "op_type"
) -> pd.DataFrame:
    """Every profiled ok trial of either side, op by op: its side, the pair it belongs to (its series; where the
    sides differ in a series dimension, see ``contrast``, the dimensions they share), its run_id, profiled step
    time, raw profile, series fields and the compiler that ran, and per op (``by``: its type or its name) and
    host/device, the time and count per step."""
    if by not in OP_KEYS:
        raise SelectionError(f"ops are aligned by one of {', '.join(OP_KEYS)}, not {by!r}")
    where_a, params_a = baseline.where()
    where_b, params_b = candidate.where()
    differ = contrast(baseline, candidate)
    shared = [f'CAST("{ALIASES.get(d, d)}" AS VARCHAR)' for d in SERIES_DIMENSIONS if d not in differ]
    pair = f"concat_ws('|', {', '.join(shared)})" if differ else "series_key"
    picked = "status = 'ok' AND profile_steps IS NOT NULL"
    return _frame(
        con,
        f"""
        WITH picked AS (
            SELECT 'baseline' AS side, {pair} AS pair, * FROM runs WHERE ({where_a}) AND {picked}
            UNION ALL BY NAME
            SELECT 'candidate' AS side, {pair} AS pair, * FROM runs WHERE ({where_b}) AND {picked})
        SELECT p.side, p.pair, p.run_id, p.profile_step_time_s AS step_s, p.profile_uri, p.series_key, p.compiler,
               {named(SERIES_COLUMNS, "p", "")}, o.{by} AS op, o.host_or_device,
               sum(o.time_s) AS time_s, sum(o.count) AS count
        FROM picked p JOIN ops o USING (run_id)
        GROUP BY ALL ORDER BY p.side, p.pair, p.run_id
        """,
        [*params_a, *params_b],
    )
