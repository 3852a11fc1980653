"""``stepwatch export``: the selected runs of a store as CSV or parquet (parquet can be ingested again)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.markup import escape

from stepwatch.collector.cli.arguments import add_db_argument, console, db_path
from stepwatch.collector.cli.exits import EXIT_OK
from stepwatch.collector.runner.results import ResultsError
from stepwatch.collector.store import database, export
from stepwatch.collector.store.selection import Selection


def register(commands: Any) -> None:
    parser = commands.add_parser("export", help="write selected runs from the store as CSV or parquet")
    parser.add_argument("--where", help="selection, e.g. model=resnet50,tf_version=2.21.0,since=2026-11-01")
    parser.add_argument("--format", choices=export.EXPORT_FORMATS, default="csv")
    parser.add_argument("--out", help="output file (default stepwatch-export.FORMAT)")
    add_db_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Write the selected runs as CSV or parquet (parquet can be ingested into another store)."""
    selection = Selection.parse(args.where)
    out = Path(args.out or f"stepwatch-export.{args.format}")
    with database.open_store(db_path(args)) as reader:
        try:
            rows = export.write(reader.connection(), selection, args.format, out)
        except OSError as error:
            raise ResultsError(f"cannot write {out}: {error.strerror or error}") from None
    console.print(f"{rows:,} run(s) matching {escape(selection.describe())}")
    print(f"exported: {out}")
    return EXIT_OK
