"""What a runner can see, measured on it: repeated A/A comparisons (the same packages in several separately
built environments, trials interleaved), per metric. The between-environment variance they show widens every
later comparison's interval on that runner (``compare``, ``upgrade-check``, ``bisect``); the false alarms they
give with and without it say whether a verdict there can be trusted; and the minimum detectable effect at a
number of trials says what is worth asking the runner.

Pure functions over arrays, plus the calibration file (one JSON per runner label, under ``data/calibration/``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from stepwatch.collector import outcomes
from stepwatch.collector.analysis import stats
from stepwatch.collector.errors import UsageError
from stepwatch.collector.metrics import get_metric

CALIBRATION_DIR = Path("data/calibration")
CALIBRATION_ENV = "STEPWATCH_CALIBRATION"  # a calibration file, or "none", for every command that reads one
RUNNER_ENV = ("STEPWATCH_RUNNER_LABEL", "RUNNER_NAME")  # the runner label, as trials record it
MDE_TRIALS = (3, 5, 10, 20)


class CalibrationError(UsageError):
    """A calibration file that cannot be read, in one line."""


def runner_label() -> str:
    """This runner's label: $STEPWATCH_RUNNER_LABEL, else $RUNNER_NAME (GitHub Actions), else the host name."""
    for name in RUNNER_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return socket.gethostname()


def default_path(label: str | None = None) -> Path:
    """Where a runner's calibration is written and read: data/calibration/<label>.json."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label or runner_label()).strip("._") or "runner"
    return CALIBRATION_DIR / f"{safe}.json"


@dataclass(frozen=True)
class MetricCalibration:
    """One metric on one runner: how much environments of the same packages differ, how noisy trials are, and
    how often an A/A comparison called a change (without and with the between-environment variance)."""

    between: stats.Between
    within_cv: float  # trial-to-trial standard deviation of log values, pooled over series and environments
    comparisons: int  # A/A comparisons judged (environment pairs x series)
    false_alarms: int  # of them, called a regression or improvement with the trials' own intervals
    false_alarms_widened: int  # the same with the between-environment variance in the interval
    detectable: dict[int, float] = field(default_factory=dict)  # trials per side -> minimum detectable effect

    @property
    def false_alarm_rate(self) -> float:
        return self.false_alarms / self.comparisons if self.comparisons else math.nan

    @property
    def false_alarm_rate_widened(self) -> float:
        return self.false_alarms_widened / self.comparisons if self.comparisons else math.nan


@dataclass(frozen=True)
class Calibration:
    runner: str
    created_at: str
    environments: int
    trials: int
    suite: str
    requirements: tuple[str, ...]
    metrics: dict[str, MetricCalibration]

    def between(self) -> dict[str, stats.Between]:
        """metric -> its between-environment variance, named after this calibration."""
        source = f"calibrate on {self.runner} ({self.environments} environments, {self.created_at[:10]})"
        return {name: stats.Between(m.between.var_log, m.between.df, source) for name, m in self.metrics.items()}


def calibrate_metric(
    name: str, per_series: Mapping[str, Sequence[Sequence[float]]], trials: int | None = None
) -> MetricCalibration | None:
    """One metric from its trials: per series, one list of values per environment (the same environments in the
    same order for every series). The between-environment variance is the mean over series of each series'
    random-effects estimate, with the degrees of freedom of one series (the environments are shared, so the
    series are not independent evidence); every pair of environments is an A/A comparison of all series at
    once, judged as a check would judge it (Benjamini-Hochberg across the series)."""
    metric = get_metric(name)
    series = {key: [np.log(np.asarray(v, dtype=float)) for v in envs] for key, envs in per_series.items()}
    series = {key: envs for key, envs in series.items() if sum(len(g) >= 2 for g in envs) >= 2}
    if not series:
        return None
    estimates = [stats.between_groups(envs) for envs in series.values()]
    found = [e for e in estimates if e is not None]
    between = stats.Between(float(np.mean([e.var_log for e in found])), min(e.df for e in found))
    residuals = [g - g.mean() for envs in series.values() for g in envs if len(g) >= 2]
    dof = sum(len(r) - 1 for r in residuals)
    within_var = float(sum((r**2).sum() for r in residuals) / dof)
    k = max(len(envs) for envs in series.values())
    comparisons = alarms = alarms_widened = 0
    for i, j in itertools.combinations(range(k), 2):
        pairs = [
            (stats.Side.of_logs(envs[i]), stats.Side.of_logs(envs[j]))
            for envs in series.values()
            if i < len(envs) and j < len(envs) and len(envs[i]) >= 2 and len(envs[j]) >= 2
        ]
        if not pairs:
            continue
        thresholds, directions = [metric.threshold] * len(pairs), [metric.higher_is_better] * len(pairs)
        plain = stats.judge(pairs, thresholds, directions)
        widened = stats.judge(pairs, thresholds, directions, [between] * len(pairs))
        comparisons += len(pairs)
        alarms += sum(call in (outcomes.REGRESSION, outcomes.IMPROVEMENT) for _, _, call in plain)
        alarms_widened += sum(call in (outcomes.REGRESSION, outcomes.IMPROVEMENT) for _, _, call in widened)
    sizes = sorted({*MDE_TRIALS, *([trials] if trials else [])})
    side = {n: stats.Side(n, 0.0, within_var) for n in sizes}
    detectable = {n: stats.detectable_change(side[n], side[n], between=between) for n in sizes}
    return MetricCalibration(between, math.sqrt(within_var), comparisons, alarms, alarms_widened, detectable)


def build(
    runner: str,
    suite: str,
    requirements: Sequence[str],
    trials: int,
    values: Mapping[str, Mapping[str, Sequence[Sequence[float]]]],
) -> Calibration:
    """A runner's calibration from ``values``: metric -> series -> per environment, the trials' values."""
    metrics = {name: calibrate_metric(name, per_series, trials) for name, per_series in values.items()}
    environments = max((len(envs) for per in values.values() for envs in per.values()), default=0)
    return Calibration(
        runner,
        datetime.now(UTC).isoformat(timespec="seconds"),
        environments,
        trials,
        suite,
        tuple(requirements),
        {name: m for name, m in metrics.items() if m is not None},
    )


def save(calibration: Calibration, path: Path) -> None:
    """Write the calibration file (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = asdict(calibration)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)


def load(path: Path) -> Calibration:
    """Read a calibration file; raises CalibrationError naming the file and what is wrong with it."""
    try:
        data = json.loads(path.read_text())
        metrics = {
            name: MetricCalibration(
                stats.Between(float(m["between"]["var_log"]), float(m["between"]["df"])),
                float(m["within_cv"]),
                int(m["comparisons"]),
                int(m["false_alarms"]),
                int(m["false_alarms_widened"]),
                {int(n): float(v) for n, v in m.get("detectable", {}).items()},
            )
            for name, m in data["metrics"].items()
        }
        return Calibration(
            str(data["runner"]),
            str(data["created_at"]),
            int(data["environments"]),
            int(data["trials"]),
            str(data["suite"]),
            tuple(data.get("requirements") or ()),
            metrics,
        )
    except OSError as error:
        raise CalibrationError(f"cannot read the calibration {path}: {error.strerror or error}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CalibrationError(
            f"{path} is not a stepwatch calibration ({type(error).__name__}: {error}); "
            "run `stepwatch calibrate` again or pass --calibration none"
        ) from None


def find(path: str | None) -> Calibration | None:
    """The calibration a comparison uses: ``path``, else $STEPWATCH_CALIBRATION; 'none' for none; or, when
    neither is given, this runner's default file if it exists."""
    path = path or os.environ.get(CALIBRATION_ENV) or None
    if path == "none":
        return None
    if path:
        return load(Path(path))
    default = default_path()
    return load(default) if default.exists() else None


def aa_between(pairs: Sequence[tuple[stats.Side, stats.Side]]) -> stats.Between | None:
    """The between-environment variance one A/A check shows (the same packages in two environments), from its
    series of one metric: the mean of the series' estimates, with one degree of freedom (one pair of
    environments, whatever the number of series)."""
    found = [b for b in (stats.between_pair(a, c) for a, c in pairs) if b is not None]
    if not found:
        return None
    return stats.Between(float(np.mean([b.var_log for b in found])), 1.0, "the A/A of this check")
