"""What every format's reader hands over, and how it becomes result rows.

A reader turns one file (or folder) of another tool's output into a ``Run``: what the tool measured together (a
pytest session, an asv result file, a torchtitan job), with its ``Result`` per benchmark and metric. ``rows``
checks each result (its name, unit, values and direction) and makes one result row per repeat: the series is the
result's benchmark, parameters, metric and direction (config fields of ``collector.config``, so the series key is
derived as for stepwatch's own rows), and what the format records of the commit, the machine and the software goes
into the columns stepwatch keeps its own in. What the format does not record stays empty: nothing is guessed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from stepwatch.collector.config import BenchmarkConfig, config_columns
from stepwatch.collector.errors import UsageError
from stepwatch.collector.schema import SCHEMA_VERSION, series_key

MAX_TRIALS = 30  # more repeats than this (a microbenchmark's thousands of rounds) are grouped into this many trials
BETTER = ("higher", "lower")
FAILED_STATUS = "error"
# The config fields an imported row holds (the rest stay empty: the tool did not run stepwatch's matrix).
KEPT_FIELDS = ("model", "preset", "keras_backend", "imported_from", "imported_metric", "imported_better")
NO_BACKEND = ""  # no Keras backend ran it (an empty dimension would be filled with its default, as an older row's)


class ImportRefused(UsageError):
    """A file of another tool's output that cannot be imported, in one line (the rest of an ingest goes on)."""


@dataclass
class Result:
    """One benchmark's one metric in one run: its values, one per repeat (a failed repeat is a message)."""

    benchmark: str
    metric: str
    unit: str
    values: list[float]
    better: str | None = None  # "higher" or "lower"; None where the format does not say (``--better`` does)
    params: str = ""  # its parameters, as the tool writes them
    failed: list[str] = field(default_factory=list)
    device: str | None = None
    accelerator: str | None = None
    dtype: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class Run:
    """What one tool measured together, and what it recorded of where and with what."""

    fmt: str
    key: str  # what makes this run itself (its file's digest, or its event file's name): the rows' ids follow it
    started_at: datetime
    part: str = ""  # one of several files of one run (an MLPerf log of its night): its rows' ids follow it too
    results: list[Result] = field(default_factory=list)
    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None
    repository: str | None = None
    host: str | None = None
    runner: str | None = None
    cpu_model: str | None = None
    cpu_cores: int | None = None
    os: str | None = None
    device: str | None = None
    accelerator: str | None = None
    accelerator_count: int | None = None
    versions: dict[str, str] = field(default_factory=dict)  # result column -> version (python_version, ...)
    packages: dict[str, str] | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def digest(*parts: Any) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16]


# A name holding markup or SQL is refused: stepwatch binds and escapes what it stores, but a benchmark named so is an
# attack on whatever else reads these names, not a benchmark. Templated C++ names (``BM_Sort<int>``) are names.
_MARKUP = re.compile(r"<\s*/?\s*(script|img|iframe|svg|style|link|meta|object|embed|body|html|a|div|span|form|input|"
                     r"b|i|p|h\d)\b[^>]*>|javascript:|\bon[a-z]+\s*=", re.I)  # fmt: skip
_SQL = re.compile(r"(;|--(\s|$)|/\*|\*/|')|\b(drop|delete|insert|update|alter|create|attach|copy)\s+(table|from|into|"
                  r"database|schema|view)\b", re.I)  # fmt: skip
NAME_MAX = 300
UNIT_MAX = 40


def hostile_name(text: str) -> str | None:
    """Why ``text`` cannot name a benchmark, a parameter or a metric, or None."""
    if len(text) > NAME_MAX:
        return f"is {len(text)} characters long (at most {NAME_MAX})"
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return "holds control characters"
    if _MARKUP.search(text):
        return "holds markup"
    if _SQL.search(text):
        return "holds SQL"
    return None


TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "seconds": 1.0, "min": 60.0,
              "nsec": 1e-9, "usec": 1e-6, "msec": 1e-3, "h": 3600.0}  # fmt: skip
_HIGHER_NAME = re.compile(r"(per_?sec|per second|/s\b|throughput|tps|tflops|mfu|speedup|bandwidth|accuracy|"
                          r"items|ops\b|qps|fps|it/s|iter/s)", re.I)  # fmt: skip
_LOWER_NAME = re.compile(r"(time|latency|duration|memory|mem\b|bytes|size|_s\b|\(s\)|seconds|ttft|tpot|itl|"
                         r"(GiB|GB|MiB|MB)\b)", re.I)  # fmt: skip


def implied_better(metric: str, unit: str) -> str | None:
    """Which way a metric is better where its unit or name implies it: a time, a size or a latency is lower-is-better,
    a rate (anything per second), a throughput or a utilisation higher; else None."""
    if unit.lower() in TIME_UNITS or unit.lower() in ("bytes", "b", "kib", "mib", "gib", "kb", "mb", "gb"):
        return "lower"
    words = f"{metric} {unit}"
    if _HIGHER_NAME.search(words):
        return "higher"
    return "lower" if _LOWER_NAME.search(words) else None


def _unit_problem(unit: str) -> str | None:
    if not unit or len(unit) > UNIT_MAX or any(ord(c) < 32 for c in unit) or _MARKUP.search(unit) or "'" in unit:
        return f"unknown unit {unit!r}"
    return None


def trials_of(values: Sequence[float]) -> tuple[list[float], int]:
    """The trials of a result's repeats: each repeat, or where there are more than MAX_TRIALS, the means of
    MAX_TRIALS runs of consecutive repeats (batch means: each still an independent-enough measurement of the
    same thing, and the interval over them stays honest); and the repeats per trial."""
    if len(values) <= MAX_TRIALS:
        return list(values), 1
    size = math.ceil(len(values) / MAX_TRIALS)
    groups = [values[i : i + size] for i in range(0, len(values), size)]
    return [sum(g) / len(g) for g in groups], size


def result_rows(run: Run, better: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The result rows of ``run`` (one per repeat of each result), and the results left out for want of a direction
    (their names; ``better``, the ``--better`` flag, answers for every result of the run whose format does not).
    Raises ImportRefused for a result that cannot be a measurement."""
    out: list[dict[str, Any]] = []
    undirected: list[str] = []
    suite_run_id = digest(run.fmt, run.key)
    shared = _run_columns(run, suite_run_id)
    for result in run.results:
        name = " ".join(filter(None, (result.benchmark, result.params, result.metric)))
        for what, text in (("benchmark name", result.benchmark), ("parameters", result.params),
                           ("metric", result.metric)):  # fmt: skip
            why = hostile_name(text)
            if why:
                raise ImportRefused(f"the {what} {text[:80]!r} {why}")
        if not result.benchmark:
            raise ImportRefused("a result without a benchmark name")
        unit = _unit_problem(result.unit)
        if unit:
            raise ImportRefused(f"{name}: {unit}")
        for value in result.values:
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise ImportRefused(f"{name}: value {value!r} cannot be a measurement (a {result.metric} is positive "
                                    "and finite)")  # fmt: skip
        if not result.values and not result.failed:
            raise ImportRefused(f"{name}: a record without a value")
        direction = result.better or better
        if direction not in BETTER:
            undirected.append(f"{name} [{result.unit}]")
            continue
        config = BenchmarkConfig(
            model=result.benchmark,
            preset=result.params,
            keras_backend=NO_BACKEND,
            imported_from=run.fmt,
            imported_metric=result.metric,
            imported_better=direction,
        )
        columns = {name: None for name in config_columns(config)}
        columns.update({name: getattr(config, name) for name in KEPT_FIELDS})
        columns["device"] = result.device or run.device
        columns["precision"] = result.dtype
        key = columns["config_key"] = config.key
        accelerator = result.accelerator or run.accelerator
        trials, per_trial = trials_of(result.values)
        extras = {**run.extras, **result.extras, **({"repeats_per_trial": per_trial} if per_trial > 1 else {})}
        columns.update(series_key=series_key(key, accelerator), accelerator=accelerator, unit=result.unit,
                       extras=json.dumps(extras, sort_keys=True, default=str) if extras else None)  # fmt: skip
        outcomes = [(value, None) for value in trials] + [(None, message) for message in result.failed]
        for trial, (value, message) in enumerate(outcomes):
            out.append({
                **shared, **columns,
                "run_id": digest(suite_run_id, run.part, key, accelerator, trial),
                "trial": trial,
                "status": "ok" if message is None else FAILED_STATUS,
                "error_type": None if message is None else "ImportedFailure",
                "error_message": message,
                "imported_value": value,
            })  # fmt: skip
    return out, undirected


def _run_columns(run: Run, suite_run_id: str) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "suite_run_id": suite_run_id,
        "suite": run.fmt,
        "started_at": run.started_at,
        "source": "real",
        "host": run.host,
        "runner_label": run.runner,
        "cpu_model": run.cpu_model,
        "cpu_cores": run.cpu_cores,
        "os": run.os,
        "accelerator_count": run.accelerator_count,
        "project_commit": run.commit,
        "project_dirty": run.dirty,
        "project_repository": run.repository,
        "package_set": json.dumps(run.packages, sort_keys=True) if run.packages else None,
        **run.versions,
        **({"branch": run.branch} if run.branch else {}),  # no column of its own: the row's extras keep it
    }
