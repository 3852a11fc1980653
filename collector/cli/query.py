"""``stepwatch query "SQL"``: read-only SQL against the live store (its base and deltas as one), printed as a
table or CSV, or written as CSV or parquet."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from stepwatch.collector.cli.arguments import add_db_argument, console, db_path
from stepwatch.collector.cli.exits import EXIT_OK
from stepwatch.collector.errors import UsageError
from stepwatch.collector.output.runs import query_table, write_query
from stepwatch.collector.runner.results import ResultsError
from stepwatch.collector.store.user_sql import TABLES, query

QUERY_FORMATS = ("table", "csv", "parquet")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "query", help="read-only SQL against the store (base and deltas): a table, CSV or parquet"
    )
    parser.add_argument("sql", help=f"one SELECT (or EXPLAIN); tables: {', '.join(TABLES)}")
    parser.add_argument("--format", choices=QUERY_FORMATS, default="table")
    parser.add_argument("--out", type=Path, help="write the result here (needed for parquet; CSV goes to stdout)")
    parser.add_argument("--max-rows", type=int, default=50, help="rows a table shows (default 50)")
    add_db_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.format == "parquet" and args.out is None:
        raise UsageError("--format parquet needs --out FILE")
    result = query(db_path(args), args.sql)
    if args.format == "table" and args.out is None:
        query_table(result, args.max_rows)
        return EXIT_OK
    try:
        write_query(result, "csv" if args.format == "table" else args.format, args.out)
    except OSError as error:
        raise ResultsError(f"cannot write {args.out}: {error.strerror or error}") from None
    if args.out is not None:
        console.print(f"{result.num_rows:,} row(s): {args.out}")
    return EXIT_OK
