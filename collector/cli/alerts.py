"""``stepwatch detect`` and ``stepwatch alerts``: change points over nightly history recorded as alerts, and
moving an alert along its lifecycle."""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.markup import escape

from stepwatch.collector import metrics
from stepwatch.collector.analysis import alerts, changepoints, sequential, verification
from stepwatch.collector.analysis.thresholds import worse
from stepwatch.collector.cli.arguments import (
    FORMATS,
    OneLineParser,
    add_analysis_arguments,
    add_db_argument,
    add_import_arguments,
    add_issue_argument,
    console,
    db_path,
    import_command,
    overrides,
    selection,
)
from stepwatch.collector.cli.exits import EXIT_OK, EXIT_REGRESSION
from stepwatch.collector.cli.progress import TerminalHooks
from stepwatch.collector.config import TRIALS
from stepwatch.collector.errors import UsageError
from stepwatch.collector.output import webhook
from stepwatch.collector.output.comparison import bimodal_warning
from stepwatch.collector.output.runs import show_alerts, verified_text
from stepwatch.collector.output.text import plain_rows, series_label
from stepwatch.collector.runner import execution
from stepwatch.collector.store import database, history, records
from stepwatch.collector.workflows import verify

NIGHT_BUDGET = 60.0  # minutes a night's verifications may take in all
MOST = 3  # alerts a night verifies at most


def register(commands: Any) -> None:
    detect = commands.add_parser("detect", help="find change points in nightly history and record alerts")
    detect.add_argument("--where", help="which runs make up the history (default: all in the store)")
    detect.add_argument("--nights", type=int, default=alerts.DEFAULT_NIGHTS, help="nights per series to look at")
    add_webhook_argument(detect, "with --issue-on confirmed, post a newly confirmed regression")
    add_analysis_arguments(detect, several_metrics=False, stored=True)
    add_issue_argument(detect)
    detect.set_defaults(handler=run_detect)

    alert = commands.add_parser("alerts", help="list alerts or move one along (ack, false-positive, fixed)")
    actions = alert.add_subparsers(dest="action", required=True, parser_class=OneLineParser)
    listing = actions.add_parser("list", help="show alerts")
    listing.add_argument("--status", default="open", choices=("open", "all", *records.STATUSES))
    listing.add_argument("--metric", help="only this metric")
    listing.add_argument("--format", choices=FORMATS, default="table")
    listing.add_argument("--out", help="also write the markdown (or JSON) to this file")
    add_db_argument(listing)
    listing.set_defaults(handler=run_list)
    save = actions.add_parser("save", help="write every alert with its triage to a file (to rebuild a store)")
    save.add_argument("--out", required=True, help="file path or s3:// / gs:// URI (e.g. history/alerts.parquet)")
    add_db_argument(save)
    save.set_defaults(handler=run_save)
    check = actions.add_parser(
        "verify", help="measure suspected changes again: the nights either side interleaved here, bisected to a commit"
    )  # fmt: skip
    check.add_argument("ids", nargs="*", type=int, metavar="ID",
                       help="alerts to verify (default: every open alert not verified yet, the largest change first)")
    check.add_argument("--trials", type=int, default=TRIALS,
                       help=f"trials per side at the first look (default {TRIALS})")
    check.add_argument("--max-trials", type=int, default=sequential.MAX_TRIALS, metavar="N",
                       help=f"trials per side at the last look (default {sequential.MAX_TRIALS})")
    check.add_argument("--night-budget", type=float, default=NIGHT_BUDGET, metavar="MINUTES",
                       help=f"minutes for the night's verifications in all (default {NIGHT_BUDGET:g}; 0: none); an "
                       "alert left over is verified on a later night")
    check.add_argument("--most", type=int, default=MOST, metavar="N",
                       help=f"alerts verified a night at most, the largest change first (default {MOST})")
    check.add_argument("--no-aa", dest="aa", action="store_false",
                       help="no A/A beside each check (it says whether this runner raises false alarms)")
    check.add_argument("--results", type=Path, default=verify.RESULTS_DIR,
                       help=f"folder for the checks' parquet (default {verify.RESULTS_DIR})")
    check.add_argument("--checks-db", type=Path, default=verify.STORE,
                       help=f"the checks' own store (default {verify.STORE}; the history's is --db)")
    check.add_argument("--thresholds", type=Path, help="per-series threshold overrides")
    check.add_argument("--format", choices=FORMATS, default="table")
    check.add_argument("--out", help="also write the open alerts' report (markdown, or JSON) to this file")
    add_issue_argument(check)
    add_webhook_argument(check, "post a regression this run reproduced")
    check.add_argument("--fresh-environments", action="store_true",
                       help="build a package check's environments from scratch (default: on this interpreter's "
                       "packages, the ones that moved pinned at each night's version)")
    check.add_argument("--pip-arg", action="append", default=[], help="extra pip install argument (repeatable)")
    add_import_arguments(check)
    add_db_argument(check)
    check.set_defaults(handler=run_verify)
    for name, status, needs_note in (
        ("ack", records.ACKNOWLEDGED, True),
        ("false-positive", records.FALSE_POSITIVE, False),
        ("fixed", records.FIXED, False),
    ):
        action = actions.add_parser(name, help=f"mark an alert {status}")
        action.add_argument("id", type=int, help="alert id (from `stepwatch alerts list`)")
        action.add_argument("--note", required=needs_note, help="why (kept with the alert)")
        add_db_argument(action)
        action.set_defaults(handler=run_set, new_status=status)


def add_webhook_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--webhook", default=os.environ.get(webhook.ENV) or None,
        help=f"{what} to this chat webhook (Slack-compatible JSON; default ${webhook.ENV})",
    )  # fmt: skip


def post(url: str, regressions: list[dict[str, Any]], fields: dict[str, dict], metric: metrics.Metric,
         issue_on: str) -> None:  # fmt: skip
    """Post regressions to the chat webhook; one note where it does not take them (the verdict stands)."""
    why = webhook.post(url, regression_text(regressions, fields, metric, issue_on))
    console.print(f"note: the webhook did not take the regression: {escape(why)}" if why else
                  f"posted {len(regressions)} {issue_on} regression(s) to the webhook")  # fmt: skip


def run_detect(args: argparse.Namespace) -> int:
    """Change points over each series' nightly history, recorded as alerts; exit 1 on an open confirmed regression."""
    picked = selection(args, args.where)
    if args.webhook:
        webhook.check(args.webhook)  # before anything is recorded
    thresholds = overrides(args)
    if args.nights < 2 * changepoints.MIN_SIZE:
        raise UsageError(f"--nights must be at least {2 * changepoints.MIN_SIZE}")
    db = db_path(args)
    with database.open_store(db) as reader:
        metric = metrics.get_metric(args.metric or alerts.headline_metric(reader.connection()))
        nominate = args.issue_on == "reproduced"  # a check decides: the history may nominate on its last night
        scanned = alerts.scan(reader.connection(), picked, metric, thresholds, args.nights, nominate)
    with database.update(db) as con:
        counts = alerts.record(con, scanned, metric.name, datetime.now(UTC))
        open_alerts = plain_rows(records.list_alerts(con, records.OPEN, metric.name))
        open_alerts = [a for a in open_alerts if a["series_key"] in scanned.nights]
        for alert in open_alerts:  # the commits either side of each change, for its range
            alert["commits"] = records.change_commits(con, alert["series_key"], alert["suite_run_id"])
    console.print(
        f"{len(scanned.nights)} series, {len(scanned.found)} change(s) found, {scanned.outliers} outlier night(s) "
        f"set aside; alerts: {counts['created']} new, {counts['confirmed']} confirmed, {counts['updated']} updated, "
        f"{counts['withdrawn']} withdrawn, {counts['moved']} moved"
    )
    for item in scanned.found:  # how many nights each verdict needed
        label = series_label(scanned.fields.get(item.series_key, {})) or item.series_key
        moved = f" (moved from {str(item.moved_from)[:10]})" if item.moved_from not in (None, item.change_at) else ""
        console.print(f"{escape(label)}: {item.change.ratio - 1:+.1%} from {str(item.change_at)[:10]}{moved}, "
                      f"{item.change.nights_text()}")  # fmt: skip
    show_alerts(open_alerts, args.format, args.out, f"stepwatch: open {metric.name} alerts", compare_url())
    for key, noise in scanned.noise.items():
        warning = bimodal_warning(series_label(scanned.fields[key]), metric.name, noise)
        if warning:
            console.print(f"[yellow]{escape(warning)}[/yellow]")
    regressions = [a for a in open_alerts if pages(a, args.issue_on)
                   and worse(metric, scanned.fields.get(a["series_key"], {}), thresholds, a["ratio"])]  # fmt: skip
    new_tonight = counts["created"] + counts["confirmed"]  # said once; a reproduced one is said by the check
    if regressions and args.webhook and new_tonight and args.issue_on == "confirmed":
        post(args.webhook, regressions, scanned.fields, metric, args.issue_on)
    suspected = [a for a in open_alerts if args.issue_on == "reproduced" and not a.get("verification")
                 and worse(metric, scanned.fields.get(a["series_key"], {}), thresholds, a["ratio"])]  # fmt: skip
    if suspected:
        console.print(f"{len(suspected)} suspected regression(s) not verified yet: `stepwatch alerts verify` measures "
                      "them again on this runner, and only a reproduced one opens the issue")  # fmt: skip
    if regressions:
        console.print(f"[red]{len(regressions)} {args.issue_on} regression(s)[/red]: triage with `stepwatch alerts "
                      "ack ID`")  # fmt: skip
        return EXIT_REGRESSION
    return EXIT_OK


def pages(alert: dict[str, Any], issue_on: str) -> bool:
    """Whether an open alert opens the regression issue: one a verifying check reproduced (``issue_on`` reproduced,
    whatever the history says now), or one the history confirmed and no check has found not there."""
    if issue_on == "reproduced":
        return alert.get("verification") == records.REPRODUCED
    return alert["status"] == records.CONFIRMED and alert.get("verification") not in (
        records.NOT_REPRODUCED, records.MACHINE,
    )  # fmt: skip


def run_verify(args: argparse.Namespace) -> int:
    """Measure suspected changes again on this runner and record each verdict on its alert; then the open alerts'
    report, and exit 1 while a regression that opens the issue (``--issue-on``) is open."""
    if args.night_budget < 0 or args.most < 0:
        raise UsageError("--night-budget and --most are 0 (none) or more")
    if args.webhook:
        webhook.check(args.webhook)  # before anything is measured
    # The project's trials setting is a night's (2, say); a check of two nights starts at a check's first look.
    first = max(args.trials, TRIALS)
    plan = verify.Plan(
        Path.cwd(), sequential.Design.of(first, max(args.max_trials, first), verification.ALPHA), overrides(args),
        args.results,
        args.checks_db, execution.RunOptions(), args.aa, args.night_budget or None, args.most or None,
        not args.fresh_environments, tuple(args.pip_arg), import_command(args),
    )  # fmt: skip
    db = db_path(args)
    hooks = TerminalHooks()
    done = verify.verify(db, args.ids or None, plan, hooks)
    for item in done:
        for line in item.lines:
            console.print(escape(line))
        console.print(f"alert {item.alert_id}: [bold]{escape(item.found.verification)}[/bold]")
    if not done:
        console.print("no alert to verify: every open one is verified (`stepwatch alerts list` says how)")
    with database.open_store(db) as reader:
        open_alerts = plain_rows(records.list_alerts(reader.connection(), records.OPEN))
    show_alerts(open_alerts, args.format, args.out, "stepwatch: open alerts, verified", compare_url())
    thresholds = overrides(args)
    regressions = [a for a in open_alerts if pages(a, args.issue_on)
                   and worse(metrics.get_metric(a["metric"]), a, thresholds, a["ratio"])]  # fmt: skip
    tonight = {item.alert_id for item in done if item.found.verification == records.REPRODUCED}
    fresh = [a for a in regressions if a["id"] in tonight]
    if fresh and args.webhook and args.issue_on == "reproduced":  # each said once, as its check reproduced it
        post(args.webhook, fresh, {a["series_key"]: a for a in fresh}, metrics.get_metric(fresh[0]["metric"]),
             args.issue_on)  # fmt: skip
    if regressions:
        console.print(f"[red]{len(regressions)} {args.issue_on} regression(s)[/red]: triage with `stepwatch alerts "
                      "ack ID`")  # fmt: skip
        return EXIT_REGRESSION
    return EXIT_OK


def compare_url() -> str | None:
    """Where GitHub compares two commits of the repository a workflow runs in (its variables), else None."""
    server, repository = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    return f"{server}/{repository}/compare" if server and repository else None


def regression_text(regressions: list[dict[str, Any]], fields: dict[str, dict], metric: metrics.Metric,
                    issue_on: str = "confirmed") -> str:  # fmt: skip
    """The webhook's message: one line per regression, its series, its change, when and what moved, and what its
    verifying check measured (with the first slow commit), where one ran."""
    lines = [f"stepwatch: {len(regressions)} {issue_on} training-speed regression(s) in {metric.label.lower()}"]
    for alert in regressions:
        moved = alert.get("versions_changed")
        versions = ", ".join(f"{k} {' -> '.join(v)}" for k, v in json.loads(moved).items()) if moved else ""
        label = series_label(fields.get(alert["series_key"], {})) or alert["series_key"]
        checked = verified_text(alert)
        lines.append(f"- {label}: {alert['ratio'] - 1:+.1%} from {str(alert['change_at'])[:10]}"
                     + (f" ({versions})" if versions else "") + f", alert {alert['id']}"
                     + (f"; verified: {checked}" if checked else ""))  # fmt: skip
    return "\n".join(lines)


def run_list(args: argparse.Namespace) -> int:
    """Show alerts: open ones by default, or a given status, or all."""
    statuses = {"open": records.OPEN, "all": records.STATUSES}.get(args.status, (args.status,))
    with database.open_store(db_path(args)) as reader:
        rows = plain_rows(records.list_alerts(reader.connection(), statuses, args.metric))
    show_alerts(rows, args.format, args.out, f"stepwatch alerts ({args.status})")
    return EXIT_OK


def run_set(args: argparse.Namespace) -> int:
    """Move one alert along its lifecycle (acknowledged, false positive, fixed)."""
    with database.update(db_path(args)) as con:
        before = records.set_status(con, args.id, args.new_status, args.note, datetime.now(UTC))
    note = f" ({escape(args.note)})" if args.note else ""
    console.print(f"alert {args.id}: {before} -> {args.new_status}{note}")
    return EXIT_OK


def run_save(args: argparse.Namespace) -> int:
    """Write every alert, with its status and note, where `stepwatch rebuild --alerts` reads it back."""
    saved = history.save_alerts(db_path(args), args.out)
    console.print(f"{saved} alert(s) saved to {escape(args.out)}")
    return EXIT_OK
