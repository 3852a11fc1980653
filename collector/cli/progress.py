"""The workflows' hooks on a terminal: a progress bar and a line per trial while trials run, a progress line
while an ingest reads files, and what the ingest did."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.progress import MofNCompleteColumn, Progress, TextColumn

from stepwatch.collector.cli.arguments import PROGRESS_COLUMNS, console
from stepwatch.collector.output.runs import ingest_lines, trial_line
from stepwatch.collector.runner import execution
from stepwatch.collector.store.ingest import IngestReport
from stepwatch.collector.workflows.hooks import Hooks, OnDone, OnStart


class TerminalHooks(Hooks):
    def say(self, text: str) -> None:
        console.print(text)

    @contextlib.contextmanager
    def trials(self, total: int, label: str, trials: int) -> Iterator[tuple[OnStart, OnDone]]:
        with Progress(*PROGRESS_COLUMNS, console=console, transient=False) as progress:
            task = progress.add_task("starting", total=total)

            def on_start(side: str, config: Any, trial: int) -> None:
                progress.update(task, description=f"{label}{side}: {config.label()} trial {trial + 1}/{trials}")

            def on_done(side: str, outcome: execution.Outcome) -> None:
                progress.console.print(trial_line(f"{label}{side}: {outcome.config.label()}", outcome.row,
                                                  outcome.trial))  # fmt: skip
                progress.advance(task)

            yield on_start, on_done

    @contextlib.contextmanager
    def ingesting(self, db: Path) -> Iterator[tuple[Callable[[str, str], None], Callable[[], None]]]:
        """A progress line counting files, and what to say while another write holds the store."""
        columns = TextColumn("{task.description}"), MofNCompleteColumn()
        with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task("ingesting", total=None)

            def on_file(uri: str, outcome: str) -> None:
                bar.advance(task)

            def on_wait() -> None:
                bar.console.print(f"waiting for another ingest into {db} to finish ...")

            yield on_file, on_wait

    def ingested(self, done: IngestReport, db: Path) -> None:
        for line in ingest_lines(done, db):
            console.print(line)
