"""The search for the largest per-device batch that trains (``run --find-max-batch``), whatever tries a batch: doubling,
then bisecting at the first out-of-memory, guided by a compiler's memory analysis where one is known. Its probes run
in one process (``collector.trial.probe``) or as short trials (``collector.runner.max_batch``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stepwatch.collector.config import BenchmarkConfig


@dataclass(frozen=True)
class MaxBatch:
    """What a batch-size search found: the largest per-device batch that trained (None if not even the first),
    how the search ended, in words, every probe as (batch, its status) in the order run, and where the probes
    ran in one process, each probe's record (how it was tried: ran or compiled; the memory its step needs; its
    seconds)."""

    largest: int | None
    ended: str
    probes: tuple[tuple[int, str], ...]
    record: list[dict[str, Any]] | None = None


BUDGET = "budget"  # a probe's status once the search's time budget is spent: no larger batch is tried
ENDED_BY = {"oom": "out of memory", "timeout": "timeout", "nonfinite_loss": "non-finite loss",
            BUDGET: "the time budget spent"}  # fmt: skip


SEARCH_LIMIT = 1 << 16  # the largest batch a search tries unless told a smaller one
GUIDED_PROBES = 3  # probes the memory estimate may pick before the search bisects plainly (an estimate that creeps)


def search_max_batch(
    probe: Callable[[int], str], start: int, limit: int = SEARCH_LIMIT, bound: Callable[[], int | None] = lambda: None
) -> MaxBatch:
    """The largest batch that trains: ``probe(batch)`` tries it and gives its status. Doubling from ``start``
    while it is ``ok``; out of memory above the largest that ran bisects between the two; any other failure (a
    timeout, a crash, the time budget spent) ends the search there, with what ran so far. ``bound()``, once it
    knows (a compiler's analysis of the memory a batch needs, against the device's), names the batch to try next,
    up to ``GUIDED_PROBES`` times: the largest it says fits, then the one above it to show that it does not."""
    probes: list[tuple[int, str]] = []
    guided = 0

    def run(batch: int) -> str:
        status = probe(batch)
        probes.append((batch, status))
        return status

    def result(largest: int | None, ended: str) -> MaxBatch:
        return MaxBatch(largest, ended, tuple(probes))

    def failed(status: str, batch: int) -> str:
        if status == BUDGET:
            return f"{ENDED_BY[status]} before batch {batch}"
        return f"{ENDED_BY.get(status, status)} at batch {batch}"

    status = run(start)
    if status != "ok":
        return result(None, failed(status, start))
    good, bad = start, None  # the largest batch that ran, and the smallest that ran out of memory
    while True:
        ceiling = min(limit, bad - 1) if bad is not None else limit
        if ceiling <= good:
            return result(good, f"out of memory at batch {bad}" if bad is not None else f"reached the search's limit "
                          f"({limit})")  # fmt: skip
        estimate = bound() if guided < GUIDED_PROBES else None
        if estimate is not None:  # the estimate's batch, or the next one where it says the largest has run
            guided += 1
            candidate = min(max(estimate, good + 1), ceiling)
        elif bad is None:  # doubling, up to the limit
            candidate = min(good * 2, ceiling)
        else:  # bisecting
            candidate = (good + bad) // 2
        status = run(candidate)
        if status == "ok":
            good = candidate
        elif status == "oom":
            bad = candidate
        else:
            return result(good, failed(status, candidate))


def memory_bound(points: dict[int, int], capacity: int | None) -> int | None:
    """The largest batch whose compiled step fits in ``capacity`` bytes, from XLA's memory analysis of the steps
    tried (batch -> compiled_memory_bytes, whether they fit or not): a line through the two largest (a step's
    buffers are a fixed part and a part per example). None until two batches are known, or without a capacity."""
    if capacity is None or len(points) < 2:
        return None
    (b1, m1), (b2, m2) = sorted(points.items())[-2:]
    per_example = (m2 - m1) / (b2 - b1)
    if per_example <= 0:
        return None
    return int((capacity - (m1 - per_example * b1)) / per_example)


def device_capacity(host: dict[str, Any], config: BenchmarkConfig) -> int | None:
    """The memory a step may take on the trial's device: the device's memory (from ``host_environment``), times
    the fraction JAX's allocator takes by default (XLA_PYTHON_CLIENT_MEM_FRACTION, 0.75) on JAX. None on a CPU,
    whose memory is the host's: there a search needs a capacity given (``--max-batch-memory``)."""
    total = host.get("accelerator_memory_bytes")
    if not total or config.device == "cpu":
        return None
    jax = config.keras_backend == "jax" and config.loop == "fit"
    fraction = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75")) if jax else 1.0
    return int(total * fraction)


def scaled_start(record: list[dict[str, Any]], capacity: int | None, failed: int, floor: int) -> int:
    """Where a search goes on below ``failed``, whose step ran out of memory where its compiled analysis said it fits
    (the probes' ``record``: batch, how, bytes): the largest batch the compiled analysis says fits in ``capacity``
    once scaled by the running step's excess at ``failed``; ``floor`` (the largest batch whose step ran) where that
    cannot be told."""
    by = {(p["batch"], p["how"]): p["bytes"] for p in record if p.get("bytes")}
    compiled, running = by.get((failed, "compiled")), by.get((failed, "ran"))
    if not compiled or not running or running <= compiled:
        return floor
    points = {p["batch"]: p["bytes"] * running / compiled for p in record if p.get("bytes") and p["how"] == "compiled"}
    return min(max(memory_bound(points, capacity) or floor, floor), failed - 1)
