"""The night as one static page (``python -m stepwatch.dashboard.page --db STORE --out site/index.html``): the
Overview's table of every series with its verdict, and the history chart of each series that changed, drawn by
the dashboard's own figures (``charts``), with plotly.js in a file beside it (the same bytes every night: a history
branch keeps it once). No server and no network: the nightly's publish writes it onto the history branch, and
GitHub Pages can serve it. The Streamlit dashboard stays where one digs in; the page names the command.
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path
from typing import Any

import plotly.io as pio
from plotly.offline import get_plotlyjs

from stepwatch.collector.analysis import latest
from stepwatch.collector.analysis.alerts import headline_metric
from stepwatch.collector.analysis.stats import plain
from stepwatch.collector.analysis.thresholds import load_overrides
from stepwatch.collector.metrics import DEFAULT_METRIC, METRICS
from stepwatch.collector.outcomes import CHANGED, IMPROVEMENT, NO_CHANGE, REGRESSION
from stepwatch.collector.output.text import series_label
from stepwatch.collector.store import database, queries, records
from stepwatch.collector.store.selection import ALL
from stepwatch.dashboard import charts, labels

PLOTLY_JS = "plotly.min.js"
DRAWN = {REGRESSION, IMPROVEMENT, CHANGED}  # a series that moved against either reference gets its chart
HISTORY = "git:stepwatch-history"  # where the nightly keeps the history (another repository: git:URL#BRANCH)
STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#262730}table{border-collapse:collapse;font-size:14px}
td,th{padding:4px 8px;border-bottom:1px solid #eee;text-align:left}th{background:#f6f6f8}code{background:#f6f6f8;
padding:1px 4px}.chip{padding:2px 6px;border-radius:4px;white-space:nowrap}"""


def _cell(text: str, verdict: object) -> str:
    fill = labels.VERDICT_FILLS.get(verdict, "") if isinstance(verdict, str) else ""
    style = f' style="background:{fill}"' if fill else ""
    return f'<td><span class="chip"{style}>{html.escape(text)}</span></td>'


def numerics_of(row: dict[str, Any]) -> str:
    """A row's numerics verdict in words; empty where there is none (a first night, a failed run: NaN in the table)."""
    return str(plain(row.get("numerics")) or "")


def night_line(
    started: str, commit: str | None, run_url: str | None, jobs: str | None, failed: list[str] | None = None
) -> str:
    """What names the night at the page's top: its date, the commit and the workflow run (linked), how many of
    its collect jobs ran no trial ok, and each of those with why (``failed``: "JOB: reason")."""
    parts = [f"The night of {html.escape(started[:10])}"]
    if commit:
        parts.append(f"commit <code>{html.escape(commit[:12])}</code>")
    if run_url and run_url.split(":", 1)[0] in ("https", "http", "file"):
        parts.append(f'<a href="{html.escape(run_url, quote=True)}">the workflow run</a>')
    if jobs:
        none_ok, total = jobs.split("/")
        parts.append(f"{none_ok} of {total} collect job(s) ran no trial ok" if none_ok != "0" else
                     f"all {total} collect job(s) ran")  # fmt: skip
    listed = "".join(f"<li>{html.escape(line)}</li>" for line in failed or ())
    return "<p><b>" + "; ".join(parts) + ".</b></p>" + (f"<ul class=failed>{listed}</ul>" if listed else "")


def render(
    db: Path, metric_name: str | None = None, report: str | None = None, night: dict[str, Any] | None = None
) -> tuple[str, int]:
    """The page's HTML, and how many series it names; ``night``: its commit, run_url and jobs (``night_line``).
    ``metric_name``: default throughput, or for a store of imported results alone their own metric."""
    with database.open_store(db) as reader:
        con = reader.connection()
        metric_name = metric_name or headline_metric(con)
        metric = METRICS[metric_name]
        table = latest.overview(con, ALL, metric_name, load_overrides())
        points = queries.history_points(con, ALL, metric_name, False)
        alerts = records.list_alerts(con, records.STATUSES, metric_name)
        night_runs = queries.suite_run_costs(con, sorted(set(table["suite_run_id"].dropna())) if len(table) else [])
    rows = table.to_dict("records")
    started = max((str(row["started_at"]) for row in rows), default="")
    body = [
        f"<h1>stepwatch: the latest night, {html.escape(metric.label.lower())}</h1>",
        night_line(started, **{key: (night or {}).get(key) for key in ("commit", "run_url", "jobs", "failed")}),
        f"<p>{len(rows)} series; {int(latest.regressed(table).sum())} regressed. Each change is the latest suite run "
        f"against the run before it and against its baseline (up to {latest.BASELINE_NIGHTS} nights), and the level "
        f"of the last {latest.LEVEL_NIGHTS} nights against the nights before them, a ratio of geometric means with "
        f"its 95% interval, judged against the metric's threshold ({metric.threshold:.0%}). To "
        f"dig in: <code>{html.escape('stepwatch dashboard ' + ((night or {}).get('history') or HISTORY))}</code> in "
        "a clone of this repository.</p>",
        f"<p>What the night cost: {html.escape(labels.cost_text(night_runs))}</p>" if len(night_runs) else "",
    ]
    # A training that changed leads the page, its speed beside it: a speedup that computes something else is none.
    retrained = [row for row in rows if numerics_of(row).startswith(f"{CHANGED}:")]
    if retrained:
        body.append(f"<h2>Trainings that changed ({len(retrained)})</h2><ul>")
        body += [f"<li>{html.escape(series_label(row))}: {metric.label.lower()} "
                 f"{html.escape(labels.change_text(row, 'previous'))} against the run before it, but its training "
                 f"{html.escape(numerics_of(row))}</li>" for row in retrained]  # fmt: skip
        body.append("</ul>")
    body.append(
        "<table><tr><th>status</th><th>series</th><th>latest</th><th>vs previous run</th><th>vs baseline</th>"
        f"<th>last {latest.LEVEL_NIGHTS} nights</th><th>could see</th><th>passing</th><th>alerts</th>"
        "<th>numerics vs previous run</th><th>started</th></tr>"
    )
    for row in rows:
        value = row["value"]
        body.append(
            "<tr>" + _cell(labels.CHANGE_WORDS.get(row["verdict"], row["verdict"]), row["verdict"])
            + f"<td>{html.escape(series_label(row))}</td>"
            + f"<td>{'' if value != value else html.escape(metric.shown(value, row.get('unit')))}</td>"
            + _cell(labels.change_text(row, "previous"), row["previous_verdict"])
            + _cell(labels.change_text(row, "baseline"), row["baseline_verdict"])
            + _cell(labels.change_text(row, "level"), row["level_verdict"])
            + f"<td>{html.escape(labels.seen_text(row))}</td>"
            + f"<td>{row['ok']}/{row['trials']}</td><td>{row['alerts']}</td>"
            + f"<td>{html.escape(numerics_of(row))}</td>"
            + f"<td>{html.escape(str(row['started_at'])[:16])}</td></tr>"
        )  # fmt: skip
    body.append("</table>")
    changed = [r for r in rows if {r["previous_verdict"], r["baseline_verdict"], r["level_verdict"]} & DRAWN
               or r["alerts"]]  # fmt: skip
    body.append(f"<h2>Series that changed ({len(changed)})</h2>")
    if not changed:
        body.append(
            f"<p>None: against the run before it and its baseline, every series is {NO_CHANGE}, "
            "inconclusive or new tonight.</p>"
        )
    # Every series' history, those that changed first, each titled with the night's verdict on it.
    unchanged = [r for r in rows if r not in changed]
    for index, row in enumerate(changed + unchanged):
        if index == len(changed) and unchanged:
            body.append(f"<h2>The other series ({len(unchanged)})</h2>")
        key = row["series_key"]
        mine = points[points["series_key"] == key].dropna(subset=["value"])
        found = alerts[alerts["series_key"] == key] if len(alerts) else alerts
        figure = charts.history(mine, metric, "night", "model", None, False, None, found)
        verdict = labels.CHANGE_WORDS.get(row["verdict"], row["verdict"])
        figure.update_layout(height=320, title=f"{series_label(row)}: {verdict}")
        body.append(pio.to_html(figure, include_plotlyjs=False, full_html=False, default_width="100%"))
    if report and Path(report).is_file():
        body.append(f"<h2>Change points</h2><pre>{html.escape(Path(report).read_text())}</pre>")
    head = (f'<meta charset="utf-8"><title>stepwatch: the latest night</title><style>{STYLE}</style>'
            f'<script src="{PLOTLY_JS}"></script>')  # fmt: skip
    return f"<!DOCTYPE html><html><head>{head}</head><body>{''.join(body)}</body></html>\n", len(rows)


def write(
    db: Path, out: Path, metric_name: str | None = None, report: str | None = None,
    night: dict[str, Any] | None = None,
) -> int:  # fmt: skip
    """Write the page and plotly.js beside it, each whole or not at all; how many series it names."""
    text, count = render(db, metric_name, report, night)
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, content in ((out.parent / PLOTLY_JS, get_plotlyjs()), (out, text)):
        if path.name == PLOTLY_JS and path.exists() and path.read_text() == content:
            continue
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(content)
        tmp.replace(path)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepwatch.dashboard.page", description=__doc__.split("\n")[0])
    parser.add_argument("--db", help="a store: a DuckDB file or a shared store's address (default $STEPWATCH_DB)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--metric", choices=tuple(METRICS), help=f"default {DEFAULT_METRIC}, or imported results' own")
    parser.add_argument("--report", help="the detection's markdown, shown under the charts")
    parser.add_argument("--commit", help="the commit the night ran")
    parser.add_argument("--run-url", help="the workflow run's address")
    parser.add_argument("--jobs", help="FAILED/TOTAL: the collect jobs that ran no trial ok, of all")
    parser.add_argument("--history", help=f"where the history is, as stepwatch dashboard reads it (default {HISTORY})")
    parser.add_argument("--failed-job", action="append", dest="failed", metavar="'JOB: REASON'",
                        help="a collect job that ran no trial ok, and why (repeated)")  # fmt: skip
    args = parser.parse_args(argv)
    night = {"commit": args.commit, "run_url": args.run_url, "jobs": args.jobs, "history": args.history,
             "failed": args.failed}  # fmt: skip
    try:
        count = write(
            database.resolve(args.db) if args.db else database.default_db(), args.out, args.metric, args.report, night
        )
    except (database.StoreError, OSError) as error:
        print(f"stepwatch page: {error}", file=sys.stderr)
        return 1
    print(f"page: {args.out} ({count} series)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
