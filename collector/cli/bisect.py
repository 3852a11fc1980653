"""``stepwatch bisect``: which package of an upgrade causes its regression (``collector.workflows.bisect``).

Every step is an upgrade check (the good side against an intermediate environment, interleaved, with
upgrade-check's statistics), ingested into upgrade-check's store with the step recorded in ``bisect_steps``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from stepwatch.collector.cli import exits
from stepwatch.collector.cli.arguments import (
    add_analysis_arguments,
    calibrated_between,
    console,
    db_path,
    matrix_values,
    overrides,
    price_options,
    trial_options,
)
from stepwatch.collector.cli.checks import add_check_arguments, budget_of, design_of
from stepwatch.collector.cli.progress import TerminalHooks
from stepwatch.collector.environments import virtualenvs
from stepwatch.collector.errors import UsageError
from stepwatch.collector.output.bisect import bisect_json, bisect_markdown, step_line
from stepwatch.collector.output.text import publish, write_file
from stepwatch.collector.runner import execution
from stepwatch.collector.runner.suite import load_suite, narrow
from stepwatch.collector.workflows import bisect

RESULTS_DIR = virtualenvs.RESULTS_DIR / "bisect"


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "bisect", help="find the package of an upgrade behind its regression (a search of upgrade checks)"
    )
    parser.add_argument("--good", required=True, help="pip requirements without the regression: 'tensorflow==2.20.0'")
    parser.add_argument("--bad", required=True, help="pip requirements with it: 'tensorflow==2.21.0'")
    add_check_arguments(parser, RESULTS_DIR)
    add_analysis_arguments(parser, several_metrics=True, default_db=virtualenvs.STORE, calibrated=True)
    parser.set_defaults(handler=run)


def plan(args: argparse.Namespace) -> bisect.Plan:
    try:
        good = virtualenvs.parse_side(args.good, "good")
        bad = virtualenvs.parse_side(args.bad, "bad")
    except ValueError as error:
        raise UsageError(str(error)) from None
    design = design_of(args)
    suite = load_suite(args.suite)
    return bisect.Plan(
        good, bad, suite.name, list(narrow(suite.configs, matrix_values(args), suite.defaults)), design,
        args.metric, overrides(args), Path(args.results), db_path(args),
        execution.RunOptions(
            **price_options(args), **trial_options(args)
        ),
        args.reuse_site_packages, tuple(args.pip_arg), args.aa, calibrated_between(args), budget_of(args),
    )  # fmt: skip


class BisectTerminalHooks(TerminalHooks, bisect.BisectHooks):
    def stepped(self, step: bisect.Step) -> None:
        console.print(f"step {step.number}: {step_line(step)}")


def run(args: argparse.Namespace) -> int:
    found = bisect.bisect(plan(args), BisectTerminalHooks())
    state, search = found.state, found.search
    text = bisect_markdown(state, found.changes, search)
    state.folder.mkdir(parents=True, exist_ok=True)
    write_file(text, state.folder / "report.md")
    code = exits.of_bisect(found.ends, search)
    if args.format == "json":
        publish(json.dumps(bisect_json(state, found.changes, search, code), indent=2, default=str), args.out)
    else:
        publish(text, args.out)
    console.print(f"report: {state.folder / 'report.md'}")
    return code
