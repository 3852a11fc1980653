"""What every kind of trial measures, built once: ``measured_fields`` turns the window clock, the startup phases
and the machine's watch into the row's timed fields, whether a backend trained a model (``process.py``) or a script
of yours marked its steps (``script.py``). Also what both write with: the startup phases and the result file."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.metrics import STARTUP_PHASES, startup_column
from stepwatch.collector.trial import machine
from stepwatch.collector.trial.measure import WindowClock, host_load, summarize
from stepwatch.collector.trial.runtime import loaded_frameworks
from stepwatch.collector.trial.runtime.trial_backend import host_memory_fields

SPAWN_TIME_ENV = "STEPWATCH_SPAWN_TIME"  # time.time() at which the parent started the trial process (``Phases``)


def write_json_atomically(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, default=str))
    os.replace(tmp, path)


def perf_at(wall_time: float) -> float:
    """The time.perf_counter() reading that corresponds to a time.time() reading."""
    return time.perf_counter() - (time.time() - wall_time)


class Phases:
    """How long each phase of a trial's startup took (``collector.metrics.STARTUP_PHASES``, in order): each
    ``done(phase)`` ends that phase where the last one ended, starting from the process's spawn."""

    def __init__(self, spawn_time: float) -> None:
        self.spawned = self.last = perf_at(spawn_time)
        self.times: dict[str, float] = {}

    def done(self, phase: str) -> None:
        assert phase in STARTUP_PHASES, phase
        now = time.perf_counter()
        self.times[startup_column(phase)] = now - self.last
        self.last = now


def measured_fields(
    clock: WindowClock, config: BenchmarkConfig, phases: Phases, global_batch: int | None, rate_batch: int
) -> dict[str, Any]:
    """The timed fields of a trial as far as it got: startup to the first step and its phases, the measured
    windows' statistics (``rate_batch`` examples a step), how busy the host was, the machine's state over the
    measured steps (``global_batch`` examples a step, none where unknown), the host memory the trial itself reads
    at its end, and the frameworks it really imported (kept in extras)."""
    fields: dict[str, Any] = {}
    if clock.marks:
        fields["startup_s"] = clock.marks[0].time - phases.spawned
    fields.update(phases.times)
    stats = summarize(clock, config.warmup_steps, rate_batch)
    fields.update(asdict(stats))
    fields.update(host_load(clock, config.warmup_steps))  # kept in extras: how busy this process was
    fields.update(machine.trial_fields(clock, stats.measured_steps * (global_batch or 0)))
    fields.update(host_memory_fields())
    fields["frameworks_loaded"] = loaded_frameworks()  # kept in extras: what this process really imported
    return fields
