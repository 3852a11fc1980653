"""What every rendering shares: a series named in one line, changes and intervals as percentages, the command
that repeats a series, and the files reports are written to (a job summary is appended to)."""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from stepwatch.collector.analysis.stats import plain
from stepwatch.collector.config import config_from_row, repro_flags
from stepwatch.collector.errors import Failure
from stepwatch.collector.outcomes import CHANGED, FAILED, IMPROVEMENT, INCONCLUSIVE, MISSING, NO_CHANGE, REGRESSION


class ReportError(OSError, Failure):
    """A report that could not be written, in one line."""


def series_label(fields: dict[str, Any]) -> str:
    """'bert/tiny cpu xla fp32 b8 fit on <accelerator>' from a series' fields (or a run's columns); an imported
    result whose tool recorded no accelerator says none."""
    config = config_from_row(fields)
    accelerator = fields.get("accelerator")
    named = isinstance(accelerator, str) and accelerator
    if not named and config.imported_from:
        return config.label()
    return f"{config.label()} on {accelerator if named else '?'}"


def repro_command(series: dict[str, Any], trials: int = 5) -> str:
    """The ``stepwatch run`` line that measures this one series again."""
    config = config_from_row(series)
    suite = ["--suite", series.get("suite") or "smoke"]
    return shlex.join(["stepwatch", "run", *suite, "--trials", str(trials), *repro_flags(config)])


def shown_path(path: str | Path) -> str:
    """A local path as a reader of what stepwatch printed can use it: relative to the folder the command ran in when
    it is inside it (a runner's absolute path means nothing in a pull request's comment), else as it is."""
    absolute = Path(path).absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def percent(ratio: float) -> str:
    return "n/a" if ratio is None or math.isnan(ratio) else f"{(ratio - 1) * 100:+.1f}%"


def interval(low: float, high: float) -> str:
    if low is None or math.isnan(low):
        return "n/a"
    return f"[{percent(low)}, {percent(high)}]"


MARKS = {REGRESSION: "🔴", IMPROVEMENT: "🟢", NO_CHANGE: "⚪", INCONCLUSIVE: "🟡", MISSING: "⚫", FAILED: "❌",
         CHANGED: "🔷"}  # fmt: skip


def versions_text(versions_changed: str | None) -> str:
    """'tf_version 2.20.0 -> 2.21.0; ...' from the stored JSON, or a hint when nothing changed."""
    changed = json.loads(versions_changed) if versions_changed else {}
    if not changed:
        return "no recorded version changed (hardware, driver or neighbour drift?)"
    return "; ".join(f"{name} {old} -> {new}" for name, (old, new) in changed.items())


def plain_rows(frame: Any) -> list[dict[str, Any]]:
    """A data frame's rows as dicts of plain Python values."""
    return [{k: plain(v) for k, v in row.items()} for row in frame.to_dict("records")]


def stdout_console() -> Console:
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def publish(text: str, out: str | None) -> None:
    """Print ``text``; with ``out`` also write it to that file (a job summary, a PR comment body)."""
    print(text, end="" if text.endswith("\n") else "\n")
    if out:
        write_file(text, out)


def step_output(path: str | None, lines: str) -> None:
    """Append ``lines`` (``name=value``) to a GitHub step output file, when one is named."""
    if not path:
        return
    try:
        with open(path, "a") as handle:
            handle.write(lines)
    except OSError as error:
        raise ReportError(f"cannot write {path}: {error.strerror or error}") from None


def write_file(text: str, out: str | Path) -> None:
    """Write a report; GitHub's job summary file is appended to, as Actions expects."""
    try:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a" if str(out) == os.environ.get("GITHUB_STEP_SUMMARY") else "w") as handle:
            handle.write(text)
    except OSError as error:
        raise ReportError(f"cannot write {out}: {error.strerror or error}") from None


def time_split_lines(split: dict[str, float]) -> tuple[str, ...]:
    """Where a check's trial time went, as shares (``Check.time_split``): what more steps a trial would buy against
    more trials. Nothing where no trial reached its first step."""
    total = sum(split.values())
    if total <= 0:
        return ()
    shares = ", ".join(f"{name} {seconds / total:.0%}" for name, seconds in split.items() if seconds > 0)
    return (f"Where the trials' {total / 60:.1f} minutes went: {shares}.", "")
