"""A bisect rendered: its headline, the markdown report (culprit, groups, steps, where the effect comes from),
its JSON, and the line each step prints."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from stepwatch.collector.analysis.comparison import Row
from stepwatch.collector.analysis.stats import plain
from stepwatch.collector.environments.packages import Change, Group, describe
from stepwatch.collector.outcomes import INCONCLUSIVE, SKIPPED
from stepwatch.collector.output.comparison import aa_lines, between_lines, change_text, resolution
from stepwatch.collector.output.explain import report_lines
from stepwatch.collector.output.text import interval, percent, series_label
from stepwatch.collector.workflows.bisect import Bisection, Step
from stepwatch.collector.workflows.search import Contribution, Search


def _target_cells(rows: Sequence[Row]) -> str:
    return "; ".join(f"{series_label(r.series)} {r.metric.name}: {r.verdict} {change_text(r)}" for r in rows)


def bisect_headline(state: Bisection, search: Search | None) -> str:
    """What the bisect found, in one line (bold in the markdown)."""
    ends = state.steps[0]
    if ends.outcome == SKIPPED:
        return f"The ends could not be measured: {ends.reason}"
    if search is None:
        if ends.outcome == INCONCLUSIVE:
            return "Cannot tell whether the upgrade regresses: nothing to bisect yet (see the ends' resolution)"
        return "No regression between the ends: nothing to bisect"
    if search.stopped:
        return f"Inconclusive: {search.stopped}"
    if search.together is not None and search.culprit is None:
        return f"Culprit among: {describe(search.together)} (the steps between could not be built)"
    if search.together is not None:
        others = describe(search.together - set(search.culprit.changes))
        return f"Culprit: {search.culprit.text()}, but only together with {others} (alone it did not reproduce)"
    sources = [c for c in search.contributions() if c.changed]
    if len(sources) > 1:
        return "Several changes move it: " + "; ".join(
            f"{_groups_text(search.groups, c)} {_effects_text(c)}" for c in sources
        )
    culprit = search.culprit
    moved = " (they move together)" if len(culprit.changes) > 1 else ""
    needed = culprit.closure - set(culprit.changes)
    also = f", with {describe(needed)}, which it needs" if needed else ""
    return f"Culprit: {culprit.text()}{moved}{also}"


def _groups_text(groups: Sequence[Group], part: Contribution) -> str:
    return " + ".join(g.text() for g in groups[part.first - 1 : part.last])


def _effects_text(part: Contribution) -> str:
    return ", ".join(f"{percent(r.ratio)} {interval(r.ci_low, r.ci_high)}" for r in part.effects.values())


def bisect_markdown(state: Bisection, all_changes: Sequence[Change], search: Search | None) -> str:
    """The bisect's report: the culprit and its effect alone, how the changes group, every step with its
    verdicts, what was cleared and what was not needed."""
    title = f"stepwatch bisect: {' '.join(state.good)} -> {' '.join(state.bad)}"
    ends = state.steps[0]
    lines = [f"## {title}", "", f"**{bisect_headline(state, search)}**", ""]
    if search is not None and search.culprit is not None and not search.stopped:
        alone = search.culprit_alone
        step = next((s for s in state.steps if alone is not None and s.applied == alone.applied), ends)
        lines += [f"- Its effect alone (step {step.number}): {_target_cells(step.rows)}",
                  f"- The whole upgrade (step 0): {_target_cells(ends.rows)}", ""]  # fmt: skip
        if step.explained:
            lines += ["```", f"step {step.number}:", *report_lines(*step.explained), "```", ""]
    if ends.explained:
        lines += ["```", "step 0 (the whole upgrade):", *report_lines(*ends.explained), "```", ""]
    minutes, plan = (time.monotonic() - state.started) / 60, state.plan
    measured = sum(1 for s in state.steps if s.outcome != SKIPPED)
    lines += [
        f"Suite `{plan.suite}`, {len(plan.configs)} config(s), each step sequential ({plan.design.text()}, "
        f"budget {plan.budget_minutes or 'none'} min), interleaved on {state.host}; metric(s) "
        f"{', '.join(plan.metrics)}. {len(state.steps)} step(s), "
        f"{measured} measured; {state.built} environment(s) built, the others from the cache; "
        f"{state.resolver_runs} resolver run(s); {minutes:.1f} min.",
        "",
        *aa_lines(state.aa),
        *between_lines(state.between),
    ]
    if search is not None:
        lines += [f"### What differs: {len(all_changes)} package(s) in {len(search.groups)} group(s), as pip's "
                  "resolver allows them to move", "", "| # | group | needs | note |", "|---|---|---|---|"]  # fmt: skip
        for i, group in enumerate(search.groups, 1):
            together = " (move together)" if len(group.changes) > 1 else ""
            needed = describe(group.closure - set(group.changes)) if group.closure - set(group.changes) else ""
            lines.append(f"| {i} | {group.text()}{together} | {needed} | {group.reason} |")
        lines.append("")
    else:
        lines += [f"Packages that differ: {describe(all_changes)}.", ""]
    lines += ["### Steps", "", "| step | measured | outcome | targets: verdict, change [95% CI] |", "|---|---|---|---|"]
    for s in state.steps:
        measured = s.why if s.number == 0 else f"{s.why}: {describe(s.applied)}"
        cells = _target_cells(s.rows) if s.rows else ""
        outcome = s.outcome + (f" ({s.reason})" if s.reason else "")
        lines.append(f"| {s.number} | {measured} | {outcome} | {cells} |")
    lines.append("")
    undecided = [(s, r) for s in state.steps for r in s.rows if r.verdict == INCONCLUSIVE]
    for s, r in undecided:
        lines.append(f"- Step {s.number}, {series_label(r.series)} {r.metric.name}: {resolution(r.result)}")
    if search is not None and search.measured:
        lines += ["", "### Where the effect comes from", "",
                  "What each stretch of groups adds on top of the groups before it (the ratio of two measured steps' "
                  "ratios, with a 95% interval over both steps' trials and, where known, the variation between "
                  "environments):", "",
                  "| groups | changes | adds | beyond the threshold |", "|---|---|---|---|"]  # fmt: skip
        for part in search.contributions():
            where = str(part.first) if part.first == part.last else f"{part.first}-{part.last}"
            changed = "yes" if part.changed else "no"
            lines.append(f"| {where} | {_groups_text(search.groups, part)} | {_effects_text(part)} | {changed} |")
    cleared = search.cleared - (search.culprit.closure if search.culprit else set()) if search else set()
    if cleared:
        lines += ["", f"**Cleared** (measured without the regression): {describe(cleared)}."]
    if search is not None and search.unneeded:
        lines += ["", f"**Not needed to reproduce** (the regression reproduced without them; their own effect was "
                  f"not measured): {describe(search.unneeded)}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def bisect_json(state: Bisection, all_changes: Sequence[Change], search: Search | None, code: int) -> dict[str, Any]:
    def change(c: Change) -> dict[str, Any]:
        return {"package": c.name, "good": c.good, "bad": c.bad}

    def row(r: Row) -> dict[str, Any]:
        return {"series": series_label(r.series), "metric": r.metric.name, "verdict": r.verdict,
                "ratio": plain(r.result.ratio), "ci_low": plain(r.result.ci_low), "ci_high": plain(r.result.ci_high),
                "trials_per_side_for_threshold": r.result.trials_needed}  # fmt: skip

    return {
        "bisect_id": state.id,
        "good": list(state.good),
        "bad": list(state.bad),
        "headline": bisect_headline(state, search),
        "exit_code": code,
        "changes": [change(c) for c in all_changes],
        "groups": [
            {
                "changes": [change(c) for c in g.changes],
                "needs": [change(c) for c in sorted(g.closure)],
                "note": g.reason,
            }  # fmt: skip
            for g in (search.groups if search else [])
        ],
        "steps": [
            {
                "step": s.number,
                "why": s.why,
                "applied": [change(c) for c in sorted(s.applied)],
                "outcome": s.outcome,
                "reason": s.reason,
                "targets": [row(r) for r in s.rows],
                "suite_run_ids": s.suite_run_ids,
            }
            for s in state.steps
        ],  # fmt: skip
        "culprit": [change(c) for c in search.culprit.changes] if search and search.culprit else None,
        "cleared": [change(c) for c in sorted(search.cleared)] if search else [],
        "contributions": [
            {
                "groups": [part.first, part.last],
                "changed": part.changed,
                "effects": [
                    {
                        "series_key": key,
                        "metric": metric,
                        "ratio": plain(r.ratio),
                        "ci_low": plain(r.ci_low),
                        "ci_high": plain(r.ci_high),
                    }
                    for (key, metric), r in part.effects.items()
                ],
            }
            for part in (search.contributions() if search else [])
        ],  # fmt: skip
        "unneeded": [change(c) for c in sorted(search.unneeded)] if search else [],
        "environments_built": state.built,
        "minutes": (time.monotonic() - state.started) / 60,
    }


def step_line(step: Step) -> str:
    """'reproduces: bert/tiny ... peak_memory_bytes +16.1% [+15.9%, +16.3%]' for the log and the report."""
    if step.outcome == SKIPPED and not step.rows:
        return f"skipped: {step.reason}"
    cells = [f"{r.metric.name} {change_text(r)}" for r in step.rows]
    return f"{step.outcome}: " + "; ".join(cells) + (f" ({step.reason})" if step.reason else "")
