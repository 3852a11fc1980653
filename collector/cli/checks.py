"""What the interleaved checks' commands share (upgrade-check, code-check, bisect): their arguments, and the report
of a measured check with its exit code."""

from __future__ import annotations

import argparse
from pathlib import Path

from stepwatch.collector.cli import exits
from stepwatch.collector.cli.arguments import (
    add_environment_arguments,
    add_matrix_arguments,
    add_profile_argument,
    console,
    db_path,
)
from stepwatch.collector.cli.exits import EXIT_FAILED, EXIT_OK
from stepwatch.collector.errors import UsageError
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
from stepwatch.collector.output.text import write_file
from stepwatch.collector.workflows import check

AA_HELP = (
    "also run the baseline in a second, separately built environment (an A/A; in a bisect, in its first step), "
    "interleaved: reported beside the verdict, and its between-environment variation widens the intervals"
)


def add_check_arguments(parser: argparse.ArgumentParser, results: Path, aa: str = AA_HELP) -> None:
    """What an interleaved check takes (upgrade-check, code-check, and each step of a bisect): the suite and its
    narrowing flags, trials per side, the results folder, ``--aa`` (``aa``: what it runs) and how environments are
    built."""
    add_matrix_arguments(parser)
    parser.add_argument("--trials", type=int, default=5, help="trials per config and side (default 5)")
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
    first = failure_lines(ran) + first  # what failed, before what changed
    notes = aa_lines(result.aa, aa) + between_lines(done.between, alone) + own_results(ran.out_dir, db_path(args))
    notes += more
    appendix = report_lines(*done.explained, done.aa_explained, done.profile_errors) if done.explained else ()
    write_file(to_markdown(result, title, preface + notes, appendix, first), ran.out_dir / "report.md")
    show_comparison(result, args.format, args.out, title, exits.of_comparison, preface, notes, appendix, first)
    console.print(f"report: {ran.out_dir / 'report.md'}")
    code = exits.of_comparison(result, args.fail_on_inconclusive)
    failed = ran.failed()
    if code == EXIT_OK and failed:
        console.print(f"[red]{len(failed)} of {len(ran.outcomes)} trials failed[/red]")
        return EXIT_FAILED
    return code
