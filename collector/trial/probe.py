"""``run --find-max-batch`` in one process: ``python -m stepwatch.collector.trial.probe --config JSON --result PATH
[--capacity BYTES] [--budget-s S]``.

The framework is imported and the device set up once. A candidate batch is tried by building the model for it and
training one step (not a trial: no warm-up, no measured windows), where the framework recovers from running out
of memory (torch's ``OutOfMemoryError`` and its cache emptied, XLA's and TensorFlow's resource-exhausted errors).
Where the backend's compiler says how much memory a step needs before anything runs (XLA's memory analysis of the
train step, on JAX), a batch above the first is tried by compiling the step for its shapes only: it fits when
that is within the device's capacity, so the search bisects on compiled programs and runs only its answer. The
search is ``collector.runner.max_batch.search_max_batch``; its record is written before and after every probe, so
the parent says each probe as it ends and a process killed at its timeout, or at a probe's limit, still says how far
it got.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from stepwatch.collector.config import BenchmarkConfig, validate
from stepwatch.collector.trial import runtime
from stepwatch.collector.trial.batch_search import (
    BUDGET,
    SEARCH_LIMIT,
    MaxBatch,
    device_capacity,
    memory_bound,
    scaled_start,
    search_max_batch,
)
from stepwatch.collector.trial.fields import write_json_atomically
from stepwatch.collector.trial.host import host_environment
from stepwatch.collector.trial.measure import WindowClock
from stepwatch.trainers import get_model


class Prober:
    """The probes of one search, run in this process: each batch's step (or its compiled program), timed and kept."""

    def __init__(self, config: BenchmarkConfig, capacity: int | None, budget_s: float, result_path: Path) -> None:
        self.config, self.budget_s, self.result_path = config, budget_s, result_path
        self.started = time.perf_counter()
        self.setup_s: float | None = None  # from here to the first probe: the framework imported, the device set up
        host = host_environment(config.device)
        self.capacity = capacity or device_capacity(host, config)
        runtime.prepare(config)
        self.backend = runtime.load(config)
        self.setup = self.backend.configure(config)
        self.spec = get_model(config.model)
        self.record: list[dict[str, Any]] = []  # every probe: batch, status, how (ran / compiled), bytes, seconds
        self.current: dict[str, Any] | None = None  # the probe under way: its batch, how, and when it started
        self.error: str | None = None  # what stopped the search other than memory (a compile error, a crash)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def probe(self, batch: int) -> str:
        """The batch's status: ``ok``, ``oom``, ``budget`` (the time budget is spent), or ``crash``."""
        if self.setup_s is None:  # the budget is the probes': it starts with the first, which always runs
            self.setup_s = round(self.elapsed(), 3)
        elif self.elapsed() - self.setup_s > self.budget_s:
            return BUDGET
        if not self.record:  # the first batch runs: it records the step a compiler can analyse at other batches
            return self.ran(batch)
        start = time.perf_counter()
        self.trying(batch, "compiling")
        try:
            needed = self.backend.step_memory(batch * self.setup.replicas)
        except Exception as error:  # noqa: BLE001 - a compiler that cannot fit the program is an answer; else a stop
            needed, status = None, self.failed(error)
        else:
            if needed is None:  # nothing to analyse: the step runs
                return self.ran(batch)
            status = "ok" if self.capacity is None or needed <= self.capacity else "oom"
        return self.kept(batch, status, "compiled", needed, start)

    def ran(self, batch: int) -> str:
        """One step of ``batch`` run, kept in the record."""
        start = time.perf_counter()
        self.trying(batch, "running")
        status, needed = self.step(batch)
        return self.kept(batch, status, "ran", needed, start)

    def trying(self, batch: int, how: str) -> None:
        """The probe under way, written before it starts: a watcher (``collector.runner.max_batch``) says it, and
        stops a probe that runs past its limit."""
        self.current = {"batch": batch, "how": how, "since_s": round(self.elapsed(), 3)}
        self.write(None)

    def kept(self, batch: int, status: str, how: str, needed: int | None, start: float) -> str:
        self.record.append({"batch": batch, "status": status, "how": how, "bytes": needed,
                            "s": round(time.perf_counter() - start, 3)})  # fmt: skip
        self.current = None
        self.write(None)
        return status

    def failed(self, error: Exception) -> str:
        """``oom`` where the framework says it ran out of memory (XLA can, compiling); else ``crash``, and why."""
        if self.backend.is_out_of_memory(error):
            return "oom"
        traceback.print_exc()
        self.error = f"{type(error).__name__}: {str(error).strip()[:300]}"
        return "crash"

    def step(self, batch: int) -> tuple[str, int | None]:
        """Build the model for ``batch`` and train one step after the first execution (which compiles); its status
        and the memory the step needs where the backend can tell, against the capacity where one is set."""
        config = self.config.with_changes(per_device_batch=batch)
        model = optimizer = data = None
        try:
            model, optimizer = self.backend.build_model(self.spec, config, self.setup)
            data = self.backend.make_data(self.spec, config, self.setup)
            clock = WindowClock(first_steps=config.steps_per_execution, window_steps=config.steps_per_execution)
            self.backend.train(model, optimizer, data, clock, config.steps_per_execution, config, self.setup)
        except Exception as error:  # noqa: BLE001 - out of memory is an answer; anything else ends the search
            return self.failed(error), None
        finally:
            del model, optimizer, data
            self.backend.release()
        try:
            needed = self.backend.step_memory(batch * self.setup.replicas)
        except Exception:  # noqa: BLE001 - the step ran: without its analysis the search bisects by running
            traceback.print_exc()
            needed = None
        if needed is not None and self.capacity is not None and needed > self.capacity:
            return "oom", needed
        return "ok", needed

    def bound(self, how: str | None = None) -> int | None:
        """The largest batch the compiler's analysis of the batches tried (those ``how`` tried them: ran or compiled;
        all by default) says fits (``memory_bound``)."""
        points = {p["batch"]: p["bytes"] for p in self.record if p["bytes"] and how in (None, p["how"])}
        return memory_bound(points, self.capacity)

    def search(self, limit: int = SEARCH_LIMIT) -> MaxBatch:
        """The search from the config's batch; where its answer was only compiled, one step of it is run. A step
        that runs out of memory there needed more than the analysis of its shapes alone said (on JAX the step that
        runs, 5% more at ResNet-50's largest batch on a CPU): the search goes on below it with steps that run,
        from the batch the compiled analysis scaled by that excess says fits, guided by the running steps' own
        memory (doubling again from the smallest batch by running steps took minutes: the stall of a search on
        JAX)."""
        found = search_max_batch(self.probe, self.config.per_device_batch, limit, bound=self.bound)
        ran = {p["batch"] for p in self.record if p["how"] == "ran" and p["status"] == "ok"}
        if found.largest is None or found.largest in ran:
            return found
        if self.ran(found.largest) == "ok":
            return found
        start = scaled_start(self.record, self.capacity, found.largest, max(ran))
        again = search_max_batch(self.ran, start, limit=found.largest - 1, bound=lambda: self.bound("ran"))
        if again.largest is None and start > max(ran):  # the scaled estimate was still too large: from what ran
            again = search_max_batch(self.ran, max(ran), limit=start - 1, bound=lambda: self.bound("ran"))
        return MaxBatch(again.largest, f"{again.ended} (a step at batch {found.largest} ran out of memory where the "
                        "compiler's analysis said it fits)", found.probes + again.probes)  # fmt: skip

    def write(self, found: MaxBatch | None) -> None:
        payload: dict[str, Any] = {"probes": self.record, "capacity_bytes": self.capacity, "error": self.error,
                                   "elapsed_s": round(self.elapsed(), 3), "setup_s": self.setup_s,
                                   "current": self.current}  # fmt: skip
        if found is not None:
            payload.update(largest=found.largest, ended=found.ended)
        write_json_atomically(self.result_path, payload)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepwatch.collector.trial.probe", description=__doc__)
    parser.add_argument("--config", required=True, help="BenchmarkConfig as JSON (its batch: the first)")
    parser.add_argument("--result", required=True, type=Path, help="where to write the search's record (JSON)")
    parser.add_argument("--capacity", type=int, default=None, help="the device memory a step may take, in bytes")
    parser.add_argument("--budget-s", type=float, default=float("inf"), help="seconds before no new probe starts")
    parser.add_argument("--limit", type=int, default=SEARCH_LIMIT, help="the largest batch to try")
    args = parser.parse_args(argv)
    prober = Prober(validate(BenchmarkConfig.from_json(args.config)), args.capacity, args.budget_s, args.result)
    found = prober.search(args.limit)
    if prober.error and found.ended.startswith("crash"):
        found = MaxBatch(found.largest, f"{found.ended}: {prober.error}", found.probes)
    prober.write(found)
    print(f"search finished: {found.largest} ({found.ended})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as a trial: no framework teardown to wait for
