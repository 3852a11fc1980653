"""What a workflow tells the one who runs it (``Hooks``), and the one workflow every command that stores results
shares: ingest with progress (``ingest_into``). Kept apart from the checks so that `stepwatch ingest` loads no
analysis."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.runner import execution
from stepwatch.collector.store.database import ingest
from stepwatch.collector.store.ingest import IngestReport

OnStart = Callable[[str, BenchmarkConfig, int], None]
OnDone = Callable[[str, execution.Outcome], None]


class Hooks:
    """What a workflow tells the one who runs it. Each does nothing here; a front end overrides them (the CLI
    draws progress bars and prints a line per trial)."""

    def say(self, text: str) -> None:
        """A line of what is going on (environments being built, a step's outcome)."""

    @contextlib.contextmanager
    def trials(self, total: int, label: str, trials: int) -> Iterator[tuple[OnStart, OnDone]]:
        """While ``total`` trials run: what to call as each starts and ends."""
        yield (lambda side, config, trial: None), (lambda side, outcome: None)

    @contextlib.contextmanager
    def ingesting(self, db: Path) -> Iterator[tuple[Callable[[str, str], None], Callable[[], None]]]:
        """While an ingest runs: what to call per file, and when another write holds the store."""
        yield (lambda uri, outcome: None), (lambda: None)

    def ingested(self, done: IngestReport, db: Path) -> None:
        """What an ingest did."""


def ingest_into(
    sources: list[str],
    db: Path,
    synthetic: bool,
    hooks: Hooks,
    recursive: bool = False,
    refused: list[tuple[str, str]] | None = None,
) -> IngestReport:
    """Ingest ``sources``, saying what it did; ``refused``: files refused before (an import's), said with its own."""
    with hooks.ingesting(db) as (on_file, on_wait):
        done = ingest(sources, db, synthetic, on_file, on_wait, recursive)
    done.refused[:0] = refused or []
    hooks.ingested(done, db)
    return done
