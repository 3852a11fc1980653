"""Two formats many tools already write to: github-action-benchmark's custom JSON (a list of ``{"name", "unit",
"value", "range", "extra"}``, the input of its ``customBiggerIsBetter`` and ``customSmallerIsBetter`` tools:
https://github.com/benchmark-action/github-action-benchmark#examples), and Bencher's Metric Format (``{benchmark:
{measure: {"value", "lower_value", "upper_value"}}}``: https://bencher.dev/docs/reference/bencher-metric-format/).
Neither records when, where or at which commit it ran: the run's time is the file's, and the rest is empty (the
ingest's ``--commit`` names a commit). A result is one value, one trial. Which way is better: the unit's or the
measure's where they imply it (a time, a latency, a throughput), else ``--better``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepwatch.collector.imports.rows import ImportRefused, Result, Run, implied_better
from stepwatch.collector.imports.source import file_digest, modified, number

GITHUB_ACTION = "github-action-benchmark"
BENCHER = "bencher"
# Bencher's built-in measures: slug -> (unit, better).
MEASURES = {"latency": ("ns", "lower"), "throughput": ("operations/s", "higher"), "build-time": ("s", "lower"),
            "file-size": ("bytes", "lower"), "instructions": ("instructions", "lower"), "cycles": ("cycles", "lower"),
            "l1-accesses": ("accesses", "lower"), "l2-accesses": ("accesses", "lower"), "ram-accesses":
            ("accesses", "lower"), "estimated-cycles": ("cycles", "lower"), "total-read-write": ("accesses", "lower"),
            "peak-memory": ("bytes", "lower")}  # fmt: skip


def is_github_action(data: Any) -> bool:
    return (isinstance(data, list) and bool(data) and isinstance(data[0], dict) and "name" in data[0]
            and "unit" in data[0] and "metric" not in data[0])  # fmt: skip


def is_bencher(data: Any) -> bool:
    if not isinstance(data, dict) or not data:
        return False
    first = next(iter(data.values()))
    return isinstance(first, dict) and bool(first) and all(isinstance(m, dict) and "value" in m for m in first.values())


def _run(fmt: str, path: Path) -> Run:
    return Run(fmt, file_digest(path), modified(path), extras={"time_from": "file mtime"})


def read_github_action(path: Path, data: Any) -> list[Run]:
    run = _run(GITHUB_ACTION, path)
    for number_, entry in enumerate(data, 1):
        if not isinstance(entry, dict) or "value" not in entry:
            raise ImportRefused(f"entry {number_}: a record without a value")
        name, unit = str(entry.get("name") or ""), str(entry.get("unit") or "")
        value = entry["value"]
        run.results.append(Result(name, "value", unit, [number(value) if number(value) is not None else value],
                                  implied_better("", unit),
                                  extras={"range": entry.get("range"), "extra": entry.get("extra")}))  # fmt: skip
    return [run]


def read_bencher(path: Path, data: Any) -> list[Run]:
    run = _run(BENCHER, path)
    for name, measures in data.items():
        if not isinstance(measures, dict):
            raise ImportRefused(f"{str(name)[:80]}: its measures are not an object")
        for slug, metric in measures.items():
            if not isinstance(metric, dict) or "value" not in metric:
                raise ImportRefused(f"{str(name)[:80]} {str(slug)[:40]}: a record without a value")
            unit, better = MEASURES.get(slug, ("value", implied_better(str(slug), "")))
            value = metric["value"]
            run.results.append(
                Result(
                    str(name),
                    str(slug),
                    unit,
                    [number(value) if number(value) is not None else value],
                    better,
                    extras={k: metric[k] for k in ("lower_value", "upper_value") if k in metric},
                )
            )
    return [run]
