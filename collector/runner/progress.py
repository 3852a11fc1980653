"""A suite run's progress as a file the dashboard reads while the trials run (``stepwatch run --dashboard``): how many
trials of how many are done, how many failed, which one runs now, and whether the run has ended. The run names the
file to the dashboard's server in ``STEPWATCH_PROGRESS``; written whole each time (a reader never sees half)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stepwatch.collector.trial.fields import write_json_atomically

PROGRESS_ENV = "STEPWATCH_PROGRESS"


@dataclass
class Progress:
    suite: str
    total: int
    done: int = 0
    failed: int = 0
    running: str | None = None  # the trial running now: its config's label and trial number
    ended: bool = False
    started: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)

    def write(self, path: Path) -> None:
        self.updated = time.time()
        write_json_atomically(path, asdict(self))


def read(path: str | Path | None = None) -> Progress | None:
    """The progress in ``path`` (default: the file ``STEPWATCH_PROGRESS`` names); None where there is none."""
    path = path or os.environ.get(PROGRESS_ENV)
    if not path:
        return None
    try:
        return Progress(**json.loads(Path(path).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def said(progress: Progress) -> str:
    """The progress in words, as the dashboard shows it."""
    failed = f", {progress.failed} failed" if progress.failed else ""
    if progress.ended:
        return f"Suite {progress.suite}: all {progress.total} trials done{failed}."
    now = f"; running {progress.running}" if progress.running else ""
    minutes = (time.time() - progress.started) / 60
    done = f"{progress.done} of {progress.total} trials done"
    return f"Suite {progress.suite}: {done}{failed}{now} ({minutes:.0f} min in)."
