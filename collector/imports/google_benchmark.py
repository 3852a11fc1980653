"""Google Benchmark's JSON (``--benchmark_format=json`` or ``--benchmark_out``; its Python package writes the same):
each benchmark's repetitions (``run_type`` iteration) as its trials, of its real time and CPU time in its
``time_unit`` and of each user counter; aggregates (mean, median, stddev, cv) left out, as they are computed from
the repetitions already counted; a repetition that raised an error (``error_occurred``) a failed trial."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepwatch.collector.imports.rows import ImportRefused, Result, Run, implied_better
from stepwatch.collector.imports.source import file_digest, number, when

NAME = "google-benchmark"
TIME_UNITS = ("ns", "us", "ms", "s")
# What an iteration row holds beyond its user counters (benchmark's JSONReporter).
KNOWN = {"name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
         "repetition_index", "threads", "iterations", "real_time", "cpu_time", "time_unit", "error_occurred",
         "error_message", "aggregate_name", "aggregate_unit", "label", "big_o", "rms", "skipped"}  # fmt: skip


def detect(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("context"), dict) and isinstance(data.get("benchmarks"), list)


def read(path: Path, data: Any) -> list[Run]:
    context = data["context"]
    started = when(context.get("date"))
    if started is None:
        raise ImportRefused("no context.date: Google Benchmark writes when it ran")
    run = Run(NAME, file_digest(path), started, host=context.get("host_name"), cpu_cores=context.get("num_cpus"),
              device="cpu", extras={"benchmark_library": context.get("library_version"),
                                    "build_type": context.get("library_build_type")})  # fmt: skip
    results: dict[tuple[str, str], Result] = {}
    for bench in data["benchmarks"]:
        if not isinstance(bench, dict):
            raise ImportRefused("a benchmark entry that is not an object")
        if bench.get("run_type") == "aggregate":
            continue
        name = str(bench.get("run_name") or bench.get("name") or "")
        unit = bench.get("time_unit", "ns")
        if unit not in TIME_UNITS:
            raise ImportRefused(f"{name}: unknown unit {unit!r} (Google Benchmark's are {', '.join(TIME_UNITS)})")
        failed = bench.get("error_occurred") or bench.get("skipped") == "error"
        metrics = {"real_time": (unit, "lower"), "cpu_time": (unit, "lower")}
        counters = {k: v for k, v in bench.items() if k not in KNOWN and number(v) is not None}
        for counter in counters:  # items_per_second, bytes_per_second, or a counter of the benchmark's own
            unit_of = f"{counter.removesuffix('_per_second')}/s" if counter.endswith("_per_second") else "count"
            metrics[counter] = (unit_of, implied_better(counter, unit_of))
        for metric, (metric_unit, better) in metrics.items():
            if metric not in bench:
                continue
            result = results.setdefault((name, metric), Result(name, metric, metric_unit or "count", [], better))
            if failed:
                result.failed.append(str(bench.get("error_message") or "error"))
            else:
                result.values.append(number(bench[metric]) if number(bench[metric]) is not None else bench[metric])
    run.results = list(results.values())
    return [run]
