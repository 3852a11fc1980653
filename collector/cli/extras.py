"""``stepwatch extras``: the stepwatch extras that install the frameworks this project's settings train on (its
``keras-backend`` and ``device``, else those of its ``suite`` file's configs), or its own ``extras`` setting: what
stepwatch's action installs when a workflow names none, so that every workflow installs what the nightly does from
one place, the project's settings."""

from __future__ import annotations

import argparse
from typing import Any

from stepwatch.collector.cli.exits import EXIT_OK
from stepwatch.collector.config import KERAS_BACKENDS
from stepwatch.collector.errors import UsageError
from stepwatch.collector.project import extras_for
from stepwatch.collector.runner.suite import load_suite

DEVICES = ("cpu", "gpu", "tpu")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "extras", help="print the stepwatch extras the project's frameworks need (what the action installs)"
    )
    parser.add_argument("--keras-backend", help="Keras backend(s), comma-separated (default: the project's setting)")
    parser.add_argument("--device", help="cpu, gpu or tpu, comma-separated (default: the project's setting, else cpu)")
    parser.add_argument("--suite", help="a suite file whose configs name their backends (default: the project's)")
    parser.add_argument("--extras", help="the extras themselves, comma-separated: printed as they are")
    parser.set_defaults(handler=run)


def _names(value: str | None, known: tuple[str, ...], flag: str) -> list[str]:
    names = [part.strip() for part in (value or "").split(",") if part.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(f"{flag} {unknown[0]}: not one of {', '.join(known)}")
    return names


def run(args: argparse.Namespace) -> int:
    """Print the extras, comma-separated (nothing where the project names no backend: the job's own frameworks)."""
    backends = _names(args.keras_backend, KERAS_BACKENDS, "--keras-backend")
    devices = _names(args.device, DEVICES, "--device")
    if args.extras:
        print(",".join(part.strip() for part in args.extras.split(",") if part.strip()))
        return EXIT_OK
    if not backends and args.suite:
        configs = load_suite(args.suite).configs
        backends = list(dict.fromkeys(config.keras_backend for config in configs))
        devices = devices or list(dict.fromkeys(config.device for config in configs))
    print(",".join(extras_for(backends, devices)))
    return EXIT_OK
