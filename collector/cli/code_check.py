"""``stepwatch code-check``: does this pull request slow training down? Its merge base against its head, both
checked out and run on this machine, interleaved, compared (``collector.workflows.code_check``)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from stepwatch.collector.cli.arguments import (
    add_analysis_arguments,
    add_import_arguments,
    calibrated_between,
    db_path,
    import_command,
    matrix_values,
    metric_list,
    overrides,
    price_options,
    trial_options,
)
from stepwatch.collector.cli.checks import add_check_arguments, budget_of, deadline_of, design_of, report
from stepwatch.collector.cli.exits import EXIT_FAILED, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION
from stepwatch.collector.cli.progress import TerminalHooks
from stepwatch.collector.environments import virtualenvs
from stepwatch.collector.output import code_check as said
from stepwatch.collector.output.comparison import NO_BETWEEN
from stepwatch.collector.output.failures import reason_line
from stepwatch.collector.output.text import publish, step_output, time_split_lines
from stepwatch.collector.runner import execution
from stepwatch.collector.runner.suite import load_suite, narrow
from stepwatch.collector.workflows import check, code_check
from stepwatch.collector.workflows.code_check import BUNDLED, CHANGED, UNCHANGED

AA_HELP = (
    "also run the merge base in a second checkout (an A/A), interleaved: reported beside the verdict, so that a "
    "false alarm of this runner shows"
)
# What a code check compares unless told: the compiled step's counters and the peak memory (what changed for sure,
# on any runner) beside the throughput.
METRICS = "examples_per_sec,counters,peak_memory_bytes"


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "code-check", help="two commits of this repository (a pull request's merge base and head), interleaved here"
    )
    parser.add_argument(
        "--base", help="the branch the change goes into: the baseline is its merge base with --head (default: the "
        "default branch, origin/HEAD, main or master)",
    )  # fmt: skip
    parser.add_argument("--head", help="the commit to check (default HEAD; '.': the working tree, edits included)")
    add_check_arguments(parser, code_check.RESULTS_DIR, AA_HELP)
    parser.add_argument("--fail-on-inconclusive", action="store_true", help="exit 3 when any verdict is inconclusive")
    parser.add_argument("--dry-run", action="store_true", help="print what differs and the interleaved plan, and exit")
    parser.add_argument(
        "--github-output", metavar="FILE",
        help="append checked=true or false (false: no workload's code differs, nothing ran) and, when trials "
        "failed, reason=the first failure in one line to this file ($GITHUB_OUTPUT)",
    )  # fmt: skip
    add_analysis_arguments(parser, several_metrics=True, default_db=code_check.STORE, calibrated=True)
    add_import_arguments(parser)
    parser.set_defaults(handler=run, metric=metric_list(METRICS))


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # the checkouts are removed on the way out, as after Ctrl-C


def run(args: argparse.Namespace) -> int:
    """Check out both commits, find the workloads whose code differs, run them interleaved, compare, report. A
    SIGTERM (a cancelled CI job) stops it as Ctrl-C does."""
    before = signal.signal(signal.SIGTERM, _stop)
    try:
        return _check(args)
    finally:
        signal.signal(signal.SIGTERM, before)


def _check(args: argparse.Namespace) -> int:
    started = time.monotonic()
    design, deadline = design_of(args), deadline_of(args, started)
    command = import_command(args)
    if command is not None:
        return _check_imported(args, command, design)
    suite = load_suite(args.suite)
    configs = list(narrow(suite.configs, matrix_values(args), suite.defaults))
    commits = code_check.commits(Path.cwd(), args.base, args.head)
    virtualenvs.remove_left_behind(args.results)  # a killed check's (its worktrees: when checking out)
    hooks = TerminalHooks()
    with code_check.checked_out(commits, args.aa) as folders:
        found = code_check.workloads(configs, folders["baseline"], folders["candidate"])
        found += code_check.left_out(suite.configs, configs)
        packages = code_check.pins_changed(commits)
        runs = {CHANGED, UNCHANGED, BUNDLED} if packages else {CHANGED}
        measured = [w.config for w in found if w.state in runs]
        step_output(args.github_output, f"checked={'true' if measured else 'false'}\n")
        if not measured:
            text = said.nothing_json(found) if args.format == "json" else said.nothing_to_check(commits, found)
            publish(text, args.out)
            return EXIT_OK
        if args.dry_run:
            print("\n".join(said.workload_lines(commits, found, packages)).rstrip())
            for side, config, trial in virtualenvs.plan(measured, design.looks[0], tuple(folders)):
                print(f"{side} {config.label()} trial {trial + 1}")
            return EXIT_OK
        sides = code_check.sides(commits, folders, packages, args.reuse_site_packages, tuple(args.pip_arg), hooks)
        options = execution.RunOptions(**price_options(args), **trial_options(args))
        asked = check.Asked(args.metric, overrides(args), calibrated_between(args), pool_aa=sides.pins is not None)
        done = check.measure(
            measured, design, suite.name, sides.envs, args.results, options, db_path(args), asked, hooks,
            deadline=deadline, budget_minutes=budget_of(args),
        )  # fmt: skip
    minutes = (time.monotonic() - started) / 60
    why = reason_line(done.check)
    if why:
        step_output(args.github_output, f"reason={why}\n")
    return _report(args, commits, found, sides, done, len(measured), minutes, options.profile > 0)


def _check_imported(args: argparse.Namespace, command: Any, design: Any) -> int:
    """A code check by the team's own benchmark command (``import`` in stepwatch.toml): every series its output
    holds, on both commits, interleaved, with the A/A where asked; a markdown or text table, and the exit code."""
    from stepwatch.collector.analysis.thresholds import direction_for, threshold_for
    from stepwatch.collector.analysis.verification import aa_text
    from stepwatch.collector.metrics import IMPORTED_METRIC, get_metric
    from stepwatch.collector.outcomes import INCONCLUSIVE, REGRESSION
    from stepwatch.collector.output.text import MARKS, interval, percent, series_label
    from stepwatch.collector.workflows import import_check

    commits = code_check.commits(Path.cwd(), args.base, args.head)
    if args.dry_run:
        times = f"{design.looks[0]} to {design.looks[-1]} times a side"
        print(f"would run `{command.text}` {times}: {commits.base_name} -> {commits.head_name}")
        return EXIT_OK
    metric, thresholds = get_metric(IMPORTED_METRIC), overrides(args)
    judged = lambda s: (threshold_for(metric, s, thresholds), bool(direction_for(metric, s, thresholds)))  # noqa: E731
    try:
        found = import_check.check_commits(commits, command, design.looks, args.aa, TerminalHooks(), judged,
                                           design.alpha)  # fmt: skip
    except import_check.CommandFailed as error:
        step_output(args.github_output, f"checked=true\nreason={error}\n")
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    step_output(args.github_output, "checked=true\n")
    lines = [f"## stepwatch code check: {commits.base_name} -> {commits.head_name}", "",
             f"`{command.text}`, run on each side in interleaved rounds, up to {design.looks[-1]}.", "",
             "| | series | verdict | change | 95% CI | A/A |", "|---|---|---|---|---|---|"]  # fmt: skip
    verdicts = []
    for item in sorted(found.values(), key=lambda s: series_label(s.fields)):
        v, aa = item.verdict, item.aa
        call = v.verdict if v else "missing"
        verdicts.append(call)
        said_aa = aa_text(aa.verdict, aa.ratio, aa.ci_low, aa.ci_high) if aa else aa_text(None)  # quiet, or raised
        lines.append(f"| {MARKS.get(call, '')} | {series_label(item.fields)} | {call} | "
                     f"{percent(v.ratio) if v else 'n/a'} | {interval(v.ci_low, v.ci_high) if v else 'n/a'} | "
                     f"{said_aa} |")  # fmt: skip
    publish("\n".join(lines) + "\n", args.out)
    if REGRESSION in verdicts:
        return EXIT_REGRESSION
    return EXIT_INCONCLUSIVE if args.fail_on_inconclusive and INCONCLUSIVE in verdicts else EXIT_OK


def _report(
    args: argparse.Namespace,
    commits: code_check.Commits,
    found: list[code_check.Workload],
    sides: code_check.Sides,
    done: check.Measured,
    configs: int,
    minutes: float,
    profiled: bool,
) -> int:
    """The check's report (what differs, what ran and cost, the comparison, where to look next) and its exit code."""
    ran, result = done.check, done.comparison
    result.model_code.clear()  # the sides' code differs by design: no warning that it does (the preface says how)
    preface = said.workload_lines(commits, found, sides.pins is not None)
    if sides.pins is not None:
        moved = ", ".join(change.text() for change in sides.pins.changes)
        preface += (f"Packages that differ between the two environments: {moved or 'none'}.", "")
    preface += said.run_lines(configs, ran.rounds, ran.host(), len(ran.failed()), len(ran.outcomes), ran.spent(),
                              minutes)  # fmt: skip
    preface += time_split_lines(ran.time_split())
    title = f"stepwatch code check: {commits.base_name} -> {commits.head_name}"
    more = said.where_next(ran.suite_run_ids, str(db_path(args)), profiled, said.moved_metrics(result))
    alone = said.SAME_INTERPRETER if sides.pins is None else NO_BETWEEN
    return report(args, done, title, preface, said.AA_CHECKOUT, more, alone, said.for_sure(result))
