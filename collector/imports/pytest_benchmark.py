"""pytest-benchmark's ``--benchmark-json``: one pytest session, each test's rounds (``stats.data``, the time of each
round, with ``--benchmark-save-data``; else its ``stats`` alone, one trial: the mean of its rounds) as its trials, the
session's ``commit_info`` and ``machine_info``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepwatch.collector.imports.rows import ImportRefused, Result, Run
from stepwatch.collector.imports.source import file_digest, number, when

NAME = "pytest-benchmark"


def detect(data: Any) -> bool:
    return isinstance(data, dict) and "machine_info" in data and isinstance(data.get("benchmarks"), list)


def read(path: Path, data: Any) -> list[Run]:
    machine, commit = data.get("machine_info") or {}, data.get("commit_info") or {}
    cpu = machine.get("cpu") or {}
    started = when(data.get("datetime"))
    if started is None:
        raise ImportRefused("no datetime: pytest-benchmark writes when the session ran")
    run = Run(
        NAME, file_digest(path), started,
        commit=commit.get("id") if commit.get("id") not in (None, "unversioned") else None,
        branch=commit.get("branch") if commit.get("branch") not in (None, "(unknown)") else None,
        dirty=commit.get("dirty"), repository=commit.get("project"), host=machine.get("node"),
        cpu_model=cpu.get("brand_raw"), cpu_cores=cpu.get("count"), os=machine.get("system"), device="cpu",
        accelerator=cpu.get("brand_raw"), versions={"python_version": machine.get("python_version")},
        extras={"pytest_benchmark_version": data.get("version")},
    )  # fmt: skip
    for bench in data["benchmarks"]:
        if not isinstance(bench, dict) or not isinstance(bench.get("stats"), dict):
            raise ImportRefused("a benchmark without stats")
        stats = bench["stats"]
        rounds = stats.get("data")
        values = rounds if isinstance(rounds, list) else [stats.get("mean")]
        name = str(bench.get("name") or "")
        given = bench.get("params")
        params = ", ".join(f"{k}={v}" for k, v in given.items()) if isinstance(given, dict) else ""
        base = name.split("[", 1)[0] if params else name  # test_sort[1000] is test_sort at n=1000
        run.results.append(Result(
            base, "time", "s", [number(v) if number(v) is not None else v for v in values], "lower", params,
            extras={"group": bench.get("group"), "fullname": bench.get("fullname"),
                    "iterations": stats.get("iterations")},
        ))  # fmt: skip
    return [run]
