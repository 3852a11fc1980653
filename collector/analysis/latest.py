"""What each series' latest suite run changed: its trials against the suite run before it, and against its
baseline (the trials of its previous nights, at most ``BASELINE_NIGHTS``, none from before the change an
acknowledged or fixed alert accepted), each through the same statistics and verdicts as a comparison
(``stats.judge``: ratio of geometric means, 95% Welch interval, Benjamini-Hochberg across the series).
``changes`` is tables in, a table out; ``overview`` reads what it needs through ``queries`` (the Overview shows it)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from stepwatch.collector.analysis import calibration, noise, numerics, stats
from stepwatch.collector.analysis.changepoints import trial_side
from stepwatch.collector.analysis.thresholds import Override, direction_for, threshold_for, worse
from stepwatch.collector.metrics import DEFAULT_METRIC, METRICS, Metric, get_metric
from stepwatch.collector.outcomes import (
    CHANGED,
    FAILED,
    IMPROVEMENT,
    INCONCLUSIVE,
    MISSING,
    NO_CHANGE,
    REGRESSION,
    VERDICT_ORDER,
)
from stepwatch.collector.store import queries, records, trajectories
from stepwatch.collector.store.selection import Selection

BASELINE_NIGHTS = 7  # a baseline pools the trials of up to this many nights before the latest
SPARK_NIGHTS = 30  # nights a sparkline shows
VARIANCE_NIGHTS = 90  # a series' night-to-night variance reads up to this many nights since its last change
LEVEL_NIGHTS = 7  # the level: the last this many nights, the latest included...
LEVEL_BASE_NIGHTS = 28  # ...against up to this many nights before them, since the last change
MIN_LEVEL_NIGHTS = 3  # nights each side of the level needs
AGAINST = ("previous", "baseline", "level")
EMPTY = stats.Side(0, math.nan, math.nan)
COLUMNS = [
    "series_key", "value", "n", "nights", "spark", "baseline_value", "baseline_nights", "night_variance",
    *(f"{against}_{part}" for against in AGAINST for part in ("ratio", "ci_low", "ci_high", "verdict", "seen")),
]  # fmt: skip


def changes(
    points: pd.DataFrame,
    metric: Metric,
    series: Mapping[str, Mapping[str, Any]],
    overrides: list[Override],
    starts: Mapping[str, datetime],
    baseline_nights: int = BASELINE_NIGHTS,
    night_to_night: bool = True,
    prior: stats.Between | None = None,
) -> pd.DataFrame:
    """One row per series of ``points`` (``queries.recent_points``, newest night first): the latest night's
    median, its trials, a sparkline of the nights' medians (oldest first), and three comparisons, each a ratio,
    its 95% interval, the verdict and what it could see (``_seen``: the interval's half-width, as a change):

    - ``previous``: the latest night against the night before it;
    - ``baseline``: the latest night against the trials of up to ``baseline_nights`` nights before it, pooled as
      a change point's segment is (``changepoints.trial_side``: trials of one night that move together count
      for less);
    - ``level``: the last ``LEVEL_NIGHTS`` nights against up to ``LEVEL_BASE_NIGHTS`` nights before them, night
      means against night means (a Welch test on them, whose spread carries each night's offset): where one
      night cannot tell a change of the threshold from a night's own offset, a week of them can.

    Every comparison reads the nights since the series' baseline began (``starts``: where an accepted change
    started it; for a counter, its own last change). ``series`` gives each series' fields (its threshold, and its
    ``runner``).

    A night is two nights' offsets from the one before it and one from a pooled baseline, which the trials of one
    night cannot show: those intervals also cover the variance of a night's offset (``night_variance`` says where
    it came from). It is the series' own, estimated from up to ``VARIANCE_NIGHTS`` nights since its last change
    (``stats.between_nights``); where that rests on fewer than ``stats.ENOUGH_DF`` degrees of freedom or came out at
    or below zero, it is pooled with the estimate of every series of its runner (or, where its runner has none,
    ``prior``: the runner's calibration; with neither, ``stats.LONE_RUNNER`` while its nights are few), so that a
    noisy estimate of zero cannot switch the widening off. Where nothing gives one, the latest night's verdicts are
    inconclusive. ``night_to_night`` False: the former plain tests of the
    trials, which ``benchmarks/overview_aa.py`` measures against this."""
    rows, pairs = [], {against: [] for against in AGAINST}
    own: list[stats.Between | None] = []  # per series, its own estimate of a night's offset variance
    lone: list[stats.Between | None] = []  # ... pooled with stats.LONE_RUNNER, where nothing else measured its runner
    spans: dict[str, list[tuple[stats.Span, stats.Span]]] = {against: [] for against in AGAINST}  # counters
    ordered = points.sort_values(["series_key", "back"])
    by_series: dict[str, list[tuple]] = {}
    for record in zip(ordered["series_key"], ordered["night"], ordered["value"], ordered["values"]):
        by_series.setdefault(record[0], []).append(record[1:])
    for key, nights in by_series.items():
        when, medians, values = zip(*nights)
        sizes = [len(v) if v is not None else 0 for v in values]  # one log over every night's values at once
        flat = np.fromiter(itertools.chain.from_iterable(v for v in values if v is not None), float, sum(sizes))
        logs = np.split(np.log(flat), np.cumsum(sizes)[:-1])
        start = pd.Timestamp(starts[key]) if key in starts else None
        since = [i for i in range(len(logs)) if start is None or when[i] >= start]  # the latest is always in it
        before = [i for i in since if i > 0]
        base = [i for i in before[:baseline_nights] if len(logs[i])]
        if metric.deterministic:  # a counter's baseline starts after its last change: the nights that hold its value
            base = since_last_change(base, values)
        newest = stats.Side.of_logs(logs[0])
        pairs["previous"].append((stats.Side.of_logs(logs[before[0]]) if before else EMPTY, newest))
        pairs["baseline"].append((trial_side([logs[i] for i in base]) if base else EMPTY, newest))
        pairs["level"].append(level_sides([logs[i] for i in since]))
        recent = [logs[i] for i in before[:VARIANCE_NIGHTS]]
        own.append(stats.between_nights(recent))
        lone.append(stats.between_nights(recent, stats.LONE_RUNNER))
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
    keys = [row["series_key"] for row in rows]
    nightly = night_variances(keys, own, {k: series.get(k, {}).get("runner") for k in keys}, prior, lone)
    thresholds = [threshold_for(metric, series.get(row["series_key"], {}), overrides) for row in rows]
    directions = [direction_for(metric, series.get(row["series_key"], {}), overrides) for row in rows]
    for row, estimate, mine in zip(rows, nightly, own):
        unknown = "unknown: too few nights" if mine is None else "unknown: zero, and nothing to pool it with"
        row["night_variance"] = estimate.source if estimate is not None else unknown
    for against in AGAINST:
        if metric.deterministic and against == "level":  # a counter has no level: each night is compared exactly
            judged = [(stats.Ratio(math.nan, math.nan, math.nan, math.nan), math.nan, None)] * len(rows)
        elif metric.deterministic:  # a counter exactly, as compare does: "changed" unless a direction is declared
            exact = [stats.exact(*pair, t, d) for pair, t, d in zip(spans[against], thresholds, directions)]
            judged = [(stats.Ratio(v.ratio, v.ci_low, v.ci_high, math.nan), math.nan, v.verdict) for v in exact]
        elif against == "level":  # night means against night means: their spread carries the nights' offsets
            judged = stats.judge(pairs[against], thresholds, directions)
        elif night_to_night:  # the previous night: two nights' offsets; the baseline's pooled nights: the latest's
            offsets = nightly if against == "previous" else [one_night(e) for e in nightly]
            judged = stats.judge(pairs[against], thresholds, directions, offsets)
            judged = [(r, q, v if e is not None or v in (MISSING, FAILED) else INCONCLUSIVE)
                      for (r, q, v), e in zip(judged, nightly)]  # fmt: skip
        else:
            judged = stats.judge(pairs[against], thresholds, directions)
        for row, (_, newest), (ratio, _, verdict) in zip(rows, pairs[against], judged):
            failed = newest.n == 0 and against != "level"
            row.update({f"{against}_ratio": ratio.ratio, f"{against}_ci_low": ratio.ci_low,
                        f"{against}_ci_high": ratio.ci_high, f"{against}_seen": seen(ratio),
                        f"{against}_verdict": FAILED if failed else verdict})  # fmt: skip
        if against == "level":
            for row, (old, recent) in zip(rows, pairs[against]):
                if old.n < MIN_LEVEL_NIGHTS or recent.n < MIN_LEVEL_NIGHTS:
                    row["level_verdict"] = None  # too few nights since the last change for a level
    return pd.DataFrame(rows, columns=COLUMNS)


def level_sides(nights: list[np.ndarray]) -> tuple[stats.Side, stats.Side]:
    """The level's two sides from a series' nights since its last change (log values, newest first): the means of
    the nights before the last ``LEVEL_NIGHTS`` (up to ``LEVEL_BASE_NIGHTS``) and of those nights."""
    means = stats.night_moments(nights[: LEVEL_NIGHTS + LEVEL_BASE_NIGHTS])[1]
    return stats.Side.of_logs(means[LEVEL_NIGHTS:]), stats.Side.of_logs(means[:LEVEL_NIGHTS])


def seen(ratio: stats.Ratio) -> float:
    """What a comparison could see: half its interval's width, as a relative change (0.02: a change of 2% either
    way is what it can tell from none)."""
    if not (ratio.ci_low > 0 and ratio.ci_high > 0):
        return math.nan
    return math.expm1((math.log(ratio.ci_high) - math.log(ratio.ci_low)) / 2)


def runner_prior(metric: Metric) -> stats.Between | None:
    """This runner's calibration of ``metric`` (``stepwatch calibrate``): what a night's offset is pooled with where
    a series' runner has no other series to say it (the Overview and ``detect`` alike); None without one."""
    try:
        calibrated = calibration.find(None)
    except calibration.CalibrationError:
        return None
    return calibrated.between().get(metric.name) if calibrated else None


def night_variances(
    keys: list[str],
    own: list[stats.Between | None],
    runners: Mapping[str, Any],
    prior: stats.Between | None,
    lone: list[stats.Between | None] | None = None,
) -> list[stats.Between | None]:
    """Per series, the variance of a night's offset its latest night is judged with: its own estimate where it
    rests on ``stats.ENOUGH_DF`` degrees of freedom and is above zero, else pooled (weighted by degrees of freedom) with
    the estimates of the other series of its runner, or with ``prior`` where its runner has none to give; where
    neither says anything, ``lone`` (its nights' estimate pooled with ``stats.LONE_RUNNER``, per series) where given."""
    sums: dict[Any, list[float]] = {}  # runner -> [sum of var x df, sum of df, series]
    for key, estimate in zip(keys, own):
        if estimate is not None:
            total = sums.setdefault(runners.get(key), [0.0, 0.0, 0])
            total[0] += estimate.var_log * estimate.df
            total[1] += estimate.df
            total[2] += 1
    out = []
    for i, (key, estimate) in enumerate(zip(keys, own)):
        weighted, df, count = sums.get(runners.get(key), [0.0, 0.0, 0])
        if estimate is not None:  # the others of its runner: this series' own estimate is pooled once, below
            weighted, df, count = weighted - estimate.var_log * estimate.df, df - estimate.df, count - 1
        others = stats.Between(weighted / df, df) if count and df > 0 else None
        floor = others if others is not None else prior
        if floor is None and lone is not None and (estimate is None or estimate.df < stats.ENOUGH_DF):
            mine = lone[i]  # nothing has measured its runner: its own nights, pooled with the prior while few
            named = None if mine is None else dataclasses.replace(mine, source=f"{mine.source} ({mine.df:.0f} df)")
            out.append(named if named is not None and named.var_log > 0 else None)
            continue
        out.append(stats.night_offset(estimate, floor, f"its runner's {count} other series" if floor is others else ""))
    return out


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
    """The worst of several verdicts (``VERDICT_ORDER``)."""
    return min(verdicts, key=VERDICT_ORDER.index)


def row_verdict(previous: str, baseline: str, level: str | None, beyond: bool = False) -> str:
    """The verdict a row is sorted and filtered by: a change the latest night shows on its own (against the night
    before it or the baseline), a failed or first night, as those say; else what the level of the last nights
    tells, unless the latest night's own estimate is past the threshold (``beyond``) where it cannot tell, which
    the level would average away: inconclusive. Where there is no level (too few nights since the baseline
    began), the worse of the latest night's."""
    latest = (previous, baseline)
    if set(latest) & {REGRESSION, IMPROVEMENT, CHANGED, FAILED} or baseline == MISSING or not level:
        return worst(*latest)
    if beyond and level == NO_CHANGE:
        return INCONCLUSIVE
    return level


def statuses(table: pd.DataFrame, metric: Metric, overrides: list[Override]) -> list[str]:
    """Per row of a ``changes`` table (with its series' fields, where it has them), the verdict it is sorted and
    filtered by (``row_verdict``); a row without a latest comparison is missing."""
    out = []
    for row in table.to_dict("records"):
        previous, level, ratio = row["previous_verdict"], row["level_verdict"], row["baseline_ratio"]
        if not isinstance(previous, str):
            out.append(MISSING)
            continue
        # the latest night's estimate against the baseline is past the series' threshold, whatever its interval
        beyond = (
            ratio == ratio and ratio > 0 and abs(math.log(ratio)) >= math.log1p(threshold_for(metric, row, overrides))
        )
        out.append(row_verdict(previous, row["baseline_verdict"], level if isinstance(level, str) else None, beyond))
    return out


def overview(
    con: duckdb.DuckDBPyConnection, selection: Selection, metric_name: str, overrides: list[Override]
) -> pd.DataFrame:
    """Per selected series its latest suite run (``queries.latest_per_series``) with its ``changes``, its open
    alerts, its worst verdict (``verdict``: what it is sorted and filtered by) and its throughput's noise (over
    its last ``noise.NOISE_TRIALS`` trials), worst first: series with open alerts, then by verdict."""
    metric = get_metric(metric_name)
    runs = queries.latest_per_series(con, selection)
    keys = list(runs["series_key"])
    points = queries.recent_points(con, keys, metric.name, VARIANCE_NIGHTS)
    fields = {row["series_key"]: row for row in runs.to_dict("records")}
    found = changes(points, metric, fields, overrides, records.baselines(con, metric.name), prior=runner_prior(metric))
    table = runs.merge(found, on="series_key", how="left")
    open_alerts = records.list_alerts(con, records.OPEN)
    worse_ones = worse_alerts(open_alerts, overrides)
    for column, picked in (("alerts", worse_ones), ("changed_alerts", ~worse_ones)):
        counts = open_alerts[picked].groupby("series_key").size()
        table[column] = table["series_key"].map(counts).fillna(0).astype(int)
    # Ok trials with no value of the metric did not fail: it was not measured (a counter its backend does not read)
    unmeasured = table["ok"].gt(0) & table["n"].fillna(0).eq(0)
    for against in AGAINST:
        table.loc[unmeasured, f"{against}_verdict"] = MISSING if against != "level" else None
    table["verdict"] = statuses(table, metric, overrides)
    # Noise is the series' throughput's (trials on one of two speeds is a property of its processes); another
    # metric's trials would show its own steps as clusters.
    values = queries.trial_values(con, keys, DEFAULT_METRIC, noise.NOISE_TRIALS)
    noises = noise.noises_of(values, ordered=True)  # newest first: a step in its history is no bimodality
    table["noise"] = [noise.noise_text(noises.get(key)) for key in table["series_key"]]
    table["bimodal"] = [key in noises and bool(noises[key].bimodal) for key in table["series_key"]]
    table["numerics"] = table["series_key"].map(numerics_of(con, keys))
    order = table["verdict"].map({v: i for i, v in enumerate(VERDICT_ORDER)})
    return (
        table.assign(_order=order, _alerts=-table["alerts"])
        .sort_values(["_alerts", "_order"], kind="stable")
        .drop(columns=["_order", "_alerts"])
    )


def numerics_of(con: duckdb.DuckDBPyConnection, keys: list[str]) -> dict[str, str]:
    """Per series, the numerics verdict of its latest suite run against the one before (trial i of each from seed
    i), in one line; none where a run has no loss trajectory or the series has one run."""
    sides = trajectories.last_two_runs(con, keys)
    found = {key: numerics.judge(numerics.trials_of(a), numerics.trials_of(b)) for key, (a, b) in sides.items()}
    return {key: verdict.text() for key, verdict in found.items() if verdict is not None}


def regressed(table: pd.DataFrame) -> pd.Series:
    """The rows of an ``overview`` that regressed: a regression against either reference, or an open alert in its
    metric's worse direction (``alerts``; ``changed_alerts`` are the others)."""
    return table["verdict"].eq(REGRESSION) | table["alerts"].gt(0)
