"""Shared test setup: the opt-in ``large`` marker and helpers that run the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-large", action="store_true", help="also run tests marked large (slow)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-large"):
        return
    skip = pytest.mark.skip(reason="large: opt in with --run-large")  # ok-skip: opt-in marker
    for item in items:
        if "large" in item.keywords:
            item.add_marker(skip)


def stepwatch(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m collector`` (the stepwatch CLI) in the repository and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "collector", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_suite(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
