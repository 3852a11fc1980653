"""MLPerf training logs (``:::MLLOG`` lines, as ``mlperf-logging``'s logger writes them): one log is one training run
to its target, a trial. Its time to train is from ``run_start`` to ``run_stop`` (MLPerf's metric: initialisation left
out), and ``run_stop``'s status says whether it reached the target (a run that did not is a failed trial). A
throughput the log reports (a ``throughput`` or ``*_per_second`` event) is a metric too. The runs of one benchmark on
one platform on one day are one night's trials."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stepwatch.collector.imports.rows import ImportRefused, Result, Run, digest
from stepwatch.collector.imports.source import file_digest, number, when

NAME = "mlperf"
PREFIX = ":::MLLOG"


def detect(head: bytes) -> bool:
    return PREFIX.encode() in head


def lines(path: Path) -> list[dict]:
    """The MLLOG events of a log, streamed (other lines, as a framework's own output, are left out)."""
    found = []
    with path.open("rb") as handle:
        for number_, line in enumerate(handle, 1):
            text = line.decode("utf-8", "replace")
            if PREFIX not in text:
                continue
            try:
                event = json.loads(text.split(PREFIX, 1)[1])
            except json.JSONDecodeError:
                raise ImportRefused(f"line {number_}: an MLLOG event that is not JSON (truncated?)") from None
            if isinstance(event, dict):
                found.append(event)
    return found


def read(path: Path, data: Any = None) -> list[Run]:
    events = lines(path)
    keyed = {}
    for event in events:
        keyed.setdefault(event.get("key"), event)
    start, stop = keyed.get("run_start"), keyed.get("run_stop")
    if start is None:
        raise ImportRefused("no run_start event: not a whole MLPerf training log")
    started = when(start.get("time_ms"))
    if started is None:
        raise ImportRefused("run_start has no time_ms")
    value = lambda key: (keyed.get(key) or {}).get("value")  # noqa: E731
    benchmark = str(value("submission_benchmark") or "")
    if not benchmark:
        raise ImportRefused("no submission_benchmark: MLPerf logs name their benchmark")
    platform = value("submission_platform")
    day = started.date().isoformat()
    log = file_digest(path)
    run = Run(NAME, digest(benchmark, platform, day), started, part=log, runner=str(platform) if platform else None,
              extras={"submission_org": value("submission_org"), "log": log[:16]})  # fmt: skip
    params = f"global_batch_size={value('global_batch_size')}" if value("global_batch_size") is not None else ""
    status = ((stop or {}).get("metadata") or {}).get("status")
    result = Result(benchmark, "time to train", "s", [], "lower", params)
    stop_ms = number((stop or {}).get("time_ms"))
    if stop is None:
        result.failed.append("no run_stop: the run did not end")
    elif status != "success":
        result.failed.append(f"run_stop status {status!r}: the target was not reached")
    elif stop_ms is not None and number(start.get("time_ms")) is not None:
        result.values.append((stop_ms - float(start["time_ms"])) / 1000)
    run.results.append(result)
    for event in events:
        key = str(event.get("key") or "")
        if (key == "throughput" or key.endswith("_per_second")) and number(event.get("value")) is not None:
            unit = str((event.get("metadata") or {}).get("unit") or "samples/s")
            found = next((r for r in run.results if r.metric == key), None)
            if found is None:
                found = Result(benchmark, key, unit, [], "higher", params)
                run.results.append(found)
            if status == "success":
                found.values = [number(event["value"])]  # the last it reports
    return [run]  # one trial of its night: its rows' ids follow the log (``part``)
