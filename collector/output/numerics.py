"""The numerics verdict of a comparison rendered (``collector.analysis.numerics``): the lead a changed training
gives a report (its speed change beside it), the per-series lines, and the JSON. The comparison's output
(``collector.output.comparison``) places them."""

from __future__ import annotations

from typing import Any

from stepwatch.collector.analysis import numerics
from stepwatch.collector.analysis.comparison import Comparison
from stepwatch.collector.analysis.stats import plain
from stepwatch.collector.output.text import interval, percent, series_label

EXPLAINED = (
    "Numerics: trial i of each side trains from seed i (the same initial weights and data), so their loss "
    "trajectories pair. identical: the same to the bit; changed: the best loss reached, or the steps to the loss both "
    "sides reached, differs beyond the seeds' own spread (a paired interval on log values excludes no change, each "
    "at half the level) by at least {threshold:.0%}; within seed spread: it differs by no more than changing the "
    "seed does."
)


def _speed(comparison: Comparison, key: str) -> str | None:
    """The series' first metric's change, as the report's table gives it ('throughput +9.0% [+7.1%, +11.0%]')."""
    first = comparison.metrics[0]
    row = next((r for r in comparison.rows if r.series["series_key"] == key and r.metric == first), None)
    if row is None or row.result.ratio != row.result.ratio:
        return None
    r = row.result
    return f"{row.metric.label.lower()} {percent(r.ratio)} {interval(r.ci_low, r.ci_high)} ({row.verdict})"


def lead_lines(comparison: Comparison) -> list[str]:
    """What leads a report whose training changed, per series: its speed change, then how its numerics changed
    ('... throughput +9.0% [...] (improvement), but its training changed: best loss +14% ..., reaches ... later')."""
    lines = []
    for key, found in comparison.numerics.items():
        if found.verdict != numerics.CHANGED:
            continue
        label = series_label(comparison.series_of(key))
        speed = _speed(comparison, key)
        said = found.text().removeprefix(f"{numerics.CHANGED}: ")
        lines.append(f"{label}: {speed + ', but its' if speed else 'its'} training changed: {said}")
    return lines


def aa_text(aa: Comparison) -> str:
    """What an A/A's numerics said, for its line: '; numerics: 3 identical' (empty: none judged)."""
    said = numerics.headline(aa.numerics)
    return f"; {said}" if said else ""


def series_lines(comparison: Comparison) -> list[str]:
    """The numerics headline and a line per series that is not identical (all identical: the headline says so)."""
    if not comparison.numerics:
        return []
    lines = [numerics.headline(comparison.numerics)]
    for key, found in comparison.numerics.items():
        if found.verdict != numerics.IDENTICAL:
            lines.append(f"{series_label(comparison.series_of(key))}: {found.text()}")
    return lines


def to_markdown(comparison: Comparison) -> list[str]:
    """The report's numerics section (empty when no series has a trajectory on both sides)."""
    lines = series_lines(comparison)
    if not lines:
        return []
    head, *rest = lines
    return ["", f"**{head[0].upper()}{head[1:]}**", "", *(f"- {line}" for line in rest), *([""] if rest else []),
            EXPLAINED.format(threshold=numerics.THRESHOLD)]  # fmt: skip


def json_rows(comparison: Comparison) -> list[dict[str, Any]]:
    def ratio(value: numerics.Ratio | None) -> dict[str, float] | None:
        return None if value is None else {"ratio": value.ratio, "ci_low": value.low, "ci_high": value.high}

    return [
        {
            "series_key": key,
            "label": series_label(comparison.series_of(key)),
            "verdict": found.verdict,
            "text": found.text(),
            "seeds": found.pairs,
            "best_loss": ratio(found.best),
            "seed_spread": plain(found.seed_spread),
            "steps_to_same_loss": ratio(found.to_level),
            "deterministic": {"baseline": found.deterministic[0], "candidate": found.deterministic[1]},
        }
        for key, found in comparison.numerics.items()
    ]
