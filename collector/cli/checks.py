"""What the interleaved checks' commands share (upgrade-check, code-check, bisect): their arguments, and the report
of a measured check with its exit code."""

from __future__ import annotations

import argparse
from pathlib import Path

from stepwatch.collector.analysis import calibration, sequential
from stepwatch.collector.analysis.comparison import Comparison
from stepwatch.collector.cli import exits
from stepwatch.collector.cli.arguments import (
    add_environment_arguments,
    add_matrix_arguments,
    add_numerics_argument,
    add_profile_argument,
    console,
    db_path,
)
from stepwatch.collector.cli.exits import EXIT_FAILED, EXIT_OK
from stepwatch.collector.config import TRIALS
from stepwatch.collector.errors import UsageError
from stepwatch.collector.metrics import get_metric
from stepwatch.collector.output.comparison import (
    AA_ENVIRONMENT,
    NO_BETWEEN,
    aa_lines,
    between_lines,
    show_comparison,
    to_markdown,
)
from stepwatch.collector.output.explain import report_lines
from stepwatch.collector.output.failures import failure_lines
from stepwatch.collector.output.sequential import sequential_lines
from stepwatch.collector.output.text import write_file
from stepwatch.collector.workflows import check

AA_HELP = (
    "also run the baseline in a second, separately built environment (an A/A; in a bisect, in its first step), "
    "interleaved: reported beside the verdict, and its between-environment variation widens the intervals"
)


def add_check_arguments(
    parser: argparse.ArgumentParser, results: Path, aa: str = AA_HELP, numerics: str = "show"
) -> None:
    """What an interleaved check takes (upgrade-check, code-check, and each step of a bisect): the suite and its
    narrowing flags, trials per side, the results folder, ``--aa`` (``aa``: what it runs), how environments are
    built, and whether a changed training fails it (``numerics``: the command's default)."""
    add_matrix_arguments(parser)
    add_numerics_argument(parser, numerics)
    parser.add_argument(
        "--trials", type=int, default=TRIALS,
        help=f"trials per config and side at the first look (default {TRIALS}); more rounds follow while "
        "a verdict is inconclusive",
    )  # fmt: skip
    parser.add_argument(
        "--max-trials", type=int, default=sequential.MAX_TRIALS, metavar="N",
        help=f"trials per config and side at the last look (default {sequential.MAX_TRIALS}; --trials: one look, a "
        "fixed design)",
    )  # fmt: skip
    parser.add_argument(
        "--budget", type=float, default=sequential.BUDGET_MINUTES, metavar="MINUTES",
        help=f"start no round of trials that would end past this many minutes from the check's start (default "
        f"{sequential.BUDGET_MINUTES:g}; 0: none); two rounds always run",
    )  # fmt: skip
    parser.add_argument("--results", default=str(results), help=f"folder for the parquet (default {results})")
    parser.add_argument("--aa", action="store_true", help=aa)
    add_environment_arguments(parser)
    add_profile_argument(parser)


def own_results(folder: Path, db: Path) -> tuple[str, ...]:
    """Where a check kept what it measured: its own folder and store, never the nightly's."""
    return (f"This check's trials are in `{folder}` and its store `{db}` (its own: the nightly's history is "
            "never written by a check).", "")  # fmt: skip


def check_trials(trials: int) -> None:
    if trials < 2:
        raise UsageError("--trials must be at least 2: a side needs two trials for a confidence interval")


def design_of(args: argparse.Namespace) -> sequential.Design:
    """The check's looks: from --trials to --max-trials; where the runner has a calibration, the first look is as
    large as its noise needs for the first metric's threshold (``sequential.first_look``)."""
    check_trials(args.trials)
    if args.max_trials < args.trials:
        raise UsageError(f"--max-trials ({args.max_trials}) must be at least --trials ({args.trials})")
    design = sequential.Design.of(args.trials, args.max_trials)
    found = calibration.find(args.calibration)
    known = [name for name in args.metric if found and name in found.metrics]
    if not known:
        return design
    metric = found.metrics[known[0]]
    first = sequential.first_look(metric.within_cv, metric.between, get_metric(known[0]).threshold, design)
    if first <= args.trials:
        return design
    console.print(f"the runner's calibration ({found.runner}) puts the first look at {first} trials per side: the "
                  f"fewest at which its noise lets {known[0]} see ±{get_metric(known[0]).threshold:.0%}")  # fmt: skip
    return sequential.Design.of(first, args.max_trials)


def deadline_of(args: argparse.Namespace, started: float) -> float | None:
    """When the check's budget (--budget minutes from ``started``, ``time.monotonic()``) runs out; None for none."""
    if args.budget < 0:
        raise UsageError(f"--budget must be 0 (none) or more minutes, not {args.budget:g}")
    return started + args.budget * 60 if args.budget else None


def budget_of(args: argparse.Namespace) -> float | None:
    return args.budget or None


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
    when no between-environment variation widens them; ``more`` follows its notes; ``first`` leads the report, after
    what failed (which side, which workload, why)."""
    ran, result = done.check, done.comparison
    result.looks = done.sequential.payload() if done.sequential else None
    first = failure_lines(ran) + first  # what failed, before what changed
    notes = sequential_lines(done.sequential, result) + aa_lines(result.aa, aa) + between_lines(done.between, alone)
    notes += own_results(ran.out_dir, db_path(args))
    notes += more
    appendix = report_lines(*done.explained, done.aa_explained, done.profile_errors) if done.explained else ()
    write_file(to_markdown(result, title, preface + notes, appendix, first), ran.out_dir / "report.md")
    numerics = getattr(args, "numerics", "show")

    def code_of(comparison: Comparison) -> int:
        return exits.of_comparison(comparison, args.fail_on_inconclusive, numerics)

    show_comparison(result, args.format, args.out, title, code_of, preface, notes, appendix, first)
    console.print(f"report: {ran.out_dir / 'report.md'}")
    code = code_of(result)
    failed = ran.failed()
    if code == EXIT_OK and failed:
        console.print(f"[red]{len(failed)} of {len(ran.outcomes)} trials failed[/red]")
        return EXIT_FAILED
    return code
