"""The numerics verdict: whether the two sides of a comparison still compute the same training, beside its speed
verdict. Trial i of every side trains from seed i (``collector.runner.execution``: the same initial weights and
data), so the sides' loss trajectories pair by seed:

- ``identical``: every pair's trajectory is the same to the bit;
- ``changed``: the sides' best loss (the lowest window loss a trial reached: the quality its training got to, which
  an optimizer's late spike does not hide), or the steps they take to the loss both reached, differs beyond what
  the seeds' own spread leaves open (a paired t interval on log values excludes no change, each of the two at half
  the comparison's level) and by at least the final loss's threshold (``collector.metrics``);
- ``within seed spread``: they differ, but no more than changing the seed does;
- ``too few seeds``: not identical, and fewer than two seeds on both sides to tell the rest.

A trajectory is a model's window losses, or the quality a script reports (``stepwatch.quality``). Beside the
verdict: how much later (or sooner) the candidate reaches the loss both trials of a seed reached (steps to a loss
level, paired), and the sides' determinism (``collector.trial.runtime.determinism``).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepwatch.collector.analysis.stats import ALPHA, t_quantile
from stepwatch.collector.metrics import get_metric
from stepwatch.collector.outcomes import CHANGED, IDENTICAL, NUMERICS_ORDER, TOO_FEW_SEEDS, WITHIN_SEED_SPREAD

THRESHOLD = get_metric("final_loss").threshold  # the smallest change of the best loss that counts
# The smallest loss a trajectory resolves, as a share of its first value: a window's mean loss is the difference of
# two running means (``measure.window_mean_from_running``), whose float32 rounding leaves less than this as noise
# (even below zero) after a few thousand steps.
RESOLUTION = 1e-6


@dataclass(frozen=True)
class Trial:
    """One trial's numerics: its seed and loss (or quality) trajectory."""

    seed: int
    values: tuple[float, ...]
    deterministic: bool = False
    start: int = 0  # the training steps done before the first value's window
    every: int = 1  # the steps each value covers
    higher_is_better: bool = False  # a script's quality that grows (an accuracy)

    @property
    def best(self) -> float:
        """The best value reached; a loss no lower than the trajectory resolves (``RESOLUTION``)."""
        if self.higher_is_better:
            return max(self.values)
        return max(min(self.values), abs(self.values[0]) * RESOLUTION)

    def reached(self, value: float, level: float) -> bool:
        return value >= level if self.higher_is_better else value <= level


@dataclass(frozen=True)
class Ratio:
    """Candidate over baseline, a geometric mean over the pairs, with its interval."""

    ratio: float
    low: float
    high: float

    def text(self) -> str:
        """'+12.0% [+8.1%, +16.0%]', or '221x [93.8x, 519x]' where any of the three is far from 1."""
        far = any(value >= 3 or value <= 1 / 3 for value in (self.ratio, self.low, self.high))
        shown = [f"{value:.3g}x" if far else f"{value - 1:+.1%}" for value in (self.ratio, self.low, self.high)]
        return f"{shown[0]} [{shown[1]}, {shown[2]}]"

    def beyond(self, threshold: float) -> bool:
        """The interval excludes no change, and the change is at least ``threshold`` (0.05: 5%) either way."""
        return (self.low > 1 or self.high < 1) and abs(math.log(self.ratio)) >= math.log1p(threshold)


@dataclass(frozen=True)
class Numerics:
    verdict: str
    pairs: int  # seeds on both sides
    best: Ratio | None  # the best loss, candidate / baseline
    seed_spread: float | None  # the best loss's spread across seeds (a coefficient of variation, pooled by side)
    to_level: Ratio | None  # steps to the loss both trials of a seed reached, candidate / baseline
    deterministic: tuple[bool, bool]  # each side: all its trials ran deterministic kernels
    confidence: float

    def text(self) -> str:
        """One line: 'changed: best loss +12.0% [+8.1%, +16.0%] (95% CI, 3 seeds), seed spread 9.5%, steps to the
        same loss +14.0% [+9.0%, +19.0%]'."""
        if self.verdict == IDENTICAL:
            return f"identical: the {self.pairs} seed(s) give the same losses to the bit"
        if self.best is None:
            return f"{self.verdict}: the losses differ, and {self.pairs} seed(s) on both sides cannot say by how much"
        lead = f"{self.verdict}: best loss {self.best.text()}"
        parts = [f"{lead} ({self.confidence:.4g}% CI, {self.pairs} seeds)"]
        if self.seed_spread is not None:
            parts.append(f"seed spread {self.seed_spread:.1%}")
        parts += [reach for reach in (self.reach_text(),) if reach]
        return ", ".join(parts)

    def reach_text(self) -> str | None:
        """'steps to the same loss +14.0% [+9.0%, +19.0%]': to the loss both sides' trials of a seed reached."""
        if self.to_level is None:
            return None
        return f"steps to the same loss {self.to_level.text()}"


def trajectory(row: Mapping[str, Any]) -> tuple[float, ...]:
    """A row's loss trajectory: its window losses, else the quality its script reported (empty: neither)."""
    for name in ("window_losses", "quality_values"):
        values = row.get(name)
        if values is not None and len(values):
            return tuple(float(v) for v in values)
    return ()


def trials_of(rows: Sequence[Mapping[str, Any]]) -> list[Trial]:
    """The rows with a trajectory, as trials. A model's window losses start after its first step and warm-up (a
    script's qualities count in reports, not steps)."""
    found = []
    for row in rows:
        values = trajectory(row)
        if not values:
            continue
        windows = bool(row.get("window_losses") is not None and len(row["window_losses"]))
        start = (row.get("steps_per_execution") or 1) + (row.get("warmup_steps") or 0) if windows else 0
        every = (row.get("window_steps") or 1) if windows else 1
        extras = row.get("extras") or {}
        extras = json.loads(extras) if isinstance(extras, str) else extras
        higher = not windows and bool(extras.get("quality_higher_is_better"))
        found.append(Trial(int(row.get("seed") or 0), values, bool(row.get("deterministic")), start, every, higher))
    return found


def _by_seed(trials: Sequence[Trial]) -> dict[int, list[Trial]]:
    found: dict[int, list[Trial]] = {}
    for trial in trials:
        found.setdefault(trial.seed, []).append(trial)
    return found


def _interval(logs: np.ndarray, alpha: float) -> Ratio:
    mean = float(np.mean(logs))
    half = t_quantile(1 - alpha / 2, len(logs) - 1) * float(np.std(logs, ddof=1)) / math.sqrt(len(logs))
    return Ratio(math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def _log_best(trials: Sequence[Trial]) -> float:
    return float(np.mean([math.log(max(t.best, sys.float_info.min)) for t in trials]))


def _steps_to(trial: Trial, level: float) -> int:
    """The steps a trial took to reach ``level`` (the end of its first window at or under it; at its best at the
    latest, read at the resolution)."""
    steps = (trial.start + (i + 1) * trial.every for i, value in enumerate(trial.values) if trial.reached(value, level))
    return next(steps, trial.start + len(trial.values) * trial.every)


def judge(baseline: Sequence[Trial], candidate: Sequence[Trial], alpha: float = ALPHA) -> Numerics | None:
    """The numerics verdict of one series (None: a side has no trajectory). Trials of one seed repeated on a side
    (several nights) are one seed: their best losses averaged in logs, and identical only if all are. Its two tests
    (best loss, steps to the same loss) are each at ``alpha`` / 2 (Bonferroni), so that together they raise no more
    false alarms than one."""
    if not baseline or not candidate:
        return None
    alpha = alpha / 2
    sides = _by_seed(baseline), _by_seed(candidate)
    seeds = sorted(set(sides[0]) & set(sides[1]))
    deterministic = (all(t.deterministic for t in baseline), all(t.deterministic for t in candidate))
    confidence = 100 * (1 - alpha)
    if not seeds:
        return Numerics(TOO_FEW_SEEDS, 0, None, None, None, deterministic, confidence)
    same = all(len({t.values for t in sides[0][s] + sides[1][s]}) == 1 for s in seeds)
    if same:
        return Numerics(IDENTICAL, len(seeds), None, None, None, deterministic, confidence)
    if len(seeds) < 2:
        return Numerics(TOO_FEW_SEEDS, len(seeds), None, None, None, deterministic, confidence)
    a = np.array([_log_best(sides[0][s]) for s in seeds])
    b = np.array([_log_best(sides[1][s]) for s in seeds])
    best = _interval(b - a, alpha)
    spread = math.sqrt((np.var(a, ddof=1) + np.var(b, ddof=1)) / 2)
    # Per seed, the loss both sides' trials reached (the worse of their bests), and the steps each took to reach it.
    reached = []
    for seed in seeds:
        bests = [t.best for t in sides[0][seed] + sides[1][seed]]
        level = min(bests) if baseline[0].higher_is_better else max(bests)
        reached.append((_first(sides[0][seed], level), _first(sides[1][seed], level)))
    to_level = _interval(np.log([b / a for a, b in reached]), alpha)
    changed = best.beyond(THRESHOLD) or to_level.beyond(THRESHOLD)
    verdict = CHANGED if changed else WITHIN_SEED_SPREAD
    return Numerics(verdict, len(seeds), best, math.expm1(spread), to_level, deterministic, confidence)


def _first(trials: Sequence[Trial], level: float) -> float:
    """The mean steps a seed's trials took to reach ``level`` (each reached it: it is the worst of their bests)."""
    return float(np.mean([_steps_to(t, level) for t in trials]))


def counts(found: Mapping[str, Numerics]) -> dict[str, int]:
    """How many series have each verdict, worst first (those with none left out)."""
    tally = {verdict: sum(1 for n in found.values() if n.verdict == verdict) for verdict in NUMERICS_ORDER}
    return {verdict: n for verdict, n in tally.items() if n}


def headline(found: Mapping[str, Numerics]) -> str:
    """'numerics: 1 changed, 3 identical' (empty: no series has a trajectory on both sides)."""
    tally = counts(found)
    return "numerics: " + ", ".join(f"{n} {verdict}" for verdict, n in tally.items()) if tally else ""
