"""What a sequential check's report says of its looks (``collector.analysis.sequential``): how many ran, why it
stopped, the level each look tested at, which configs measured more steps, and what its last look could see."""

from __future__ import annotations

import math

from stepwatch.collector.analysis.comparison import Comparison
from stepwatch.collector.analysis.sequential import BUDGET, DECIDED, STOPPED, Sequential
from stepwatch.collector.outcomes import INCONCLUSIVE

REFERENCE = 'docs/reference.md, "Sequential checks"'


def sequential_lines(plan: Sequential | None, comparison: Comparison) -> tuple[str, ...]:
    """The looks, in a few lines of a report (nothing for a check without them)."""
    if plan is None or not plan.looks:
        return ()
    counts = " -> ".join(str(look.trials) for look in plan.looks)
    why = STOPPED[plan.reason] if plan.reason else "it was stopped"
    if plan.reason == BUDGET:
        why = f"its budget of {plan.budget_minutes:g} minutes ran out (another round would have ended past it)"
    lines = [
        f"**Rounds**: {len(plan.looks)} look(s), at {counts} trials per side; stopped because {why}.",
        "",
        f"Design: {plan.design.text()}, so that the intervals hold together over every look and a verdict is "
        f"valid whichever look the check stops at ({REFERENCE}).",
        "",
    ]
    for label, (before, after) in plan.steps.items():
        lines += [f"After the first look, `{label}` measured {after} steps a trial instead of {before}: its start-up "
                  "and compiling took longer than its measured steps.", ""]  # fmt: skip
    if plan.reason != DECIDED:
        seen = could_see(comparison)
        if seen:
            lines += [f"What its last look could see: {seen}.", ""]
    return tuple(lines)


def could_see(comparison: Comparison) -> str:
    """Per metric with inconclusive verdicts, the range of changes its last look could detect: 'examples_per_sec:
    changes of ≥7.9% (threshold ±5%)'."""
    parts = []
    for metric in comparison.metrics:
        rows = [r.result for r in comparison.rows if r.metric == metric and r.verdict == INCONCLUSIVE
                and not r.result.spans and math.isfinite(r.result.detectable)]  # fmt: skip
        if rows:
            low, high = min(r.detectable for r in rows), max(r.detectable for r in rows)
            size = f"≥{low:.1%}" if high - low < 0.0005 else f"≥{low:.1%} to ≥{high:.1%}"
            parts.append(f"{metric.name}: changes of {size} (threshold ±{rows[0].threshold:.0%})")
    return "; ".join(parts)
