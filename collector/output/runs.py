"""Runs, alerts and ingests rendered: a suite run's summary, a trial's progress line, what a run's memory
figures mean, what an ingest did, alerts as a table or markdown, and a query's result."""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from rich.markup import escape
from rich.table import Table

from stepwatch.collector.analysis.calibration import Calibration
from stepwatch.collector.config import config_from_row
from stepwatch.collector.metrics import ANON_KIND, HEADLINE, RSS_KIND, Metric
from stepwatch.collector.output.text import (
    interval,
    percent,
    publish,
    series_label,
    stdout_console,
    versions_text,
    write_file,
)
from stepwatch.collector.store.address import shown

if TYPE_CHECKING:  # `run` imports this module, and needs no DuckDB
    from stepwatch.collector.store.ingest import IngestReport


def _commits(alert: dict[str, Any], compare_url: str | None) -> str:
    """The commit range of a change (``commits``: before, after), linked to ``compare_url`` (GitHub's
    ``.../compare``) where given."""
    before, after = alert.get("commits") or (None, None)
    if not after:
        return ""
    if not before or before == after:
        return f"`{after[:12]}`"
    text = f"`{before[:12]}..{after[:12]}`"
    return f"[{text}]({compare_url}/{before}...{after})" if compare_url else text


def _number(value: Any) -> str:
    return f"{value:,.1f}" if isinstance(value, int | float) and value == value else "?"


def verified_text(alert: dict[str, Any]) -> str:
    """What an alert's verifying check said (``stepwatch alerts verify``), in a line; '' where none ran yet. A row of
    a frame gives NaN where a column is empty: taken as empty."""

    def given(name: str) -> Any:
        value = alert.get(name)
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else value

    state = given("verification")
    if not state:
        return ""
    parts = [str(state)]
    if given("verify_ratio") is not None:
        parts[0] += f" {percent(given('verify_ratio'))} {interval(given('verify_ci_low'), given('verify_ci_high'))}"
    if given("verify_aa"):
        parts.append(f"A/A {given('verify_aa')}")
    if given("verify_commit"):
        parts.append(f"first slow commit {str(given('verify_commit'))[:12]}")
    if given("verify_minutes") is not None:
        parts.append(f"{given('verify_minutes'):.1f} min")
    if state in ("the machine's", "unverifiable") and given("verify_note"):
        parts.append(str(given("verify_note")))
    return ", ".join(parts)


def alerts_markdown(
    alerts: list[dict[str, Any]], title: str = "stepwatch alerts", compare_url: str | None = None
) -> str:
    """Alerts (rows of ``collector.store.records.list_alerts``) as a markdown table, e.g. for an issue body: each
    with its level before and after, its interval and the commits either side of it (``commits``, where known;
    linked to ``compare_url``)."""
    lines = [f"## {title}", ""]
    if not alerts:
        return "\n".join([*lines, "No alerts.", ""])
    lines += ["| id | status | series | metric | change at | before -> after | change | 95% CI | commits | versions "
              "changed | verified | note |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for a in alerts:
        when = a["change_at"].strftime("%Y-%m-%d %H:%M") if a.get("change_at") is not None else "?"
        values = f"{_number(a.get('before_value'))} -> {_number(a.get('after_value'))}"
        lines.append(
            f"| {a['id']} | {a['status']} | {series_label(a)} | {a['metric']} | {when} | {values} | "
            f"{percent(a['ratio'])} | {interval(a['ci_low'], a['ci_high'])} | {_commits(a, compare_url)} | "
            f"{versions_text(a['versions_changed'])} | {verified_text(a)} | {a.get('note') or ''} |"
        )
    return "\n".join(lines) + "\n"


def show_alerts(
    rows: list[dict[str, Any]], fmt: str, out: str | None, title: str, compare_url: str | None = None
) -> None:
    """Print alerts as a table, markdown or JSON; with ``out`` also write them (markdown, or JSON)."""
    if fmt == "json":
        publish(json.dumps(rows, indent=2, default=str), out)
        return
    if fmt == "markdown":
        publish(alerts_markdown(rows, title, compare_url), out)
        return
    table = Table(title=title)
    for name in ("id", "status", "series", "metric", "change at", "change", "95% CI", "versions changed", "verified",
                 "note"):
        table.add_column(name)
    for a in rows:
        table.add_row(
            str(a["id"]), a["status"], escape(series_label(a)), a["metric"],
            a["change_at"].strftime("%Y-%m-%d %H:%M"), percent(a["ratio"]),
            interval(a["ci_low"], a["ci_high"]), escape(versions_text(a["versions_changed"])),
            escape(verified_text(a)), escape(a.get("note") or ""),
        )  # fmt: skip
    stdout_console().print(table)
    if out:
        write_file(alerts_markdown(rows, title, compare_url), out)


def run_summary(rows: Sequence[dict[str, Any]]) -> Table:
    """One line per config of a suite run: trials ok, the median of each headline metric over the ok trials (in
    the model's unit), the first one's CV across trials, and the failures."""
    table = Table(title="stepwatch results", show_lines=False)
    first_metric = HEADLINE[0]
    for name in ("config", "ok", first_metric.heading, "cv", *(m.heading for m in HEADLINE[1:]), "failures"):
        table.add_column(name, justify="left" if name in ("config", "failures") else "right")
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["config_key"], []).append(row)
    for group in groups.values():
        first = group[0]
        ok = [r for r in group if r["status"] == "ok"]
        unit = first.get("unit") or "examples"

        def median(metric: Metric, ok: list[dict[str, Any]] = ok, unit: str = unit) -> str:
            values = [r[metric.name] for r in ok if r.get(metric.name) is not None]
            return metric.shown(statistics.median(values) if values else None, unit)

        rates = [r[first_metric.name] for r in ok if r.get(first_metric.name)]
        cv = f"{statistics.stdev(rates) / statistics.mean(rates):.1%}" if len(rates) > 1 else "-"
        failures = ", ".join(sorted({r["status"] for r in group if r["status"] != "ok"}))
        label = config_from_row(first).label()
        table.add_row(label, f"{len(ok)}/{len(group)}", median(first_metric), cv,
                      *(median(m) for m in HEADLINE[1:]), failures)  # fmt: skip
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
        first = (("compile", row.get("compile_s")), ("to its first step", row.get("startup_script_s")))
        detail = f"{row['units_per_sec']:,.1f} {row.get('unit')}/s" + "".join(
            f", {what} {seconds:.1f} s" for what, seconds in first if seconds is not None
        )
        if row.get("throttled") or row.get("shared"):  # the machine's state while it measured
            detail += f" [yellow]({escape(str(row.get('machine_note')))})[/yellow]"
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
    lines += [f"note: {escape(note)}" for note in done.notes]
    lines.append(
        f"{done.files_seen} file(s): {done.files_ingested} ingested ({done.rows_added:,} new rows of "
        f"{done.rows_read:,} read), {done.files_unchanged} already in the store, {len(done.quarantined)} "
        f"quarantined; {escape(shown(db))} in {done.seconds:.2f} s"
        + (f" ({done.commit_retries} commit(s) made again after another writer's)" if done.commit_retries else "")
    )
    return lines


def calibration_table(found: Calibration) -> Table:
    """Per metric: the variation between environments and within, the A/A false alarms, the detectable effect."""
    sizes = sorted({n for m in found.metrics.values() for n in m.detectable})
    out = Table(title=f"calibration of {found.runner}: {found.environments} environments x {found.trials} trials")
    for name in ("metric", "between envs", "trial CV", "A/A false alarms", "widened", *(f"MDE n={n}" for n in sizes)):
        out.add_column(name, justify="left" if name == "metric" else "right")
    for name, m in found.metrics.items():
        out.add_row(
            name,
            f"±{m.between.cv:.2%} ({m.between.df:.0f} df)",
            f"{m.within_cv:.2%}",
            f"{m.false_alarms}/{m.comparisons}",
            f"{m.false_alarms_widened}/{m.comparisons}",
            *(f"{m.detectable[n]:.1%}" if n in m.detectable else "" for n in sizes),
        )
    return out


def query_table(result: pa.Table, max_rows: int) -> None:
    """A query's result as a terminal table: its first ``max_rows`` rows, and how many more there are."""
    table = Table(show_lines=False)
    for name in result.column_names:
        table.add_column(escape(name))
    for row in result.slice(0, max_rows).to_pylist():
        table.add_row(*("" if v is None else escape(str(v)) for v in row.values()))
    out = stdout_console()
    out.print(table)
    if result.num_rows > max_rows:
        out.print(f"{result.num_rows - max_rows:,} more row(s): --max-rows, or --format csv / parquet for all")


def write_query(result: pa.Table, fmt: str, out: Path | None) -> None:
    """A query's result as CSV (to ``out``, else stdout) or parquet (to ``out``)."""
    if fmt == "parquet":
        pq.write_table(result, out)
    elif out is not None:
        pacsv.write_csv(result, out)
    else:
        sink = pa.BufferOutputStream()
        pacsv.write_csv(result, sink)
        sys.stdout.write(sink.getvalue().to_pybytes().decode())
