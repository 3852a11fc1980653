"""``stepwatch extras``: the stepwatch extras that install the frameworks this project's settings train on (its
``keras-backend`` and ``device``, else those of its ``suite`` file's configs), or its own ``extras`` setting: what
stepwatch's action installs when a workflow names none, so that every workflow installs what the nightly does from
one place, the project's settings."""

from __future__ import annotations

import argparse
from typing import Any

from stepwatch.collector.cli.arguments import comma_list
from stepwatch.collector.cli.exits import EXIT_OK
from stepwatch.collector.config import ROLES
from stepwatch.collector.project import extras_for
from stepwatch.collector.runner.suite import load_suite

FIELDS = ("keras_backend", "device")  # the config fields whose values choose the frameworks' builds


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "extras", help="print the stepwatch extras the project's frameworks need (what the action installs)"
    )
    for name in FIELDS:  # the config's own flags and choices (collector.config)
        role = ROLES[name]
        described = f"{', '.join(role.choices)}, comma-separated (default: the project's setting)"
        parser.add_argument(role.flag, dest=name, type=comma_list(choices=role.choices), help=described)
    parser.add_argument("--suite", help="a suite file whose configs name their backends (default: the project's)")
    parser.add_argument(
        "--extras", type=comma_list(), help="the extras themselves, comma-separated: printed as they are"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the extras, comma-separated (nothing where the project names no backend: the job's own frameworks)."""
    if args.extras:
        print(",".join(args.extras))
        return EXIT_OK
    backends, devices = args.keras_backend or [], args.device or []
    if not backends and args.suite:
        configs = load_suite(args.suite).configs
        backends = list(dict.fromkeys(config.keras_backend for config in configs))
        devices = devices or list(dict.fromkeys(config.device for config in configs))
    print(",".join(extras_for(backends, devices)))
    return EXIT_OK
