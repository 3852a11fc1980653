"""What each series' latest suite run changed: its trials against the suite run before it, and against its
baseline (the trials of its previous nights, at most ``BASELINE_NIGHTS``, none from before the change an
acknowledged or fixed alert accepted), each through the same statistics and verdicts as a comparison
(``stats.judge``: ratio of geometric means, 95% Welch interval, Benjamini-Hochberg across the series).
``changes`` is tables in, a table out; ``overview`` reads what it needs through ``queries`` (the Overview shows it)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from stepwatch.collector.analysis import stats
from stepwatch.collector.analysis.changepoints import trial_side
from stepwatch.collector.analysis.thresholds import Override, direction_for, threshold_for, worse
from stepwatch.collector.metrics import DEFAULT_METRIC, METRICS, Metric, get_metric
from stepwatch.collector.outcomes import FAILED, INCONCLUSIVE, MISSING, REGRESSION, VERDICT_ORDER
from stepwatch.collector.store import queries, records
from stepwatch.collector.store.selection import Selection

BASELINE_NIGHTS = 7  # a baseline pools the trials of up to this many nights before the latest
SPARK_NIGHTS = 30  # nights a sparkline shows
AGAINST = ("previous", "baseline")
EMPTY = stats.Side(0, math.nan, math.nan)
COLUMNS = [
    "series_key", "value", "n", "nights", "spark", "baseline_value", "baseline_nights",
    *(f"{against}_{part}" for against in AGAINST for part in ("ratio", "ci_low", "ci_high", "verdict")),
]  # fmt: skip


def changes(
    points: pd.DataFrame,
    metric: Metric,
    series: Mapping[str, Mapping[str, Any]],
    overrides: list[Override],
    starts: Mapping[str, datetime],
    baseline_nights: int = BASELINE_NIGHTS,
    night_to_night: bool = True,
) -> pd.DataFrame:
    """One row per series of ``points`` (``queries.recent_points``, newest night first): the latest night's
    median, its trials, a sparkline of the nights' medians (oldest first), and against the previous night and
    against the baseline each a ratio, its 95% interval and the verdict. The baseline's trials are pooled as
    a change point's segment is (``changepoints.trial_side``: trials of one night that move together count
    for less). ``series`` gives each series' fields (for its threshold); ``starts`` where an accepted change
    started a series' new baseline.

    A night against the night before is two nights' offsets apart, which the trials of either night cannot show:
    its interval also covers twice the variance of a night's offset, estimated from consecutive nights since the
    baseline began (``stats.between_nights``, up to SPARK_NIGHTS of them); against the baseline (whose pooled
    nights carry their own offsets in its spread), the latest night's one offset. With fewer than three earlier
    nights of two trials there is no estimate, and both verdicts are inconclusive. ``night_to_night`` False: the
    former plain tests of the trials, which ``benchmarks/overview_aa.py`` measures against this."""
    rows, pairs = [], {against: [] for against in AGAINST}
    nightly: list[stats.Between | None] = []  # per series, the variance of a night's offset (its baseline's)
    spans: dict[str, list[tuple[stats.Span, stats.Span]]] = {against: [] for against in AGAINST}  # counters
    ordered = points.sort_values(["series_key", "back"])
    by_series: dict[str, list[tuple]] = {}
    for record in zip(ordered["series_key"], ordered["night"], ordered["value"], ordered["values"]):
        by_series.setdefault(record[0], []).append(record[1:])
    for key, nights in by_series.items():
        when, medians, values = zip(*nights)
        logs = [np.log(np.asarray(v if v is not None else [], dtype=float)) for v in values]
        start = pd.Timestamp(starts[key]) if key in starts else None
        before = [i for i in range(1, len(logs)) if start is None or when[i] >= start]
        base = [i for i in before[:baseline_nights] if len(logs[i])]
        if metric.deterministic:  # a counter's baseline starts after its last change: the nights that hold its value
            base = since_last_change(base, values)
        newest = stats.Side.of_logs(logs[0])
        pairs["previous"].append((stats.Side.of_logs(logs[before[0]]) if before else EMPTY, newest))
        pairs["baseline"].append((trial_side([logs[i] for i in base]) if base else EMPTY, newest))
        nightly.append(stats.between_nights([logs[i] for i in before]))  # every night since the baseline began
        if metric.deterministic:  # a counter's values as they are, for the exact comparison
            raw = [list(v) if v is not None else [] for v in values]
            spans["previous"].append((stats.Span.of(raw[before[0]] if before else []), stats.Span.of(raw[0])))
            spans["baseline"].append((stats.Span.of([x for i in base for x in raw[i]]), stats.Span.of(raw[0])))
        rows.append(
            {
                "series_key": key,
                "value": medians[0],
                "n": len(logs[0]),
                "nights": len(logs),
                "spark": [v * metric.scale for v in medians[:SPARK_NIGHTS][::-1] if v == v and v is not None],
                "baseline_value": float(np.median([medians[i] for i in base])) if base else math.nan,
                "baseline_nights": len(base),
            }
        )
    thresholds = [threshold_for(metric, series.get(row["series_key"], {}), overrides) for row in rows]
    directions = [direction_for(metric, series.get(row["series_key"], {}), overrides) for row in rows]
    for against in AGAINST:
        if metric.deterministic:  # a counter exactly, as compare does: "changed" unless a direction is declared
            exact = [stats.exact(*pair, t, d) for pair, t, d in zip(spans[against], thresholds, directions)]
            judged = [(stats.Ratio(v.ratio, v.ci_low, v.ci_high, math.nan), math.nan, v.verdict) for v in exact]
        elif night_to_night:  # the previous night: two nights' offsets; the baseline's pooled nights: the latest's
            offsets = nightly if against == "previous" else [one_night(e) for e in nightly]
            judged = stats.judge(pairs[against], thresholds, directions, offsets)
            judged = [(r, q, v if e is not None or v in (MISSING, FAILED) else INCONCLUSIVE)
                      for (r, q, v), e in zip(judged, nightly)]  # fmt: skip
        else:
            judged = stats.judge(pairs[against], thresholds, directions)
        for row, (_, newest), (ratio, _, verdict) in zip(rows, pairs[against], judged):
            row.update({f"{against}_ratio": ratio.ratio, f"{against}_ci_low": ratio.ci_low,
                        f"{against}_ci_high": ratio.ci_high,
                        f"{against}_verdict": FAILED if newest.n == 0 else verdict})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def since_last_change(nights: list[int], values: tuple[Any, ...]) -> list[int]:
    """Of a counter's baseline ``nights`` (newest first), those since its last change: back from the newest while
    a night's values are the newest's. A baseline that pooled nights before and after a change would hold both
    values and call every night after it inconclusive."""
    kept: list[int] = []
    for i in nights:
        if kept and sorted(values[i]) != sorted(values[kept[0]]):
            break
        kept.append(i)
    return kept


def worse_alerts(alerts: pd.DataFrame, overrides: list[Override]) -> pd.Series:
    """Per alert (``records.list_alerts``'s rows), whether it is a change in its metric's declared worse direction:
    a regression. A counter's change without a declared direction is only "changed"."""
    flags = [
        alert["metric"] in METRICS and worse(METRICS[alert["metric"]], alert, overrides, alert["ratio"])
        for alert in alerts.to_dict("records")
    ]
    return pd.Series(flags, index=alerts.index, dtype=bool)


def one_night(between: stats.Between | None) -> stats.Between | None:
    """One night's offset as a ``stats.Between`` (which adds its variance twice: once per side)."""
    return None if between is None else stats.Between(between.var_log / 2, between.df, "one night's offset")


def worst(*verdicts: str) -> str:
    """The verdict a row is sorted and filtered by: the worst of its comparisons."""
    return min(verdicts, key=VERDICT_ORDER.index)


def overview(
    con: duckdb.DuckDBPyConnection, selection: Selection, metric_name: str, overrides: list[Override]
) -> pd.DataFrame:
    """Per selected series its latest suite run (``queries.latest_per_series``) with its ``changes``, its open
    alerts, its worst verdict (``verdict``: what it is sorted and filtered by) and its throughput's noise (over
    its last ``stats.NOISE_TRIALS`` trials), worst first: series with open alerts, then by verdict."""
    metric = get_metric(metric_name)
    runs = queries.latest_per_series(con, selection)
    keys = list(runs["series_key"])
    points = queries.recent_points(con, keys, metric.name, SPARK_NIGHTS)
    fields = {row["series_key"]: row for row in runs.to_dict("records")}
    found = changes(points, metric, fields, overrides, records.baselines(con, metric.name))
    table = runs.merge(found, on="series_key", how="left")
    open_alerts = records.list_alerts(con, records.OPEN)
    worse_ones = worse_alerts(open_alerts, overrides)
    for column, picked in (("alerts", worse_ones), ("changed_alerts", ~worse_ones)):
        counts = open_alerts[picked].groupby("series_key").size()
        table[column] = table["series_key"].map(counts).fillna(0).astype(int)
    # Ok trials with no value of the metric did not fail: it was not measured (a counter its backend does not read)
    unmeasured = table["ok"].gt(0) & table["n"].fillna(0).eq(0)
    for against in AGAINST:
        table.loc[unmeasured, f"{against}_verdict"] = MISSING
    table["verdict"] = [
        worst(p, b) if isinstance(p, str) else MISSING
        for p, b in zip(table["previous_verdict"], table["baseline_verdict"])
    ]
    # Noise is the series' throughput's (trials on one of two speeds is a property of its processes); another
    # metric's trials would show its own steps as clusters.
    values = queries.trial_values(con, keys, DEFAULT_METRIC, stats.NOISE_TRIALS)
    noise = stats.noises_of(values)
    table["noise"] = [stats.noise_text(noise.get(key)) for key in table["series_key"]]
    table["bimodal"] = [key in noise and bool(noise[key].bimodal) for key in table["series_key"]]
    order = table["verdict"].map({v: i for i, v in enumerate(VERDICT_ORDER)})
    return (
        table.assign(_order=order, _alerts=-table["alerts"])
        .sort_values(["_alerts", "_order"], kind="stable")
        .drop(columns=["_order", "_alerts"])
    )


def regressed(table: pd.DataFrame) -> pd.Series:
    """The rows of an ``overview`` that regressed: a regression against either reference, or an open alert in its
    metric's worse direction (``alerts``; ``changed_alerts`` are the others)."""
    return table["verdict"].eq(REGRESSION) | table["alerts"].gt(0)
