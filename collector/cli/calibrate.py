"""``stepwatch calibrate``: what this runner can see. The same packages in several separately built environments,
trials interleaved, every pair of environments compared as an upgrade check would (A/A): the false alarms per
metric, the variation between environments (which then widens compare's, upgrade-check's and bisect's
intervals on this runner) and the minimum detectable effect at a number of trials."""

from __future__ import annotations

import argparse
import math
from importlib import metadata
from pathlib import Path
from typing import Any

from stepwatch.collector.analysis import calibration
from stepwatch.collector.cli.arguments import (
    add_db_argument,
    add_environment_arguments,
    add_matrix_arguments,
    comma_list,
    console,
    db_path,
    matrix_values,
    price_options,
)
from stepwatch.collector.cli.exits import EXIT_FAILED, EXIT_OK
from stepwatch.collector.cli.progress import TerminalHooks
from stepwatch.collector.config import TRIALS
from stepwatch.collector.environments import virtualenvs
from stepwatch.collector.errors import UsageError
from stepwatch.collector.metrics import METRICS
from stepwatch.collector.output.runs import calibration_table
from stepwatch.collector.runner import execution
from stepwatch.collector.runner.suite import load_suite, narrow
from stepwatch.collector.workflows import check as workflow

DEFAULT_METRICS = ["examples_per_sec", "peak_memory_bytes"]


def _default_requirements() -> str:
    """This interpreter's TensorFlow, pinned: what the runner is usually calibrated for."""
    try:
        return f"tensorflow=={metadata.version('tensorflow')}"
    except metadata.PackageNotFoundError:
        return ""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "calibrate", help="repeated A/A runs on this runner: its false alarms, between-environment variation, MDE"
    )
    parser.add_argument(
        "--requirements", default=_default_requirements(),
        help="pip requirements every environment gets (default: this interpreter's TensorFlow, pinned)",
    )  # fmt: skip
    parser.add_argument(
        "--environments", type=int, default=4, help="separately built environments of them (default 4, at least 2)"
    )
    parser.add_argument(
        "--trials", type=int, default=TRIALS, help=f"trials per config and environment (default {TRIALS})"
    )
    parser.add_argument(
        "--metric", type=comma_list(choices=tuple(METRICS)), default=DEFAULT_METRICS,
        help=f"comma-separated metrics (default {','.join(DEFAULT_METRICS)})",
    )  # fmt: skip
    parser.add_argument("--runner", default=None, help="runner label (default: $STEPWATCH_RUNNER_LABEL or host name)")
    parser.add_argument("--out", type=Path, help="calibration file (default data/calibration/<runner label>.json)")
    parser.add_argument(
        "--results", default=str(virtualenvs.RESULTS_DIR / "calibrate"), help="folder for the trials' parquet"
    )
    add_matrix_arguments(parser)
    add_environment_arguments(parser)
    add_db_argument(parser, virtualenvs.STORE)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Build the environments, run the suite in each (interleaved), and write the runner's calibration."""
    if args.environments < 2:
        raise UsageError("--environments must be at least 2: an A/A compares two environments")
    if args.trials < 2:
        raise UsageError("--trials must be at least 2: an environment needs two trials for its own noise")
    if not args.requirements:
        raise UsageError("--requirements is empty and TensorFlow is not installed here: give pip requirements")
    try:
        requirements = virtualenvs.parse_side(args.requirements, "requirements")
    except ValueError as error:
        raise UsageError(str(error)) from None
    suite = load_suite(args.suite)
    configs = list(narrow(suite.configs, matrix_values(args), suite.defaults))
    label = args.runner or calibration.runner_label()
    out = args.out or calibration.default_path(label)
    options = execution.RunOptions(**price_options(args))
    ran, found = workflow.calibrate(
        label, requirements, args.environments, configs, args.trials, suite.name, args.metric, args.results, options,
        db_path(args), args.reuse_site_packages, tuple(args.pip_arg), TerminalHooks(),
    )  # fmt: skip
    if not found.metrics:
        console.print(f"[red]no metric had two environments with 2+ ok trials; nothing written to {out}[/red]")
        return EXIT_FAILED
    calibration.save(found, out)
    console.print(calibration_table(found))
    for name, m in found.metrics.items():
        rate = m.false_alarm_rate
        console.print(
            f"{name}: A/A false alarms {rate:.0%} with the trials' own intervals, {m.false_alarm_rate_widened:.0%} "
            f"with the between-environment variation; at {args.trials} trials per side this runner can see "
            f"changes of ≥{m.detectable.get(args.trials, math.nan):.1%} (threshold {METRICS[name].threshold:.0%})"
        )
    console.print(f"calibration: {out} (compare, upgrade-check and bisect read it on this runner)")
    failed = ran.failed()
    if failed:
        console.print(f"[red]{len(failed)} of {len(ran.outcomes)} trials failed[/red]")
        return EXIT_FAILED
    return EXIT_OK
