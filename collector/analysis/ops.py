"""Where the time went: the op tables of two sides' profiled trials, diffed (``stepwatch explain``).

For each pair of series (as ``compare`` pairs them) and each op (its type, or its name) on the host or the
device: its mean time per step on each side, their ratio (of geometric means, with a Welch interval across the
profiled trials, as every stepwatch ratio), and the share of the whole step's change it explains (a difference
of arithmetic means over the step's, so that the shares and the remainder add up to the change). An op that
runs in every profiled trial of one side and in none of the other is on that side only (reported where it takes
more than ``NEGLIGIBLE`` of that side's step). The remainder is the change of the profiled step time that no op
explains: time outside every op (the framework's own Python, waiting) or ops that overlap on parallel threads.

An op has moved when its interval excludes 1 after Benjamini-Hochberg across all ops of the pair (q < 0.05)
and it changed by more than ``MOVED`` of itself and by more than ``NEGLIGIBLE`` of the step; with one profiled
trial a side there is no interval, and nothing is said to have moved.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from stepwatch.collector.analysis import stats
from stepwatch.collector.store import profiled
from stepwatch.collector.store.selection import Selection

MOVED = 0.05  # an op that changed by less than this of its own time has not moved, whatever its interval
NEGLIGIBLE = 0.002  # nor one whose change is less than this share of the step
Table = Mapping[tuple[str, str], float]  # (op, host or device) -> seconds per step


@dataclass(frozen=True)
class OpChange:
    op: str
    where: str
    baseline_s: float  # mean time per step over the side's profiled trials (0 in a trial that did not run it)
    candidate_s: float
    ratio: stats.Ratio
    share: float  # of the step's change (NaN where the step did not change)
    step_share: float  # of the candidate's step (the baseline's, for an op on the baseline only)
    only: str | None = None  # "baseline" or "candidate": an op that ran on that side alone
    q_value: float = math.nan
    moved: bool = False

    @property
    def delta_s(self) -> float:
        return self.candidate_s - self.baseline_s

    @property
    def appeared(self) -> bool:
        """On one side only, and more than a negligible share of that side's step (an iterator's bookkeeping op
        that a profile caught on one side is not a change)."""
        return self.only is not None and bool(self.step_share > NEGLIGIBLE)


@dataclass(frozen=True)
class Explained:
    """One pair of series: the profiled step on each side, every op's change, and the remainder."""

    series: dict[str, Any]  # the candidate's series fields (the baseline's where the candidate has none)
    trials: tuple[int, int]  # profiled trials of the baseline and the candidate
    step_s: tuple[float, float]  # mean profiled step time per side
    step_ratio: stats.Ratio
    ops: list[OpChange]  # largest absolute change first
    remainder_s: float
    profiles: dict[str, list[str]] = field(default_factory=dict)  # side -> the raw profiles' addresses
    vocabularies: tuple[str, str] = ("", "")  # what names the ops on each side (see ``vocabulary``)
    coverage: tuple[float, float] = (math.nan, math.nan)  # per side, the mean ``coverage`` of its profiled trials

    @property
    def aligned(self) -> bool:
        """Whether both sides name their ops alike: the same backend and compiler."""
        return self.vocabularies[0] == self.vocabularies[1]

    @property
    def delta_s(self) -> float:
        return self.step_s[1] - self.step_s[0]

    def moved(self) -> list[OpChange]:
        """The ops that moved, and those on one side only that take more than a negligible share of its step."""
        return [op for op in self.ops if op.moved or op.appeared]


def coverage(step_s: float, table: Table) -> float:
    """The share of a profiled step that its named ops account for: their time per step on the device where the
    step ran ops there (an accelerator), else on the host, over the step's wall time. What is left is time in no
    op: the framework's own Python, launches, waiting. Above 1 where ops overlap on parallel threads."""
    device = [t for (_, where), t in table.items() if where == "device"]
    named = sum(device) if device else sum(table.values())
    return named / step_s if step_s > 0 else math.nan


def vocabulary(keras_backend: str, compiler: str | None) -> str:
    """What names a trial's ops, by what ran it: TensorFlow's graph ops, XLA's HLO instructions (TensorFlow with
    XLA and JAX alike), or torch's operators."""
    if keras_backend == "torch":
        return "torch operators"
    return "HLO instructions" if compiler == "xla" or keras_backend == "jax" else "TensorFlow graph ops"


def _logs(values: Sequence[float]) -> stats.Side:
    return stats.Side.of(values) if len(values) and min(values) > 0 else stats.Side(0, math.nan, math.nan)


def diff(
    baseline: Sequence[tuple[float, Table]], candidate: Sequence[tuple[float, Table]]
) -> tuple[list[OpChange], float]:
    """The op changes between two sides' profiled trials, each (profiled step time, op table), and the remainder
    of the step's change that no op explains."""
    steps = [float(np.mean([s for s, _ in side])) for side in (baseline, candidate)]
    delta_step = steps[1] - steps[0]
    keys = sorted({key for side in (baseline, candidate) for _, table in side for key in table})
    changes, p_values = [], []
    for key in keys:
        values = [[table.get(key, 0.0) for _, table in side] for side in (baseline, candidate)]
        means = [float(np.mean(v)) for v in values]
        present = [sum(v > 0 for v in side) for side in values]
        only = None
        if present[0] == len(baseline) and not present[1]:
            only = "baseline"
        elif present[1] == len(candidate) and not present[0]:
            only = "candidate"
        ratio = (
            stats.welch_ratio(_logs(values[0]), _logs(values[1]))
            if only is None
            else stats.Ratio(math.inf if only == "candidate" else 0.0, math.nan, math.nan, math.nan)
        )
        delta = means[1] - means[0]
        share = delta / delta_step if delta_step else math.nan
        on = 0 if only == "baseline" else 1
        step_share = float(means[on] / steps[on])
        changes.append(OpChange(key[0], key[1], means[0], means[1], ratio, float(share), step_share, only))
        p_values.append(ratio.p_value)
    tested = [i for i, p in enumerate(p_values) if not math.isnan(p)]
    q_values = stats.benjamini_hochberg([p_values[i] for i in tested]) if tested else []
    for i, q in zip(tested, q_values):
        change = changes[i]
        big = abs(change.ratio.ratio - 1) > MOVED and abs(change.delta_s) > NEGLIGIBLE * max(steps)
        changes[i] = dataclasses.replace(change, q_value=float(q), moved=bool(q < stats.ALPHA and big))
    changes.sort(key=lambda c: (-abs(c.delta_s), c.op, c.where))
    return changes, delta_step - sum(c.delta_s for c in changes)


def explain(frame: pd.DataFrame) -> tuple[list[Explained], dict[str, list[dict[str, Any]]]]:
    """Per pair of series with profiled trials on both sides (``profiled.profiled_ops``), what changed op by op;
    and, by side, the series profiled on that side only."""
    explained: list[Explained] = []
    unpaired: dict[str, list[dict[str, Any]]] = {"baseline": [], "candidate": []}
    for _, pair in frame.groupby("pair", sort=True):
        sides = {side: rows for side, rows in pair.groupby("side")}
        if set(sides) != {"baseline", "candidate"}:
            for side, rows in sides.items():
                unpaired[side].append(rows.iloc[0].to_dict())
            continue
        trials = {side: _trials(rows) for side, rows in sides.items()}
        changes, remainder = diff(trials["baseline"], trials["candidate"])
        step_ratio = stats.welch_ratio(*(_logs([s for s, _ in trials[side]]) for side in ("baseline", "candidate")))
        series_row = sides["candidate"].iloc[0].to_dict()
        explained.append(
            Explained(
                series=series_row,
                trials=(len(trials["baseline"]), len(trials["candidate"])),
                step_s=tuple(float(np.mean([s for s, _ in trials[side]])) for side in ("baseline", "candidate")),
                step_ratio=step_ratio,
                ops=changes,
                remainder_s=remainder,
                profiles={side: sorted(set(rows["profile_uri"].dropna())) for side, rows in sides.items()},
                vocabularies=tuple(  # type: ignore[arg-type]
                    vocabulary(sides[side]["keras_backend"].iloc[0], sides[side]["compiler"].iloc[0])
                    for side in ("baseline", "candidate")
                ),
                coverage=tuple(  # type: ignore[arg-type]
                    float(np.mean([coverage(step, table) for step, table in trials[side]]))
                    for side in ("baseline", "candidate")
                ),
            )
        )
    return explained, unpaired


def _trials(rows: pd.DataFrame) -> list[tuple[float, dict[tuple[str, str], float]]]:
    trials = []
    for _, trial in rows.groupby("run_id", sort=True):
        table = {(op, where): float(t) for op, where, t in zip(trial["op"], trial["host_or_device"], trial["time_s"])}
        trials.append((float(trial["step_s"].iloc[0]), table))
    return trials


def between(
    con: duckdb.DuckDBPyConnection, baseline: Selection, candidate: Selection, by: str = "op_type"
) -> tuple[list[Explained], dict[str, list[dict[str, Any]]]]:
    """What changed op by op between two selections' profiled trials, and the series profiled on one side only."""
    return explain(profiled.profiled_ops(con, baseline, candidate, by))
