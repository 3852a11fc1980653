"""``run --find-max-batch``: the largest per-device batch that trains, found by probing short trials (doubling, then
bisecting at the first out-of-memory), bounded by XLA's memory analysis of the probes where it gives one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.runner import spawn


@dataclass(frozen=True)
class MaxBatch:
    """What a batch-size search found: the largest per-device batch that trained (None if not even the first),
    how the search ended, in words, and every probe as (batch, the trial's status) in the order run."""

    largest: int | None
    ended: str
    probes: tuple[tuple[int, str], ...]


ENDED_BY = {"oom": "out of memory", "timeout": "timeout", "nonfinite_loss": "non-finite loss"}


def search_max_batch(
    probe: Callable[[int], str], start: int, limit: int = 1 << 16, bound: Callable[[], int | None] = lambda: None
) -> MaxBatch:
    """The largest batch that trains: ``probe(batch)`` runs it and gives the trial's status. Doubling from
    ``start`` while it is ``ok``; out of memory above the largest that ran bisects between the two; any other
    failure (a timeout, a crash) ends the search there, with what ran so far. ``bound()``, once it knows (a
    compiler's estimate of the memory a batch needs against the device's), caps the batches tried like ``limit``."""
    probes: list[tuple[int, str]] = []

    def run(batch: int) -> str:
        status = probe(batch)
        probes.append((batch, status))
        return status

    def result(largest: int | None, ended: str) -> MaxBatch:
        return MaxBatch(largest, ended, tuple(probes))

    def failed(status: str, batch: int) -> str:
        return f"{ENDED_BY.get(status, status)} at batch {batch}"

    status = run(start)
    if status != "ok":
        return result(None, failed(status, start))
    good, bad = start, None  # the largest batch that ran, and the smallest that ran out of memory
    while True:
        if bad is None:  # doubling, up to the limit and the bound
            cap = min(limit, bound() or limit)
            candidate = min(good * 2, cap)
            if candidate <= good:
                why = "the memory bound of the compiler's analysis" if cap < limit else "the search's limit"
                return result(good, f"reached {why} ({cap})")
        elif bad - good > 1:  # bisecting
            candidate = (good + bad) // 2
        else:
            return result(good, f"out of memory at batch {bad}")
        status = run(candidate)
        if status == "ok":
            good = candidate
        elif status == "oom":
            bad = candidate
        else:
            return result(good, failed(status, candidate))


def memory_bound(points: dict[int, int], capacity: int | None) -> int | None:
    """The largest batch whose compiled step fits in ``capacity`` bytes, from XLA's memory analysis of steps
    that ran (batch -> compiled_memory_bytes): a line through the two largest (a step's buffers are a fixed part
    and a part per example). None until two batches are known, or without a capacity."""
    if capacity is None or len(points) < 2:
        return None
    (b1, m1), (b2, m2) = sorted(points.items())[-2:]
    per_example = (m2 - m1) / (b2 - b1)
    if per_example <= 0:
        return None
    return max(b2, int((capacity - (m1 - per_example * b1)) / per_example))


def device_capacity(row: dict[str, Any]) -> int | None:
    """The memory a trial's framework may allocate on its device: the device's memory, times the fraction JAX's
    allocator takes by default (XLA_PYTHON_CLIENT_MEM_FRACTION, 0.75)."""
    total = row.get("accelerator_memory_bytes")
    if not total:
        return None
    fraction = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75"))
    return int(total * fraction)


def find_max_batch(config: BenchmarkConfig, python: str, log: Callable[[str], None] = lambda _: None) -> MaxBatch:
    """Largest per-device batch that trains a few steps (out-of-memory caught in the child, on accelerators).
    Where XLA's memory analysis of the steps that ran tells how the step's memory grows (JAX), the search stops
    at the batch the device's memory allows instead of probing beyond it."""
    probe_base = config.with_changes(steps=2, warmup_steps=10, window_steps=1, steps_per_execution=1)
    points: dict[int, int] = {}  # batch -> compiled_memory_bytes of the probes that ran
    capacity: int | None = None

    def probe(batch: int) -> str:
        nonlocal capacity
        with tempfile.TemporaryDirectory(prefix="stepwatch-maxbatch-") as tmp:
            child, wall_s, _ = spawn.run_child(probe_base.with_changes(per_device_batch=batch), python, Path(tmp))
        if child["status"] == "ok" and child.get("compiled_memory_bytes"):
            points[batch] = int(child["compiled_memory_bytes"])
            capacity = capacity or device_capacity(child)
        detail = f": {child.get('error_message')}" if child["status"] not in ("ok", "oom") else ""
        log(f"  batch {batch}: {child['status']} ({wall_s:.0f} s){detail}")
        return child["status"]

    def bound() -> int | None:
        return memory_bound(points, capacity)

    return search_max_batch(probe, config.per_device_batch, bound=bound)
