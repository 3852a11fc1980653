"""Every metric stepwatch judges, in one table: its column, unit, which direction is better and the smallest
change that matters. The CLI, the analysis and the dashboard all read it; none repeats it.

A series can have its own threshold: ``data/thresholds.toml`` lists overrides as a selection of series
fields (``model=bilstm,backend=cpu``), a metric and a threshold, each with its reason.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

THRESHOLDS_PATH = Path(__file__).resolve().parents[1] / "data" / "thresholds.toml"


@dataclass(frozen=True)
class Metric:
    name: str  # the result column
    label: str  # how charts and tables name it
    unit: str  # "{unit}" is the model's own unit (images, sequences, tokens)
    higher_is_better: bool
    threshold: float  # the smallest relative change that counts (0.03 = 3%)
    scale: float = 1.0  # multiply the column by this for display in ``unit``

    def worse(self, ratio: float) -> bool:
        """True if candidate/baseline = ``ratio`` is a change in the bad direction."""
        return ratio < 1 if self.higher_is_better else ratio > 1


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("examples_per_sec", "Throughput", "examples/s", True, 0.03),
        Metric("units_per_sec", "Throughput in the model's unit", "{unit}/s", True, 0.03),
        Metric("examples_per_sec_per_device", "Throughput per device", "examples/s", True, 0.03),
        Metric("step_time_p50_s", "Step time (median)", "ms", False, 0.03, 1000.0),
        Metric("step_time_p90_s", "Step time (p90)", "ms", False, 0.05, 1000.0),
        Metric("compile_s", "Compile / first step time", "s", False, 0.15),
        Metric("startup_s", "Startup time", "s", False, 0.15),
        Metric("peak_memory_bytes", "Peak memory", "GiB", False, 0.01, 1 / 2**30),
        Metric("mfu", "Model FLOPs utilisation", "%", True, 0.03, 100.0),
        Metric("max_per_device_batch", "Largest per-device batch (--find-max-batch)", "examples", True, 0.05),
        Metric("cost_usd", "Cost per run", "USD", False, 0.03),
        Metric("cost_per_1m_examples_usd", "Cost per 1M examples", "USD", False, 0.03),
        Metric("final_loss", "Final loss", "", False, 0.05),
    )
}
DEFAULT_METRIC = "examples_per_sec"


class MetricError(ValueError):
    """An unknown metric or a broken thresholds file, in one line."""


def get_metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        close = difflib.get_close_matches(name, METRICS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else f"; known: {', '.join(METRICS)}"
        raise MetricError(f"unknown metric {name!r}{hint}") from None


@dataclass(frozen=True)
class Override:
    """A threshold for the series whose fields match ``where`` (every listed field equal to one of its values)."""

    where: tuple[tuple[str, tuple[str, ...]], ...]
    metric: str
    threshold: float
    reason: str

    def matches(self, series: Mapping[str, Any]) -> bool:
        return all(_text(series.get(name)) in values for name, values in self.where)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "" if value is None else str(value)


def _parse_where(text: str, origin: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    parts = []
    for part in text.split(","):
        key, sep, values = part.partition("=")
        if not sep or not key.strip():
            raise MetricError(f"{origin}: {part!r} is not field=value")
        key = {"xla_requested": "xla"}.get(key.strip(), key.strip())
        parts.append((key, tuple(v.strip() for v in values.split("|"))))
    return tuple(parts)


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
            where = _parse_where(str(entry.get("where", "")), origin) if entry.get("where") else ()
        except KeyError as missing:
            raise MetricError(f"{origin}: missing {missing}") from None
        except (TypeError, ValueError) as error:
            raise MetricError(f"{origin}: {error}") from None
        if not 0 < threshold < 1:
            raise MetricError(f"{origin}: threshold {threshold} must be a fraction between 0 and 1 (0.05 = 5%)")
        overrides.append(Override(where, metric, threshold, str(entry.get("reason", ""))))
    return overrides


def threshold_for(metric: Metric, series: Mapping[str, Any], overrides: list[Override]) -> float:
    """The last matching override's threshold for this series and metric, else the metric's default."""
    chosen = metric.threshold
    for override in overrides:
        if override.metric == metric.name and override.matches(series):
            chosen = override.threshold
    return chosen
