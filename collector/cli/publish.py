"""``stepwatch publish``: the nightly's last job. The night's parquet found wherever its artifacts put them,
ingested (a corrupt file quarantined, never archived), archived with the alerts and a static page of the night on
the history branch's work tree, change points detected, and the branch pushed (retried over a push race). With
``--alert``, it triages one alert instead of taking a night.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from stepwatch.collector.cli.arguments import add_db_argument, add_issue_argument, console, db_path
from stepwatch.collector.cli.exits import EXIT_OK
from stepwatch.collector.cli.progress import TerminalHooks
from stepwatch.collector.errors import UsageError
from stepwatch.collector.store import history, objectstore
from stepwatch.collector.store.address import named
from stepwatch.collector.store.files import DB_ENV
from stepwatch.collector.workflows import publish

PAGE = "site/index.html"  # on the history branch: the night's static page
ALERT_ACTIONS = ("ack", "false-positive", "fixed")


def register(commands: Any) -> None:
    parser = commands.add_parser("publish", help="the nightly's publish: ingest, archive and push a night's results")
    parser.add_argument(
        "sources", nargs="*",
        help="folders the collect jobs' artifacts were downloaded into (any layout: every parquet below them), and "
        "s3:// or gs:// prefixes (ingested, not archived: the bucket is the history)",
    )  # fmt: skip
    parser.add_argument("--history", type=Path, required=True, help="the history branch's work tree (a git clone)")
    parser.add_argument("--push", metavar="BRANCH", help="push the history to this branch of its origin")
    parser.add_argument(
        "--collect-result", help="the collect jobs' result as GitHub gives it (success, failure, cancelled, skipped)"
    )
    parser.add_argument("--report", default="stepwatch-report.md", help="where the detection's markdown goes")
    parser.add_argument("--summary", help="append the night's summary here (GitHub's job summary)")
    parser.add_argument("--github-output", help="write page= and pages= here (GitHub's step outputs)")
    parser.add_argument("--pages", action="store_true", help="say that the page is to be published to GitHub Pages")
    parser.add_argument(
        "--profiles-budget", type=float, default=publish.PROFILES_BUDGET / 2**20, metavar="MB",
        help=f"raw profiles kept on the history branch a night, in MB (default {publish.PROFILES_BUDGET // 2**20}; "
        "0: none); the rest stay in the run's artifacts, and every profile's op table is in its row",
    )  # fmt: skip
    parser.add_argument(
        "--keep-profiles", type=int, default=publish.KEEP_NIGHTS, metavar="NIGHTS",
        help=f"raw profiles stay on the history branch for the last NIGHTS nights (default {publish.KEEP_NIGHTS}); "
        "a month's results are compacted into one file once it is over",
    )  # fmt: skip
    parser.add_argument(
        "--keep-commits", action="store_true",
        help="push the night as a commit on the branch's history (default: the branch is one commit, replaced each "
        "night, so that a clone fetches only what the history holds now)",
    )  # fmt: skip
    parser.add_argument(
        "--night", type=_night, default=None, metavar="YYYY-MM-DD",
        help="the night's date, for its profiles' folder and the month's compaction (default: today, UTC)",
    )  # fmt: skip
    parser.add_argument(
        "--alert", nargs=2, metavar=("ACTION", "ID"),
        help=f"triage one alert instead of taking a night: ACTION is one of {', '.join(ALERT_ACTIONS)}",
    )  # fmt: skip
    parser.add_argument("--note", help="why (with --alert; required for ack)")
    parser.add_argument(
        "--verify", action="store_true",
        help="after detection, measure the changes it suspects again on this runner (`stepwatch alerts verify`, with "
        "the project's settings: the night's budget, the checks' trials) and detect again: the exit code then says "
        "whether a regression that opens the issue (issue-on) is open",
    )  # fmt: skip
    add_issue_argument(parser)
    add_db_argument(parser)
    parser.set_defaults(handler=run)


def _night(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def _detect(db: Path, report: str, issue_on: str) -> int:
    """``stepwatch detect`` on the store, with the project's settings, its markdown to ``report``."""
    from stepwatch.collector.cli import apply_project, build_parser
    from stepwatch.collector.cli.alerts import run_detect
    from stepwatch.collector.project import Project

    argv = ["detect", "--format", "markdown", "--out", report, "--db", named(db), "--issue-on", issue_on]
    parser = build_parser(argv)
    apply_project(parser, argv, Project.find())
    return run_detect(parser.parse_args(argv))


def _verify(db: Path, issue_on: str) -> None:
    """``stepwatch alerts verify`` on the store, with the project's settings (its exit code is detect's, after)."""
    from stepwatch.collector.cli import apply_project, build_parser
    from stepwatch.collector.cli.alerts import run_verify
    from stepwatch.collector.project import Project

    argv = ["alerts", "verify", "--db", named(db), "--issue-on", issue_on]
    parser = build_parser(argv)
    apply_project(parser, argv, Project.find())
    args = parser.parse_args(argv)
    if args.issue_on == "confirmed":
        console.print("issue-on confirmed: the history's confirmation opens the issue, and no check verifies it")
        return
    run_verify(args)


def _triage(db: Path, action: str, alert: str, note: str | None) -> None:
    from stepwatch.collector.cli import build_parser
    from stepwatch.collector.cli.alerts import run_set

    if action not in ALERT_ACTIONS:
        raise UsageError(f"--alert {action}: the action is one of {', '.join(ALERT_ACTIONS)}")
    argv = ["alerts", action, alert, "--db", named(db), *(["--note", note] if note else [])]
    run_set(build_parser(argv).parse_args(argv))


def night_of(jobs: list[publish.Job], tree: Path, branch: str | None) -> list[str]:
    """What names the night on its page: the commit and the workflow run (GitHub's variables, where it runs), how
    many collect jobs ran no trial ok, and where the history is when it is another repository's (``--history``'s
    origin), as the page's flags."""
    flags = []
    if os.environ.get("GITHUB_SHA"):
        flags += ["--commit", os.environ["GITHUB_SHA"]]
    server, repository, run = (os.environ.get(f"GITHUB_{name}") for name in ("SERVER_URL", "REPOSITORY", "RUN_ID"))
    if server and repository and run:
        flags += ["--run-url", f"{server}/{repository}/actions/runs/{run}"]
    origin = publish.origin(tree)
    if branch and origin and server and repository and origin.removesuffix(".git") != f"{server}/{repository}":
        flags += ["--history", f"git:{origin}#{branch}"]
    if jobs:
        flags += ["--jobs", f"{sum(1 for job in jobs if not job.ok)}/{len(jobs)}"]
        for job in jobs:  # a job that ran no trial ok: its name, and why its first trial failed
            if not job.ok:
                flags += ["--failed-job", f"{job.name}: {job.error or 'it wrote no row'}"]
    return flags


def write_page(db: Path, target: Path, report: str | None, night: list[str] = ()) -> None:
    """The night's static page, drawn by the dashboard's own figures (in a process of its own: the dashboard is a
    layer of its own, beside the CLI); ``night``: what names it (``night_of``)."""
    # The store through the environment: a shared store's address may hold a password, which arguments would show.
    command = [sys.executable, "-m", "stepwatch.dashboard.page", "--out", str(target), *night]
    if report and Path(report).is_file():
        command += ["--report", report]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, DB_ENV: named(db)})
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        console.print(f"note: no page tonight: {lines[-1] if lines else 'the page failed'}")


def run(args: argparse.Namespace) -> int:
    """Publish a night (or triage an alert), archive and push the history; the detection's exit code (a night whose
    every collect job failed is said so, on the page and in the summary: those jobs carry the failure)."""
    tree = args.history
    if not tree.is_dir():
        raise UsageError(f"--history {tree}: no such folder (clone the history branch there, or git init it)")
    if args.alert and args.sources:
        raise UsageError("--alert triages one alert: it takes no results")
    db = db_path(args)
    db.parent.mkdir(parents=True, exist_ok=True)
    nights = [Path(s) for s in args.sources if not objectstore.is_remote(s)]
    remote = [s for s in args.sources if objectstore.is_remote(s)]
    hooks = TerminalHooks()
    with hooks.ingesting(db) as (on_file, _):
        night = publish.collect(nights, remote, db, tree, on_file, args.night or datetime.now(UTC).date().isoformat(),
                                int(args.profiles_budget * 2**20), args.keep_profiles)  # fmt: skip
    if night.rebuilt is not None:
        console.print(f"the store was gone: rebuilt from {tree / publish.RESULTS} ({night.rebuilt.rows_added} rows)")
    for report in night.ingested:
        hooks.ingested(report, db)
    code = EXIT_OK
    if args.alert:  # then detection again: its exit code and report say what is left open
        _triage(db, args.alert[0], args.alert[1], args.note)
        code = _detect(db, args.report, args.issue_on)
    elif db.exists():
        code = _detect(db, args.report, args.issue_on)
        if args.verify:  # the history nominated; the checks decide, and detection says what is left open
            _verify(db, args.issue_on)
            code = _detect(db, args.report, args.issue_on)
    if db.exists():
        history.save_alerts(db, str(tree / publish.ALERTS_FILE))
        write_page(db, tree / PAGE, None if args.alert else args.report, night_of(night.jobs, tree, args.push))
    message = (
        f"stepwatch history: alert {args.alert[1]} {args.alert[0]}" if args.alert else "stepwatch history: a night"
    )
    run_id = os.environ.get("GITHUB_RUN_ID")  # named in the commit, where there is one
    committed = publish.commit(tree, f"{message}{f' (run {run_id})' if run_id else ''}")
    if args.push and committed:
        night.pushed = publish.push(tree, args.push, console.print, squash=not args.keep_commits)
    lines = publish.summary(night, args.collect_result)
    print("\n".join(lines[2:]))
    if args.summary:
        with open(args.summary, "a") as out:
            out.write("\n".join(lines) + "\n\n")
    if args.github_output:
        page = tree / PAGE
        with open(args.github_output, "a") as out:
            out.write(f"page={page if page.exists() else ''}\npages={str(args.pages and page.exists()).lower()}\n")
    if not args.alert and publish.every_job_failed(night, args.collect_result):
        # Said on the page, in the summary and here; the collect jobs that crashed carry the failure. The publish
        # job itself did its work (it was red too: three red jobs for one crash, and no page of the night).
        console.print("[red]every collect job failed tonight[/red]: no trial ran ok (see the summary and the page)")
    return code
