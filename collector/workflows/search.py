"""The search of a bisect: a binary search over prefixes of the groups of changes (``collector.environments.packages``),
in the order pip's resolver allows them to be installed. Every prefix installs; the shortest prefix whose
environment reproduces the regression ends with the culprit group, whose effect alone is then measured on its
own (with only what it needs), so the report says what it does by itself, not only in company.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from stepwatch.collector.analysis import stats
from stepwatch.collector.environments.packages import Change, Group, describe, prefix
from stepwatch.collector.outcomes import CLEARS, INCONCLUSIVE, REPRODUCES, SKIPPED

# --- The search ------------------------------------------------------------------------------------------------


Target = tuple[str, str]  # (series key, metric) the ends found regressed


@dataclass(frozen=True)
class Probe:
    """What one measured environment showed against the good side: one of REPRODUCES, CLEARS, INCONCLUSIVE,
    SKIPPED (it could not be built or its trials failed; ``reason`` says why), and per target the two sides'
    trials (good, this environment), the metric's threshold and the between-environment variance its intervals
    cover (None: process-to-process noise only)."""

    applied: frozenset[Change]
    outcome: str
    reason: str = ""
    sides: dict[Target, tuple[stats.Side, stats.Side, float]] = field(default_factory=dict)
    between: dict[Target, stats.Between] = field(default_factory=dict)


@dataclass(frozen=True)
class Contribution:
    """What groups ``first``..``last`` (1-based, in search order) add on top of the groups before them, per
    target: the ratio of the two prefixes' ratios, and whether it is a change beyond the threshold."""

    first: int
    last: int
    effects: dict[Target, stats.Ratio]
    changes: dict[Target, bool]

    @property
    def changed(self) -> bool:
        return any(self.changes.values())


def contribution(ordered: list[Group], j: int, k: int, earlier: Probe | None, later: Probe) -> Contribution:
    """Groups j+1..k's share: later's ratio over earlier's (None: nothing applied). Two measured environments
    differ by more than their trials show: the interval covers the between-environment variance, so a share
    of a few percent counts only where it exceeds that too."""
    effects, changes = {}, {}
    for target, (good, mine, threshold) in later.sides.items():
        before = None if earlier is None else earlier.sides.get(target)
        if earlier is not None and before is None:
            continue
        ratio = stats.ratio_between(before[:2] if before else None, (good, mine), between=later.between.get(target))
        effects[target] = ratio
        band = math.log1p(threshold)
        changes[target] = (
            not math.isnan(ratio.ci_low)
            and (math.log(ratio.ci_low) > 0 or math.log(ratio.ci_high) < 0)
            and abs(math.log(ratio.ratio)) >= band
        )
    return Contribution(j + 1, k, effects, changes)


@dataclass
class Search:
    """The path of a search and where it ended: the culprit (the group and everything it needs), or why not."""

    groups: list[Group]
    probes: list[Probe] = field(default_factory=list)
    culprit: Group | None = None
    culprit_alone: Probe | None = None  # the culprit and what it needs, measured by themselves
    together: frozenset[Change] | None = None  # when the culprit reproduces only with earlier groups: them all
    cleared: frozenset[Change] = frozenset()  # measured without the regression
    unneeded: frozenset[Change] = frozenset()  # the regression reproduced without them
    stopped: str = ""  # why the search could not decide (an inconclusive step)
    measured: dict[int, Probe] = field(default_factory=dict)  # prefix length -> its measurement

    def contributions(self) -> list[Contribution]:
        """Between consecutive measured prefixes, what the groups between them add: where the effect comes from."""
        ks = sorted(self.measured)
        out = []
        for j, k in zip([0, *ks], ks):
            if k > j:
                out.append(contribution(self.groups, j, k, self.measured.get(j), self.measured[k]))
        return out


def search(
    ordered: list[Group],
    measure: Callable[[frozenset[Change], str], Probe],
    ends: Probe | None = None,
    max_steps: int | None = None,
) -> Search:
    """Binary search for the shortest prefix of ``ordered`` that reproduces the regression (the whole list does:
    the bad side, measured as ``ends``), then the culprit group alone, then each stretch of groups between
    measured prefixes that still changes the targets is split until it is one group: an upgrade's effect can
    have several sources, and one can offset another. ``measure(applied, why)`` measures good + applied
    against good. ``max_steps`` caps the steps of that last part (default: as many as there are groups)."""
    found = Search(ordered)
    m = len(ordered)
    if ends is not None:
        found.measured[m] = ends
    lo, hi = 0, m
    unbuildable: set[int] = set()

    def probe(k: int | None, applied: frozenset[Change], why: str) -> Probe:
        result = measure(applied, why)
        found.probes.append(result)
        if k is not None and result.outcome == SKIPPED:
            unbuildable.add(k)
        elif k is not None:
            found.measured[k] = result
        return result

    while hi - lo > 1:
        mid = (lo + hi) // 2
        tried = [mid, *range(mid + 1, hi), *range(mid - 1, lo, -1)]  # a step that cannot be built: its neighbours
        for k in tried:
            result = probe(k, prefix(ordered, k), f"the first {k} of {m} groups")
            if result.outcome != SKIPPED:
                break
        else:
            break  # nothing between lo and hi can be measured: the culprit is somewhere in there
        if result.outcome == INCONCLUSIVE:
            found.stopped = f"the step with {describe(result.applied)} could not tell"
            return found
        if result.outcome == REPRODUCES:
            hi = k
        else:
            lo = k
            found.cleared = prefix(ordered, k)
    everything = prefix(ordered, m)
    found.unneeded = everything - prefix(ordered, hi)
    if hi - lo > 1:  # the steps between could not be built: the culprit is one of these groups
        found.together = prefix(ordered, hi) - prefix(ordered, lo)
        return found
    found.culprit = ordered[hi - 1]
    alone = found.culprit.closure
    lengths = {prefix(ordered, k): k for k in range(m + 1)}
    if alone in lengths and lengths[alone] in found.measured:
        found.culprit_alone = found.measured[lengths[alone]]
    elif alone == everything:
        found.culprit_alone = None  # the whole upgrade: the ends are its measurement
    else:
        found.culprit_alone = probe(lengths.get(alone), alone, "the culprit with only what it needs")
        if found.culprit_alone.outcome == CLEARS:
            found.together = prefix(ordered, hi)  # it reproduces only together with earlier groups
        elif found.culprit_alone.outcome == INCONCLUSIVE:
            found.stopped = "the culprit alone could not tell"
            return found
    budget = m if max_steps is None else max_steps
    while budget > 0:
        ks = sorted(found.measured)
        split = None
        for part, (j, k) in zip(found.contributions(), zip([0, *ks], ks)):
            inside = [x for x in range(j + 1, k) if x not in unbuildable]
            if part.changed and inside:
                split = sorted(inside, key=lambda x: abs(x - (j + k) / 2))[0]
                break
        if split is None:
            break
        probe(split, prefix(ordered, split), f"the first {split} of {m} groups (where the effect comes from)")
        budget -= 1
    return found
