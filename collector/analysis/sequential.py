"""A check's sequential design: how many trials per side it looks at, when, and at what level each look tests.

A check (``code-check``, ``upgrade-check``, each step of a ``bisect``) runs a first round of trials per side
(``collector.config.TRIALS``), compares, and adds rounds while a verdict it was asked for is inconclusive, until
every one is decided, the design's last look (``MAX_TRIALS`` per side) or its budget. Looking again at data that
grows is optional stopping: tested at 0.05 at every look, an A/A would sooner or later raise an alarm. So a check
spends its alpha over its looks, a group-sequential design (Lan & DeMets 1983, "Discrete sequential boundaries for
clinical trials", Biometrika 70:659): each of the K looks the design plans tests, and draws its intervals, at
alpha / K. The split is Bonferroni's: the union bound holds whatever the correlation between looks, and for Welch's
t at a few trials, where the normal-theory boundaries of Pocock or O'Brien-Fleming are not exact; it is
conservative by that correlation. The intervals are then repeated confidence intervals (Jennison & Turnbull 1989,
JRSS B 51:305): together they cover the true ratio with 95%, so the one a check stops at does, whatever made it
stop, and a regression, an improvement or a no change called at any look is as valid as a fixed design's. A budget
or a maximum that stops the check early spends less than alpha, never more.

Pure functions: the workflow (``collector.workflows.check``) runs the trials and asks these when to stop.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stepwatch.collector.analysis import stats
from stepwatch.collector.metrics import trial_time
from stepwatch.collector.outcomes import INCONCLUSIVE

MAX_TRIALS = 12  # a check's last look, trials per side
BUDGET_MINUTES = 20.0  # a check's default budget, from its start: what a team gives a check on CI
GROWTH = 1.5  # each look has about this many times the trials of the one before (3, 5, 8, 12)
MAX_STEPS_FACTOR = 4  # where start-up dominates, later trials measure up to this many times the config's steps

DECIDED, BUDGET, MAXIMUM = "decided", "budget", "maximum"  # why a check stopped
STOPPED = {
    DECIDED: "every verdict asked for was decided",
    BUDGET: "its budget ran out",
    MAXIMUM: "it reached the design's last look",
}


@dataclass(frozen=True)
class Design:
    """The looks a check plans (cumulative trials per side at each) and the alpha they share."""

    looks: tuple[int, ...]
    alpha: float = stats.ALPHA

    @classmethod
    def of(cls, first: int, most: int, alpha: float = stats.ALPHA) -> Design:
        """Looks from ``first`` trials per side, each about ``GROWTH`` times the last, ending at ``most`` (one look,
        a fixed design at ``alpha``, where ``most`` is ``first``)."""
        looks = [first]
        while looks[-1] < most:
            looks.append(min(most, max(looks[-1] + 1, math.ceil(looks[-1] * GROWTH))))
        return cls(tuple(looks), alpha)

    @property
    def level(self) -> float:
        """What every look tests at (and one minus its intervals' confidence): alpha split over the looks."""
        return self.alpha / len(self.looks)

    def text(self) -> str:
        """'3, 5, 8 and 12 trials per side, each look at α = 0.0125 (98.75% intervals; 0.05 over 4 looks)'."""
        counts = [str(n) for n in self.looks]
        listed = counts[0] if len(counts) == 1 else ", ".join(counts[:-1]) + f" and {counts[-1]}"
        if len(self.looks) == 1:
            return f"{listed} trials per side, one look at α = {self.alpha:g} ({1 - self.alpha:.0%} intervals)"
        return (f"{listed} trials per side, each look at α = {self.level:.3g} ({confidence_text(self.level)} "
                f"intervals; {self.alpha:g} over {len(self.looks)} looks)")  # fmt: skip


def confidence_text(alpha: float) -> str:
    """An interval's confidence as a report names it: '95%', '98.75%'."""
    return f"{(1 - alpha) * 100:.4g}%"


@dataclass(frozen=True)
class Look:
    """What one look saw: the trials per side it compared, its verdicts still inconclusive and the seconds since
    the check started."""

    trials: int
    undecided: int
    seconds: float


@dataclass
class Sequential:
    """A sequential check as it ran: its design, its looks, why it stopped, its budget, and the configs whose
    later trials measured more steps (label -> (steps, steps after the first look))."""

    design: Design
    budget_minutes: float | None
    looks: list[Look] = field(default_factory=list)
    reason: str = ""
    steps: dict[str, tuple[int, int]] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        """As a JSON report carries it."""
        return {"looks_planned": list(self.design.looks), "level": self.design.level, "alpha": self.design.alpha,
                "looks": [look.__dict__ for look in self.looks], "stopped": self.reason,
                "budget_minutes": self.budget_minutes,
                "steps": {label: list(pair) for label, pair in self.steps.items()}}  # fmt: skip


def undecided(verdicts: Sequence[tuple[str, bool]]) -> int:
    """How many of (verdict, exact) are inconclusive and could be decided by more trials: a counter compared
    exactly (``exact``) is not, its values only spread further."""
    return sum(1 for verdict, exact in verdicts if verdict == INCONCLUSIVE and not exact)


def first_look(within_cv: float | None, between: stats.Between | None, threshold: float, design: Design) -> int:
    """The first look's trials per side where a runner's calibration says how noisy it is: the fewest (from the
    design's first, at most its last) at which a change of ``threshold`` is detectable at the design's level; the
    design's first where nothing is known, or where the between-environment variation alone puts the threshold out
    of reach (more trials in the same environments cannot help)."""
    first, most = design.looks[0], design.looks[-1]
    if within_cv is None or not math.isfinite(within_cv):
        return first
    side = stats.Side(2, 0.0, within_cv**2)
    needed = stats.trials_to_detect(side, side, threshold, design.level, between=between)
    if needed is None or needed >= stats.MAX_TRIALS:
        return first
    return min(most, max(first, needed))


def steps_for(steps: int, window: int, rows: Sequence[Mapping[str, Any]]) -> int:
    """A config's steps for the trials after the first look: where the rest of a trial (start-up, compiling,
    warm-up, the harness) took longer than its measured steps (medians over ``rows``, its first look's trials),
    more steps, so that a trial's measured time about matches the rest, at most ``MAX_STEPS_FACTOR`` times
    ``steps`` (a multiple of ``window``): a process costs the same start-up for more measured windows."""
    parts = [split(row) for row in rows if row.get("status") == "ok" and (row.get("measured_s") or 0) > 0]
    if not parts:
        return steps
    measured = statistics.median(p[0] for p in parts)
    rest = statistics.median(p[1] for p in parts)
    if rest <= measured:
        return steps
    factor = min(MAX_STEPS_FACTOR, math.ceil(rest / measured))
    return max(window, (steps * factor) // window * window)


def split(row: Mapping[str, Any]) -> tuple[float, float]:
    """A trial's measured seconds, and the rest of its wall time but its profile (a later trial is not profiled)."""
    parts = trial_time(row)
    measured = parts.pop("measured steps")
    parts.pop("profile")
    return measured, sum(parts.values())


def round_seconds(
    rows_by_config: Mapping[str, Sequence[Mapping[str, Any]]], scale: Mapping[str, float], sides: int
) -> float:
    """What one more round would take: per config, the mean of its trials' rest and measured time (the measured
    part times ``scale``, the config's steps from now on over its steps then), times its ``sides``, summed."""
    total = 0.0
    for key, rows in rows_by_config.items():
        parts = [split(row) for row in rows]
        if parts:
            total += sum(rest + measured * scale.get(key, 1.0) for measured, rest in parts) / len(parts) * sides
    return total


def replay(
    baseline: Sequence[float],
    candidate: Sequence[float],
    design: Design,
    threshold: float,
    higher_is_better: bool = True,
    between: stats.Between | None = None,
) -> tuple[str, int]:
    """The verdict a sequential check reaches on one series' trials, taken in the order they ran, and the trials per
    side it stopped at: the workflow's decision (``stats.compare`` at the design's level, look by look) on arrays,
    as the tests and ``benchmarks/sequential.py`` ask it. Fewer values than a look needs end it there."""
    call, have = INCONCLUSIVE, min(len(baseline), len(candidate))
    for n in design.looks:
        n = min(n, have)
        pair = (stats.Side.of(baseline[:n]), stats.Side.of(candidate[:n]))
        [result] = stats.compare([pair], [threshold], [higher_is_better], [between], alpha=design.level)
        call = result.verdict
        if call != INCONCLUSIVE or n == have:
            return call, n
    return call, n
