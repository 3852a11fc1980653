"""One trial in a fresh process: ``python -m collector.bench.trial --config JSON --result PATH``.

The parent (collector.bench.runner) starts this with a timeout and always writes a row; this side writes
what it measured, or why it stopped, to the result file before it exits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from collector.bench.environment import host_environment
from collector.bench.measure import NonFiniteLoss, WindowClock, summarize
from collector.config import BenchmarkConfig, validate
from trainers import get_model

SPAWN_TIME_ENV = "STEPWATCH_SPAWN_TIME"  # time.time() at which the parent started this process


def write_json_atomically(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, default=str))
    os.replace(tmp, path)


def run_trial(config: BenchmarkConfig, spawn_time: float) -> dict[str, Any]:
    """Set up TensorFlow, train for the configured steps and return the child's part of the row."""
    result: dict[str, Any] = {"status": "crash"}
    result.update(host_environment(config.backend))
    # Imported here, not at the top: the parent imports this module for SPAWN_TIME_ENV and must stay
    # free of TensorFlow. If the import fails, the parent records the crash with the log tail.
    from collector.bench.runtime import tensorflow as tfruntime

    result.update(tfruntime.software_environment())
    spec = get_model(config.model)
    preset = spec.preset(config.preset)
    clock = WindowClock(first_steps=config.steps_per_execution, window_steps=config.window_steps)
    total_steps = config.steps_per_execution + config.warmup_steps + config.steps
    try:
        runtime = tfruntime.configure(config)
        result.update(tfruntime.accelerator_details(config))
        global_batch = config.per_device_batch * runtime.replicas
        result.update(
            replicas=runtime.replicas,
            global_batch=global_batch,
            tf32_enabled=runtime.tf32_enabled,
            compute_dtype=runtime.compute_dtype,
            variable_dtype=runtime.variable_dtype,
            loss_scaling=config.precision == "mixed_float16",
            unit=spec.unit,
            units_per_example=spec.units_per_example(preset),
            flops_per_example=spec.flops_per_example(preset),
            learning_rate=spec.learning_rate(config.learning_rate),
        )
        model, optimizer = tfruntime.build_model(spec, config, runtime)
        result["xla_effective"] = tfruntime.xla_effective(model, config)
        dataset = tfruntime.make_dataset(spec, config, global_batch)
        if config.loop == "fit":
            tfruntime.train_fit(model, dataset, clock, total_steps)
        else:
            tfruntime.train_ctl(model, optimizer, dataset, clock, total_steps, config, runtime)
        result["status"] = "ok"
    except NonFiniteLoss as error:
        result.update(status="nonfinite_loss", error_type="NonFiniteLoss", error_message=str(error))
    except Exception as error:  # noqa: BLE001 - every failure becomes a row, with its traceback in the log
        traceback.print_exc()
        oom = tfruntime.is_out_of_memory(error)
        message = str(error).strip().splitlines()[0][:500] if str(error).strip() else repr(error)
        result.update(status="oom" if oom else "crash", error_type=type(error).__name__, error_message=message)
    finally:
        if clock.marks:
            result["startup_s"] = clock.marks[0].time - _perf_at(spawn_time)
        stats = summarize(clock, config.warmup_steps, result.get("global_batch", config.per_device_batch))
        result.update(asdict(stats))
        result["peak_memory_bytes"], result["peak_memory_kind"] = tfruntime.peak_memory(config)
    return result


def _perf_at(wall_time: float) -> float:
    """The time.perf_counter() reading that corresponds to a time.time() reading."""
    return time.perf_counter() - (time.time() - wall_time)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collector.bench.trial", description=__doc__)
    parser.add_argument("--config", required=True, help="BenchmarkConfig as JSON")
    parser.add_argument("--result", required=True, type=Path, help="where to write the result JSON")
    args = parser.parse_args(argv)
    spawn_time = float(os.environ.get(SPAWN_TIME_ENV, time.time()))
    config = validate(BenchmarkConfig.from_json(args.config))
    result = run_trial(config, spawn_time)
    write_json_atomically(args.result, result)
    print(f"trial finished: {result['status']}", file=sys.stderr)
    return 0 if result["status"] == "ok" else 3


if __name__ == "__main__":
    sys.exit(main())
