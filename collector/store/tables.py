"""The store's tables: their definitions (every column of ``runs`` from collector/schema.py), the migrations
that bring an older store to this layout, and the derived tables each write keeps up to date (``series``,
``latest_runs``, ``summaries``). How they are laid out in files, written and read is ``collector.store.engine``.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pyarrow as pa

from stepwatch.collector.config import ADDED_DIMENSIONS, FIELD_NAMES, SERIES_FIELDS
from stepwatch.collector.metrics import COUNTERS, METRICS, RECENT_TRIALS, RSS_KIND
from stepwatch.collector.schema import OP_COLUMNS, SCHEMA, VERSION_COLUMNS
from stepwatch.collector.store.errors import StoreError
from stepwatch.collector.store.selection import ALIASES, as_fields

if TYPE_CHECKING:
    import duckdb

# The tables' layout; a store written by a newer layout is refused, never rewritten. 2: Keras backends (runs'
# ``backend`` column becomes ``device``; earlier runs are TensorFlow runs; compiler from xla_effective).
# 3: a base file and delta files (a stepwatch that reads only the base must not read a store with deltas).
# 4: CPU peak memory is the peak anonymous memory. 5: per-series, per-version ``summaries``.
STORE_VERSION = 5

# Lists of a result row that the store keeps as rows of a table of their own, one per entry:
# table -> (its index column, ((the row's list column, the table's column), ...)).
CHILD_TABLES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "samples": ("window_index", (("window_step_times_s", "step_time_s"), ("window_losses", "loss"))),
    "ops": (
        "op_index",
        tuple(zip(OP_COLUMNS, ("op_type", "op_name", "host_or_device", "time_s", "count"), strict=True)),
    ),
}
LIST_COLUMNS = tuple(name for _, pairs in CHILD_TABLES.values() for name, _ in pairs)

_DUCK_TYPES = {"int64": "BIGINT", "double": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN"}


def _duck_type(dtype: pa.DataType) -> str:
    if pa.types.is_timestamp(dtype):
        return "TIMESTAMPTZ"
    if pa.types.is_list(dtype):  # a short list kept in the run's row (a script's reported qualities)
        return _duck_type(dtype.value_type) + "[]"
    return _DUCK_TYPES[str(dtype)]


RUN_COLUMNS = tuple(f for f in SCHEMA if f.name not in LIST_COLUMNS)


def child_columns(table: str) -> dict[str, str]:
    """A child table's columns and their DuckDB types: the run's id, the entry's index, then one per list."""
    index, pairs = CHILD_TABLES[table]
    types = {"run_id": "VARCHAR", index: "INTEGER"}
    return types | {column: _duck_type(SCHEMA.field(name).type.value_type) for name, column in pairs}


def list_type(name: str) -> str:
    """The DuckDB type of a list column of the result row (``DOUBLE[]``)."""
    return _duck_type(SCHEMA.field(name).type.value_type) + "[]"


def unnest_children(table: str, source: str) -> str:
    """The rows of child ``table`` from the list columns of the runs in ``source``."""
    index, pairs = CHILD_TABLES[table]
    longest = ", ".join(f"len({name})" for name, _ in pairs)
    lists = ", ".join(f"unnest({name}) AS {column}" for name, column in pairs)
    return f"SELECT run_id, unnest(range(greatest({longest}))) AS {index}, {lists} FROM {source}"


def nest_children(table: str, runs: str) -> str:
    """The list columns of the runs in ``runs`` (a query of run_ids) from child ``table``: what ``unnest_children``
    took apart, one row per run that has entries."""
    index, pairs = CHILD_TABLES[table]
    lists = ", ".join(
        f"list({column} ORDER BY {index}) FILTER (WHERE {column} IS NOT NULL) AS {name}" for name, column in pairs
    )
    return f"SELECT run_id, {lists} FROM {table} WHERE run_id IN ({runs}) GROUP BY run_id"


def whole_rows(
    con: duckdb.DuckDBPyConnection, where: str = "true", params: list | None = None, keep_source: bool = False
) -> pa.Table:
    """The runs matching ``where`` (over ``runs r``) as whole result rows, their lists put back from the child tables,
    in the result schema (collector/schema.py); with ``keep_source``, the file each came from and when it was
    ingested too."""
    children = "".join(f", {table} AS ({nest_children(table, 'SELECT run_id FROM picked')})" for table in CHILD_TABLES)
    joins = "".join(f" LEFT JOIN {table} USING (run_id)" for table in CHILD_TABLES)
    table = con.sql(
        f"WITH picked AS (SELECT r.* FROM runs r WHERE {where}){children} "
        f"SELECT * FROM picked{joins} ORDER BY started_at, run_id",
        params=params or [],
    ).to_arrow_table()
    rows = table.select(SCHEMA.names).cast(SCHEMA).replace_schema_metadata(SCHEMA.metadata)
    if keep_source:
        for name in ("source_uri", "ingested_at"):
            rows = rows.append_column(name, table[name])
    return rows


# What a verifying check (``stepwatch alerts verify``) recorded on an alert: its state (records.VERIFIED_STATES),
# the check's id, what its sides were, its ratio and interval, its A/A, what it cost, the first slow commit a bisect
# named, and what it said (or why it could not run). Added to an older store's alerts on its next write.
VERIFICATION_COLUMNS = {
    "verification": "VARCHAR", "verified_at": "TIMESTAMPTZ", "verify_check": "VARCHAR", "verify_sides": "VARCHAR",
    "verify_ratio": "DOUBLE", "verify_ci_low": "DOUBLE", "verify_ci_high": "DOUBLE", "verify_aa": "VARCHAR",
    "verify_minutes": "DOUBLE", "verify_commit": "VARCHAR", "verify_note": "VARCHAR",
}  # fmt: skip


# Tables. Every column of ``runs`` comes from collector/schema.py; new schema columns are added
# to an older store on its next ingest.
DDL = (
    "CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    "CREATE TABLE IF NOT EXISTS runs ("
    + ", ".join(f'"{f.name}" {_duck_type(f.type)}' for f in RUN_COLUMNS)
    + ", source_uri VARCHAR, ingested_at TIMESTAMPTZ)",
    *(
        f"CREATE TABLE IF NOT EXISTS {table} (" + ", ".join(f"{c} {t}" for c, t in child_columns(table).items()) + ")"
        for table in CHILD_TABLES
    ),
    "CREATE TABLE IF NOT EXISTS ingested_files (uri VARCHAR, size BIGINT, mtime_ns BIGINT, digest VARCHAR, "
    "rows_read BIGINT, ingested_at TIMESTAMPTZ)",
    "CREATE SEQUENCE IF NOT EXISTS alert_ids",
    "CREATE TABLE IF NOT EXISTS alerts (id BIGINT DEFAULT nextval('alert_ids') PRIMARY KEY, "
    "created_at TIMESTAMPTZ, updated_at TIMESTAMPTZ, series_key VARCHAR, metric VARCHAR, status VARCHAR, "
    "change_at TIMESTAMPTZ, suite_run_id VARCHAR, before_value DOUBLE, after_value DOUBLE, ratio DOUBLE, "
    "ci_low DOUBLE, ci_high DOUBLE, versions_changed VARCHAR, note VARCHAR"
    + "".join(f", {name} {kind}" for name, kind in VERIFICATION_COLUMNS.items())
    + ")",
    # The path of each ``stepwatch bisect``: one row per measured step and target series (a skipped step has
    # no series). ``applied`` is the step's changes as JSON [[package, good version, bad version], ...].
    "CREATE TABLE IF NOT EXISTS bisect_steps (bisect_id VARCHAR, step INTEGER, created_at TIMESTAMPTZ, "
    "good VARCHAR, bad VARCHAR, why VARCHAR, applied VARCHAR, outcome VARCHAR, reason VARCHAR, "
    "series_key VARCHAR, metric VARCHAR, verdict VARCHAR, ratio DOUBLE, ci_low DOUBLE, ci_high DOUBLE, "
    "baseline_suite_run_id VARCHAR, candidate_suite_run_id VARCHAR)",
)


def series_of(source: str) -> str:
    """One row per series of ``source`` (a table of runs): its dimensions (config fields under their own
    names) and how much history it has."""
    return (
        f"SELECT series_key, any_value(config_key) AS config_key, {as_fields(SERIES_FIELDS)}, "
        "any_value(accelerator) AS accelerator, any_value(unit) AS unit, count(*) AS trials, "
        "count(DISTINCT suite_run_id) AS suite_runs, min(started_at) AS first_at, max(started_at) AS last_at "
        f"FROM {source} GROUP BY series_key"
    )


# How two rows of ``series`` for one series (what the store had, what a write adds) combine; other columns
# are the series' dimensions, equal in both.
SERIES_TOTALS = {"trials": "sum", "suite_runs": "sum", "first_at": "min", "last_at": "max"}


def log_value(metric: str) -> str:
    """A trial's value of ``metric`` as the statistics use it: its log, for an ok trial with a positive value."""
    return f"""CASE WHEN status = 'ok' AND "{metric}" > 0 THEN ln("{metric}") END"""


# Per-series, per-version summaries: one row per series, software versions and label (and config, which a
# series holds fixed), with per metric the count, mean and sum of squared deviations (M2) of the logs of its
# ok trials. A comparison whose sides are named by those columns reads these instead of every trial: what it
# needs (count, mean and variance of each side's logs) pools exactly from them.
SUMMARY_KEYS = tuple(
    dict.fromkeys(
        (
            "series_key",
            *(ALIASES.get(n, n) for n in (*FIELD_NAMES, "accelerator", "unit", "suite")),
            *VERSION_COLUMNS,
            "label",
        )
    )
)
SUMMARY_METRICS = tuple(METRICS)
# A deterministic metric also keeps its raw values' count, least and greatest (zeros included: no graph breaks is
# a count too), which is what comparing it exactly needs (``stats.exact``).
SPANS = {"k": ("count", "sum"), "lo": ("min", "min"), "hi": ("max", "max")}  # over trials, then over parts
SUMMARY_STATS = (
    *(f"{stat}_{m}" for m in SUMMARY_METRICS for stat in ("n", "mean", "m2")),
    *(f"{stat}_{m}" for m in COUNTERS for stat in SPANS),
)


def ok_value(metric: str) -> str:
    """A trial's raw value of ``metric``, for an ok trial."""
    return f"""CASE WHEN status = 'ok' THEN "{metric}" END"""


def span_of(metric: str, stat: str, value: str | None = None) -> str:
    """The aggregate of ``stat`` (a key of SPANS) over trials' raw values (``value``: an expression, the metric's
    ok value by default)."""
    return f"{SPANS[stat][0]}({value or ok_value(metric)})"


def _keys(alias: str = "") -> str:
    return ", ".join(f'{alias}"{k}"' for k in SUMMARY_KEYS)


def summaries_of(source: str) -> str:
    """The summaries of the runs in ``source``; ``group_key`` identifies a row's key columns (NULLs included)."""
    logs = ", ".join(f'{log_value(m)} AS "v_{m}"' for m in SUMMARY_METRICS)
    stats = ", ".join(
        f'count("v_{m}") AS "n_{m}", avg("v_{m}") AS "mean_{m}", coalesce(var_pop("v_{m}") * count("v_{m}"), 0) '
        f'AS "m2_{m}"'
        for m in SUMMARY_METRICS
    )
    spans = "".join(f', {span_of(m, stat)} AS "{stat}_{m}"' for m in COUNTERS for stat in SPANS)
    return (
        f"SELECT hash({_keys()}) AS group_key, {_keys()}, count(*) AS trials, "
        f"count(*) FILTER (WHERE status <> 'ok') AS failed, {stats}{spans} "
        f"FROM (SELECT *, {logs} FROM {source}) GROUP BY {_keys()}"
    )


def pooled(source: str, by: str, metrics: tuple[str, ...] = SUMMARY_METRICS, carry: str = "") -> str:
    """Rows of summaries in ``source`` pooled by the expressions ``by``: counts add, means weight by count, and
    M2 adds each part's own and its mean's deviation from the pooled mean (exact, in one pass over the parts).
    ``carry``: more select expressions (aggregates)."""
    mu = ", ".join(f'sum("n_{m}" * "mean_{m}") OVER w / nullif(sum("n_{m}") OVER w, 0) AS "mu_{m}"' for m in metrics)
    totals = ", ".join(
        f'sum("n_{m}") AS "n_{m}", sum("n_{m}" * "mean_{m}") / nullif(sum("n_{m}"), 0) AS "mean_{m}", '
        f'coalesce(sum("m2_{m}" + "n_{m}" * ("mean_{m}" - "mu_{m}") ^ 2), 0) AS "m2_{m}"'
        for m in metrics
    )
    spans = "".join(
        f', {SPANS[stat][1]}("{stat}_{m}") AS "{stat}_{m}"' for m in metrics if m in COUNTERS for stat in SPANS
    )
    extra = f"{carry}, " if carry else ""
    return (
        f"SELECT {by}, {extra}sum(trials) AS trials, sum(failed) AS failed, {totals}{spans} "
        f"FROM (SELECT *, {mu} FROM {source} WINDOW w AS (PARTITION BY {by})) GROUP BY {by}"
    )


# The last trials of each series, per metric: what its noise is judged on (``noise.NOISE_TRIALS`` of them), kept
# by each write so that judging every series' noise never reads all of ``runs``.
RECENCY = "started_at DESC, trial DESC, run_id DESC"  # newest first, as recent_of picks them


def _metrics() -> str:
    return ", ".join(f'"{m}"' for m in SUMMARY_METRICS)


def recent_of(source: str) -> str:
    """Per series and metric, the values of its last RECENT_TRIALS ok trials in ``source`` (positive values): each
    metric's newest trials picked per series in one pass (max_by with a count), then one row per value."""
    picks = ", ".join(
        f"max_by({{'started_at': started_at, 'trial': trial, 'run_id': run_id, 'value': CAST(\"{m}\" AS DOUBLE)}}, "
        f'(started_at, trial, run_id), {RECENT_TRIALS}) FILTER (WHERE status = \'ok\' AND "{m}" > 0) AS "{m}"'
        for m in SUMMARY_METRICS
    )
    return (
        "SELECT series_key, metric, v.started_at, v.trial, v.run_id, v.value FROM ("
        f"SELECT series_key, metric, unnest(picked) AS v FROM (UNPIVOT (SELECT series_key, {picks} FROM {source} "
        f"GROUP BY series_key) ON {_metrics()} INTO NAME metric VALUE picked))"
    )


# Derived tables, so that readers never aggregate all of ``runs`` for the overview (at 1M rows that is the
# difference between a few and a few hundred milliseconds). A compaction rebuilds them; a delta updates the
# series it touches (``update_derived``).
DERIVED = (
    f"CREATE OR REPLACE TABLE series AS {series_of('runs')}",
    # Every trial of each series' most recent suite run.
    "CREATE OR REPLACE TABLE latest_runs AS SELECT r.* FROM runs r JOIN "
    "(SELECT series_key, arg_max(suite_run_id, started_at) AS suite_run_id FROM runs GROUP BY series_key) l "
    "USING (series_key, suite_run_id)",
    f"CREATE OR REPLACE TABLE summaries AS {summaries_of('runs')}",
    f"CREATE OR REPLACE TABLE recent_values AS {recent_of('runs')}",
)
DERIVED_OF = {"summaries": summaries_of("runs"), "recent_values": recent_of("runs")}


# STORE_MIGRATIONS[v] brings the tables of store version v to v + 1 (new columns are already added). The
# same change as the results schema's migration (collector.schema), for rows ingested before it.
STORE_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "UPDATE runs SET device = backend WHERE device IS NULL",
        # keras_backend is filled with its default like every added dimension (ensure_schema, ADDED_DIMENSIONS).
        "UPDATE runs SET compiler = CASE WHEN xla_effective THEN 'xla' ELSE 'none' END "
        "WHERE compiler IS NULL AND xla_effective IS NOT NULL",
        "ALTER TABLE runs DROP COLUMN backend",
    ),
    2: (),  # the tables are unchanged; the deltas folder is new
    3: (  # a CPU row's ru_maxrss is no longer its peak memory (collector.schema, version 4)
        f"UPDATE runs SET peak_rss_bytes = coalesce(peak_rss_bytes, peak_memory_bytes), peak_memory_bytes = NULL "
        f"WHERE peak_memory_kind = '{RSS_KIND}' OR (peak_memory_kind IS NULL AND device = 'cpu')",
    ),
    4: (),  # derived tables, ``summaries`` and ``recent_values``: built with the others
}


def run_id_index(table: str = "runs") -> str:
    """The base's index on run_id: an ingest looks up a night's run ids in it instead of scanning the store."""
    return f"CREATE INDEX IF NOT EXISTS runs_run_id ON {table} (run_id)"


# Log tables are split across the files (the base, each delta its part); state tables are whole in the newest file.
# ``summaries`` and ``recent_values`` are derived logs: each write appends the parts of its new rows (a reader
# pools them: the summaries of a group add, the last trials of a series are the newest of every part), and a
# compaction rebuilds them whole, so a write never copies them.
LOG_TABLES = ("runs", *CHILD_TABLES, "summaries", "recent_values")
RAW_LOGS = ("runs", *CHILD_TABLES)  # what a write appends to; the derived logs follow from them
STATE_TABLES = ("store_meta", "ingested_files", "alerts", "bisect_steps", "series", "latest_runs")
DERIVED_TABLES = ("series", "latest_runs", "summaries", "recent_values")  # rebuilt from the runs, never edited
KEPT_TABLES = ("ingested_files", "alerts", "bisect_steps")  # state a write carries forward as it was


LOG_COLUMNS = {
    "runs": (*(f.name for f in RUN_COLUMNS), "source_uri", "ingested_at"),
    **{table: tuple(child_columns(table)) for table in CHILD_TABLES},
    "summaries": ("group_key", *SUMMARY_KEYS, "trials", "failed", *SUMMARY_STATS),
    "recent_values": ("series_key", "metric", "started_at", "trial", "run_id", "value"),
}  # as DDL creates them; every file of a store is at this layout (an older base is compacted first)


def ensure_schema(con: duckdb.DuckDBPyConnection, kind: str) -> None:
    """Create missing tables and columns in a writable store; refuse one of a newer layout."""
    for statement in DDL:
        con.execute(statement)
    version = store_version(con)
    if version is not None and version > STORE_VERSION:
        refuse_newer(version)
    present = {
        row[0]
        for row in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'runs' AND database_name = current_database()"
        ).fetchall()
    }
    for name, sql_type in VERIFICATION_COLUMNS.items():  # an older store's alerts
        con.execute(f"ALTER TABLE alerts ADD COLUMN IF NOT EXISTS {name} {sql_type}")
    for column in RUN_COLUMNS:
        if column.name not in present:
            con.execute(f'ALTER TABLE runs ADD COLUMN "{column.name}" {_duck_type(column.type)}')
            if column.name in ADDED_DIMENSIONS:  # every run before this dimension existed had its default
                con.execute(f'UPDATE runs SET "{column.name}" = ?', [ADDED_DIMENSIONS[column.name]])
    present = tables_in(con, current(con))
    for table, query in DERIVED_OF.items():  # empty, with the columns of the runs as they now are
        if table not in present:
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM ({query}) LIMIT 0")
    for step in range(version or STORE_VERSION, STORE_VERSION):
        for statement in (*STORE_MIGRATIONS[step], *DERIVED):
            con.execute(statement)
    con.execute("INSERT OR IGNORE INTO store_meta VALUES ('kind', ?)", [kind])
    con.execute("INSERT OR REPLACE INTO store_meta VALUES ('store_version', ?)", [str(STORE_VERSION)])
    con.execute("INSERT OR REPLACE INTO store_meta VALUES ('layout', ?)", [LAYOUT])


def refuse_newer(version: int) -> None:
    raise StoreError(
        f"the store was written by a newer stepwatch (store version {version}, this one writes up to "
        f"{STORE_VERSION}); upgrade stepwatch or pick another --db"
    )


def meta(con: duckdb.DuckDBPyConnection, key: str, catalog: str = "") -> str | None:
    table = f"{catalog}.store_meta" if catalog else "store_meta"
    rows = con.execute(f"SELECT value FROM {table} WHERE key = ?", [key]).fetchall()
    return rows[0][0] if rows else None


def store_version(con: duckdb.DuckDBPyConnection, catalog: str = "") -> int | None:
    """The layout version a store was written with (None for a store being created)."""
    value = meta(con, "store_version", catalog)
    return int(value) if value is not None else None


def store_kind(con: duckdb.DuckDBPyConnection, catalog: str = "") -> str:
    """'real' or 'synthetic': a store made for synthetic test data says so, so it is never taken for real."""
    return meta(con, "kind", catalog) or "real"


# What the columns of the log tables are, as this stepwatch writes them: a file records it (store_meta 'layout'),
# and a store whose newest file records another is compacted before a write, which brings every file to it.
LAYOUT = hashlib.sha256(repr(sorted(LOG_COLUMNS.items())).encode()).hexdigest()[:16]


def missing_columns(con: duckdb.DuckDBPyConnection, catalog: str) -> bool:
    """Whether the store (its newest file, ``catalog``) was written with other log columns than this stepwatch's
    (a metric or column added since): such a store is compacted before a write, which adds them everywhere."""
    return meta(con, "layout", catalog) != LAYOUT


def current(con: duckdb.DuckDBPyConnection) -> str:
    return con.execute("SELECT current_database()").fetchall()[0][0]


def has_table(con: duckdb.DuckDBPyConnection, catalog: str, table: str) -> bool:
    """Whether ``catalog`` holds ``table`` (a file written before the table existed does not)."""
    return table in tables_in(con, catalog)


def tables_in(con: duckdb.DuckDBPyConnection, catalog: str) -> set[str]:
    """The tables ``catalog`` holds, in one look-up."""
    found = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [catalog]).fetchall()
    return {name for (name,) in found}


def update_derived(con: duckdb.DuckDBPyConnection, new: str) -> None:
    """Bring the derived tables up to date with the rows a write adds (the table ``new``), touching only the
    series it adds to: what it costs follows what was added, not the store. Runs in the store's default
    catalog, where the derived tables are the write's own; ``stored_runs`` is the store before the write."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE touched AS {series_of(new)}")
    # Suite runs of touched series that the store already had (a resumed file): not counted twice.
    # (Constant lists, so that the base, sorted by series, is read only where those series are.)
    keys = [k for (k,) in con.execute(f"SELECT DISTINCT series_key FROM {new}").fetchall()]
    suites = [k for (k,) in con.execute(f"SELECT DISTINCT suite_run_id FROM {new}").fetchall()]
    marks = ", ".join("?" for _ in keys) or "NULL"
    suite_marks = ", ".join("?" for _ in suites) or "NULL"
    con.execute(
        "CREATE OR REPLACE TEMP TABLE seen AS SELECT DISTINCT series_key, suite_run_id FROM stored_runs "
        f"SEMI JOIN (SELECT DISTINCT series_key, suite_run_id FROM {new}) USING (series_key, suite_run_id) "
        f"WHERE series_key IN ({marks}) AND suite_run_id IN ({suite_marks})",
        [*keys, *suites],
    )
    con.execute(
        "UPDATE touched t SET suite_runs = t.suite_runs - "
        "(SELECT count(*) FROM seen s WHERE s.series_key = t.series_key)"
    )
    columns = [
        c
        for (c,) in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
            "AND table_name = 'series' "
            "ORDER BY column_index"
        ).fetchall()
    ]
    merged = ", ".join(f'{SERIES_TOTALS.get(c, "any_value")}("{c}") AS "{c}"' for c in columns if c != "series_key")
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE combined AS SELECT series_key, {merged} FROM (SELECT s.* FROM series s "
        "SEMI JOIN touched USING (series_key) UNION ALL BY NAME SELECT * FROM touched) GROUP BY series_key"
    )
    con.execute("DELETE FROM series WHERE series_key IN (SELECT series_key FROM touched)")
    con.execute("INSERT INTO series BY NAME SELECT * FROM combined")
    # Each touched series' latest suite run: the stored latest one or one of the new rows, whichever started last.
    con.execute(
        "CREATE OR REPLACE TEMP TABLE pick AS SELECT series_key, arg_max(suite_run_id, started_at) AS suite_run_id "
        "FROM (SELECT series_key, suite_run_id, started_at FROM latest_runs SEMI JOIN touched USING (series_key) "
        f"UNION ALL SELECT series_key, suite_run_id, started_at FROM {new}) GROUP BY series_key"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE latest_new AS SELECT l.* FROM latest_runs l JOIN pick USING (series_key, "
        f"suite_run_id) UNION ALL BY NAME SELECT r.* FROM {new} r JOIN pick USING (series_key, suite_run_id)"
    )
    # A picked suite run whose stored rows were not the latest (an older run continued later): rare, looked up.
    con.execute(
        "CREATE OR REPLACE TEMP TABLE rare AS SELECT * FROM pick SEMI JOIN seen USING (series_key, suite_run_id) "
        "ANTI JOIN (SELECT DISTINCT series_key, suite_run_id FROM latest_runs) USING (series_key, suite_run_id)"
    )
    if con.execute("SELECT count(*) FROM rare").fetchall()[0][0]:
        con.execute(
            "INSERT INTO latest_new BY NAME SELECT r.* FROM stored_runs r JOIN rare USING (series_key, suite_run_id)"
        )
    con.execute("DELETE FROM latest_runs WHERE series_key IN (SELECT series_key FROM touched)")
    con.execute("INSERT INTO latest_runs BY NAME SELECT * FROM latest_new")
    # The summaries and the last trials of the new rows, appended like them: a reader pools every part.
    catalog = new.rsplit(".", 1)[0]
    con.execute(f"INSERT INTO {catalog}.summaries BY NAME {summaries_of(new)}")
    con.execute(f"INSERT INTO {catalog}.recent_values BY NAME {recent_of(new)}")
    for table in ("touched", "seen", "combined", "pick", "latest_new", "rare"):
        con.execute(f"DROP TABLE {table}")


def carry_state(con: duckdb.DuckDBPyConnection, catalog: str) -> None:
    """The state tables of the store's newest file, into the new delta (alert ids continue after its last)."""
    next_id = con.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {catalog}.alerts").fetchall()[0][0]
    con.execute(f"CREATE SEQUENCE alert_ids START {int(next_id)}")
    for statement in DDL:
        con.execute(statement)
    present = tables_in(con, catalog)
    for table in STATE_TABLES:
        if table in DERIVED_TABLES and table in present:
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM {catalog}.{table}")
        elif table in present:
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {catalog}.{table}")
