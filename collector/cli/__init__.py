"""The ``stepwatch`` command. Each subcommand is a module here: its arguments (``register``) and one ``run``
function that parses, calls a workflow, the store or the analysis, and prints through ``collector.output``;
``collector.cli.exits`` says what each exit code means.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from stepwatch.collector.cli.arguments import OneLineParser
from stepwatch.collector.cli.exits import EXIT_FAILED, EXIT_UNKNOWN, EXIT_USAGE
from stepwatch.collector.errors import Failure, UsageError
from stepwatch.collector.project import Project, ProjectError, version
from stepwatch.collector.store.files import DB_ENV

# Each command and the module here that registers it (in the order `stepwatch --help` lists them). Only the module
# of the command being run is imported: a command pays for its own libraries only (`run` and `ingest` never load
# pandas; a usage error loads none of them). test_cli checks that every module registers exactly these.
COMMANDS = {
    "run": "run",
    "ingest": "ingest",
    "rebuild": "ingest",
    "synthesize": "ingest",
    "maintain": "ingest",
    "export": "export",
    "query": "query",
    "compare": "compare",
    "explain": "explain",
    "detect": "alerts",
    "alerts": "alerts",
    "upgrade-check": "upgrade_check",
    "code-check": "code_check",
    "package-sets": "package_sets",
    "image-sides": "image_sides",
    "bisect": "bisect",
    "calibrate": "calibrate",
    "dashboard": "dashboard",
    "init": "init",
    "extras": "extras",
    "publish": "publish",
}


def _named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of the command ``argv`` names; of every command when it names none we know (help, a typo)."""
    parser = OneLineParser(prog="stepwatch", description="Track deep-learning training performance.")
    parser.add_argument("--version", action="version", version=f"stepwatch {version()}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    named = _named(argv or ())
    modules = [COMMANDS[named]] if named in COMMANDS else COMMANDS.values()
    for module in dict.fromkeys(modules):
        importlib.import_module(f"stepwatch.collector.cli.{module}").register(commands)
    return parser


# Settings that are not named after an option: per command, the dest of the option they set. ``results`` is where
# ``run`` writes and what ``ingest`` reads; ``out`` is no setting (in the reports it names a report file).
RENAMED_SETTINGS = {"results": {"run": "out", "ingest": "sources", "dashboard": "sources"}}
NOT_SETTINGS = {"out": "results"}
# The nightly's results and store are never a check's: upgrade-check, code-check, bisect and calibrate keep their own
# their reports), whatever the project's ``results`` and ``db`` say.
CHECKS = ("upgrade-check", "code-check", "bisect", "calibrate")
# A verifying check (``alerts verify``) reads the nightly's store, and keeps its trials apart like the others.
OWN_RESULTS = {"results": (*CHECKS, "verify"), "db": CHECKS}


def _option(parser: argparse.ArgumentParser, name: str) -> argparse.Action | None:
    renamed = RENAMED_SETTINGS.get(name, {}).get(parser.prog.split()[-1])
    if renamed:
        return next(action for action in parser._actions if action.dest == renamed)
    flag = "--" + name.replace("_", "-")
    return next((action for action in parser._actions if flag in action.option_strings), None)


def _command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser | None:
    """The parser of the command ``argv`` names, or of its action where it has them (``alerts verify``)."""
    named = _named(argv)
    command = _commands(parser).get(named) if named else None
    words = [arg for arg in argv if not arg.startswith("-")]
    actions = _commands(command) if command is not None and len(words) > 1 else {}
    return actions.get(words[1], command) if actions else command


def apply_project(parser: argparse.ArgumentParser, argv: Sequence[str], project: Project) -> None:
    """The project's settings as the defaults of the options of the command ``argv`` names, each parsed as its
    flag would be; a flag on the command line still wins. A setting that no command has is a usage error."""
    command = _command(parser, argv)
    if command is None or not project.settings:
        return
    for name, value in project.settings.items():
        if name in NOT_SETTINGS:
            raise ProjectError(f"{project.source}: {name!r} is no setting; did you mean {NOT_SETTINGS[name]!r}?")
        if name == "db" and os.environ.get(DB_ENV):  # the environment's store wins over the project's
            continue
        if command.prog.split()[-1] in OWN_RESULTS.get(name, ()):
            continue
        action = _option(command, name)
        if action is None:
            if name not in RENAMED_SETTINGS and not any(_option(c, name) for c in _all_commands().values()):
                raise ProjectError(
                    f"{project.source}: unknown setting {name.replace('_', '-')!r}; settings are the long options "
                    "of stepwatch's commands without their dashes (see stepwatch --help)"
                )
            continue  # another command's setting
        value = project.resolved(name, value)
        try:
            command.set_defaults(**{action.dest: _parsed(action, value)})
        except (argparse.ArgumentTypeError, ValueError, TypeError) as error:
            raise ProjectError(f"{project.source}: {name.replace('_', '-')}: {error}") from None


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser of each command ``parser`` has, by name ({} for a command with no actions of its own)."""
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


@functools.cache
def _all_commands() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser, built once: asked for each setting the command at hand does not have (a project's
    settings are mostly ``run``'s), building them again each time cost a command 0.1-0.25 s a setting."""
    commands = _commands(build_parser([]))
    return {**commands, **{f"{name} {action}": parser for name, command in commands.items()
                           for action, parser in _commands(command).items()}}  # fmt: skip


def _parsed(action: argparse.Action, value: Any) -> Any:
    """A setting's value as its flag's value: a list is the comma-separated list of the flag, true and false
    are on and off."""
    if action.nargs == 0:  # a switch (store_true)
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not true or false")
        return value
    values = value if isinstance(value, list) else [value]
    words = [("on" if v else "off") if isinstance(v, bool) else str(v) for v in values]
    if action.nargs in ("*", "+"):  # a positional list (ingest's sources)
        return words
    text = ",".join(words)
    parsed = action.type(text) if action.type else text
    if action.choices is not None and parsed not in action.choices:
        raise ValueError(f"{text!r} is not one of {', '.join(map(str, action.choices))}")
    return parsed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    try:
        apply_project(parser, argv, Project.find())
    except UsageError as error:
        print(f"stepwatch: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except UsageError as error:
        print(f"stepwatch: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except Failure as error:
        print(f"stepwatch: error: {error}", file=sys.stderr)
        return EXIT_UNKNOWN if getattr(error, "outcome_unknown", False) else EXIT_FAILED
    except KeyboardInterrupt:
        hint = ", rerun with --resume to continue" if args.command == "run" else ""
        print(f"stepwatch: interrupted; finished trials are saved{hint}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
