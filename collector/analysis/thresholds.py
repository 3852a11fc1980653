"""Per-series thresholds: the smallest change that counts, where a series needs its own.

A thresholds file (the project's, else the bundled ``thresholds.toml``) lists overrides, each a selection of
series (the selection language of ``collector.store.selection``: ``model=bilstm,backend=cpu,xla=on``), a
metric, a threshold and its reason.
When several match a series, the last one wins; where none does, the metric's default threshold holds.

A counter of the compiled step has no better direction of its own: a change is "changed" (collector.outcomes).
An override may declare one for it (``better = "lower"`` or ``"higher"``): its changes are then regressions or
improvements, for the series it selects.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepwatch.collector.analysis.stats import is_worse
from stepwatch.collector.data import bundled
from stepwatch.collector.metrics import Metric, MetricError, get_metric
from stepwatch.collector.store.selection import Selection

THRESHOLDS_PATH = bundled("thresholds.toml")
BETTER = ("higher", "lower")


@dataclass(frozen=True)
class Override:
    """A threshold for the series that ``where`` selects."""

    where: Selection
    metric: str
    threshold: float | None  # None: the metric's own (an override that only declares a counter's direction)
    reason: str
    better: str | None = None  # a counter's declared direction: "higher" or "lower"


def load_overrides(path: Path | None = None) -> list[Override]:
    """Per-series thresholds from a TOML file (``[[override]]`` with where, metric, threshold and/or a counter's
    better direction, reason)."""
    path = path or THRESHOLDS_PATH
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise MetricError(f"{path}: {error}") from None
    overrides = []
    for number, entry in enumerate(data.get("override", []), 1):
        origin = f"{path} override {number}"
        better = entry.get("better")
        try:
            metric = get_metric(str(entry["metric"]))
            threshold = float(entry["threshold"]) if "threshold" in entry or better is None else None
            where = Selection.parse(str(entry.get("where") or ""))
        except KeyError as missing:
            raise MetricError(f"{origin}: missing {missing}") from None
        except (TypeError, ValueError) as error:  # SelectionError and MetricError are ValueErrors
            raise MetricError(f"{origin}: {error}") from None
        if where.since or where.until:
            raise MetricError(f"{origin}: a threshold selects series, not dates (drop since/until)")
        if threshold is not None and not 0 < threshold < 1:
            raise MetricError(f"{origin}: threshold {threshold} must be a fraction between 0 and 1 (0.05 = 5%)")
        if better is not None and better not in BETTER:
            raise MetricError(f"{origin}: better {better!r} is not one of {', '.join(BETTER)}")
        if better is not None and not (metric.deterministic or metric.per_series):
            own = "higher" if metric.higher_is_better else "lower"
            raise MetricError(f"{origin}: better is declared for counters of the compiled step only; {metric.name} is "
                              f"{own} is better")  # fmt: skip
        overrides.append(Override(where, metric.name, threshold, str(entry.get("reason", "")), better))
    return overrides


def _last(metric: Metric, series: Mapping[str, Any], overrides: list[Override], attribute: str) -> Any:
    """The ``attribute`` of the last override for this metric that matches the series and sets it, else None."""
    chosen = None
    for override in overrides:
        value = getattr(override, attribute)
        if override.metric == metric.name and value is not None and override.where.matches(series):
            chosen = value
    return chosen


def threshold_for(metric: Metric, series: Mapping[str, Any], overrides: list[Override]) -> float:
    """The last matching override's threshold for this series and metric, else the metric's default."""
    chosen = _last(metric, series, overrides, "threshold")
    return metric.threshold if chosen is None else chosen


def worse(metric: Metric, series: Mapping[str, Any], overrides: list[Override], ratio: float) -> bool:
    """Whether candidate/baseline = ``ratio`` is a change in the bad direction for this series (never, for a
    counter without a declared direction)."""
    return is_worse(ratio, direction_for(metric, series, overrides))


def direction_for(metric: Metric, series: Mapping[str, Any], overrides: list[Override]) -> bool | None:
    """Whether higher is better for this series and metric: the metric's own direction for a timed metric; for a
    counter, the last matching override's declared one, else None (a change is only "changed"); for a metric whose
    direction is each series' own (an imported result), the series' (``imported_better``), else None."""
    if metric.per_series:
        better = series.get("imported_better") or _last(metric, series, overrides, "better")
        return None if not better else better == "higher"
    if not metric.deterministic:
        return metric.higher_is_better
    better = _last(metric, series, overrides, "better")
    return None if better is None else better == "higher"
