"""``stepwatch upgrade-check``: the suite under two package sets, interleaved on this machine, compared."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import Progress

from collector.analysis import calibration, comparison, report, stats
from collector.analysis.comparison import EXIT_FAILED, EXIT_OK
from collector.analysis.thresholds import Override
from collector.bench import catalog, runner, upgrade
from collector.bench.suite import load_suite, narrow
from collector.cli.arguments import (
    PROGRESS_COLUMNS,
    UsageError,
    add_analysis_arguments,
    add_environment_arguments,
    add_matrix_arguments,
    calibrated_between,
    console,
    db_path,
    matrix_values,
    overrides,
)
from collector.cli.ingest import ingest_and_report
from collector.config import BenchmarkConfig
from collector.store import database
from collector.store.selection import Selection


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


def check_trials(trials: int) -> None:
    if trials < 2:
        raise UsageError("--trials must be at least 2: a side needs two trials for a confidence interval")


def register(commands: Any) -> None:
    check = commands.add_parser(
        "upgrade-check", help="the suite under two package sets, interleaved on this machine, compared"
    )
    check.add_argument("--baseline", required=True, help="pip requirements, e.g. 'tensorflow==2.20.0'")
    check.add_argument("--candidate", required=True, help="pip requirements, e.g. 'tensorflow==2.21.0 keras==3.15.1'")
    add_check_arguments(check, upgrade.RESULTS_DIR)
    check.add_argument("--fail-on-inconclusive", action="store_true", help="exit 3 when any verdict is inconclusive")
    check.add_argument("--dry-run", action="store_true", help="print the interleaved plan and exit")

    add_analysis_arguments(check, several_metrics=True, default_db=upgrade.STORE, calibrated=True)
    check.set_defaults(handler=run)


@dataclass
class Measured:
    """One interleaved check, ingested and compared: the trials, baseline vs candidate (with its A/A, when one
    ran, as ``comparison.aa``), and the between-environment variance per metric that its intervals cover."""

    check: upgrade.Check
    comparison: comparison.Comparison
    between: dict[str, stats.Between]


def run_interleaved(
    configs: list[BenchmarkConfig],
    trials: int,
    suite: str,
    envs: dict[str, upgrade.Environment],
    results: str | Path,
    options: runner.RunOptions,
    label: str = "",
) -> upgrade.Check:
    """Every environment's trials, interleaved, with a progress bar and a line per trial (``label`` prefixes
    them): an upgrade check, a bisect step, a calibration."""
    with Progress(*PROGRESS_COLUMNS, console=console, transient=False) as progress:
        task = progress.add_task("starting", total=len(configs) * trials * len(envs))

        def on_start(side: str, config: Any, trial: int) -> None:
            progress.update(task, description=f"{label}{side}: {config.label()} trial {trial + 1}/{trials}")

        def on_done(side: str, outcome: runner.Outcome) -> None:
            progress.console.print(report.trial_line(f"{label}{side}: {outcome.config.label()}", outcome.row,
                                                     outcome.trial))  # fmt: skip
            progress.advance(task)

        return upgrade.run(configs, trials, suite, envs, results, options, on_start, on_done)


def measure(
    configs: list[BenchmarkConfig],
    trials: int,
    suite: str,
    envs: dict[str, upgrade.Environment],
    results: str | Path,
    options: runner.RunOptions,
    db: Path,
    metric_names: list[str],
    thresholds: list[Override],
    label: str = "",
    between: dict[str, stats.Between] | None = None,
) -> Measured:
    """Run the environments' trials interleaved (with a progress bar), ingest them and compare them: an upgrade
    check, and each step of a bisect. ``label`` prefixes the progress lines. ``between``: what is already known
    of the between-environment variance (a calibration, an earlier A/A); with an A/A side in ``envs`` its own
    estimate is pooled in."""
    check = run_interleaved(configs, trials, suite, envs, results, options, label)
    ingest_and_report([str(check.out_dir)], db, synthetic=False)
    selections = {side: Selection.of(suite_run_id=run_id) for side, run_id in check.suite_run_ids.items()}
    known = dict(between or {})
    aa = None
    with database.open_store(db) as reader:
        con = reader.connection()
        if upgrade.AA in envs:
            aa = comparison.build(con, selections["baseline"], selections[upgrade.AA], metric_names, thresholds, known)
            for name in metric_names:
                pairs = [(r.result.baseline, r.result.candidate) for r in aa.rows if r.metric.name == name]
                pooled = stats.pool_between([known.get(name), calibration.aa_between(pairs)])
                if pooled is not None:
                    known[name] = pooled
        result = comparison.build(con, selections["baseline"], selections["candidate"], metric_names, thresholds, known)
    result.aa = aa
    return Measured(check, result, known)


def side_environments(
    sides: dict[str, tuple[str, ...]], args: argparse.Namespace, aa: bool
) -> dict[str, upgrade.Environment]:
    """Every side's environment and, with ``aa``, a second one of the baseline's requirements (built separately)."""
    envs = upgrade.ensure_all(sides, args.reuse_site_packages, tuple(args.pip_arg), console.print)
    if aa:
        envs[upgrade.AA] = upgrade.ensure(
            upgrade.AA, sides["baseline"], args.reuse_site_packages, tuple(args.pip_arg), console.print, copy=1
        )
    return envs


def run(args: argparse.Namespace) -> int:
    """Build (or reuse) an environment per side, run the suite interleaved, ingest, compare, report."""
    try:
        sides = {side: upgrade.parse_side(getattr(args, side), side) for side in upgrade.SIDES}
    except ValueError as error:
        raise UsageError(str(error)) from None
    suite = load_suite(args.suite)
    configs = list(narrow(suite.configs, matrix_values(args)))
    check_trials(args.trials)
    order = (*upgrade.SIDES, upgrade.AA) if args.aa else upgrade.SIDES
    if args.dry_run:
        for side, config, trial in upgrade.plan(configs, args.trials, order):
            print(f"{side} {config.label()} trial {trial + 1}")
        return EXIT_OK
    thresholds = overrides(args)
    known = calibrated_between(args)
    envs = side_environments(sides, args, args.aa)
    options = runner.RunOptions(price_per_hour=args.price_per_hour, prices=catalog.load_prices(args.prices))
    done = measure(
        configs, args.trials, suite.name, envs, args.results, options, db_path(args), args.metric, thresholds,
        between=known,
    )  # fmt: skip
    check, result = done.check, done.comparison
    failed = check.failed()
    preface = report.upgrade_preface(
        sides["baseline"], sides["candidate"], len(configs), args.trials, suite.name, check.host(),
        len(failed), len(check.outcomes), upgrade.package_diff(envs["baseline"], envs["candidate"]),
    )  # fmt: skip
    notes = report.aa_lines(result.aa) + report.between_lines(done.between)
    title = f"stepwatch upgrade check: {' '.join(sides['baseline'])} -> {' '.join(sides['candidate'])}"
    report.write_file(report.to_markdown(result, title, preface + notes), check.out_dir / "report.md")
    report.show_comparison(result, args.format, args.out, title, preface, notes)
    console.print(f"report: {check.out_dir / 'report.md'}")
    code = result.exit_code(args.fail_on_inconclusive)
    if code == EXIT_OK and failed:
        console.print(f"[red]{len(failed)} of {len(check.outcomes)} trials failed[/red]")
        return EXIT_FAILED
    return code
