"""The questions asked of the store, in one place for the CLI, the analysis and the dashboard.

A selection (``tf_version=2.20.0,label=candidate``, ``since=2026-11-01``, ``model=resnet50|bert``) becomes
a WHERE clause over known column names with every value bound as a parameter: nothing a user types is
ever formatted into SQL.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from collector.config import FIELD_NAMES
from collector.metrics import METRICS
from collector.schema import SCHEMA
from collector.store import RUN_COLUMNS

_TYPES = {f.name: f.type for f in RUN_COLUMNS}
SELECTABLE = tuple(
    name
    for name, dtype in _TYPES.items()
    if not pa.types.is_floating(dtype) and not pa.types.is_timestamp(dtype) and name not in ("extras", "log_tail")
)
ALIASES = {"xla": "xla_requested", "series": "series_key", "version": "tf_version"}
RANGE_KEYS = ("since", "until")


class SelectionError(ValueError):
    """A selection that names an unknown field or a value of the wrong kind, in one line."""


def _value(name: str, text: str) -> Any:
    dtype = _TYPES[name]
    if pa.types.is_boolean(dtype):
        lowered = text.lower()
        if lowered in ("on", "true", "1", "yes"):
            return True
        if lowered in ("off", "false", "0", "no"):
            return False
        raise SelectionError(f"{name}={text!r}: expected on or off")
    if pa.types.is_integer(dtype):
        try:
            return int(text)
        except ValueError:
            raise SelectionError(f"{name}={text!r}: expected a whole number") from None
    return text


def _instant(key: str, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise SelectionError(f"{key}={text!r}: expected a date such as 2026-11-01 or 2026-11-01T12:00") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Selection:
    """Equality filters (several values of one field are alternatives) and a started_at range."""

    equals: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    since: datetime | None = None
    until: datetime | None = None

    @classmethod
    def parse(cls, text: str | None) -> Selection:
        """``key=value[|value...][,key=value...]``; raises SelectionError naming the bad part."""
        equals: dict[str, tuple[Any, ...]] = {}
        since = until = None
        for part in (text or "").split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, raw = part.partition("=")
            key = key.strip()
            if not sep or not key:
                raise SelectionError(f"{part!r} is not key=value (e.g. tf_version=2.20.0)")
            key = ALIASES.get(key, key)
            raw = raw.strip()
            if key in RANGE_KEYS:
                moment = _instant(key, raw)
                since, until = (moment, until) if key == "since" else (since, moment)
                continue
            if key not in SELECTABLE:
                close = difflib.get_close_matches(key, SELECTABLE + RANGE_KEYS + tuple(ALIASES), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise SelectionError(f"unknown field {key!r} in selection{hint}")
            equals[key] = equals.get(key, ()) + tuple(_value(key, v.strip()) for v in raw.split("|"))
        return cls(tuple(sorted(equals.items())), since, until)

    @classmethod
    def of(cls, **fields: Any) -> Selection:
        """Equality filters from keyword arguments (a list is alternatives; None or empty means any)."""
        equals = []
        for name, values in sorted(fields.items()):
            values = values if isinstance(values, list | tuple) else [values]
            values = tuple(v for v in values if v is not None)
            if values:
                equals.append((ALIASES.get(name, name), values))
        return cls(tuple(sorted(equals)))

    def where(self, alias: str = "") -> tuple[str, list[Any]]:
        """SQL condition and its parameters; column names come from the schema, values are bound."""
        prefix = f"{alias}." if alias else ""
        clauses, params = ["TRUE"], []
        for name, values in self.equals:
            clauses.append(f'{prefix}"{name}" IN ({", ".join("?" for _ in values)})')
            params.extend(values)
        if self.since is not None:
            clauses.append(f"{prefix}started_at >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append(f"{prefix}started_at < ?")
            params.append(self.until)
        return " AND ".join(clauses), params

    def describe(self) -> str:
        parts = [f"{k}={'|'.join(map(str, v))}" for k, v in self.equals]
        parts += [f"since={self.since.isoformat()}"] if self.since else []
        parts += [f"until={self.until.isoformat()}"] if self.until else []
        return ",".join(parts) or "all runs"


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> pd.DataFrame:
    """Run a bound query into pandas through Arrow (faster than DuckDB's own DataFrame conversion)."""
    return con.sql(sql, params=params).to_arrow_table().to_pandas()


def latest_per_series(con: duckdb.DuckDBPyConnection, selection: Selection = Selection()) -> pd.DataFrame:
    """Per series, its most recent suite run: trials passing n/N, median throughput, the versions it ran."""
    where, params = selection.where()
    return _frame(
        con,
        f"""
        SELECT series_key, any_value(model) AS model, any_value(preset) AS preset, any_value(backend) AS backend,
               any_value(accelerator) AS accelerator, any_value(num_devices) AS num_devices,
               any_value(xla_requested) AS xla, any_value(precision) AS precision,
               any_value(per_device_batch) AS per_device_batch, any_value(loop) AS loop,
               any_value(suite_run_id) AS suite_run_id, max(started_at) AS started_at,
               count(*) AS trials, count(*) FILTER (WHERE status = 'ok') AS ok,
               median(examples_per_sec) FILTER (WHERE status = 'ok') AS examples_per_sec,
               median(units_per_sec) FILTER (WHERE status = 'ok') AS units_per_sec, any_value(unit) AS unit,
               any_value(tf_version) AS tf_version, any_value(label) AS label,
               string_agg(DISTINCT status, ', ') FILTER (WHERE status <> 'ok') AS failures
        FROM latest_runs WHERE {where}
        GROUP BY series_key ORDER BY model, preset, backend, accelerator, precision, xla
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
    "per_device_batch",
    "global_batch",
    "cost_usd",
    "cost_per_1m_examples_usd",
    "tf_version",
    "keras_version",
    "keras_hub_version",
    "cuda_build_version",
    "cudnn_build_version",
    "driver_version",
    "container_image",
    "stepwatch_git_sha",
    "host",
)


def series_history(con: duckdb.DuckDBPyConnection, series_key: str, selection: Selection = Selection()) -> pd.DataFrame:
    """Every trial of one series in time order, with the metrics plotted and the versions compared along."""
    where, params = selection.where()
    columns = ", ".join(HISTORY_COLUMNS)
    return _frame(
        con,
        f"SELECT {columns} FROM runs WHERE series_key = ? AND {where} ORDER BY started_at, trial",
        [series_key, *params],
    )


SERIES_FIELDS = (*(f if f != "xla" else "xla_requested" for f in FIELD_NAMES), "accelerator", "unit", "suite")


def compare_sides(
    con: duckdb.DuckDBPyConnection,
    baseline: Selection,
    candidate: Selection,
    metric: str = "examples_per_sec",
) -> pd.DataFrame:
    """Per series present on either side: ok-trial count, mean and variance of log(metric) for each side
    (what a ratio of geometric means and its Welch interval need), failed trials per side, and the
    series' config fields. Failed trials never enter the statistics."""
    if metric not in METRICS:
        raise SelectionError(f"{metric!r} is not a metric stepwatch compares (known: {', '.join(METRICS)})")
    where_a, params_a = baseline.where()
    where_b, params_b = candidate.where()
    fields = ", ".join(f'any_value("{f}") AS "{f}"' for f in SERIES_FIELDS)
    return _frame(
        con,
        f"""
        WITH sides AS (
            SELECT 'baseline' AS side, *, CASE WHEN status = 'ok' AND "{metric}" > 0 THEN ln("{metric}") END AS v
            FROM runs WHERE {where_a}
            UNION ALL BY NAME
            SELECT 'candidate' AS side, *, CASE WHEN status = 'ok' AND "{metric}" > 0 THEN ln("{metric}") END AS v
            FROM runs WHERE {where_b}
        )
        SELECT series_key, {fields},
               count(v) FILTER (WHERE side = 'baseline') AS n_baseline,
               avg(v) FILTER (WHERE side = 'baseline') AS mean_log_baseline,
               var_samp(v) FILTER (WHERE side = 'baseline') AS var_log_baseline,
               count(*) FILTER (WHERE side = 'baseline' AND status <> 'ok') AS failed_baseline,
               count(v) FILTER (WHERE side = 'candidate') AS n_candidate,
               avg(v) FILTER (WHERE side = 'candidate') AS mean_log_candidate,
               var_samp(v) FILTER (WHERE side = 'candidate') AS var_log_candidate,
               count(*) FILTER (WHERE side = 'candidate' AND status <> 'ok') AS failed_candidate,
               exp(avg(v) FILTER (WHERE side = 'candidate') - avg(v) FILTER (WHERE side = 'baseline')) AS ratio
        FROM sides GROUP BY series_key
        ORDER BY model, preset, backend, accelerator, precision, xla_requested, per_device_batch, series_key
        """,
        [*params_a, *params_b],
    )


VERSION_FIELDS = (
    "tf_version",
    "keras_version",
    "keras_hub_version",
    "python_version",
    "cuda_build_version",
    "cudnn_build_version",
    "cuda_runtime_version",
    "driver_version",
    "container_image",
    "stepwatch_git_sha",
)


def version_key(version: str) -> list[Any]:
    """Sort key for version strings: 2.9.0 before 2.10.0."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in version.replace("-", ".").split(".")]


def side_versions(con: duckdb.DuckDBPyConnection, selection: Selection) -> dict[str, list[str]]:
    """The distinct software versions among the selected runs, per version field (what a side *is*)."""
    where, params = selection.where()
    lists = ", ".join(f'list(DISTINCT "{f}" ORDER BY "{f}") FILTER (WHERE "{f}" IS NOT NULL)' for f in VERSION_FIELDS)
    row = con.sql(f"SELECT count(*), {lists} FROM runs WHERE {where}", params=params).fetchall()[0]
    return {"runs": [str(row[0])], **{f: list(v or []) for f, v in zip(VERSION_FIELDS, row[1:])}}


SERIES_DIMENSIONS = ("model", "preset", "backend", "accelerator", "precision", "xla", "per_device_batch", "num_devices")
X_AXES = ("night", *VERSION_FIELDS[:3], "cuda_build_version", "driver_version", "container_image")


def series_catalog(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Every series with its config fields and history span (the filters' choices)."""
    return _frame(con, "SELECT * FROM series ORDER BY model, preset, accelerator, precision, xla", [])


def history_points(con: duckdb.DuckDBPyConnection, selection: Selection, metric: str) -> pd.DataFrame:
    """One point per series and suite run: the median of its ok trials' metric (failed trials left out),
    the trial counts, the versions it ran and the series' dimensions, oldest first."""
    if metric not in METRICS:
        raise SelectionError(f"{metric!r} is not a metric stepwatch tracks (known: {', '.join(METRICS)})")
    where, params = selection.where("r")
    versions = ", ".join(f'any_value(r."{f}") AS "{f}"' for f in VERSION_FIELDS)
    dims = ", ".join(f's."{d}"' for d in SERIES_DIMENSIONS)
    return _frame(
        con,
        f"""
        SELECT r.series_key, r.suite_run_id, min(r.started_at) AS night,
               median(r."{metric}") FILTER (WHERE r.status = 'ok') AS value,
               count(*) FILTER (WHERE r.status = 'ok') AS ok, count(*) AS trials,
               any_value(r.label) AS label, {versions}, {dims}
        FROM runs r JOIN series s USING (series_key) WHERE {where}
        GROUP BY r.series_key, r.suite_run_id, {dims} ORDER BY night
        """,
        params,
    )


def speedups(con: duckdb.DuckDBPyConnection, selection: Selection) -> pd.DataFrame:
    """Median throughput of the selected ok runs per config point, with its speedup over XLA off (same
    everything else) and over fp32 (the fastest fp32 point of the same model, device and XLA setting,
    since mixed precision usually runs a larger batch): the seeds' two charts."""
    where, params = selection.where()
    keys = ("model", "preset", "accelerator", "num_devices", "loop", "data")

    def same(alias: str, *extra: str) -> str:
        return " AND ".join([*(f"{alias}.{k} IS NOT DISTINCT FROM p.{k}" for k in keys), *extra])

    return _frame(
        con,
        f"""
        WITH points AS (
            SELECT {", ".join(keys)}, per_device_batch, xla_requested AS xla, precision,
                   median(examples_per_sec) AS examples_per_sec, count(*) AS trials
            FROM runs WHERE status = 'ok' AND {where}
            GROUP BY ALL
        ), fp32 AS (
            SELECT {", ".join(keys)}, xla, max(examples_per_sec) AS examples_per_sec
            FROM points WHERE precision = 'fp32' GROUP BY ALL
        )
        SELECT p.*,
               p.examples_per_sec / x.examples_per_sec AS xla_speedup,
               p.examples_per_sec / f.examples_per_sec AS precision_speedup
        FROM points p
        LEFT JOIN points x ON {
            same("x", "x.precision = p.precision", "x.per_device_batch = p.per_device_batch", "NOT x.xla")
        }
        LEFT JOIN fp32 f ON {same("f", "f.xla = p.xla")}
        ORDER BY model, preset, accelerator, precision, xla
        """,
        params,
    )


def costs(con: duckdb.DuckDBPyConnection, selection: Selection) -> pd.DataFrame:
    """Per accelerator and config: median cost per run and per 1M examples of the selected ok runs, with
    the price used, its source and its date."""
    where, params = selection.where()
    return _frame(
        con,
        f"""
        SELECT accelerator, model, preset, precision, xla_requested AS xla, per_device_batch, num_devices,
               median(cost_usd) AS cost_usd, median(cost_per_1m_examples_usd) AS cost_per_1m_examples_usd,
               median(examples_per_sec) AS examples_per_sec, any_value(price_per_device_hour) AS price_per_device_hour,
               any_value(price_source) AS price_source, any_value(price_date) AS price_date, count(*) AS trials
        FROM runs WHERE status = 'ok' AND cost_usd IS NOT NULL AND {where}
        GROUP BY ALL ORDER BY model, preset, cost_per_1m_examples_usd
        """,
        params,
    )


def recent_runs(con: duckdb.DuckDBPyConnection, selection: Selection, limit: int = 200) -> pd.DataFrame:
    """The latest trials (newest first) for picking one run to inspect."""
    where, params = selection.where()
    return _frame(
        con,
        f"SELECT run_id, suite_run_id, started_at, status, model, preset, backend, accelerator, precision, "
        f"xla_requested AS xla, per_device_batch, trial, tf_version, label FROM runs WHERE {where} "
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


EXPORT_FORMATS = ("csv", "parquet")


def export(con: duckdb.DuckDBPyConnection, selection: Selection, fmt: str, out: Path) -> int:
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
