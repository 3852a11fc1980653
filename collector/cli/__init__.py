"""The ``stepwatch`` command. Each subcommand is a module here: its arguments (``register``) and one ``run``
function that parses, calls a workflow, the store or the analysis, and prints through ``collector.output``;
``collector.cli.exits`` says what each exit code means.
"""

from __future__ import annotations

import argparse
import sys

from collector.analysis.calibration import CalibrationError
from collector.bench.catalog import CatalogError
from collector.bench.results import ResultsError
from collector.bench.suite import SuiteError
from collector.bench.upgrade import UpgradeError
from collector.cli import alerts, bisect, calibrate, compare, explain, export, ingest, query, run, sides, upgrade
from collector.cli.arguments import OneLineParser, UsageError
from collector.cli.exits import EXIT_FAILED, EXIT_USAGE
from collector.metrics import MetricError
from collector.output.text import ReportError
from collector.store.database import NoStoreError, StoreError
from collector.store.objectstore import StorageError
from collector.store.query import QueryError
from collector.store.records import AlertError
from collector.store.selection import SelectionError

COMMANDS = (run, ingest, export, query, compare, explain, alerts, upgrade, sides, bisect, calibrate)
USAGE_ERRORS = (
    SuiteError, UsageError, CatalogError, SelectionError, MetricError, AlertError, NoStoreError, CalibrationError,
    QueryError,
)  # fmt: skip
FAILURES = (ResultsError, StoreError, StorageError, UpgradeError, ReportError)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="stepwatch", description="Track deep-learning training performance.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for command in COMMANDS:
        command.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except USAGE_ERRORS as error:
        print(f"stepwatch: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except FAILURES as error:
        print(f"stepwatch: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        hint = ", rerun with --resume to continue" if args.command == "run" else ""
        print(f"stepwatch: interrupted; finished trials are saved{hint}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
