"""``run --find-max-batch``: the largest per-device batch that trains, found by probing (doubling, then bisecting at
the first out-of-memory) in one process where the framework recovers from an out-of-memory, or by XLA's memory
analysis of the step compiled for a batch (``collector.trial.probe``), then confirmed by a whole trial at the
answer; a script of yours by short trials, each in a process of its own."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.metrics import METRICS
from stepwatch.collector.runner import spawn
from stepwatch.collector.trial.batch_search import MaxBatch, device_capacity, memory_bound, search_max_batch
from stepwatch.collector.trial.runtime import COMPILE_CACHE_ENV
from stepwatch.trainers.workload import Kind

DEFAULT_BUDGET_S = 90.0  # seconds of probes before the search stops trying larger batches
DEFAULT_PROBE_LIMIT_S = 60.0  # seconds one probe may take (a compile of a large batch) before the search stops there
PROBE_MODULE = "stepwatch.collector.trial.probe"
STEP_MEMORY = METRICS["compiled_memory_bytes"]  # what a probe's step needs, shown as the metric is everywhere


def cpu_refusal(config: BenchmarkConfig, capacity: int | None) -> str | None:
    """Why a search cannot run on this CPU config, or None. A host's memory swaps, or the kernel kills the process,
    instead of raising out-of-memory; so on a CPU the search needs a capacity and a compiler that says what a step
    needs before it runs it (XLA's memory analysis: JAX with jit_compile on)."""
    if config.device != "cpu":
        return None
    if capacity is None:
        return (
            "--find-max-batch on a CPU needs --max-batch-memory BYTES (host memory swaps or the kernel kills the "
            "process instead of raising out-of-memory); or use it on GPU or TPU hosts"
        )
    analysed = config.keras_backend == "jax" and config.loop == "fit" and config.xla
    if not analysed or config.workload is Kind.SCRIPT:
        return (
            f"--find-max-batch on a CPU measures a step's memory by XLA's analysis: it needs --keras-backend jax "
            f"with --xla on, not {config.label()}"
        )
    return None


def said(probe: dict[str, Any]) -> str:
    """One probe, as the search says it: its batch, status, how it was tried, the memory its step needs, its time."""
    memory = f", {STEP_MEMORY.shown(probe['bytes'])}" if probe.get("bytes") else ""
    took = f", {probe['s']:.1f} s" if probe.get("s") is not None else ""
    return f"  batch {probe['batch']}: {probe['status']} ({probe['how']}{memory}{took})"


class Watcher:
    """The search process watched while it runs (``spawn.run_child``'s ``watch``): each probe said as soon as its
    record has it, and the search stopped where one probe runs past ``limit_s`` (the record so far is its answer)."""

    def __init__(self, log: Callable[[str], None], limit_s: float | None) -> None:
        self.log, self.limit_s = log, limit_s
        self.said = 0
        self.current: tuple[Any, ...] | None = None  # the probe under way, and when this process first saw it
        self.seen_at = 0.0
        self.stopped: dict[str, Any] | None = None  # the probe that ran past its limit

    def say(self, record: dict[str, Any]) -> None:
        probes = record.get("probes") or []
        for probe in probes[self.said :]:
            self.log(said(probe))
        self.said = max(self.said, len(probes))

    def __call__(self, path: Path) -> bool:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):  # not written yet (written whole, by rename, so never half)
            return False
        self.say(record)
        current = record.get("current")
        key = (current["batch"], current["since_s"]) if current else None
        if key != self.current:
            self.current, self.seen_at = key, time.monotonic()
        if current and self.limit_s is not None and time.monotonic() - self.seen_at > self.limit_s:
            self.stopped = current
            return True
        return False


def find_max_batch(
    config: BenchmarkConfig,
    python: str,
    log: Callable[[str], None] = lambda _: None,
    capacity: int | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    probe_limit_s: float | None = DEFAULT_PROBE_LIMIT_S,
) -> MaxBatch:
    """The largest per-device batch that trains: probed in one process (``collector.trial.probe``: one step per
    batch, or only its compiled program where XLA's memory analysis tells), within ``budget_s`` seconds of probes,
    then confirmed by one whole trial at the answer. Each probe is said as it ends; one that runs past
    ``probe_limit_s`` stops the search, whose answer is then the largest batch that fit before it. A script of yours
    runs only as a whole process, and a trial of several processes (ranks under torch's launcher) only under its
    launcher, so they are probed by short trials (``find_max_batch_by_trials``)."""
    if config.workload is Kind.SCRIPT or config.processes > 1:
        return find_max_batch_by_trials(config, python, log, capacity)
    searching = config.with_changes(timeout_s=budget_s + config.timeout_s)
    extra = ("--budget-s", str(budget_s), *(("--capacity", str(capacity)) if capacity else ()))
    with tempfile.TemporaryDirectory(prefix="stepwatch-maxbatch-") as tmp:
        # The compiler's output kept for the search (the answer's step, compiled once for its analysis, is loaded
        # when it runs, and by the whole trial that confirms it), unless the run keeps a cache of its own.
        cache = {COMPILE_CACHE_ENV: os.environ.get(COMPILE_CACHE_ENV) or str(Path(tmp) / "compiled")}
        watcher = Watcher(log, probe_limit_s)
        record, wall_s, _ = spawn.run_child(searching, python, Path(tmp), cache, module=(PROBE_MODULE, *extra),
                                            watch=watcher)  # fmt: skip
        watcher.say(record)  # the probes it wrote last
        probes = record.get("probes") or []
        tried = tuple((p["batch"], p["status"]) for p in probes)
        if watcher.stopped is not None:  # a probe ran past its limit: the largest batch that fit before it
            stopped = watcher.stopped
            fit = [p["batch"] for p in probes if p["status"] == "ok"]
            ended = (f"a probe at batch {stopped['batch']} ({stopped['how']}) ran past its limit of "
                     f"{probe_limit_s:g} s")  # fmt: skip
            log(f"  batch {stopped['batch']}: stopped ({stopped['how']} past {probe_limit_s:g} s)")
            found = MaxBatch(max(fit) if fit else None, ended, (*tried, (stopped["batch"], "timeout")), probes)
            return confirmed(found, config, python, capacity, log, cache)
        if "ended" not in record:  # the probe process failed before it could say
            why = record.get("error_message") or "the search process ended without an answer"
            return MaxBatch(None, f"the search failed: {why}", tried, probes)
        started = wall_s - record.get("elapsed_s", wall_s) + (record.get("setup_s") or 0)
        log(f"  searched in {wall_s:.0f} s ({started:.0f} s of it to the first probe)")
        found = MaxBatch(record["largest"], record["ended"], tried, probes)
        return confirmed(found, config, python, capacity, log, cache)


def confirmed(
    found: MaxBatch,
    config: BenchmarkConfig,
    python: str,
    capacity: int | None,
    log: Callable[[str], None],
    env: dict[str, str] | None = None,
) -> MaxBatch:
    """The search's answer once a whole trial (start-up, warm-up, the measured steps) has trained at it; where that
    trial fails, the answer is withdrawn and the search says why."""
    if found.largest is None:
        return found
    status, wall_s, _ = trial_status(config.with_changes(per_device_batch=found.largest), python, capacity, env)
    log(f"  a whole trial at batch {found.largest}: {status} ({wall_s:.0f} s)")
    if status == "ok":
        return found
    return MaxBatch(None, f"{found.ended}; but a whole trial at batch {found.largest} ended {status}", found.probes,
                    found.record)  # fmt: skip


def trial_status(
    config: BenchmarkConfig, python: str, capacity: int | None, env: dict[str, str] | None = None
) -> tuple[str, float, dict[str, Any]]:
    """A whole trial's status: out of memory also where its compiled step's memory (XLA's analysis) exceeds
    ``capacity``, as a device of that size would have refused it."""
    with tempfile.TemporaryDirectory(prefix="stepwatch-maxbatch-") as tmp:
        child, wall_s, _ = spawn.run_child(config, python, Path(tmp), env)
    needed = child.get("compiled_memory_bytes")
    if child["status"] == "ok" and capacity and needed and needed > capacity:
        return "oom", wall_s, child
    return child["status"], wall_s, child


def find_max_batch_by_trials(
    config: BenchmarkConfig, python: str, log: Callable[[str], None] = lambda _: None, capacity: int | None = None
) -> MaxBatch:
    """The search by short trials, each in a fresh process (start-up, compile, warm-up and two steps, only to learn
    whether a step fits; out-of-memory caught in the child, on accelerators). Where XLA's memory analysis of the
    steps that ran tells how the step's memory grows (JAX), it stops at the batch the device's memory allows."""
    probe_base = config.with_changes(steps=2, warmup_steps=10, window_steps=1, steps_per_execution=1)
    points: dict[int, int] = {}  # batch -> compiled_memory_bytes of the probes that ran

    def probe(batch: int) -> str:
        nonlocal capacity
        status, wall_s, child = trial_status(probe_base.with_changes(per_device_batch=batch), python, capacity)
        if child.get("compiled_memory_bytes"):
            points[batch] = int(child["compiled_memory_bytes"])
            capacity = capacity or device_capacity(child, config)
        detail = f": {child.get('error_message')}" if status not in ("ok", "oom") else ""
        log(f"  batch {batch}: {status} ({wall_s:.0f} s){detail}")
        return status

    def bound() -> int | None:
        return memory_bound(points, capacity)

    return search_max_batch(probe, config.per_device_batch, bound=bound)
