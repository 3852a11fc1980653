"""What each series' latest suite run changed: its trials against the suite run before it, and against its
baseline (the trials of its previous nights, at most ``BASELINE_NIGHTS``, none from before the change an
acknowledged or fixed alert accepted), each through the same statistics and verdicts as a comparison
(``stats.compare``: ratio of geometric means, 95% Welch interval, Benjamini-Hochberg across the series).
Tables in, a table out: the Overview shows it, and nothing here reads the store."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pandas as pd

from collector.analysis import stats
from collector.analysis.comparison import FAILED
from collector.analysis.thresholds import Override, threshold_for
from collector.metrics import Metric

BASELINE_NIGHTS = 7  # a baseline pools the trials of up to this many nights before the latest
SPARK_NIGHTS = 30  # nights a sparkline shows
AGAINST = ("previous", "baseline")
# The order a glance reads in: what got worse first, what cannot be told last.
VERDICT_ORDER = (
    stats.REGRESSION, FAILED, stats.INCONCLUSIVE, stats.IMPROVEMENT, stats.NO_CHANGE, stats.MISSING,
)  # fmt: skip
COLUMNS = [
    "series_key", "value", "n", "nights", "spark", "baseline_value", "baseline_nights",
    *(f"{against}_{part}" for against in AGAINST for part in ("ratio", "ci_low", "ci_high", "verdict")),
]  # fmt: skip


def pooled(nights: pd.DataFrame) -> stats.Side:
    """One side from several nights' ok trials (their counts and sums of logs and of squared logs)."""
    n = int(nights["n"].sum())
    if n == 0:
        return stats.Side(0, math.nan, math.nan)
    mean = float(nights["sum_log"].sum()) / n
    var = max(float(nights["sum_log2"].sum()) - n * mean * mean, 0.0) / (n - 1) if n > 1 else math.nan
    return stats.Side(n, mean, var)


def changes(
    points: pd.DataFrame,
    metric: Metric,
    series: Mapping[str, Mapping[str, Any]],
    overrides: list[Override],
    starts: Mapping[str, datetime],
    baseline_nights: int = BASELINE_NIGHTS,
) -> pd.DataFrame:
    """One row per series of ``points`` (``queries.recent_points``, newest night first): the latest night's
    median, its trials, a sparkline of the nights' medians (oldest first), and against the previous night and
    against the baseline each a ratio, its 95% interval and the verdict. ``series`` gives each series' fields
    (for its threshold); ``starts`` where an accepted change started a series' new baseline."""
    rows, pairs = [], {against: [] for against in AGAINST}
    thresholds = []
    for key, nights in points.groupby("series_key", sort=False):
        nights = nights.sort_values("back")
        latest, before = nights.iloc[0], nights.iloc[1:]
        if key in starts:
            before = before[before["night"] >= pd.Timestamp(starts[key])]
        base = before.head(baseline_nights)
        pairs["previous"].append((pooled(before.head(1)), pooled(nights.head(1))))
        pairs["baseline"].append((pooled(base), pooled(nights.head(1))))
        thresholds.append(threshold_for(metric, series.get(key, {}), overrides))
        rows.append(
            {
                "series_key": key,
                "value": latest["value"],
                "n": int(latest["n"]),
                "nights": int(len(nights)),
                "spark": [float(v) * metric.scale for v in nights["value"].iloc[:SPARK_NIGHTS][::-1].dropna()],
                "baseline_value": float(base["value"].median()) if len(base) else math.nan,
                "baseline_nights": int(len(base)),
            }
        )
    for against in AGAINST:
        verdicts = stats.compare(pairs[against], thresholds, [metric.higher_is_better] * len(thresholds))
        for row, (_, latest_side), result in zip(rows, pairs[against], verdicts):
            verdict = FAILED if latest_side.n == 0 else result.verdict
            row.update({f"{against}_ratio": result.ratio, f"{against}_ci_low": result.ci_low,
                        f"{against}_ci_high": result.ci_high, f"{against}_verdict": verdict})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def worst(*verdicts: str) -> str:
    """The verdict a row is sorted and filtered by: the worst of its comparisons."""
    return min(verdicts, key=VERDICT_ORDER.index)
