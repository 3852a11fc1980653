"""``stepwatch upgrade-check``: the suite under two package sets, interleaved on this machine, compared."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from stepwatch.collector.cli.arguments import (
    add_analysis_arguments,
    calibrated_between,
    db_path,
    matrix_values,
    overrides,
    price_options,
    trial_options,
)
from stepwatch.collector.cli.checks import add_check_arguments, budget_of, deadline_of, design_of, report
from stepwatch.collector.cli.exits import EXIT_OK
from stepwatch.collector.cli.progress import TerminalHooks
from stepwatch.collector.environments import containers, virtualenvs
from stepwatch.collector.errors import UsageError
from stepwatch.collector.output.comparison import (
    upgrade_preface,
)
from stepwatch.collector.output.text import time_split_lines
from stepwatch.collector.runner import execution
from stepwatch.collector.runner.suite import load_suite, narrow
from stepwatch.collector.workflows import check


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "upgrade-check", help="the suite under two package sets, interleaved on this machine, compared"
    )
    parser.add_argument("--baseline", required=True, help="pip requirements, e.g. 'tensorflow==2.20.0', or a container "
                        "image, image=REF (each trial a fresh container of it)")  # fmt: skip
    parser.add_argument("--candidate", required=True, help="pip requirements, e.g. 'tensorflow==2.21.0 keras==3.15.1', "
                        "or image=REF")  # fmt: skip
    parser.add_argument("--container-engine", choices=containers.ENGINES, help="the engine that runs an image "
                        "side's containers (default: $STEPWATCH_CONTAINER_ENGINE, else the first of podman and docker "
                        "found)")  # fmt: skip
    add_check_arguments(parser, virtualenvs.RESULTS_DIR, numerics="fail")
    parser.add_argument("--fail-on-inconclusive", action="store_true", help="exit 3 when any verdict is inconclusive")
    parser.add_argument("--dry-run", action="store_true", help="print the interleaved plan and exit")

    add_analysis_arguments(parser, several_metrics=True, default_db=virtualenvs.STORE, calibrated=True)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Build (or reuse) an environment per side, run the suite interleaved, look by look, ingest, compare, report."""
    started = time.monotonic()
    if args.container_engine:  # read where each image side is set up (containers.engine)
        os.environ[containers.ENGINE_ENV] = args.container_engine
    try:
        sides = {side: virtualenvs.parse_side(getattr(args, side), side) for side in virtualenvs.SIDES}
    except ValueError as error:
        raise UsageError(str(error)) from None
    suite = load_suite(args.suite)
    configs = list(narrow(suite.configs, matrix_values(args), suite.defaults))
    design, deadline = design_of(args), deadline_of(args, started)
    order = (*virtualenvs.SIDES, virtualenvs.AA) if args.aa else virtualenvs.SIDES
    if args.dry_run:
        for side, config, trial in virtualenvs.plan(configs, design.looks[0], order):
            print(f"{side} {config.label()} trial {trial + 1}")
        return EXIT_OK
    asked = check.Asked(args.metric, overrides(args), calibrated_between(args))
    hooks = TerminalHooks()
    envs = check.environments(sides, args.reuse_site_packages, tuple(args.pip_arg), args.aa, hooks)
    options = execution.RunOptions(**price_options(args), **trial_options(args))
    done = check.measure(configs, design, suite.name, envs, args.results, options, db_path(args), asked, hooks,
                         deadline=deadline, budget_minutes=budget_of(args))  # fmt: skip
    ran = done.check
    failed = ran.failed()
    preface = upgrade_preface(
        sides["baseline"], sides["candidate"], len(configs), ran.rounds, suite.name, ran.host(),
        len(failed), len(ran.outcomes), virtualenvs.package_diff(envs["baseline"], envs["candidate"]),
        ran.compile_caches(), ran.spent(),
    ) + time_split_lines(ran.time_split())  # fmt: skip
    title = f"stepwatch upgrade check: {' '.join(sides['baseline'])} -> {' '.join(sides['candidate'])}"
    return report(args, done, title, preface)
