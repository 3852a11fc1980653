"""A comparison of two selections: the store's two sides through the analysis, per series and metric, and
that comparison written as markdown (a PR comment or job summary) or JSON. The CLI, the upgrade check and
the dashboard build it the same way."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pandas as pd

from collector import analysis, queries
from collector.analysis import IMPROVEMENT, INCONCLUSIVE, MISSING, NO_CHANGE, REGRESSION
from collector.config import config_from_row
from collector.metrics import Metric, Override, get_metric, threshold_for

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_FAILED = 0, 1, 2, 3, 4
FAILED = "failed"  # every trial of a side failed: nothing to compare, and not a pass


@dataclass(frozen=True)
class Row:
    series: dict[str, Any]  # series_key, config fields, accelerator, unit, suite
    metric: Metric
    failed_baseline: int
    failed_candidate: int
    result: analysis.Verdict

    @property
    def verdict(self) -> str:
        r = self.result
        if (r.baseline.n == 0 and self.failed_baseline) or (r.candidate.n == 0 and self.failed_candidate):
            return FAILED
        return r.verdict

    @property
    def label(self) -> str:
        return series_label(self.series)

    def cells(self) -> dict[str, str]:
        """The row as display text, shared by the terminal table, the markdown report and the dashboard."""
        r = self.result
        failed = self.failed_baseline or self.failed_candidate
        return {
            "verdict": self.verdict,
            "series": self.label,
            "metric": self.metric.name,
            "change": percent(r.ratio),
            "95% CI": interval(r.ci_low, r.ci_high),
            "n": f"{r.baseline.n}/{r.candidate.n}"
            + (f" ({self.failed_baseline}/{self.failed_candidate} failed)" if failed else ""),
            "q": "" if math.isnan(r.q_value) else f"{r.q_value:.3g}",
            "threshold": f"±{r.threshold:.0%}",
        }


@dataclass
class Comparison:
    baseline: queries.Selection
    candidate: queries.Selection
    metrics: list[Metric]
    rows: list[Row]
    summaries: dict[str, analysis.Summary]
    versions: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def by_verdict(self, verdict: str) -> list[Row]:
        return [row for row in self.rows if row.verdict == verdict]

    def only_on(self, side: str) -> list[Row]:
        """Series run on one side only (a side whose trials all failed is a failure, not an absence)."""
        other = "candidate" if side == "baseline" else "baseline"
        return [
            r
            for r in self.rows
            if r.metric == self.metrics[0]
            and getattr(r.result, side).n
            and not getattr(r.result, other).n
            and not getattr(r, f"failed_{other}")
        ]

    def summary_text(self, metric: Metric) -> str | None:
        """'geometric mean over N series on both sides +x% [lo, hi]', or None when no series is on both."""
        summary = self.summaries[metric.name]
        if not summary.series:
            return None
        return (
            f"geometric mean over {summary.series} series on both sides "
            f"{percent(summary.geomean)} {interval(summary.ci_low, summary.ci_high)}"
        )

    def ordered(self) -> list[Row]:
        """Rows worst first: regressions, failures, inconclusive, improvements, no change, missing."""
        order = {v: i for i, v in enumerate((REGRESSION, FAILED, INCONCLUSIVE, IMPROVEMENT, NO_CHANGE, MISSING))}
        return sorted(self.rows, key=lambda r: order[r.verdict])

    def exit_code(self, fail_on_inconclusive: bool = False) -> int:
        """1 on any regression, else 4 if a series' trials all failed, else 3 on inconclusive when asked, else 0."""
        if self.by_verdict(REGRESSION):
            return EXIT_REGRESSION
        if self.by_verdict(FAILED):
            return EXIT_FAILED
        if fail_on_inconclusive and self.by_verdict(INCONCLUSIVE):
            return EXIT_INCONCLUSIVE
        return EXIT_OK


def build(
    con: duckdb.DuckDBPyConnection,
    baseline: queries.Selection,
    candidate: queries.Selection,
    metric_names: list[str],
    overrides: list[Override],
) -> Comparison:
    """Every series on either side, for every metric, with BH across the whole series x metric matrix."""
    metrics = [get_metric(name) for name in metric_names]
    tables: list[tuple[Metric, pd.DataFrame]] = [
        (m, queries.compare_sides(con, baseline, candidate, m.name)) for m in metrics
    ]
    cells, pairs, thresholds, directions = [], [], [], []
    for metric, table in tables:
        for record in table.to_dict("records"):
            series = {k: plain(record[k]) for k in ("series_key", *queries.SERIES_FIELDS)}
            series["xla"] = series["xla_requested"]
            cells.append((metric, series, int(record["failed_baseline"]), int(record["failed_candidate"])))
            pairs.append((_side(record, "baseline"), _side(record, "candidate")))
            thresholds.append(threshold_for(metric, series, overrides))
            directions.append(metric.higher_is_better)
    results = analysis.compare(pairs, thresholds, directions)
    rows = [Row(series, metric, fb, fc, result) for (metric, series, fb, fc), result in zip(cells, results)]
    summaries = {m.name: analysis.geomean_summary([r.result for r in rows if r.metric == m]) for m in metrics}
    versions = {"baseline": queries.side_versions(con, baseline), "candidate": queries.side_versions(con, candidate)}
    return Comparison(baseline, candidate, metrics, rows, summaries, versions)


def plain(value: Any) -> Any:
    """pandas scalars (NaN, numpy ints) as plain Python values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _side(record: dict[str, Any], side: str) -> analysis.Side:
    n = int(record[f"n_{side}"])
    mean, var = plain(record[f"mean_log_{side}"]), plain(record[f"var_log_{side}"])
    return analysis.Side(n, math.nan if mean is None else mean, math.nan if var is None else var)


def series_label(fields: dict[str, Any]) -> str:
    """'bert/tiny cpu xla fp32 b8 fit on <accelerator>' from a series' fields (``xla`` or ``xla_requested``)."""
    known = {k: v for k, v in fields.items() if v is not None}
    known["xla_requested"] = bool(fields.get("xla_requested", fields.get("xla")))
    return f"{config_from_row(known).label()} on {fields.get('accelerator') or '?'}"


def repro_command(series: dict[str, Any], trials: int = 5) -> str:
    """The ``stepwatch run`` line that measures this one series again."""
    config = config_from_row(series)
    args = [
        "stepwatch", "run", "--suite", series.get("suite") or "smoke", "--models", config.model,
        "--preset", config.preset, "--backend", config.backend, "--devices", str(config.num_devices),
        "--strategy", config.strategy, "--xla", "on" if config.xla else "off", "--precision", config.precision,
        "--batch", str(config.per_device_batch), "--steps-per-execution", str(config.steps_per_execution),
        "--loop", config.loop, "--data", config.data, "--steps", str(config.steps),
        "--warmup", str(config.warmup_steps), "--window", str(config.window_steps), "--trials", str(trials),
    ]  # fmt: skip
    return shlex.join(args)


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
    lines = [f"## {title}", "", f"**{headline(comparison)}**", "", *preface]
    lines += ["| | baseline | candidate |", "|---|---|---|"]
    lines.append(f"| selection | `{comparison.baseline.describe()}` | `{comparison.candidate.describe()}` |")
    for name in comparison.versions.get("baseline", {}):
        a = ", ".join(comparison.versions["baseline"][name]) or "-"
        b = ", ".join(comparison.versions["candidate"][name]) or "-"
        if a != "-" or b != "-":
            lines.append(f"| {name} | {a} | {b} |")
    lines.append("")
    for metric in comparison.metrics:
        text = comparison.summary_text(metric)
        if text:
            lines.append(f"**{metric.label}**: {text}")
    lines += [
        "",
        "| | series | metric | change | 95% CI | n (base/cand) | q | threshold |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in comparison.ordered():
        cells = row.cells()
        cells["verdict"] = f"{MARKS[row.verdict]} {row.verdict}"
        lines.append("| " + " | ".join(cells.values()) + " |")
    for side in ("baseline", "candidate"):
        only = comparison.only_on(side)
        if only:
            lines += ["", f"Only in the {side} ({len(only)}): " + "; ".join(row.label for row in only)]
    lines += [
        "",
        "Ratio of geometric means (candidate / baseline) with a 95% Welch interval on log values; q is the "
        "Benjamini-Hochberg adjusted p-value across the table. A regression or improvement is significant "
        "(q < 0.05) and beyond the threshold; no change means the whole interval is within the threshold.",
    ]
    return "\n".join(lines) + "\n"


def versions_text(versions_changed: str | None) -> str:
    """'tf_version 2.20.0 -> 2.21.0; ...' from the stored JSON, or a hint when nothing changed."""
    changed = json.loads(versions_changed) if versions_changed else {}
    if not changed:
        return "no recorded version changed (hardware, driver or neighbour drift?)"
    return "; ".join(f"{name} {old} -> {new}" for name, (old, new) in changed.items())


def alerts_markdown(alerts: list[dict[str, Any]], title: str = "stepwatch alerts") -> str:
    """Alerts (rows of ``collector.alerts.list_alerts``) as a markdown table, e.g. for an issue body."""
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
    rows = [
        {
            "series": row.series,
            "label": row.label,
            "metric": row.metric.name,
            "verdict": row.verdict,
            "ratio": plain(row.result.ratio),
            "ci_low": plain(row.result.ci_low),
            "ci_high": plain(row.result.ci_high),
            "p_value": plain(row.result.p_value),
            "q_value": plain(row.result.q_value),
            "threshold": row.result.threshold,
            "n_baseline": row.result.baseline.n,
            "n_candidate": row.result.candidate.n,
            "failed_baseline": row.failed_baseline,
            "failed_candidate": row.failed_candidate,
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
    return json.dumps(payload, indent=2, default=str)
