"""``stepwatch explain``: where the time went. The op tables of two selections' profiled trials (``--profile``
on run, upgrade-check or bisect), diffed per pair of series: the ops whose time per step changed most."""

from __future__ import annotations

import argparse
from typing import Any

from stepwatch.collector.analysis import ops
from stepwatch.collector.cli.arguments import add_db_argument, db_path
from stepwatch.collector.cli.exits import EXIT_OK
from stepwatch.collector.errors import UsageError
from stepwatch.collector.output.explain import TOP, explain_json, explain_text
from stepwatch.collector.output.text import publish
from stepwatch.collector.store import database, profiled
from stepwatch.collector.store.profiled import OP_KEYS
from stepwatch.collector.store.selection import Selection


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "explain", help="which ops got slower: the profiled trials of baseline and candidate, diffed op by op"
    )
    parser.add_argument("--baseline", required=True, help="selection, e.g. tf_version=2.20.0 or label=baseline")
    parser.add_argument("--candidate", required=True, help="selection, e.g. tf_version=2.21.0")
    parser.add_argument(
        "--by", choices=OP_KEYS, default="op_type",
        help="align ops by type (default; stable across versions) or by name (an op of the graph or HLO module)",
    )  # fmt: skip
    parser.add_argument("--top", type=int, default=TOP, help=f"ops shown per series (default {TOP})")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--out", help="also write the report to this file")
    add_db_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    baseline, candidate = Selection.parse(args.baseline), Selection.parse(args.candidate)
    with database.open_store(db_path(args)) as reader:
        pairs, unpaired = ops.between(reader.connection(), baseline, candidate, args.by)
        errors = profiled.profile_errors(reader.connection(), baseline, candidate) if not pairs else None
    shown = explain_json(pairs) if args.format == "json" else explain_text(pairs, unpaired, args.top, errors)
    publish(shown, args.out)
    return EXIT_OK
