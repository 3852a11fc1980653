"""The questions asked of the store, in one place for the CLI, the analysis and the dashboard. Runs are
picked with a ``Selection`` (collector.store.selection), whose values are always bound parameters. Config
fields come back under their own names (``xla``), grouped by the dimensions ``collector.config`` declares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import pandas as pd

from stepwatch.collector.config import FIELD_NAMES, FRAMEWORK_VERSION_COLUMNS, SERIES_DIMENSIONS
from stepwatch.collector.metrics import COUNTERS, METRICS, RECENT_TRIALS
from stepwatch.collector.schema import KERNELS, VERSION_COLUMNS
from stepwatch.collector.store.selection import ALIASES, ALL, FLAGS, Selection, SelectionError, as_fields, named
from stepwatch.collector.store.tables import (
    RECENCY,
    SPANS,
    SUMMARY_KEYS,
    log_value,
    pooled,
    span_of,
)

SERIES_ORDER = ", ".join(f'"{name}"' for name in SERIES_DIMENSIONS)
# The dimensions that stay equal between the two points of a speedup (XLA on/off, a precision vs fp32).
SPEEDUP_KEYS = tuple(d for d in SERIES_DIMENSIONS if d not in ("xla", "precision", "per_device_batch"))
# A backend is compared with TensorFlow on the same everything else (jit_compile setting, precision, batch).
BACKEND_KEYS = tuple(d for d in SERIES_DIMENSIONS if d != "keras_backend")
# Plain PyTorch (loop pytorch) is compared with Keras' fit on torch on the same everything else.
LOOP_KEYS = tuple(d for d in SERIES_DIMENSIONS if d != "loop")


def _known(metric: str, does: str = "tracks") -> None:
    """Refuse a metric name that is not one of stepwatch's (the name is formatted into the SQL as a column)."""
    if metric not in METRICS:
        raise SelectionError(f"{metric!r} is not a metric stepwatch {does} (known: {', '.join(METRICS)})")


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> pd.DataFrame:
    """Run a bound query into pandas through Arrow (faster than DuckDB's own DataFrame conversion)."""
    return con.sql(sql, params=params).to_arrow_table().to_pandas()


def latest_per_series(con: duckdb.DuckDBPyConnection, selection: Selection = ALL) -> pd.DataFrame:
    """Per series, its most recent suite run: trials passing n/N, median throughput, the versions it ran, how
    many of its ok trials ran on a flagged machine or did not read it (``flagged``, ``unread``), and the runner it
    ran on (its label, else its host)."""
    where, params = selection.where()
    return _frame(
        con,
        f"""
        SELECT series_key, {as_fields(SERIES_DIMENSIONS)},
               any_value(suite_run_id) AS suite_run_id, max(started_at) AS started_at,
               count(*) AS trials, count(*) FILTER (WHERE status = 'ok') AS ok,
               median(examples_per_sec) FILTER (WHERE status = 'ok') AS examples_per_sec,
               median(units_per_sec) FILTER (WHERE status = 'ok') AS units_per_sec, any_value(unit) AS unit,
               {", ".join(f'any_value("{v}") AS "{v}"' for v in VERSION_COLUMNS)}, any_value(label) AS label,
               string_agg(DISTINCT status, ', ') FILTER (WHERE status <> 'ok') AS failures, {_machine_counts(con, "")},
               any_value(coalesce(runner_label, host)) AS runner
        FROM latest_runs WHERE {where}
        GROUP BY series_key ORDER BY {SERIES_ORDER}
        """,
        params,
    )


HISTORY_COLUMNS = (
    "run_id",
    "suite_run_id",
    "trial",
    "started_at",
    "status",
    "label",
    "examples_per_sec",
    "units_per_sec",
    "step_time_p50_s",
    "compile_s",
    "peak_memory_bytes",
    "peak_rss_bytes",
    "per_device_batch",
    "global_batch",
    "cost_usd",
    "cost_per_1m_examples_usd",
    *VERSION_COLUMNS,
    "host",
)


def series_history(con: duckdb.DuckDBPyConnection, series_key: str, selection: Selection = ALL) -> pd.DataFrame:
    """Every trial of one series in time order, with the metrics plotted and the versions compared along."""
    where, params = selection.where()
    columns = ", ".join(HISTORY_COLUMNS)
    return _frame(
        con,
        f"SELECT {columns} FROM runs WHERE series_key = ? AND {where} ORDER BY started_at, trial",
        [series_key, *params],
    )


# What a comparison row knows of its series: every config field (to repeat the run), the accelerator, the unit.
SERIES_COLUMNS = (*FIELD_NAMES, "accelerator", "unit", "suite")


def contrast(baseline: Selection, candidate: Selection) -> tuple[str, ...]:
    """The series dimensions the two sides select differently (``keras_backend=tensorflow`` against
    ``keras_backend=jax``): a comparison pairs series that match on every other dimension."""
    sides = [dict(baseline.equals), dict(candidate.equals)]
    names = []
    for dimension in SERIES_DIMENSIONS:
        col = ALIASES.get(dimension, dimension)
        if col in sides[0] and col in sides[1] and set(sides[0][col]) != set(sides[1][col]):
            names.append(dimension)
    return tuple(names)


def summarized(*selections: Selection) -> bool:
    """Whether the selections pick whole groups of ``summaries`` (they name only series dimensions, versions and
    labels, and no time range): then what a comparison needs is read from the summaries, not every trial."""
    return all(
        s.since is None and s.until is None and all(name in SUMMARY_KEYS for name, _ in s.equals) for s in selections
    )


def compare_sides(
    con: duckdb.DuckDBPyConnection,
    baseline: Selection,
    candidate: Selection,
    metric: str = "examples_per_sec",
) -> pd.DataFrame:
    """Per series present on either side: ok-trial count, mean and variance of log(metric) for each side
    (what a ratio of geometric means and its Welch interval need), failed trials per side, and the
    series' config fields. Failed trials never enter the statistics. Where the sides differ in a series
    dimension (see ``contrast``), a row pairs the series that match on the others, and shows the candidate's
    series (its key and fields). Read from the per-version summaries when the sides allow (``summarized``),
    else from every trial: the same figures either way."""
    _known(metric, "compares")
    where_a, params_a = baseline.where()
    where_b, params_b = candidate.where()
    differ = contrast(baseline, candidate)
    columns = [f'"{ALIASES.get(n, n)}"' for n in ("series_key", *SERIES_COLUMNS)]
    if differ:
        grouped = [f'"{ALIASES.get(d, d)}"' for d in SERIES_DIMENSIONS if d not in differ]
        group = ", ".join(grouped)
        pick = "coalesce(any_value({0}) FILTER (WHERE side = 'candidate'), any_value({0}))"
        fields = ", ".join(pick.format(c) + f' AS "{n}"' for c, n in zip(columns, ("series_key", *SERIES_COLUMNS)))
    else:
        grouped, group, fields = ['"series_key"'], "series_key", f"series_key, {as_fields(SERIES_COLUMNS)}"
    if summarized(baseline, candidate):
        carried = ", ".join(f"any_value({c}) AS {c}" for c in dict.fromkeys(columns) if c not in grouped)
        parts = f"""
            SELECT 'baseline' AS side, * FROM summaries WHERE {where_a}
            UNION ALL BY NAME
            SELECT 'candidate' AS side, * FROM summaries WHERE {where_b}"""
        source = f"({pooled(f'({parts})', f'side, {group}', (metric,), carried)})"
        stat = {
            "n": f"coalesce(sum(\"n_{metric}\") FILTER (WHERE side = '{{0}}'), 0)",
            "mean": f"max(\"mean_{metric}\") FILTER (WHERE side = '{{0}}')",
            "var": f'max("m2_{metric}" / nullif("n_{metric}" - 1, 0)) FILTER (WHERE side = \'{{0}}\')',
            "failed": "coalesce(sum(failed) FILTER (WHERE side = '{0}'), 0)",
        }
    else:
        value = log_value(metric)
        source = f"""(
            SELECT 'baseline' AS side, *, {value} AS v FROM runs WHERE {where_a}
            UNION ALL BY NAME
            SELECT 'candidate' AS side, *, {value} AS v FROM runs WHERE {where_b})"""
        stat = {
            "n": "count(v) FILTER (WHERE side = '{0}')",
            "mean": "avg(v) FILTER (WHERE side = '{0}')",
            "var": "var_samp(v) FILTER (WHERE side = '{0}')",
            "failed": "count(*) FILTER (WHERE side = '{0}' AND status <> 'ok')",
        }
    names = {"n": "n_{0}", "mean": "mean_log_{0}", "var": "var_log_{0}", "failed": "failed_{0}"}
    if metric in COUNTERS:  # its raw values' count, least and greatest per side, for an exact comparison
        for part in SPANS:
            names[part] = f"{part}_{{0}}"
            stat[part] = (
                f"{SPANS[part][1]}(\"{part}_{metric}\") FILTER (WHERE side = '{{0}}')"
                if summarized(baseline, candidate)
                else span_of(metric, part, f"CASE WHEN side = '{{0}}' AND status = 'ok' THEN \"{metric}\" END")
            )
    per_side = ", ".join(
        f"{stat[key].format(side)} AS {name.format(side)}"
        for side in ("baseline", "candidate")
        for key, name in names.items()
    )
    return _frame(
        con,
        f"""
        SELECT {fields}, {per_side},
               exp({stat["mean"].format("candidate")} - {stat["mean"].format("baseline")}) AS ratio
        FROM {source} GROUP BY {group}
        ORDER BY {SERIES_ORDER}, series_key
        """,
        [*params_a, *params_b],
    )


def trial_values(
    con: duckdb.DuckDBPyConnection, series_keys: Sequence[str], metric: str, last: int
) -> dict[str, list[float]]:
    """The metric of each series' last ``last`` ok trials (positive values only, newest first), from all of its
    history: what its noise is judged on. Read from ``recent_values`` (which keeps RECENT_TRIALS of them)."""
    _known(metric)
    if not series_keys:
        return {}
    if last > RECENT_TRIALS:
        raise ValueError(f"the store keeps the last {RECENT_TRIALS} trials of a series, not {last}")
    rows = con.sql(
        f"""
        SELECT series_key, list(value ORDER BY {RECENCY}) FROM (
            SELECT *, row_number() OVER (PARTITION BY series_key ORDER BY {RECENCY}) AS recent
            FROM recent_values WHERE metric = ? AND list_contains(?, series_key)
        ) WHERE recent <= ? GROUP BY series_key
        """,
        params=[metric, list(series_keys), last],
    ).fetchall()
    return {key: values for key, values in rows}


def side_values(con: duckdb.DuckDBPyConnection, selection: Selection, metric: str) -> dict[str, list[float]]:
    """The metric of each series' ok trials among the selected runs (positive values only): a side's own spread,
    where a series' history would mix the sides of a check."""
    _known(metric)
    where, params = selection.where()
    value = log_value(metric)
    rows = con.sql(
        f"SELECT series_key, list(exp(v)) FROM (SELECT series_key, {value} AS v FROM runs WHERE {where}) "
        "WHERE v IS NOT NULL GROUP BY series_key",
        params=params,
    ).fetchall()
    return {key: values for key, values in rows}


def version_key(version: str) -> list[Any]:
    """Sort key for version strings: 2.9.0 before 2.10.0."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in version.replace("-", ".").split(".")]


def side_versions(con: duckdb.DuckDBPyConnection, selection: Selection) -> dict[str, list[str]]:
    """The distinct software versions among the selected runs, per version field (what a side *is*)."""
    where, params = selection.where()
    lists = ", ".join(f'list(DISTINCT "{f}" ORDER BY "{f}") FILTER (WHERE "{f}" IS NOT NULL)' for f in VERSION_COLUMNS)
    source, count = ("summaries", "coalesce(sum(trials), 0)") if summarized(selection) else ("runs", "count(*)")
    row = con.sql(f"SELECT {count}, {lists} FROM {source} WHERE {where}", params=params).fetchall()[0]
    return {"runs": [str(row[0])], **{f: list(v or []) for f, v in zip(VERSION_COLUMNS, row[1:])}}


def has_column(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the store's runs have ``name`` (a store of an earlier stepwatch may not, until its next write)."""
    return name in con.sql("SELECT * FROM runs LIMIT 0").columns


def model_code(con: duckdb.DuckDBPyConnection, selection: Selection) -> dict[str, list[str]]:
    """Per user model among the selected runs, the hashes of the source that ran (``model_hash``): more than one,
    or other ones on the other side, and the model's own code changed. Empty for a store written before it."""
    if not has_column(con, "model_hash"):
        return {}
    where, params = selection.where()
    rows = con.sql(
        f"SELECT model, list(DISTINCT model_hash ORDER BY model_hash) FROM runs "
        f"WHERE ({where}) AND model_hash IS NOT NULL GROUP BY model ORDER BY model",
        params=params,
    ).fetchall()
    return {model: list(hashes) for model, hashes in rows}


def _machine_counts(con: duckdb.DuckDBPyConnection, alias: str) -> str:
    """SQL for an aggregate's ``flagged`` and ``unread`` counts of ok trials: unread where the trial read part of
    the machine and not what a flag needs (a GPU trial whose NVML read failed); rows from before the machine's
    state was recorded read none of it, and are neither (0 in a store from then)."""
    if not has_column(con, "throttled"):
        return "0 AS flagged, 0 AS unread"
    r = f"{alias}." if alias else ""
    ok = f"{r}status = 'ok'"
    watched = f"({r}host_other_cpu IS NOT NULL OR {r}cpu_throttled_s IS NOT NULL OR {r}cpu_governor IS NOT NULL)"
    flagged = " OR ".join(f"{r}{flag}" for flag in FLAGS)
    unread = "(" + " OR ".join(f"{r}{flag} IS NULL" for flag in FLAGS) + f") AND {watched}"
    return (f"count(*) FILTER (WHERE {ok} AND ({flagged})) AS flagged, "
            f"count(*) FILTER (WHERE {ok} AND {unread}) AS unread")  # fmt: skip


def machine_state(con: duckdb.DuckDBPyConnection, selection: Selection) -> dict[str, int]:
    """Among the selected ok trials: how many there are, how many read the machine's state (both flags: a flag is
    empty where it was not read), and how many ran throttled or shared (collector.trial.machine)."""
    if not has_column(con, "throttled"):
        return {"trials": 0, "read": 0, "throttled": 0, "shared": 0}
    where, params = selection.where()
    row = con.sql(
        "SELECT count(*), count(*) FILTER (WHERE throttled IS NOT NULL AND shared IS NOT NULL), "
        "count(*) FILTER (WHERE throttled), count(*) FILTER (WHERE shared) "
        f"FROM runs WHERE ({where}) AND status = 'ok'",
        params=params,
    ).fetchall()[0]
    return dict(zip(("trials", "read", "throttled", "shared"), (int(v) for v in row)))


def kernels_ran(con: duckdb.DuckDBPyConnection, selection: Selection, kind: str) -> dict[str, int]:
    """Among the selected ok trials of models that have them: how many ran each kernel of ``kind`` (``schema.KERNELS``:
    attention's flash, efficient, cudnn or math; the experts' grouped_mm, batched_mm, eager or dense), as their rows
    recorded it."""
    column = KERNELS[kind]
    if not has_column(con, column):
        return {}
    where, params = selection.where()
    rows = con.sql(
        f"SELECT {column}, count(*) FROM runs WHERE ({where}) AND status = 'ok' "
        f"AND {column} IS NOT NULL GROUP BY 1 ORDER BY 2 DESC, 1",
        params=params,
    ).fetchall()
    return {str(kernel): int(count) for kernel, count in rows}


# What a version comparison goes along, and what History's x axis offers.
VERSION_AXES = (*VERSION_COLUMNS[:5], "cuda_build_version", "driver_version", "container_image", "project_commit")
X_AXES = ("night", *VERSION_AXES)


def framework_axis(backends: Sequence[str]) -> str:
    """The version axis an upgrade of these Keras backends' frameworks goes along: the first of VERSION_AXES
    that is one of theirs (TensorFlow's where it is among them), else Keras's (a store of JAX or torch trials
    does not open its Versions on TensorFlow, which none of its rows has)."""
    theirs = {FRAMEWORK_VERSION_COLUMNS.get(b) for b in backends}
    return next((axis for axis in VERSION_AXES if axis in theirs), FRAMEWORK_VERSION_COLUMNS["keras"])


def version_spread(con: duckdb.DuckDBPyConnection, selection: Selection, metric: str, along: str) -> pd.DataFrame:
    """Per series and value of the version field ``along``: the spread of its ok trials' metric (count, min,
    quartiles, max), its suite runs and the series' dimensions, one row each, so that a chart draws a box per
    version from a few numbers rather than every trial."""
    _known(metric)
    if along not in VERSION_AXES:
        raise SelectionError(f"{along!r} is not a version field (known: {', '.join(VERSION_AXES)})")
    where, params = selection.where("r")
    dims = ", ".join(f's."{d}"' for d in SERIES_DIMENSIONS)
    return _frame(
        con,
        f"""
        SELECT r.series_key, r."{along}" AS version, count(*) AS n, count(DISTINCT r.suite_run_id) AS suite_runs,
               min(r."{metric}") AS low, quantile_cont(r."{metric}", 0.25) AS q1,
               median(r."{metric}") AS median, quantile_cont(r."{metric}", 0.75) AS q3, max(r."{metric}") AS high,
               min(r.started_at) AS first_at, {dims}
        FROM runs r JOIN series s USING (series_key)
        WHERE r.status = 'ok' AND r."{metric}" IS NOT NULL AND r."{along}" IS NOT NULL AND {where}
        GROUP BY r.series_key, r."{along}", {dims}
        ORDER BY {", ".join(f's."{d}"' for d in SERIES_DIMENSIONS)}, first_at
        """,
        params,
    )


def series_catalog(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Every series with its config fields and history span (the filters' choices)."""
    return _frame(con, f"SELECT * FROM series ORDER BY {SERIES_ORDER}", [])


def history_points(
    con: duckdb.DuckDBPyConnection, selection: Selection, metric: str, trials: bool = True
) -> pd.DataFrame:
    """One point per series and suite run: the median of its ok trials' metric (failed trials left out), the
    values of those trials (``trial_values``, unless ``trials`` is false: a chart needs only the medians), the
    trial counts (``flagged`` and ``unread``: ok trials whose machine ran throttled or shared, or was not read),
    the versions it ran and the series' dimensions, oldest first."""
    _known(metric)
    where, params = selection.where("r")
    versions = ", ".join(f'any_value(r."{f}") AS "{f}"' for f in VERSION_COLUMNS)
    dims = ", ".join(f's."{d}"' for d in SERIES_DIMENSIONS)
    values = (
        f"""list(r."{metric}") FILTER (WHERE r.status = 'ok' AND r."{metric}" > 0) AS trial_values,""" if trials else ""
    )
    return _frame(
        con,
        f"""
        SELECT r.series_key, r.suite_run_id, min(r.started_at) AS night,
               median(r."{metric}") FILTER (WHERE r.status = 'ok') AS value,
               {values}
               count(*) FILTER (WHERE r.status = 'ok') AS ok, count(*) AS trials,
               {_machine_counts(con, "r")},
               any_value(r.label) AS label, any_value(r.unit) AS unit, {versions}, {dims}
        FROM runs r JOIN series s USING (series_key) WHERE {where}
        GROUP BY r.series_key, r.suite_run_id, {dims} ORDER BY night
        """,
        params,
    )


def recent_points(con: duckdb.DuckDBPyConnection, series_keys: Sequence[str], metric: str, nights: int) -> pd.DataFrame:
    """Per series, its last ``nights`` suite runs, newest first (``back`` 1 is the latest): the night, trials and
    ok trials, the median of the ok trials' metric and their values. Failed trials and values that are not
    positive are left out."""
    _known(metric)
    if not series_keys:
        return pd.DataFrame(columns=["series_key", "suite_run_id", "night", "trials", "n", "value", "values", "back"])
    # Every trial of the picked series is grouped into its suite run; the window then keeps the newest ones.
    return _frame(
        con,
        f"""
        WITH picked AS (
            SELECT series_key, suite_run_id, min(started_at) AS night, count(*) AS trials,
                   count(v) AS n, median(v) AS value, list(v) FILTER (WHERE v IS NOT NULL) AS "values"
            FROM (
                SELECT series_key, suite_run_id, started_at,
                       CASE WHEN status = 'ok' AND "{metric}" > 0 THEN "{metric}" END AS v
                FROM runs WHERE list_contains(?, series_key)
            ) GROUP BY series_key, suite_run_id
        )
        SELECT *, row_number() OVER (PARTITION BY series_key ORDER BY night DESC) AS back
        FROM picked QUALIFY back <= ? ORDER BY series_key, back
        """,
        [list(series_keys), nights],
    )


# The three speedups of a config point, each against its own reference point (see ``speedups``).
SPEEDUPS = {"xla": "x", "precision": "f", "backend": "t", "plain": "l"}


def speedups(con: duckdb.DuckDBPyConnection, selection: Selection) -> pd.DataFrame:
    """Per config point of the selected ok runs: its median throughput, and the count, mean and variance of its
    log throughput, with the same three numbers of each reference it is sped up against (``{kind}_n``,
    ``{kind}_mean_log``, ``{kind}_var_log``): XLA off (same everything else), the fastest fp32 point (same model,
    device, backend and XLA setting, since mixed precision usually runs a larger batch), the TensorFlow
    backend (same everything else) and, for a plain PyTorch point, Keras' fit on torch (same everything else).
    The ratios and their intervals come from the analysis (``collector.analysis.speedups``)."""
    where, params = selection.where()
    keys = ", ".join(f'"{k}"' for k in SPEEDUP_KEYS)

    def same(alias: str, *extra: str, keys: tuple[str, ...] = SPEEDUP_KEYS) -> str:
        return " AND ".join([*(f'{alias}."{k}" IS NOT DISTINCT FROM p."{k}"' for k in keys), *extra])

    references = ", ".join(
        f"{alias}.{part} AS {kind}_{part}" for kind, alias in SPEEDUPS.items() for part in ("n", "mean_log", "var_log")
    )
    return _frame(
        con,
        f"""
        WITH points AS (
            SELECT {named(SERIES_DIMENSIONS)}, median(examples_per_sec) AS examples_per_sec,
                   count(*) AS n, avg(ln(examples_per_sec)) AS mean_log, var_samp(ln(examples_per_sec)) AS var_log
            FROM runs WHERE status = 'ok' AND examples_per_sec > 0 AND {where}
            GROUP BY ALL
        ), fp32 AS (
            SELECT * FROM points WHERE precision = 'fp32'
            QUALIFY row_number() OVER (PARTITION BY {keys}, xla ORDER BY mean_log DESC) = 1
        )
        SELECT p.*, {references}
        FROM points p
        LEFT JOIN points x ON {
            same("x", "x.precision = p.precision", "x.per_device_batch = p.per_device_batch", "NOT x.xla")
        }
        LEFT JOIN fp32 f ON {same("f", "f.xla = p.xla")}
        LEFT JOIN points t ON {same("t", "t.keras_backend = 'tensorflow'", keys=BACKEND_KEYS)}
        LEFT JOIN points l ON {same("l", "p.loop = 'pytorch'", "l.loop = 'fit'", keys=LOOP_KEYS)}
        ORDER BY {SERIES_ORDER}
        """,
        params,
    )


def costs(con: duckdb.DuckDBPyConnection, selection: Selection) -> pd.DataFrame:
    """Per accelerator, config and price: median cost per run and per 1M examples of the selected ok runs, with
    the price used, what it covers, its source, its date, whose it is and how far it is trusted."""
    where, params = selection.where()
    said = ", ".join(  # whose price and how sure: a store of an earlier stepwatch has neither until its next write
        f"any_value({name}) AS {name}" if has_column(con, name) else f"NULL AS {name}"
        for name in ("price_whose", "price_confidence")
    )
    return _frame(
        con,
        f"""
        SELECT {named(SERIES_DIMENSIONS)}, price_key,
               median(cost_usd) AS cost_usd, median(cost_per_1m_examples_usd) AS cost_per_1m_examples_usd,
               median(examples_per_sec) AS examples_per_sec, any_value(price_per_device_hour) AS price_per_device_hour,
               any_value(price_covers) AS price_covers, any_value(price_source) AS price_source,
               any_value(price_date) AS price_date, {said}, count(*) AS trials
        FROM runs WHERE status = 'ok' AND cost_usd IS NOT NULL AND {where}
        GROUP BY ALL ORDER BY model, preset, cost_per_1m_examples_usd
        """,
        params,
    )


def cost_gaps(con: duckdb.DuckDBPyConnection, selection: Selection) -> pd.DataFrame:
    """The selected ok runs that have no cost, by why (their price_note): the hardware the catalog does not know."""
    where, params = selection.where()
    return _frame(
        con,
        "SELECT coalesce(price_note, 'no price recorded (a row written before runs said why)') AS why, "
        f"count(*) AS trials FROM runs WHERE status = 'ok' AND cost_usd IS NULL AND {where} "
        "GROUP BY ALL ORDER BY trials DESC",
        params,
    )


def suite_run_costs(
    con: duckdb.DuckDBPyConnection, suite_run_ids: Sequence[str] | None = None, limit: int = 60
) -> pd.DataFrame:
    """Per suite run (a night's collect job, a side of a check), newest first: its start and label, its trials and how
    many were priced, what they cost (every trial's time at its price, a failed one's too: the runner was paid for
    it), the prices used and, for trials with none, why. ``suite_run_ids``: only those."""
    wanted = "" if suite_run_ids is None else "WHERE list_contains(?, suite_run_id)"
    return _frame(
        con,
        f"""
        SELECT suite_run_id, min(started_at) AS started_at, any_value(label) AS label, count(*) AS trials,
               count(cost_usd) AS priced, sum(cost_usd) AS cost_usd, sum(wall_s) AS wall_s,
               string_agg(DISTINCT price_key, ', ') AS price_key,
               any_value(price_per_device_hour) AS price_per_device_hour, any_value(price_source) AS price_source,
               any_value(price_date) AS price_date,
               string_agg(DISTINCT price_note, '; ') FILTER (WHERE cost_usd IS NULL) AS unpriced
        FROM runs {wanted} GROUP BY suite_run_id ORDER BY started_at DESC LIMIT ?
        """,
        [*([list(suite_run_ids)] if suite_run_ids is not None else []), limit],
    )


def recent_runs(con: duckdb.DuckDBPyConnection, selection: Selection, limit: int = 200) -> pd.DataFrame:
    """The latest trials (newest first) for picking one run to inspect."""
    where, params = selection.where()
    return _frame(
        con,
        f"SELECT run_id, suite_run_id, started_at, status, model, preset, keras_backend, device, accelerator, "
        f"precision, compiler, "
        f"{named(['xla'])}, per_device_batch, trial, tf_version, label FROM runs WHERE {where} "
        "ORDER BY started_at DESC, trial LIMIT ?",
        [*params, limit],
    )


def run_detail(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[dict[str, Any] | None, pd.DataFrame]:
    """One run's row and its per-window step times and losses."""
    row = con.sql("SELECT * FROM runs WHERE run_id = ?", params=[run_id]).to_arrow_table().to_pylist()
    windows = _frame(
        con, "SELECT window_index, step_time_s, loss FROM samples WHERE run_id = ? ORDER BY window_index", [run_id]
    )
    return (row[0] if row else None), windows


def bisect_steps(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Every recorded bisect step (``stepwatch bisect``), newest bisect first, each bisect's steps in order,
    with each target series' label fields."""
    return _frame(
        con,
        "SELECT b.*, s.* EXCLUDE (series_key) FROM bisect_steps b LEFT JOIN series s USING (series_key) "
        "ORDER BY max(b.created_at) OVER (PARTITION BY b.bisect_id) DESC, b.step, b.series_key, b.metric",
        [],
    )
