"""A comparison rendered: the terminal table, markdown (a PR comment, a job summary) and JSON. One formatting
of a row (``row_cells``) serves the terminal, the markdown and the dashboard."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table

from stepwatch.collector.analysis import noise, numerics, stats
from stepwatch.collector.analysis.comparison import Comparison, Row
from stepwatch.collector.analysis.sequential import confidence_text
from stepwatch.collector.analysis.stats import plain
from stepwatch.collector.metrics import Metric
from stepwatch.collector.outcomes import CHANGED, FAILED, IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION
from stepwatch.collector.output import numerics as numerics_output
from stepwatch.collector.output.sides import flagged, kernel_lines, machine_line
from stepwatch.collector.output.text import (
    MARKS,
    interval,
    percent,
    publish,
    repro_command,
    series_label,
    stdout_console,
    write_file,
)
from stepwatch.collector.schema import KERNELS

CodeOf = Callable[[Comparison], int]  # the exit code a comparison gives (the CLI's, stepwatch.collector.cli.exits)


def exact_change(metric: Metric, result: stats.Verdict) -> str:
    """A counter's change (``stats.exact``) as its values and their difference: '4,994 -> 5,010 (+16, +0.3%)'; a
    side whose values varied shows their range."""

    def values(span: stats.Span) -> str:
        if not span.n:
            return "-"
        low, high = metric.shown(span.low), metric.shown(span.high)
        return low if low == high else f"{low}..{high}"

    baseline, candidate = result.spans
    ratio = result.ratio
    moved = baseline.constant and candidate.constant and math.isfinite(ratio) and ratio != 1
    difference = candidate.low - baseline.low
    shown = f" ({'+' if difference > 0 else '-'}{metric.shown(abs(difference))}, {percent(ratio)})" if moved else ""
    return f"{values(baseline)} -> {values(candidate)}{shown}"


def change_text(row: Row) -> str:
    """'+16.1% [+15.9%, +16.3%]', or a counter's values ('4,077 -> 4,209 (+3.2%)'): a row's change in one cell."""
    r = row.result
    return exact_change(row.metric, r) if r.spans else f"{percent(r.ratio)} {interval(r.ci_low, r.ci_high)}"


def failed_text(row: Row) -> str:
    """The failed trials of a row's sides, plainly: 'candidate: 3 failed'."""
    sides = (("baseline", row.failed_baseline), ("candidate", row.failed_candidate))
    return ", ".join(f"{side}: {count} failed" for side, count in sides if count)


def interval_name(comparison: Comparison) -> str:
    """The interval column's name: '95% CI', or a sequential check's look's '98.75% CI'."""
    return f"{confidence_text(comparison.alpha)} CI"


def row_cells(row: Row) -> dict[str, str]:
    """The row as display text, shared by the terminal table, the markdown report and the dashboard. A counter's
    row shows its values on both sides and says it was compared exactly."""
    r = row.result
    failed = row.failed_baseline or row.failed_candidate
    return {
        "verdict": row.verdict,
        "series": series_label(row.series),
        "metric": row.metric.name,
        "change": exact_change(row.metric, r) if r.spans else percent(r.ratio),
        "95% CI": "exact" if r.spans else interval(r.ci_low, r.ci_high),
        "n": f"{r.baseline.n}/{r.candidate.n}" + (f" ({failed_text(row)})" if failed else ""),
        "q": "" if math.isnan(r.q_value) else f"{r.q_value:.3g}",
        "threshold": f"±{r.threshold:.0%}",
        "can see": can_see(r),
        "noise": noise.noise_text(row.noise),
    }


def noise_source(comparison: Comparison) -> str:
    """Where the noise column's figures come from, in words."""
    if comparison.own_noise:
        return "Noise is the trial-to-trial CV within each side of this check, pooled over the two (its own trials)"
    return f"Noise is the series' trial-to-trial CV over its last {noise.NOISE_TRIALS} ok trials in the store"


def bimodal_warning(label: str, metric: str, found: noise.Noise | None) -> str | None:
    """One line for a series whose trials fall into two clusters across processes (not one after the other in its
    history: that is a step, ``stepped``), or None."""
    if not found or not found.bimodal or not found.modes:
        return None
    low, high = found.modes
    return (
        f"warning: {label} {metric} is bimodal across processes: its last {found.n} trials cluster near "
        f"{noise.level_text(low)} and {noise.level_text(high)} ({high / low - 1:.0%} apart); a verdict can flip with "
        "the cluster a trial lands in"
    )


def code_warnings(comparison: Comparison) -> list[str]:
    """A model of yours whose code differs between the sides: the change is then partly the model's."""
    return [
        f"{model}: the two sides ran different code of this model (source {', '.join(a)} -> {', '.join(b)}): "
        "the change is not only the software's"
        for model, a, b in comparison.code_changes()
    ]


def warnings_of(comparison: Comparison) -> list[str]:
    """What a reader must know before trusting a verdict: a model's code that changed, and bimodal series."""
    lines = (bimodal_warning(series_label(r.series), r.metric.name, r.noise) for r in comparison.rows)
    return code_warnings(comparison) + sorted({line for line in lines if line})


def can_see(r: stats.Verdict) -> str:
    """'≥9.0% (14/side for ±3%)': the minimum detectable effect, and the trials per side that would detect the
    threshold when this comparison cannot ('out of reach' where no number of trials would); 'resolved' for a
    change its interval found (a change can be found where it is found less than 80% of the time)."""
    if r.spans:
        return "any change"
    if r.verdict in (REGRESSION, IMPROVEMENT):  # its interval found it: what it could have missed is moot
        return "resolved"
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
    if r.spans:
        varied = r.verdict == INCONCLUSIVE
        return "a counter compared exactly" + (": its values varied within a side, and the ranges overlap" * varied)
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


def inconclusive_lines(comparison: Comparison) -> list[str]:
    """Per inconclusive row, what would resolve it: '<series> examples_per_sec: this run can see changes of ...'."""
    return [
        f"{series_label(r.series)} {r.metric.name}: {resolution(r.result)}" for r in comparison.by_verdict(INCONCLUSIVE)
    ]


def resolution_lead(comparison: Comparison) -> list[str]:
    """One line per metric that this comparison cannot resolve at its threshold in any series (its minimum
    detectable effect exceeds the threshold everywhere), to lead the report: the verdicts below can then only
    be 'inconclusive' or a change far larger than the threshold."""
    lines = []
    for metric in comparison.metrics:
        seen = [r.result for r in comparison.rows if r.metric == metric and not math.isnan(r.result.detectable)
                and r.result.verdict not in (REGRESSION, IMPROVEMENT)]  # a change found was seen  # fmt: skip
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


AA_ENVIRONMENT = "the baseline in a second environment of the same packages"


def aa_lines(aa: Comparison | None, what: str = AA_ENVIRONMENT) -> tuple[str, ...]:
    """The A/A of a check (``what``: the baseline against a second environment of the same packages, or a second
    checkout of the same commit), for the report's preface: quiet, or which series it called a change (a verdict
    there is a false alarm of this runner)."""
    if aa is None:
        return ()
    alarms = [r for r in aa.rows if r.verdict in (REGRESSION, IMPROVEMENT, CHANGED)]
    trained = numerics_output.aa_text(aa)
    head = f"A/A ({what}): {headline(aa)}{trained}."
    if not alarms and CHANGED not in numerics.counts(aa.numerics):
        return (head + " No false alarm.", "")
    cells = "; ".join(f"{series_label(r.series)} {r.metric.name} {percent(r.result.ratio)} "
                      f"{interval(r.result.ci_low, r.result.ci_high)}" for r in alarms)  # fmt: skip
    said = f" ⚠️ It called {len(alarms)} change(s) where nothing changed: {cells}." if alarms else ""
    retrained = numerics_output.lead_lines(aa)
    said += f" ⚠️ Its training changed where nothing did: {'; '.join(retrained)}." if retrained else ""
    return (head + said, "")


NO_BETWEEN = (
    "Intervals cover process-to-process noise only: no calibration of this runner and no A/A "
    "(`stepwatch calibrate`, or `--aa`)."
)


def between_lines(between: dict[str, stats.Between], alone: str = NO_BETWEEN) -> tuple[str, ...]:
    """What the intervals cover beyond the trials: per metric, the between-environment variation and where it was
    measured; or (``alone``) that they cover only process-to-process noise."""
    if not between:
        return (alone, "")
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


def headline(comparison: Comparison) -> str:
    counts = {v: len(comparison.by_verdict(v)) for v in (REGRESSION, IMPROVEMENT, CHANGED, NO_CHANGE, INCONCLUSIVE,
                                                          FAILED)}  # fmt: skip
    parts = [
        f"{n} {name}" + ("s" if n != 1 and name in (REGRESSION, IMPROVEMENT) else "")
        for name, n in counts.items()
        if n and name != FAILED
    ]
    if counts[FAILED]:  # metrics, not trials: what a side's failed trials left with nothing to compare
        parts.append(f"{counts[FAILED]} metric{'s' if counts[FAILED] != 1 else ''} not compared (trials failed)")
    return ", ".join(parts) or "nothing to compare"


def to_markdown(
    comparison: Comparison,
    title: str = "stepwatch comparison",
    preface: tuple[str, ...] = (),
    appendix: tuple[str, ...] = (),
    first: tuple[str, ...] = (),
) -> str:
    """A report for a PR comment or a job summary: ``first`` (what a check leads with), what this runner cannot
    resolve, headline, sides, geomeans, the verdict table, gaps; then ``appendix`` (where the time went, from the
    profiles) as preformatted text."""
    lead = resolution_lead(comparison)
    changed = kernel_lines(comparison) + numerics_output.lead_lines(comparison)
    lines = [f"## {title}", "", *first, *(f"**⚠️ {line}**" for line in changed), *([""] if changed else [])]
    lines += [*(f"**{line}**" for line in lead), *([""] if lead else [])]
    lines += [f"**{headline(comparison)}**", "", *preface]
    machine = machine_line(comparison)
    if machine:
        lines += [("⚠️ " if flagged(comparison) else "") + machine, ""]
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
        f"| | series | metric | change | {interval_name(comparison)} | n (base/cand) | q | threshold | can see "
        "| noise |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in comparison.ordered():
        cells = row_cells(row)
        cells["verdict"] = f"{MARKS[row.verdict]} {row.verdict}"
        lines.append("| " + " | ".join(cells.values()) + " |")
    lines += numerics_output.to_markdown(comparison)
    warnings = warnings_of(comparison)
    if warnings:
        lines += ["", *(f"⚠️ {line}" for line in warnings)]
    inconclusive = inconclusive_lines(comparison)
    if inconclusive:
        lines += ["", "Inconclusive:", "", *(f"- {line}" for line in inconclusive)]
    for side in ("baseline", "candidate"):
        only = comparison.only_on(side)
        if only:
            lines += ["", f"Only in the {side} ({len(only)}): " + "; ".join(series_label(row.series) for row in only)]
    lines += [
        "",
        f"Ratio of geometric means (candidate / baseline) with a {confidence_text(comparison.alpha)} Welch interval "
        "on log values; q is the Benjamini-Hochberg adjusted p-value across the table. A regression or improvement "
        f"is significant (q < {comparison.alpha:.3g}) and beyond the threshold; no change means the whole interval "
        "is within the threshold. "
        '"can see" is the minimum detectable effect: the change this many trials with this much noise find '
        "80% of the time, and, where that exceeds the threshold, the trials per side that would see the threshold. "
        f"{noise_source(comparison)}, and "
        '"bimodal" where those fall into two separate clusters (processes landing on one of two speeds). '
        "Counters of the compiled step (HLO instructions, fusions, flops, graphs, kernels) are the same in every "
        "process for one program and stack: they are compared exactly, their values shown, any change counted.",
    ]
    if appendix:
        lines += ["", "```", *appendix, "```"]
    return "\n".join(lines) + "\n"


def finite(value: Any) -> float | None:
    """A number JSON can carry: None for NaN and for an infinite ratio (a counter that was 0 on the baseline)."""
    value = plain(value)
    return value if value is None or math.isfinite(value) else None


def to_json(comparison: Comparison, code_of: CodeOf) -> str:
    return json.dumps(json_payload(comparison, code_of), indent=2, default=str)


def json_payload(comparison: Comparison, code_of: CodeOf) -> dict[str, Any]:
    """The comparison as plain data, with the exit code ``code_of`` gives it (and, for an upgrade check with
    ``--aa``, its A/A beside it)."""
    rows = [
        {
            "series": row.series,
            "label": series_label(row.series),
            "metric": row.metric.name,
            "verdict": row.verdict,
            "ratio": finite(row.result.ratio),
            "ci_low": finite(row.result.ci_low),
            "ci_high": finite(row.result.ci_high),
            "exact": {
                side: {"n": span.n, "low": finite(span.low), "high": finite(span.high)}
                for side, span in zip(("baseline", "candidate"), row.result.spans or ())
            }
            or None,
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
        "exit_code": code_of(comparison),
        "versions": comparison.versions,
        "model_code": comparison.model_code,
        "machine": comparison.machine,
        **{kind: {**comparison.kernels.get(kind, {}), "differs": comparison.kernel_differs(kind)} for kind in KERNELS},
        "summaries": summaries,
        "rows": rows,
        "alpha": comparison.alpha,
        "sequential": comparison.looks,
        "numerics": numerics_output.json_rows(comparison),
    }
    if comparison.aa is not None:
        payload["aa"] = json_payload(comparison.aa, code_of)
    return payload


VERDICT_STYLES = {REGRESSION: "red", IMPROVEMENT: "green", INCONCLUSIVE: "yellow", FAILED: "red", CHANGED: "cyan"}


def comparison_table(comparison: Comparison) -> Table:
    table = Table(title=f"{escape(comparison.baseline.describe())}  ->  {escape(comparison.candidate.describe())}")
    for name in ("verdict", "series", "metric", "change", interval_name(comparison), "n", "q", "threshold", "can see",
                 "noise"):  # fmt: skip
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
    code_of: CodeOf,
    preface: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
    appendix: tuple[str, ...] = (),
    first: tuple[str, ...] = (),
) -> None:
    """Print the comparison as a table, markdown or JSON; with ``out`` also write it (markdown, or JSON).
    ``preface`` opens the markdown only; ``notes`` (what the intervals cover, the A/A) follow it there and are
    printed above the table too."""
    if fmt == "json":
        publish(to_json(comparison, code_of), out)
        return
    if fmt == "markdown":
        publish(to_markdown(comparison, title, preface + notes, appendix, first), out)
        return
    stdout = stdout_console()
    for line in first:
        if line:
            stdout.print(escape(line))
    for line in [*kernel_lines(comparison), *numerics_output.lead_lines(comparison)]:
        if not line:
            continue
        stdout.print(f"[bold red]{escape(line)}[/bold red]")
    for line in resolution_lead(comparison):
        stdout.print(f"[bold yellow]{escape(line)}[/bold yellow]")
    for line in notes:
        if line:
            stdout.print(escape(line))
    stdout.print(comparison_table(comparison))
    for line in inconclusive_lines(comparison):
        stdout.print(f"inconclusive: {escape(line)}")
    for line in warnings_of(comparison):
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
    machine = machine_line(comparison)
    if machine:
        stdout.print(f"[yellow]{escape(machine)}[/yellow]" if flagged(comparison) else escape(machine))
    for line in numerics_output.series_lines(comparison):
        stdout.print(escape(line))
    stdout.print(f"verdict: {headline(comparison)}")
    for line in appendix:
        stdout.print(escape(line))
    if out:
        write_file(to_markdown(comparison, title, preface + notes, appendix, first), out)


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
    caches: Sequence[str | None] = (),
    spent: tuple[float, float | None, str] | None = None,
) -> tuple[str, ...]:
    """The lines an upgrade-check report opens with: what ran where, every package that differs, and with a
    compile cache (``caches``: each measured trial's ``compile_cache``) which trials were cold."""
    lines = (
        f"Baseline `{' '.join(baseline)}`, candidate `{' '.join(candidate)}`: {configs} config(s) x {trials} "
        f"trials per side of suite `{suite}`, interleaved on {host}; {failed} of {total} trials failed.",
        "",
    )
    if changed:
        packages = ", ".join(f"{name} {a} -> {b}" for name, a, b in changed)
        lines += (f"Packages that differ between the two environments: {packages}.", "")
    if spent is not None:  # (seconds of the trials, their cost in USD where a price is known, the prices used)
        seconds, usd, prices = spent
        price = f", {usd:.2f} USD at {prices}" if usd else ""
        lines += (f"What the check cost: {seconds / 60:.1f} minutes of this machine in trials{price} (building "
                  "the environments not counted).", "")  # fmt: skip
    said = [cache for cache in caches if cache]
    if said:
        cold = said.count("cold")
        lines += (f"Compile cache: filled first by one unrecorded trial of every compiled config on every side; "
                  f"{cold} of {len(said)} compiled trials compiled anyway (cold), {len(said) - cold} found their "
                  "step compiled (warm).", "")  # fmt: skip
    return lines
