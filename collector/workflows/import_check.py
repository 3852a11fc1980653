"""A team's own benchmark command as stepwatch's measurement: run it, and import what it writes (``stepwatch run
--import COMMAND --import-results PATH``, the nightly ``init --import`` writes), and a check of two commits by it
(what ``alerts verify`` runs for an alert on an imported series): the command run in a checkout of each commit, in
interleaved rounds (baseline, candidate, the A/A's second checkout of the baseline), each round's output imported,
and the series' values of each side compared as every check compares (``stats.compare``: a ratio of geometric
means, its interval and a verdict against the threshold), the A/A beside it."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from stepwatch.collector import imports
from stepwatch.collector.analysis import stats
from stepwatch.collector.errors import Failure
from stepwatch.collector.outcomes import INCONCLUSIVE
from stepwatch.collector.workflows import code_check
from stepwatch.collector.workflows.hooks import Hooks


class CommandFailed(Failure):
    """The team's benchmark command failed or wrote nothing, in one line."""


@dataclass(frozen=True)
class Command:
    """A benchmark command of the team's and where its output lands (relative to the folder it runs in)."""

    text: str
    results: str
    fmt: str | None = None
    better: str | None = None
    timeout_s: float = 3600.0


def run_once(command: Command, folder: Path, out: Path, commit: str | None = None) -> imports.Converted:
    """Run the command in ``folder`` and import what it wrote into ``out`` (one parquet file of result rows per file
    it wrote); CommandFailed where it fails, times out or writes nothing stepwatch can import."""
    target = folder / command.results
    try:
        done = subprocess.run(command.text, shell=True, cwd=folder, capture_output=True, text=True,
                              timeout=command.timeout_s)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise CommandFailed(f"`{command.text}` ran past {command.timeout_s:.0f} s") from None
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).split())[-300:]
        raise CommandFailed(f"`{command.text}` exited {done.returncode}: {tail}")
    if not target.exists():
        raise CommandFailed(f"`{command.text}` wrote no {command.results}")
    converted = imports.convert([target], out, command.fmt, command.better, commit)
    if not converted.files:
        why = "; ".join(reason for _, reason in converted.refused) or "nothing in it"
        raise CommandFailed(f"{command.results}: {why}")
    return converted


def _read(files: list[Path]) -> list[dict]:
    columns = ["config_key", "status", "imported_value", *SERIES_FIELDS_READ]
    return [row for path in files for row in pq.read_table(path, columns=columns).to_pylist()]


# What a check reads of an imported row besides its value: what names its series and judges it.
SERIES_FIELDS_READ = ("model", "preset", "imported_from", "imported_metric", "imported_better", "unit", "accelerator")


@dataclass(frozen=True)
class Series:
    """One imported series a check measured: its fields, each side's values, and the verdicts."""

    fields: dict
    values: dict[str, list[float]]  # side -> values
    verdict: stats.Verdict | None = None  # candidate against baseline (None: fewer than two values a side)
    aa: stats.Verdict | None = None  # the baseline's second checkout against the baseline


def check_commits(
    commits: code_check.Commits, command: Command, looks: tuple[int, ...], aa: bool, hooks: Hooks,
    judged: Callable[[dict], tuple[float, bool]], alpha: float = stats.ALPHA,
) -> dict[str, Series]:  # fmt: skip
    """Every series the command's output holds, measured on both commits in interleaved rounds (the A/A's second
    checkout of the baseline beside them), judged at each of ``looks`` (rounds a side so far; ``alpha`` is each
    look's, as a sequential check's) until no verdict is inconclusive: {config_key: Series}. ``judged``: a series'
    fields to its threshold and whether higher is better."""
    rows: dict[str, list[dict]] = {}
    found: dict[str, Series] = {}
    with code_check.checked_out(commits, aa) as folders, tempfile.TemporaryDirectory() as tmp:
        names = list(folders)  # baseline, candidate and the A/A's second checkout of the baseline
        for round_ in range(looks[-1]):  # ABAB...: the candidate first every other round
            for side in names if round_ % 2 == 0 else [names[1], names[0], *names[2:]]:
                hooks.say(f"{side}: `{command.text}` round {round_ + 1}")
                converted = run_once(command, folders[side], Path(tmp) / f"{side}-{round_}")
                rows.setdefault(side, []).extend(_read(converted.files))
            if round_ + 1 in looks:
                found = _judged(rows, judged, alpha)
                if all(s.verdict is not None and s.verdict.verdict != INCONCLUSIVE for s in found.values()):
                    break
    return found


def _judged(rows: dict[str, list[dict]], judged: Callable[[dict], tuple[float, bool]], alpha: float) -> dict:
    found: dict[str, Series] = {}
    for side, side_rows in rows.items():
        for row in side_rows:
            item = found.setdefault(row["config_key"], Series({k: row[k] for k in SERIES_FIELDS_READ}, {}))
            values = item.values.setdefault(side, [])
            if row["status"] == "ok" and row["imported_value"]:
                values.append(row["imported_value"])
    out = {}
    for key, item in found.items():
        sides = {side: stats.Side.of(v) for side, v in item.values.items() if len(v) >= 2}
        if "baseline" not in sides or "candidate" not in sides:
            out[key] = item
            continue
        threshold, higher = judged(item.fields)
        others = [s for s in sides if s not in ("baseline", "candidate")]
        pairs = [(sides["baseline"], sides["candidate"]), *((sides["baseline"], sides[s]) for s in others[:1])]
        verdicts = stats.compare(pairs, [threshold] * len(pairs), [higher] * len(pairs), alpha=alpha)
        out[key] = Series(item.fields, item.values, verdicts[0], verdicts[1] if len(verdicts) > 1 else None)
    return out
