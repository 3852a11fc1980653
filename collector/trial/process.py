"""One trial in a fresh process: ``python -m stepwatch.collector.trial.process --config JSON --result PATH``.

The parent (collector.runner.execution) starts this with a timeout and always writes a row; this side writes
what it measured, or why it stopped, to the result file before it exits.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepwatch.collector.config import ATTENTION_AUTO, BenchmarkConfig, usable_cores, validate
from stepwatch.collector.trial import counters, machine, profiles, ranks, routing, runtime, script
from stepwatch.collector.trial.fields import SPAWN_TIME_ENV, Phases, measured_fields, write_json_atomically
from stepwatch.collector.trial.host import host_environment
from stepwatch.collector.trial.measure import NonFiniteLoss, WindowClock, loss_target
from stepwatch.trainers import get_model
from stepwatch.trainers.workload import Kind, kind_of


def run_trial(config: BenchmarkConfig, spawn_time: float, result_path: Path) -> dict[str, Any]:
    """Run the config's workload in this process, the way its kind runs (``RUNS``), and write the child's part of
    the row to ``result_path``."""
    if config.processes > 1:  # one rank of several: rank 0 writes the trial's result, each other rank its own
        ranks.die_with_parent()
        if ranks.rank() == 0:
            ranks.rank0_pid_file(result_path).write_text(str(os.getpid()))
        result_path = ranks.rank_result(result_path, ranks.rank())
    return RUNS[config.workload](config, result_path, Phases(spawn_time))


def run_model(config: BenchmarkConfig, result_path: Path, phases: Phases) -> dict[str, Any]:
    """A bundled model or a model of yours: set up the config's backend, train for the configured steps and write
    the row's part to ``result_path`` once everything timed and its memory are measured (the parent stops sampling
    the memory when the file appears), and again with the compiled step's counters, which are read after that."""
    result: dict[str, Any] = {"status": "crash"}
    phases.done("python")
    result.update(host_environment(config.device))
    phases.done("environment")
    # Imported here, not at the top: the backend must be chosen before Keras is imported. If an import fails, the parent
    # records the crash with the log tail.
    runtime.prepare(config)
    backend = runtime.load(config)
    result.update(backend.software_environment())
    result["determinism"] = runtime.determinism(config)  # kept in extras: which kernels were asked to be deterministic
    phases.done("imports")
    spec = get_model(config.model)
    preset = spec.preset(config.preset, config.sequence_length)
    clock = WindowClock(first_steps=config.steps_per_execution, window_steps=config.window_steps)
    total_steps = config.steps_per_execution + config.warmup_steps + config.steps
    machine.watch_trial(clock, config, total_steps)
    model = optimizer = data = setup = None
    try:
        setup = backend.configure(config)
        result.update(backend.accelerator_details(config))
        phases.done("device")
        global_batch = config.per_device_batch * setup.replicas
        result.update(
            replicas=setup.replicas,
            global_batch=global_batch,
            tf32_enabled=setup.tf32_enabled,
            matmul_precision=setup.matmul_precision,
            compute_dtype=setup.compute_dtype,
            variable_dtype=setup.variable_dtype,
            intra_op_threads=setup.intra_op_threads,
            inter_op_threads=setup.inter_op_threads,
            usable_cores=usable_cores(),  # kept in extras: the cores this process may run on (its affinity)
            learning_rate=spec.learning_rate(config.learning_rate),
        )
        model, optimizer = backend.build_model(spec, config, setup)
        phases.done("build")
        # After the build: a model of yours says what it is when its function runs, inside the build.
        spec = spec.as_built()
        if config.attention != ATTENTION_AUTO and not spec.attention:
            raise ValueError(f"attention {config.attention} is pinned, but the model does not say it has attention "
                             "(return 'attention': True)")  # fmt: skip
        result.update(unit=spec.unit, units_per_example=spec.units_per_example(preset), **flops_of(spec, preset))
        data = backend.make_data(spec, config, setup)
        phases.done("data")
        backend.train(model, optimizer, data, clock, total_steps, config, setup)
        result["status"] = "ok"
    except NonFiniteLoss as error:
        result.update(status="nonfinite_loss", error_type="NonFiniteLoss", error_message=str(error))
    except Exception as error:  # noqa: BLE001 - every failure becomes a row, with its traceback in the log
        traceback.print_exc()
        oom = backend.is_out_of_memory(error)
        message = str(error).strip().splitlines()[0][:500] if str(error).strip() else repr(error)
        if config.workload.yours and not message.startswith(f"model {config.model}"):
            message = f"model {config.model}: {message}"  # where a user's model failed, it is named
        hidden = runtime.hidden_framework(error, config)
        if hidden:
            message = f"{message} ({hidden})"
        result.update(status="oom" if oom else "crash", error_type=type(error).__name__, error_message=message)
    finally:
        if model is not None:  # what really ran, read back once training has built the step function
            compiler = backend.compiler(model, config)
            result.update(
                compiler=compiler,
                xla_effective=compiler == "xla",
                loss_scaling=backend.loss_scaling(model, optimizer),
            )
        batch = result.get("global_batch")
        result.update(measured_fields(clock, config, phases, batch, batch or config.per_device_batch))
        result.update(loss_target(clock, spec.target_loss(preset)))
        result["peak_memory_bytes"], result["peak_memory_kind"] = backend.peak_memory(config)
        write_json_atomically(result_path, result)
    if result["status"] == "ok":
        # The compiled step's counters (collector.trial.counters): one that cannot be read is left out.
        result.update(after_training("counters", lambda: counters.known(backend.counters(model, data, config, setup))))
        result.update(compiler_flops(result, config))
        if spec.attention:  # after the counters: JAX reads the kernel from the step they compiled
            result.update(after_training("attention", lambda: attention_of(backend, model, data, config)))
        if spec.experts:  # the kernel that ran, and how evenly the router spread the tokens (collector.trial.routing)
            result.update(after_training("experts", lambda: experts_of(backend, model, data, config)))
            routed = lambda: routing.balance(backend.routed_tokens(model, data, config))  # noqa: E731
            result.update(after_training("routing", routed))
        write_json_atomically(result_path, result)
    profile_dir = os.environ.get(profiles.PROFILE_ENV)
    if result["status"] == "ok" and profile_dir:
        # A few more steps under the framework's profiler: the op table, or why there is none.
        result.update(after_training("profile", lambda: backend.profile(model, data, config, Path(profile_dir))))
        write_json_atomically(result_path, result)
    return result


FLOPS_ANALYTIC = "analytic: the model's own count (forward + backward)"
FLOPS_DECLARED = "declared by the model's function"
FLOPS_COMPILER = "compiler: XLA's cost analysis of the train step per example (library calls such as cuDNN's left out)"


def flops_of(spec: Any, preset: Any) -> dict[str, Any]:
    """The training FLOPs per example and where they come from (kept in extras as ``flops_source``): a bundled
    model counts its own; a model of yours declares them, or the compiler's count fills them in after training."""
    flops = spec.flops_per_example(preset)
    if flops is None:
        return {"flops_per_example": None}
    return {"flops_per_example": flops, "flops_source": FLOPS_DECLARED if kind_of(spec.name).yours else FLOPS_ANALYTIC}


def compiler_flops(result: dict[str, Any], config: BenchmarkConfig) -> dict[str, Any]:
    """Where no FLOPs were given: the compiled step's (per example, one step an execution), or why MFU stays
    empty (kept in extras as ``flops_missing``)."""
    if result.get("flops_per_example") is not None:
        return {}
    compiled, batch = result.get("compiled_flops"), result.get("global_batch")
    if compiled and batch and config.steps_per_execution == 1:
        return {"flops_per_example": compiled / batch, "flops_source": FLOPS_COMPILER}
    why = (
        "no FLOPs declared, and no compiler count of this step (it is compiled by XLA only with xla on, on "
        "TensorFlow or JAX)"
    )
    return {"flops_missing": why}


def after_training(what: str, read: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """What a trial reads once everything timed is measured (the step's counters, the attention kernel, a profile),
    and how long it took (kept in extras as ``<what>_s``); where it cannot be read, why (``<what>_error``, with the
    traceback in the log), and the trial stays ok."""
    start = time.perf_counter()
    try:
        found = read()
    except Exception as error:  # noqa: BLE001 - the timed figures are measured; what is read after them is extra
        traceback.print_exc()
        return {f"{what}_error": f"{type(error).__name__}: {str(error).strip()[:300]}"}
    return {**found, f"{what}_s": round(time.perf_counter() - start, 3)}


def attention_of(backend: runtime.Backend, model: Any, data: Any, config: BenchmarkConfig) -> dict[str, Any]:
    """The attention kernel the model ran (flash, efficient, cudnn or math), as its backend reports it, and the
    backend's own name for it (kept in extras as ``attention_op``)."""
    kernel, reported = backend.attention_kernel(model, data, config)
    return {"attention_kernel": kernel, "attention_op": reported}


def experts_of(backend: runtime.Backend, model: Any, data: Any, config: BenchmarkConfig) -> dict[str, Any]:
    """The experts kernel the model ran (grouped_mm, grouped_mm_fallback, batched_mm or eager in the plain PyTorch
    loop, read from a profiled step; dense in Keras, whose MoE backbones compute every expert for every token), and
    the operator it was read from (kept in extras as ``experts_op``)."""
    if config.loop != "pytorch":
        return {"experts_kernel": "dense", "experts_op": "keras-hub computes every expert for every token"}
    kernel, reported = backend.experts_kernel(model, data, config)  # the plain PyTorch backend's own
    return {"experts_kernel": kernel, "experts_op": reported}


# Each kind of workload (``trainers.workload``) and the one place that runs it in the trial process.
RUNS = {Kind.BUNDLED: run_model, Kind.FUNCTION: run_model, Kind.SCRIPT: script.run}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepwatch.collector.trial.process", description=__doc__)
    parser.add_argument("--config", required=True, help="BenchmarkConfig as JSON")
    parser.add_argument("--result", required=True, type=Path, help="where to write the result JSON")
    args = parser.parse_args(argv)
    spawn_time = float(os.environ.get(SPAWN_TIME_ENV, time.time()))
    config = validate(BenchmarkConfig.from_json(args.config))
    result = run_trial(config, spawn_time, args.result)
    print(f"trial finished: {result['status']}", file=sys.stderr)
    return 0 if result["status"] == "ok" else 3


if __name__ == "__main__":
    code = main()
    # The result file is complete: leave without the framework's teardown (1.5 s of TensorFlow's on a 2-core
    # CPU), which the parent would wait for and which measures nothing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
