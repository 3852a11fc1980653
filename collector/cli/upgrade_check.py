"""``stepwatch upgrade-check``: the suite under two package sets, interleaved on this machine, compared."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from stepwatch.collector.cli import exits
from stepwatch.collector.cli.arguments import (
    add_analysis_arguments,
    add_environment_arguments,
    add_matrix_arguments,
    add_profile_argument,
    calibrated_between,
    console,
    db_path,
    matrix_values,
    overrides,
    trial_options,
)
from stepwatch.collector.cli.exits import EXIT_FAILED, EXIT_OK
from stepwatch.collector.cli.progress import TerminalHooks
from stepwatch.collector.environments import virtualenvs
from stepwatch.collector.errors import UsageError
from stepwatch.collector.output.comparison import (
    AA_ENVIRONMENT,
    NO_BETWEEN,
    aa_lines,
    between_lines,
    show_comparison,
    to_markdown,
    upgrade_preface,
)
from stepwatch.collector.output.explain import report_lines
from stepwatch.collector.output.text import write_file
from stepwatch.collector.runner import catalog, execution
from stepwatch.collector.runner.suite import load_suite, narrow
from stepwatch.collector.workflows import check


def add_check_arguments(parser: argparse.ArgumentParser, results: Path) -> None:
    """What an interleaved check of two environments takes (upgrade-check, and each step of a bisect): the
    suite and its narrowing flags, trials per side, the results folder and how the environments are built."""
    add_matrix_arguments(parser)
    parser.add_argument("--trials", type=int, default=5, help="trials per config and side (default 5)")
    parser.add_argument("--results", default=str(results), help=f"folder for the parquet (default {results})")
    parser.add_argument(
        "--aa", action="store_true",
        help="also run the baseline in a second, separately built environment (an A/A; in a bisect, in its first "
        "step), interleaved: reported beside the verdict, and its between-environment variation widens the intervals",
    )  # fmt: skip
    add_environment_arguments(parser)
    add_profile_argument(parser)


def own_results(folder: Path, db: Path) -> tuple[str, ...]:
    """Where a check kept what it measured: its own folder and store, never the nightly's."""
    return (f"This check's trials are in `{folder}` and its store `{db}` (its own: the nightly's history is "
            "never written by a check).", "")  # fmt: skip


def check_trials(trials: int) -> None:
    if trials < 2:
        raise UsageError("--trials must be at least 2: a side needs two trials for a confidence interval")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "upgrade-check", help="the suite under two package sets, interleaved on this machine, compared"
    )
    parser.add_argument("--baseline", required=True, help="pip requirements, e.g. 'tensorflow==2.20.0'")
    parser.add_argument("--candidate", required=True, help="pip requirements, e.g. 'tensorflow==2.21.0 keras==3.15.1'")
    add_check_arguments(parser, virtualenvs.RESULTS_DIR)
    parser.add_argument("--fail-on-inconclusive", action="store_true", help="exit 3 when any verdict is inconclusive")
    parser.add_argument("--dry-run", action="store_true", help="print the interleaved plan and exit")

    add_analysis_arguments(parser, several_metrics=True, default_db=virtualenvs.STORE, calibrated=True)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Build (or reuse) an environment per side, run the suite interleaved, ingest, compare, report."""
    try:
        sides = {side: virtualenvs.parse_side(getattr(args, side), side) for side in virtualenvs.SIDES}
    except ValueError as error:
        raise UsageError(str(error)) from None
    suite = load_suite(args.suite)
    configs = list(narrow(suite.configs, matrix_values(args), suite.defaults))
    check_trials(args.trials)
    order = (*virtualenvs.SIDES, virtualenvs.AA) if args.aa else virtualenvs.SIDES
    if args.dry_run:
        for side, config, trial in virtualenvs.plan(configs, args.trials, order):
            print(f"{side} {config.label()} trial {trial + 1}")
        return EXIT_OK
    thresholds = overrides(args)
    known = calibrated_between(args)
    hooks = TerminalHooks()
    envs = check.environments(sides, args.reuse_site_packages, tuple(args.pip_arg), args.aa, hooks)
    options = execution.RunOptions(
        price_per_hour=args.price_per_hour, prices=catalog.load_prices(args.prices), **trial_options(args)
    )
    done = check.measure(
        configs, args.trials, suite.name, envs, args.results, options, db_path(args), args.metric, thresholds,
        hooks, between=known,
    )  # fmt: skip
    ran = done.check
    failed = ran.failed()
    preface = upgrade_preface(
        sides["baseline"], sides["candidate"], len(configs), args.trials, suite.name, ran.host(),
        len(failed), len(ran.outcomes), virtualenvs.package_diff(envs["baseline"], envs["candidate"]),
        ran.compile_caches(), ran.spent(),
    )  # fmt: skip
    title = f"stepwatch upgrade check: {' '.join(sides['baseline'])} -> {' '.join(sides['candidate'])}"
    return report(args, done, title, preface)


def report(
    args: argparse.Namespace,
    done: check.Measured,
    title: str,
    preface: tuple[str, ...],
    aa: str = AA_ENVIRONMENT,
    more: tuple[str, ...] = (),
    alone: str = NO_BETWEEN,
    first: tuple[str, ...] = (),
) -> int:
    """A check's report, written beside its trials and shown as ``--format`` asks, and its exit code (4 when
    trials failed and nothing worse did). ``aa`` says what its A/A side was, ``alone`` what its intervals cover
    when no between-environment variation widens them; ``more`` follows its notes; ``first`` leads the report."""
    ran, result = done.check, done.comparison
    notes = aa_lines(result.aa, aa) + between_lines(done.between, alone) + own_results(ran.out_dir, db_path(args))
    notes += more
    appendix = report_lines(*done.explained, done.aa_explained) if done.explained else ()
    write_file(to_markdown(result, title, preface + notes, appendix, first), ran.out_dir / "report.md")
    show_comparison(result, args.format, args.out, title, exits.of_comparison, preface, notes, appendix, first)
    console.print(f"report: {ran.out_dir / 'report.md'}")
    code = exits.of_comparison(result, args.fail_on_inconclusive)
    failed = ran.failed()
    if code == EXIT_OK and failed:
        console.print(f"[red]{len(failed)} of {len(ran.outcomes)} trials failed[/red]")
        return EXIT_FAILED
    return code
