"""Per-series thresholds: the smallest change that counts, where a series needs its own.

A thresholds file (the project's, else the bundled ``thresholds.toml``) lists overrides, each a selection of
series (the selection language of ``collector.store.selection``: ``model=bilstm,backend=cpu,xla=on``), a
metric, a threshold and its reason.
When several match a series, the last one wins; where none does, the metric's default threshold holds.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepwatch.collector.data import bundled
from stepwatch.collector.metrics import Metric, MetricError, get_metric
from stepwatch.collector.store.selection import Selection

THRESHOLDS_PATH = bundled("thresholds.toml")


@dataclass(frozen=True)
class Override:
    """A threshold for the series that ``where`` selects."""

    where: Selection
    metric: str
    threshold: float
    reason: str


def load_overrides(path: Path | None = None) -> list[Override]:
    """Per-series thresholds from a TOML file (``[[override]]`` with where, metric, threshold, reason)."""
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
        try:
            metric = get_metric(str(entry["metric"])).name
            threshold = float(entry["threshold"])
            where = Selection.parse(str(entry.get("where") or ""))
        except KeyError as missing:
            raise MetricError(f"{origin}: missing {missing}") from None
        except (TypeError, ValueError) as error:  # SelectionError and MetricError are ValueErrors
            raise MetricError(f"{origin}: {error}") from None
        if where.since or where.until:
            raise MetricError(f"{origin}: a threshold selects series, not dates (drop since/until)")
        if not 0 < threshold < 1:
            raise MetricError(f"{origin}: threshold {threshold} must be a fraction between 0 and 1 (0.05 = 5%)")
        overrides.append(Override(where, metric, threshold, str(entry.get("reason", ""))))
    return overrides


def threshold_for(metric: Metric, series: Mapping[str, Any], overrides: list[Override]) -> float:
    """The last matching override's threshold for this series and metric, else the metric's default."""
    chosen = metric.threshold
    for override in overrides:
        if override.metric == metric.name and override.where.matches(series):
            chosen = override.threshold
    return chosen
