"""``stepwatch compare``: baseline vs candidate per series, with a verdict and its exit code."""

from __future__ import annotations

import argparse
from typing import Any

from stepwatch.collector.analysis import comparison
from stepwatch.collector.analysis.comparison import Comparison
from stepwatch.collector.cli import exits
from stepwatch.collector.cli.arguments import (
    add_analysis_arguments,
    add_numerics_argument,
    calibrated_between,
    db_path,
    overrides,
    selection,
)
from stepwatch.collector.errors import UsageError
from stepwatch.collector.output.comparison import between_lines, show_comparison
from stepwatch.collector.store import database


def register(commands: Any) -> None:
    parser = commands.add_parser("compare", help="baseline vs candidate: ratio, 95%% CI and verdict per series")
    parser.add_argument("--baseline", required=True, help="selection, e.g. tf_version=2.20.0 or label=baseline")
    parser.add_argument("--candidate", required=True, help="selection, e.g. tf_version=2.21.0 or suite_run_id=...")
    add_analysis_arguments(parser, several_metrics=True, calibrated=True, stored=True)
    parser.add_argument("--fail-on-inconclusive", action="store_true", help="exit 3 when any verdict is inconclusive")
    add_numerics_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Baseline vs candidate per series: ratio of geometric means, 95% CI, verdict; exit code by verdict."""
    baseline, candidate = selection(args, args.baseline), selection(args, args.candidate)
    thresholds = overrides(args)
    db = db_path(args)
    offsets = calibrated_between(args)
    with database.open_store(db) as reader:
        result = comparison.build(reader.connection(), baseline, candidate, args.metric, thresholds, offsets)
    for side, picked in (("baseline", baseline), ("candidate", candidate)):
        if result.versions[side]["runs"] == ["0"]:
            raise UsageError(f"the {side} selection {picked.describe()!r} matches no runs in {db}")

    def code_of(comparison: Comparison) -> int:
        return exits.of_comparison(comparison, args.fail_on_inconclusive, args.numerics)

    show_comparison(result, args.format, args.out, "stepwatch comparison", code_of, notes=between_lines(offsets))
    return code_of(result)
