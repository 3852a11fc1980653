"""The ``stepwatch`` command. Each subcommand is a module here: its arguments (``register``) and one ``run``
function that parses, calls a workflow, the store or the analysis, and prints through ``collector.output``;
``collector.cli.exits`` says what each exit code means.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from collector.cli.arguments import OneLineParser
from collector.cli.exits import EXIT_FAILED, EXIT_USAGE
from collector.errors import Failure, UsageError

# Each command and the module here that registers it (in the order `stepwatch --help` lists them). Only the module
# of the command being run is imported: a command pays for its own libraries only (`run` and `ingest` never load
# pandas; a usage error loads none of them). test_cli checks that every module registers exactly these.
COMMANDS = {
    "run": "run",
    "ingest": "ingest",
    "rebuild": "ingest",
    "synthesize": "ingest",
    "export": "export",
    "query": "query",
    "compare": "compare",
    "explain": "explain",
    "detect": "alerts",
    "alerts": "alerts",
    "upgrade-check": "upgrade",
    "package-sets": "sides",
    "bisect": "bisect",
    "calibrate": "calibrate",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of the command ``argv`` names; of every command when it names none we know (help, a typo)."""
    parser = OneLineParser(prog="stepwatch", description="Track deep-learning training performance.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    named = next((arg for arg in argv or () if not arg.startswith("-")), None)
    modules = [COMMANDS[named]] if named in COMMANDS else COMMANDS.values()
    for module in dict.fromkeys(modules):
        importlib.import_module(f"collector.cli.{module}").register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        return args.handler(args)
    except UsageError as error:
        print(f"stepwatch: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except Failure as error:
        print(f"stepwatch: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        hint = ", rerun with --resume to continue" if args.command == "run" else ""
        print(f"stepwatch: interrupted; finished trials are saved{hint}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
