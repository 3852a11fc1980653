"""What a code check's report says beside its comparison: which workloads' code differs and which were not run,
what ran where and what it cost, and where to look next (explain, the dashboard's
Compare page on the check's two commits)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import urlencode

from stepwatch.collector.analysis.comparison import Comparison
from stepwatch.collector.outcomes import FAILED, IMPROVEMENT, NO_CHANGE, REGRESSION
from stepwatch.collector.output.comparison import change_text
from stepwatch.collector.store.selection import LINK_VALUE_MAX
from stepwatch.collector.workflows.code_check import (
    BUNDLED,
    CHANGED,
    GONE,
    LEFT_OUT,
    NEW,
    UNCHANGED,
    Commits,
    Workload,
)

DASHBOARD = "http://127.0.0.1:8501"  # `stepwatch dashboard`'s default address
FOR_SURE_SHOWN = 12  # changes named in the report's first line; the rest are in its table
AA_CHECKOUT = "the merge base in a second checkout, run the same way"
SAME_INTERPRETER = (
    "Intervals cover process-to-process noise: both commits ran on one interpreter and its packages, so nothing "
    "but the code differs between the sides (an A/A, --aa, says whether this runner raises false alarms)."
)


def _names(workloads: Sequence[Workload], state: str) -> list[str]:
    return list(dict.fromkeys(f"`{w.config.model}`" for w in workloads if w.state == state))


def workload_lines(commits: Commits, workloads: Sequence[Workload], packages: bool) -> tuple[str, ...]:
    """Which workloads' code differs between the commits (and in which files), which run the same code, which the
    head adds or removes, and whether pin files changed too."""
    lines = [f"Baseline: {commits.base_name}; candidate: {commits.head_name}.", ""]
    changed = {w.config.model: w for w in workloads if w.state == CHANGED}
    for model, workload in changed.items():
        files = ", ".join(f"`{f}`" for f in workload.files) or "its files"
        lines += [f"Code that differs: `{model}` ({files}).", ""]
    same = _names(workloads, UNCHANGED)
    if same:
        lines += ["Same code on both commits" + ("" if packages else ", not run") + f": {', '.join(same)}.", ""]
    new = _names(workloads, NEW)
    if new:
        lines += [f"Added by the head, nothing to compare with (not run): {', '.join(new)}.", ""]
    gone = _names(workloads, GONE)
    if gone:
        lines += [f"Removed by the head (not run): {', '.join(gone)}.", ""]
    dropped = _names(workloads, LEFT_OUT)
    if dropped:
        lines += [f"In the suite but left out by --models (the `models` setting), not checked: {', '.join(dropped)}.",
                  ""]  # fmt: skip
    bundled = _names(workloads, BUNDLED)
    if bundled and not packages:
        lines += [f"stepwatch's own models, the same code on both commits (not run): {', '.join(bundled)}.", ""]
    if packages:
        lines += [
            "Pin files changed too: each side runs in an environment built from its own commit's pins, so code and "
            "packages changed together and a difference below is either's.",
            "",
        ]
    return tuple(lines)


def nothing_to_check(commits: Commits, workloads: Sequence[Workload]) -> str:
    """The report of a check with nothing to run, as markdown."""
    lines = workload_lines(commits, workloads, packages=False)
    lead = "nothing to check: no workload's code differs between the two commits and no pin file changed"
    return "\n".join(["## stepwatch code check: nothing to check", "", f"**{lead}.**", "", *lines]).rstrip() + "\n"


def for_sure(comparison: Comparison) -> tuple[str, ...]:
    """What changed for sure, to lead the report: the counters of the compiled step that changed (exact) and the
    timings the intervals resolve past their threshold (a regression or an improvement), each with its change. A
    metric a side failed to measure changed nothing: it is what failed (``failures``)."""
    moved = [row for row in comparison.ordered()
             if (row.metric.deterministic and row.verdict not in (NO_CHANGE, FAILED) and row.result.spans)
             or row.verdict in (REGRESSION, IMPROVEMENT)]  # fmt: skip
    if not moved and all(row.verdict == FAILED for row in comparison.rows):
        return ()  # nothing ran on both sides: what failed leads instead
    if not moved:
        return ("**What changed for sure: nothing** (no counter moved and no timing resolved past its threshold).", "")
    cells = "; ".join(f"{row.metric.name} {change_text(row)} ({row.verdict})" for row in moved[:FOR_SURE_SHOWN])
    more = f"; and {len(moved) - FOR_SURE_SHOWN} more in the table" if len(moved) > FOR_SURE_SHOWN else ""
    series = len({row.series["series_key"] for row in moved})
    return (f"**What changed for sure** ({series} series): {cells}{more}.", "")


def nothing_json(workloads: Sequence[Workload]) -> str:
    """The same as JSON: no verdict, and each workload's state between the commits."""
    states = {w.config.model: w.state for w in workloads}
    return json.dumps({"nothing_to_check": True, "rows": [], "workloads": states}, indent=2) + "\n"


def run_lines(
    configs: int,
    rounds: int,
    host: str | None,
    failed: int,
    total: int,
    spent: tuple[float, float, str],
    minutes: float,
) -> tuple[str, ...]:
    """What ran where and what it cost, at whose price (``catalog.costed_at``)."""
    seconds, usd, prices = spent
    price = f", {usd:.2f} USD at {prices}" if usd else ""
    return (
        f"{configs} config(s) x {rounds} trials per side, interleaved on {host}; {failed} of {total} trials failed.",
        "",
        f"What the check cost: {minutes:.1f} minutes, {seconds / 60:.1f} of them in trials{price}.",
        "",
    )


def moved_metrics(comparison: Comparison) -> list[str]:
    """The metrics the Compare page should open on: those with a verdict other than no change (throughput first),
    as many as a link's value holds."""
    names = [
        m.name for m in comparison.metrics if any(r.metric == m and r.verdict != NO_CHANGE for r in comparison.rows)
    ]
    kept: list[str] = []
    for name in names:
        if len(",".join([*kept, name])) <= LINK_VALUE_MAX:
            kept.append(name)
    return kept


def where_next(run_ids: dict[str, str], db: str, profiled: bool, metrics: Sequence[str]) -> tuple[str, ...]:
    """The commands and link that open the check's two sides: the Compare page (on ``metrics``) and, when trials
    were profiled, which ops moved."""
    base, head = f"suite_run_id={run_ids['baseline']}", f"suite_run_id={run_ids['candidate']}"
    query = {"baseline": base, "candidate": head, **({"metric": ",".join(metrics)} if metrics else {})}
    link = f"{DASHBOARD}/compare?" + urlencode(query)
    explain = (
        f"Which ops moved: `stepwatch explain --baseline {base} --candidate {head} --db {db}`. " if profiled else ""
    )
    return (f"{explain}On the dashboard: `stepwatch dashboard --db {db}`, then {link}", "")
