"""How stepwatch shows what it found: comparisons, alerts, a suite run's results and an ingest, as terminal
tables and lines (rich), markdown (a PR comment, a job summary, an issue body) and JSON, and the files they
are written to. One formatting of a row serves the terminal, the markdown and the dashboard."""

from __future__ import annotations

import json
import math
import os
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from collector.analysis import stats
from collector.analysis.comparison import FAILED, Comparison, Row, plain
from collector.analysis.stats import IMPROVEMENT, INCONCLUSIVE, MISSING, NO_CHANGE, REGRESSION
from collector.bench.bisect import describe
from collector.config import config_from_row, repro_flags
from collector.metrics import ANON_KIND, RSS_KIND, Metric
from collector.store.ingest import IngestReport


class ReportError(OSError):
    """A report that could not be written, in one line."""


def series_label(fields: dict[str, Any]) -> str:
    """'bert/tiny cpu xla fp32 b8 fit on <accelerator>' from a series' fields (or a run's columns)."""
    return f"{config_from_row(fields).label()} on {fields.get('accelerator') or '?'}"


def repro_command(series: dict[str, Any], trials: int = 5) -> str:
    """The ``stepwatch run`` line that measures this one series again."""
    config = config_from_row(series)
    suite = ["--suite", series.get("suite") or "smoke"]
    return shlex.join(["stepwatch", "run", *suite, *repro_flags(config), "--trials", str(trials)])


def row_cells(row: Row) -> dict[str, str]:
    """The row as display text, shared by the terminal table, the markdown report and the dashboard."""
    r = row.result
    failed = row.failed_baseline or row.failed_candidate
    return {
        "verdict": row.verdict,
        "series": series_label(row.series),
        "metric": row.metric.name,
        "change": percent(r.ratio),
        "95% CI": interval(r.ci_low, r.ci_high),
        "n": f"{r.baseline.n}/{r.candidate.n}"
        + (f" ({row.failed_baseline}/{row.failed_candidate} failed)" if failed else ""),
        "q": "" if math.isnan(r.q_value) else f"{r.q_value:.3g}",
        "threshold": f"±{r.threshold:.0%}",
        "can see": can_see(r),
        "noise": stats.noise_text(row.noise),
    }


def bimodal_warning(label: str, metric: str, noise: stats.Noise | None) -> str | None:
    """One line for a series whose trials fall into two clusters, or None."""
    if not noise or not noise.bimodal or not noise.modes:
        return None
    low, high = noise.modes
    return (
        f"warning: {label} {metric} is bimodal across processes: its last {noise.n} trials cluster near "
        f"{low:,.4g} and {high:,.4g} ({high / low - 1:.0%} apart); a verdict can flip with the cluster a trial "
        "lands in"
    )


def bimodal_warnings(comparison: Comparison) -> list[str]:
    lines = (bimodal_warning(series_label(r.series), r.metric.name, r.noise) for r in comparison.rows)
    return sorted({line for line in lines if line})


def can_see(r: stats.Verdict) -> str:
    """'≥9.0% (14/side for ±3%)': the minimum detectable effect, and the trials per side that would detect the
    threshold when this comparison cannot ('out of reach' where no number of trials would)."""
    if math.isnan(r.detectable):
        return "n/a (n < 2)"
    if r.detectable <= r.threshold:
        return f"≥{r.detectable:.1%}"
    if _out_of_reach(r):
        return f"≥{r.detectable:.1%} (±{r.threshold:.0%} out of reach)"
    return f"≥{r.detectable:.1%} ({r.trials_needed}/side for ±{r.threshold:.0%})"


def _out_of_reach(r: stats.Verdict) -> bool:
    return r.trials_needed is not None and r.trials_needed >= stats.MAX_TRIALS


def resolution(r: stats.Verdict) -> str:
    """The same in words: 'this run can see changes of 9.0% or more; about 14 trials per side would see 3%'."""
    if math.isnan(r.detectable):
        return "fewer than 2 trials on a side: this run cannot tell noise from a change; run at least 2 per side"
    if r.detectable <= r.threshold:
        return f"this run can see changes of {r.detectable:.1%} or more (its threshold is {r.threshold:.0%})"
    if _out_of_reach(r) and r.between is not None and r.between.var_log > 0:
        return (
            f"this run can see changes of {r.detectable:.1%} or more; no number of trials in two environments "
            f"would see {r.threshold:.0%}: environments of the same packages differ by ±{r.between.cv:.1%} here"
        )
    if _out_of_reach(r):
        return f"this run can see changes of {r.detectable:.1%} or more; {r.threshold:.0%} is out of reach here"
    return (
        f"this run can see changes of {r.detectable:.1%} or more; about {r.trials_needed} trials per side "
        f"would see {r.threshold:.0%}"
    )


def resolution_lead(comparison: Comparison) -> list[str]:
    """One line per metric that this comparison cannot resolve at its threshold in any series (its minimum
    detectable effect exceeds the threshold everywhere), to lead the report: the verdicts below can then only
    be 'inconclusive' or a change far larger than the threshold."""
    lines = []
    for metric in comparison.metrics:
        seen = [r.result for r in comparison.rows if r.metric == metric and not math.isnan(r.result.detectable)]
        if not seen or any(r.detectable <= r.threshold for r in seen):
            continue
        low, high = min(r.detectable for r in seen), max(r.detectable for r in seen)
        span = f"{low:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{low:.0%}-{high:.0%}"
        needed = [r.trials_needed for r in seen if r.trials_needed]
        more = (
            "more trials in these environments cannot reach it (the environments themselves differ by more)"
            if needed and max(needed) >= stats.MAX_TRIALS
            else f"about {max(needed)} trials per side would"
            if needed
            else ""
        )
        lines.append(
            f"{metric.label} ({metric.name}): this runner cannot resolve ±{seen[0].threshold:.0%} here; it can "
            f"see changes of ≥{span}" + (f"; {more}" if more else "") + "."
        )
    return lines


def aa_lines(aa: Comparison | None) -> tuple[str, ...]:
    """The A/A of a check (baseline vs a second environment of the same packages), for the report's preface:
    quiet, or which series it called a change (a verdict there is a false alarm of this runner)."""
    if aa is None:
        return ()
    alarms = [r for r in aa.rows if r.verdict in (REGRESSION, IMPROVEMENT)]
    head = f"A/A (the baseline in a second environment of the same packages): {headline(aa)}."
    if not alarms:
        return (head + " No false alarm.", "")
    cells = "; ".join(f"{series_label(r.series)} {r.metric.name} {percent(r.result.ratio)} "
                      f"{interval(r.result.ci_low, r.result.ci_high)}" for r in alarms)  # fmt: skip
    return (head + f" ⚠️ It called {len(alarms)} change(s) where nothing changed: {cells}.", "")


def between_lines(between: dict[str, stats.Between]) -> tuple[str, ...]:
    """What the intervals cover beyond the trials: per metric, the between-environment variation and where it was
    measured; or that they cover only process-to-process noise."""
    if not between:
        return (
            "Intervals cover process-to-process noise only: no calibration of this runner and no A/A "
            "(`stepwatch calibrate`, or `--aa`).",
            "",
        )
    parts = [f"{name} ±{b.cv:.2%} ({b.source}, {b.df:g} df)" for name, b in between.items()]
    return ("Intervals also cover the variation between environments of the same packages: " + "; ".join(parts)
            + ".", "")  # fmt: skip


def summary_text(comparison: Comparison, metric: Metric) -> str | None:
    """'geometric mean over N series on both sides +x% [lo, hi]', or None when no series is on both."""
    summary = comparison.summaries[metric.name]
    if not summary.series:
        return None
    return (
        f"geometric mean over {summary.series} series on both sides "
        f"{percent(summary.geomean)} {interval(summary.ci_low, summary.ci_high)}"
    )


def percent(ratio: float) -> str:
    return "n/a" if ratio is None or math.isnan(ratio) else f"{(ratio - 1) * 100:+.1f}%"


def interval(low: float, high: float) -> str:
    if low is None or math.isnan(low):
        return "n/a"
    return f"[{percent(low)}, {percent(high)}]"


MARKS = {REGRESSION: "🔴", IMPROVEMENT: "🟢", NO_CHANGE: "⚪", INCONCLUSIVE: "🟡", MISSING: "⚫", FAILED: "❌"}


def headline(comparison: Comparison) -> str:
    counts = {v: len(comparison.by_verdict(v)) for v in (REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE, FAILED)}
    parts = [
        f"{n} {name}" + ("s" if n != 1 and name in (REGRESSION, IMPROVEMENT) else "") for name, n in counts.items() if n
    ]
    return ", ".join(parts) or "nothing to compare"


def to_markdown(comparison: Comparison, title: str = "stepwatch comparison", preface: tuple[str, ...] = ()) -> str:
    """A report for a PR comment or a job summary: headline, sides, geomeans, the verdict table, gaps."""
    lead = resolution_lead(comparison)
    lines = [f"## {title}", "", *(f"**{line}**" for line in lead), *([""] if lead else [])]
    lines += [f"**{headline(comparison)}**", "", *preface]
    lines += ["| | baseline | candidate |", "|---|---|---|"]
    lines.append(f"| selection | `{comparison.baseline.describe()}` | `{comparison.candidate.describe()}` |")
    for name in comparison.versions.get("baseline", {}):
        a = ", ".join(comparison.versions["baseline"][name]) or "-"
        b = ", ".join(comparison.versions["candidate"][name]) or "-"
        if a != "-" or b != "-":
            lines.append(f"| {name} | {a} | {b} |")
    lines.append("")
    for metric in comparison.metrics:
        text = summary_text(comparison, metric)
        if text:
            lines.append(f"**{metric.label}**: {text}")
    lines += [
        "",
        "| | series | metric | change | 95% CI | n (base/cand) | q | threshold | can see | noise |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in comparison.ordered():
        cells = row_cells(row)
        cells["verdict"] = f"{MARKS[row.verdict]} {row.verdict}"
        lines.append("| " + " | ".join(cells.values()) + " |")
    warnings = bimodal_warnings(comparison)
    if warnings:
        lines += ["", *(f"⚠️ {line}" for line in warnings)]
    inconclusive = comparison.by_verdict(INCONCLUSIVE)
    if inconclusive:
        lines += ["", "Inconclusive:", ""]
        lines += [f"- {series_label(r.series)} {r.metric.name}: {resolution(r.result)}" for r in inconclusive]
    for side in ("baseline", "candidate"):
        only = comparison.only_on(side)
        if only:
            lines += ["", f"Only in the {side} ({len(only)}): " + "; ".join(series_label(row.series) for row in only)]
    lines += [
        "",
        "Ratio of geometric means (candidate / baseline) with a 95% Welch interval on log values; q is the "
        "Benjamini-Hochberg adjusted p-value across the table. A regression or improvement is significant "
        "(q < 0.05) and beyond the threshold; no change means the whole interval is within the threshold. "
        '"can see" is the minimum detectable effect: the change this many trials with this much noise find '
        "80% of the time, and, where that exceeds the threshold, the trials per side that would see the threshold. "
        f"Noise is the series' trial-to-trial CV over its last {stats.NOISE_TRIALS} ok trials in the store, and "
        '"bimodal" where those fall into two separate clusters (processes landing on one of two speeds).',
    ]
    return "\n".join(lines) + "\n"


def versions_text(versions_changed: str | None) -> str:
    """'tf_version 2.20.0 -> 2.21.0; ...' from the stored JSON, or a hint when nothing changed."""
    changed = json.loads(versions_changed) if versions_changed else {}
    if not changed:
        return "no recorded version changed (hardware, driver or neighbour drift?)"
    return "; ".join(f"{name} {old} -> {new}" for name, (old, new) in changed.items())


def alerts_markdown(alerts: list[dict[str, Any]], title: str = "stepwatch alerts") -> str:
    """Alerts (rows of ``collector.store.records.list_alerts``) as a markdown table, e.g. for an issue body."""
    lines = [f"## {title}", ""]
    if not alerts:
        return "\n".join([*lines, "No alerts.", ""])
    lines += ["| id | status | series | metric | change at | change | 95% CI | versions changed | note |"]
    lines += ["|---|---|---|---|---|---|---|---|---|"]
    for a in alerts:
        when = a["change_at"].strftime("%Y-%m-%d %H:%M") if a.get("change_at") is not None else "?"
        lines.append(
            f"| {a['id']} | {a['status']} | {series_label(a)} | {a['metric']} | {when} | {percent(a['ratio'])} | "
            f"{interval(a['ci_low'], a['ci_high'])} | {versions_text(a['versions_changed'])} | {a.get('note') or ''} |"
        )
    return "\n".join(lines) + "\n"


def to_json(comparison: Comparison) -> str:
    return json.dumps(json_payload(comparison), indent=2, default=str)


def json_payload(comparison: Comparison) -> dict[str, Any]:
    """The comparison as plain data (and, for an upgrade check with ``--aa``, its A/A beside it)."""
    rows = [
        {
            "series": row.series,
            "label": series_label(row.series),
            "metric": row.metric.name,
            "verdict": row.verdict,
            "ratio": plain(row.result.ratio),
            "ci_low": plain(row.result.ci_low),
            "ci_high": plain(row.result.ci_high),
            "p_value": plain(row.result.p_value),
            "q_value": plain(row.result.q_value),
            "threshold": row.result.threshold,
            "detectable_change": plain(row.result.detectable),
            "trials_per_side_for_threshold": row.result.trials_needed,
            "resolution": resolution(row.result),
            "noise_cv": plain(row.noise.cv) if row.noise else None,
            "noise_trials": row.noise.n if row.noise else 0,
            "bimodal": bool(row.noise and row.noise.bimodal),
            "modes": list(row.noise.modes) if row.noise and row.noise.modes else None,
            "n_baseline": row.result.baseline.n,
            "n_candidate": row.result.candidate.n,
            "failed_baseline": row.failed_baseline,
            "failed_candidate": row.failed_candidate,
            "between_environments_cv": row.result.between.cv if row.result.between else None,
            "between_environments_source": row.result.between.source if row.result.between else None,
            "repro": repro_command(row.series),
        }
        for row in comparison.rows
    ]
    summaries = {
        name: {
            "series": s.series,
            "geomean": plain(s.geomean),
            "ci_low": plain(s.ci_low),
            "ci_high": plain(s.ci_high),
        }
        for name, s in comparison.summaries.items()
    }
    payload = {
        "baseline": comparison.baseline.describe(),
        "candidate": comparison.candidate.describe(),
        "headline": headline(comparison),
        "exit_code": comparison.exit_code(),
        "versions": comparison.versions,
        "summaries": summaries,
        "rows": rows,
    }
    if comparison.aa is not None:
        payload["aa"] = json_payload(comparison.aa)
    return payload


# --- The terminal ------------------------------------------------------------------------------------

VERDICT_STYLES = {REGRESSION: "red", IMPROVEMENT: "green", INCONCLUSIVE: "yellow", FAILED: "red"}


def _stdout() -> Console:
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def comparison_table(comparison: Comparison) -> Table:
    table = Table(title=f"{escape(comparison.baseline.describe())}  ->  {escape(comparison.candidate.describe())}")
    for name in ("verdict", "series", "metric", "change", "95% CI", "n", "q", "threshold", "can see", "noise"):
        table.add_column(name, justify="left" if name in ("verdict", "series", "metric") else "right")
    for row in comparison.ordered():
        cells = row_cells(row)
        style = VERDICT_STYLES.get(row.verdict, "")
        if style:
            cells["verdict"] = f"[{style}]{row.verdict}[/{style}]"
        cells["series"] = escape(cells["series"])
        table.add_row(*cells.values())
    return table


def show_comparison(
    comparison: Comparison,
    fmt: str,
    out: str | None,
    title: str,
    preface: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
) -> None:
    """Print the comparison as a table, markdown or JSON; with ``out`` also write it (markdown, or JSON).
    ``preface`` opens the markdown only; ``notes`` (what the intervals cover, the A/A) follow it there and are
    printed above the table too."""
    if fmt == "json":
        publish(to_json(comparison), out)
        return
    if fmt == "markdown":
        publish(to_markdown(comparison, title, preface + notes), out)
        return
    stdout = _stdout()
    for line in resolution_lead(comparison):
        stdout.print(f"[bold yellow]{escape(line)}[/bold yellow]")
    for line in notes:
        if line:
            stdout.print(escape(line))
    stdout.print(comparison_table(comparison))
    for row in comparison.by_verdict(INCONCLUSIVE):
        stdout.print(f"inconclusive: {escape(series_label(row.series))} {row.metric.name}: {resolution(row.result)}")
    for line in bimodal_warnings(comparison):
        stdout.print(f"[yellow]{escape(line)}[/yellow]")
    for metric in comparison.metrics:
        text = summary_text(comparison, metric)
        if text:
            stdout.print(f"{metric.name}: {text}")
    for side in ("baseline", "candidate"):
        only = comparison.only_on(side)
        if only:
            labels = "; ".join(escape(series_label(row.series)) for row in only)
            stdout.print(f"only in the {side} ({len(only)}): {labels}")
    stdout.print(f"verdict: {headline(comparison)}")
    if out:
        write_file(to_markdown(comparison, title, preface + notes), out)


def show_alerts(rows: list[dict[str, Any]], fmt: str, out: str | None, title: str) -> None:
    """Print alerts as a table, markdown or JSON; with ``out`` also write them (markdown, or JSON)."""
    if fmt == "json":
        publish(json.dumps(rows, indent=2, default=str), out)
        return
    if fmt == "markdown":
        publish(alerts_markdown(rows, title), out)
        return
    table = Table(title=title)
    for name in ("id", "status", "series", "metric", "change at", "change", "95% CI", "versions changed", "note"):
        table.add_column(name)
    for a in rows:
        table.add_row(
            str(a["id"]), a["status"], escape(series_label(a)), a["metric"],
            a["change_at"].strftime("%Y-%m-%d %H:%M"), percent(a["ratio"]),
            interval(a["ci_low"], a["ci_high"]), escape(versions_text(a["versions_changed"])),
            escape(a.get("note") or ""),
        )  # fmt: skip
    _stdout().print(table)
    if out:
        write_file(alerts_markdown(rows, title), out)


def records(frame: Any) -> list[dict[str, Any]]:
    """A data frame's rows as dicts of plain Python values."""
    return [{k: plain(v) for k, v in row.items()} for row in frame.to_dict("records")]


def run_summary(rows: Sequence[dict[str, Any]]) -> Table:
    """One line per config of a suite run: trials ok, median throughput in the model's unit, CV across trials."""
    table = Table(title="stepwatch results", show_lines=False)
    for name in ("config", "ok", "throughput", "cv", "step p50", "compile", "failures"):
        table.add_column(name, justify="left" if name in ("config", "failures") else "right")
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["config_key"], []).append(row)
    for group in groups.values():
        first = group[0]
        ok = [r for r in group if r["status"] == "ok"]
        rates = [r["units_per_sec"] for r in ok]
        unit = first.get("unit") or "examples"
        throughput = f"{statistics.median(rates):,.1f} {unit}/s" if rates else "-"
        cv = f"{statistics.stdev(rates) / statistics.mean(rates):.1%}" if len(rates) > 1 else "-"
        p50 = f"{statistics.median(r['step_time_p50_s'] for r in ok) * 1000:.1f} ms" if ok else "-"
        compiles = [r["compile_s"] for r in group if r.get("compile_s") is not None]
        compile_s = f"{statistics.median(compiles):.1f} s" if compiles else "-"
        failures = ", ".join(sorted({r["status"] for r in group if r["status"] != "ok"}))
        label = config_from_row(first).label()
        table.add_row(label, f"{len(ok)}/{len(group)}", throughput, cv, p50, compile_s, failures)
    return table


def memory_help(row: dict[str, Any]) -> str:
    """What a run's peak memory is, in words, with the figures recorded beside it."""
    gib = 2**30
    kind = row.get("peak_memory_kind")
    if kind == "device":
        text = "The framework allocator's peak on the accelerator(s)."
    elif kind == ANON_KIND:
        text = ("The process's peak anonymous (private) memory, sampled every 10 ms from outside the trial: what the "
                "program allocated, not the shared libraries it mapped.")  # fmt: skip
        if row.get("peak_file_bytes"):
            text += f" File-backed pages at that peak: {row['peak_file_bytes'] / gib:.2f} GiB."
    elif kind == RSS_KIND:
        text = "Recorded before peak memory was the anonymous peak: this run has only its peak RSS (below)."
    else:
        text = "Not recorded."
    if row.get("peak_rss_bytes"):
        text += f" Peak resident set (ru_maxrss, libraries included): {row['peak_rss_bytes'] / gib:.2f} GiB."
    return text


def trial_line(label: str, row: dict[str, Any], trial: int) -> str:
    """One finished trial for the progress log (rich markup)."""
    if row["status"] == "ok":
        detail = f"{row['units_per_sec']:,.1f} {row.get('unit')}/s, compile {row.get('compile_s') or 0:.1f} s"
    else:
        detail = f"[red]{row['status']}[/red]: {escape(str(row.get('error_message')))}"
    return f"{escape(label)} trial {trial + 1}: {detail}"


def ingest_lines(done: IngestReport, db: Path) -> list[str]:
    """What an ingest did, for the terminal (rich markup): quarantined and refused files, then the counts."""
    lines = [
        f"quarantined {escape(uri)}: {escape(reason)} (moved to {escape(moved)})"
        for uri, reason, moved in done.quarantined
    ]
    refused: dict[str, list[str]] = {}
    for uri, reason in done.refused:
        refused.setdefault(reason, []).append(uri)
    for reason, uris in refused.items():
        more = f" and {len(uris) - 1} more" if len(uris) > 1 else ""
        lines.append(f"skipped {escape(uris[0])}{more}: {escape(reason)}")
    lines.append(
        f"{done.files_seen} file(s): {done.files_ingested} ingested ({done.rows_added:,} new rows of "
        f"{done.rows_read:,} read), {done.files_unchanged} already in the store, {len(done.quarantined)} "
        f"quarantined; {db} in {done.seconds:.2f} s"
    )
    return lines


def upgrade_preface(
    baseline: Sequence[str],
    candidate: Sequence[str],
    configs: int,
    trials: int,
    suite: str,
    host: str | None,
    failed: int,
    total: int,
    changed: Sequence[tuple[str, str, str]],
) -> tuple[str, ...]:
    """The lines an upgrade-check report opens with: what ran where, and every package that differs."""
    lines = (
        f"Baseline `{' '.join(baseline)}`, candidate `{' '.join(candidate)}`: {configs} config(s) x {trials} "
        f"trials per side of suite `{suite}`, interleaved on {host}; {failed} of {total} trials failed.",
        "",
    )
    if changed:
        packages = ", ".join(f"{name} {a} -> {b}" for name, a, b in changed)
        lines += (f"Packages that differ between the two environments: {packages}.", "")
    return lines


# --- Files -------------------------------------------------------------------------------------------


def publish(text: str, out: str | None) -> None:
    """Print ``text``; with ``out`` also write it to that file (a job summary, a PR comment body)."""
    print(text, end="" if text.endswith("\n") else "\n")
    if out:
        write_file(text, out)


def write_file(text: str, out: str | Path) -> None:
    """Write a report; GitHub's job summary file is appended to, as Actions expects."""
    try:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a" if str(out) == os.environ.get("GITHUB_STEP_SUMMARY") else "w") as handle:
            handle.write(text)
    except OSError as error:
        raise ReportError(f"cannot write {out}: {error.strerror or error}") from None


# --- Bisect ------------------------------------------------------------------------------------------


def _target_cells(rows: Sequence[Row]) -> str:
    return "; ".join(
        f"{series_label(r.series)} {r.metric.name}: {r.verdict} {percent(r.result.ratio)} "
        f"{interval(r.result.ci_low, r.result.ci_high)}"
        for r in rows
    )


def bisect_headline(state: Any, search: Any) -> str:
    """What the bisect found, in one line (bold in the markdown)."""
    ends = state.steps[0]
    if ends.outcome == "skipped":
        return f"The ends could not be measured: {ends.reason}"
    if search is None:
        if ends.outcome == "inconclusive":
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


def _groups_text(groups: Sequence[Any], part: Any) -> str:
    return " + ".join(g.text() for g in groups[part.first - 1 : part.last])


def _effects_text(part: Any) -> str:
    return ", ".join(f"{percent(r.ratio)} {interval(r.ci_low, r.ci_high)}" for r in part.effects.values())


def bisect_markdown(state: Any, all_changes: Sequence[Any], search: Any) -> str:
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
    minutes = (time.monotonic() - state.started) / 60
    measured = sum(1 for s in state.steps if s.outcome != "skipped")
    lines += [
        f"Suite `{state.suite}`, {len(state.configs)} config(s) x {state.args.trials} trials per side at each step, "
        f"interleaved on {state.host}; metric(s) {', '.join(state.args.metric)}. {len(state.steps)} step(s), "
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


def bisect_json(state: Any, all_changes: Sequence[Any], search: Any, code: int) -> dict[str, Any]:
    def change(c: Any) -> dict[str, Any]:
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
