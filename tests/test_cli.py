"""The command line loads what the command it runs needs, no more: `run` and `ingest` start without the analysis
libraries (pandas; DuckDB for `run`), a usage error without either, and a trial process without pyarrow. Each
command is registered by the module the CLI's table names, so that running one imports only that module."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import textwrap

import pytest

from stepwatch.collector import cli
from tests.conftest import REPO

HEAVY = ("pandas", "duckdb", "pyarrow", "scipy")
LOADED = textwrap.dedent(
    """
    import json, sys
    if sys.argv[1:] == ["trial"]:
        import stepwatch.collector.trial.process
        code = 0
    else:
        from stepwatch.collector.cli import main
        code = main(sys.argv[1:])
    print(json.dumps({"code": code, "loaded": [m for m in HEAVY if m in sys.modules]}))
    """
)


def loaded(*args: str) -> dict:
    probe = f"HEAVY = {HEAVY!r}\n{LOADED}"
    done = subprocess.run([sys.executable, "-c", probe, *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    ("args", "code", "libraries"),
    [
        (("run", "--suite", "smoke", "--models", "bilstm", "--dry-run"), 0, ["pyarrow"]),
        (("run", "--suite", "smok"), 2, ["pyarrow"]),  # a usage error: one line, before any store is opened
        (("run", "--suite", "smoke", "--fill-compile-cache"), 2, ["pyarrow"]),  # and without --compile-cache DIR
        (("ingest", "/nonexistent/results"), 2, ["duckdb", "pyarrow"]),
        (("trial",), 0, []),  # the trial process, before it imports its framework
    ],
    ids=["run", "run-usage-error", "run-fill-without-cache", "ingest", "trial"],
)
def test_a_command_loads_only_the_libraries_it_needs(args: tuple[str, ...], code: int, libraries: list[str]) -> None:
    assert loaded(*args) == {"code": code, "loaded": libraries}


def test_every_command_is_registered_by_the_module_the_table_names() -> None:
    for module in set(cli.COMMANDS.values()):
        parser = argparse.ArgumentParser()
        commands = parser.add_subparsers()
        importlib.import_module(f"stepwatch.collector.cli.{module}").register(commands)
        registered = set(commands.choices)
        assert registered == {name for name, owner in cli.COMMANDS.items() if owner == module}, module
    full = cli.build_parser()
    assert set(full._subparsers._group_actions[0].choices) == set(cli.COMMANDS)
