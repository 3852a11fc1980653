"""A trial that runs the user's training script (the workload kind ``script``), in the trial process: the script runs as
``__main__`` with its arguments and marks its steps (``collector.trial.steps``); the row is every trial's (the
window clock, throughput, step times, startup to the first step, memory, failure rows).

Under a data-parallel launcher (``collector.runner.launchers``) every process runs this, each a rank: rank 0
writes the trial's result file, every other rank its own beside it (``rank_result``), which the parent reads to
say which rank failed. Imports no framework itself: the script imports what it trains with.
"""

from __future__ import annotations

import os
import runpy
import shlex
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from stepwatch.collector.config import FRAMEWORK_VERSION_COLUMNS, BenchmarkConfig, usable_cores
from stepwatch.collector.metrics import startup_column
from stepwatch.collector.trial import machine, steps
from stepwatch.collector.trial.fields import Phases, measured_fields, write_json_atomically
from stepwatch.collector.trial.host import distribution_version, host_environment
from stepwatch.collector.trial.measure import WindowClock
from stepwatch.collector.trial.ranks import COORDINATOR_ENV, rank
from stepwatch.collector.trial.runtime import deterministic_env
from stepwatch.collector.trial.runtime.trial_backend import host_peak_memory
from stepwatch.trainers.script import Script

DISTRIBUTIONS = {
    "tensorflow": ("tensorflow", "tensorflow-cpu"), "keras": ("keras",), "jax": ("jax",), "torch": ("torch",),
}  # fmt: skip
GUIDE = "docs/reference.md, 'Your own training script'"


def framework_versions() -> dict[str, Any]:
    """The version of each framework the script loaded, as the framework gives it (as a Keras model's trial
    records it: torch's CUDA builds say "2.11.0+cu130" where their distribution says "2.11.0"), else its
    distribution's; and the CUDA torch was built with."""
    found: dict[str, Any] = {}
    for name, column in FRAMEWORK_VERSION_COLUMNS.items():  # the frameworks the script loaded
        module = sys.modules.get(name)
        if module is None:
            continue
        own = getattr(module, "__version__", None)
        found[column] = (
            own if isinstance(own, str) else next(filter(None, map(distribution_version, DISTRIBUTIONS[name])), None)
        )
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch.version, "cuda", None):
        found["cuda_build_version"] = torch.version.cuda
    return found


def device_fields(config: BenchmarkConfig) -> dict[str, Any]:
    """On a GPU, the device the script trained on and its allocator's peak, from the framework it loaded: torch
    (the rank's own device), JAX or TensorFlow. On a CPU the parent samples the peak (``collector.trial.memory``)."""
    if config.device == "cpu":
        peak, kind = host_peak_memory()
        return {"peak_memory_bytes": peak, "peak_memory_kind": kind}
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        device = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(device)
        return {"accelerator": torch.cuda.get_device_name(device), "compute_capability": f"{major}.{minor}",
                "peak_memory_bytes": int(torch.cuda.max_memory_allocated(device)),
                "peak_memory_kind": "device"}  # fmt: skip
    jax = sys.modules.get("jax")
    if jax is not None and steps.jax_started():
        device = jax.local_devices()[0]
        stats = device.memory_stats() or {}
        return {"accelerator": device.device_kind, "peak_memory_bytes": stats.get("peak_bytes_in_use"),
                "peak_memory_kind": "device" if stats else None}  # fmt: skip
    tf = sys.modules.get("tensorflow")
    if tf is not None and tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[local])
        capability = details.get("compute_capability")
        return {"accelerator": details.get("device_name"),
                "compute_capability": ".".join(map(str, capability)) if capability else None,
                "peak_memory_bytes": tf.config.experimental.get_memory_info(f"GPU:{local}")["peak"],
                "peak_memory_kind": "device"}  # fmt: skip
    return {"peak_memory_bytes": None, "peak_memory_kind": None}


# What torch.compile reports it spent compiling (torch._dynamo.utils.compilation_time_metrics, seconds per call):
# the graphs dynamo compiled, and their backward graphs, compiled at the first backward pass.
TORCH_COMPILE_METRICS = ("_compile.compile_inner", "compile_fx.<locals>.bw_compiler")


def framework_compile_s() -> float | None:
    """The seconds the script's framework reports it spent compiling: torch.compile's own account, where the
    script used it; else None (stepwatch does not guess it from the time to the first step)."""
    metrics = getattr(sys.modules.get("torch._dynamo.utils"), "compilation_time_metrics", None) or {}
    found = [t for key in TORCH_COMPILE_METRICS for t in metrics.get(key, [])]
    return float(sum(found)) if found else None


def is_out_of_memory(error: BaseException) -> bool:
    """An allocator's out-of-memory error, by the framework's own exception or status word."""
    return type(error).__name__ in ("OutOfMemoryError", "ResourceExhaustedError") or "RESOURCE_EXHAUSTED" in str(error)


def initialise_distributed(config: BenchmarkConfig) -> None:
    """JAX's distributed initialisation, for a JAX script run as several processes (stepwatch's launcher gives
    the coordinator's address): the script then sees every process's devices, as under a cluster's launcher.
    TensorFlow reads TF_CONFIG and torch its RANK / WORLD_SIZE / MASTER_ADDR itself, in the script."""
    if config.processes > 1 and config.keras_backend == "jax":
        import jax

        jax.distributed.initialize(os.environ[COORDINATOR_ENV], num_processes=config.processes, process_id=rank())


def run(config: BenchmarkConfig, result_path: Path, phases: Phases) -> dict[str, Any]:
    """Run the config's script as ``__main__`` until its steps are done, and write this rank's part of the row to
    ``result_path``: once the last window has closed (the parent stops sampling memory then), and again when the
    script has stopped."""
    result: dict[str, Any] = {"status": "crash", "rank": rank()}
    phases.done("python")
    result.update(host_environment(config.device))
    phases.done("environment")
    os.environ["KERAS_BACKEND"] = config.keras_backend  # a Keras script runs on the config's backend
    os.environ[steps.SEED_ENV] = str(config.seed)  # stepwatch.seed(): trial i's, the same on both sides of a check
    if config.deterministic:  # what the frameworks read at import; a script turns on torch's own in its code
        os.environ.update(deterministic_env(config))
    result["determinism"] = "environment: " + ", ".join(deterministic_env(config)) if config.deterministic else (
        "the framework's default kernels")  # fmt: skip
    clock = WindowClock(first_steps=1, window_steps=config.window_steps)
    total = 1 + config.warmup_steps + config.steps
    machine.watch_trial(clock, config, total)
    session = steps.Session(clock, total)
    path = Script(config.model).check()

    def measured() -> dict[str, Any]:
        global_batch = (session.examples_per_step or 0) * config.processes
        if session.examples_per_step:  # what the script's steps held: per process (per device), and in all
            result.update(per_device_batch=session.examples_per_step, global_batch=global_batch)
        result.update(
            unit="examples",  # a script counts examples (examples_per_step)
            units_per_example=1,
            replicas=config.processes,
            usable_cores=usable_cores(),
            steps_marked=session.done,
            python_executable=sys.executable,
        )  # kept in extras: the environment the script ran in
        result.update(measured_fields(clock, config, phases, global_batch, global_batch or 1))
        # The first step's end, from the script's start: its own start-up, not a compilation (compile_s is what
        # the framework reports it compiled, where it does).
        result[startup_column("script")] = result.pop("compile_s", None)
        result["compile_s"] = framework_compile_s()
        # A script's loss is its own: nothing measured it here. What it reports of its quality is kept.
        result.update(first_loss=None, final_loss=None, loss_finite=None, window_losses=[])
        result.update(session.quality_fields())
        result.update(framework_versions())
        result.update(device_fields(config))
        return result

    def done() -> None:  # the last window closed: what was measured is complete
        result["status"] = "ok"
        write_json_atomically(result_path, measured())

    session.on_done = done
    argv = [str(path), *shlex.split(config.script_args)]
    sys.argv[:] = argv
    sys.path.insert(0, str(path.parent))
    # How the script ended other than by stepwatch's stop: what it did, and the row's failure had it not marked every
    # step. Where it had (every measured window closed), the row is ok and its note says what the script did after.
    ended: tuple[str, dict[str, Any]] | None = None
    try:
        try:
            initialise_distributed(config)
            steps.start(session)
            clock.begin()  # time to the first step: from here, the script's own start-up (imports, build) included
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as exit:
                if exit.code not in (0, None):
                    raise ScriptExit(exit.code) from None
            ended = ("ran on to its end", {"status": "crash", **too_few(config, session, total)})
        except steps.StepsDone:
            result["status"] = "ok"
        except ScriptExit as exit:
            ended = (f"exited with code {exit.code}", {"status": "crash", "error_type": "ScriptExit",
                     "error_message": f"script {config.model} exited with code {exit.code} after marking "
                     f"{session.done} of {total} steps"})  # fmt: skip
        except Exception as error:  # noqa: BLE001 - whatever the script raises becomes the row, its traceback in the log
            traceback.print_exc()
            text = str(error).strip().splitlines()
            raised = f"raised {type(error).__name__}" + (f": {text[0][:400]}" if text else "")
            status = "oom" if is_out_of_memory(error) else "crash"
            ended = (raised, {"status": status, "error_type": type(error).__name__,
                              "error_message": f"script {config.model} {raised}"})  # fmt: skip
        if ended is not None:
            what, failure = ended
            if session.complete:
                result.update(status="ok", script_note=after_its_steps(config, session, what))
            else:
                result.update(failure)
    finally:
        if result["status"] != "ok":
            result["failed_at"] = time.time()  # which rank failed first, among several
        steps.start(None)
        write_json_atomically(result_path, measured())
    return result


def after_its_steps(config: BenchmarkConfig, session: steps.Session, what: str) -> str:
    """What a script did after its last measured window had closed (kept in the row's extras, and in its log):
    stepwatch's stop (``StepsDone``) was caught, or ended only the thread that marked the steps."""
    if session.finished_in not in (None, "MainThread"):
        how = f"marked its steps in thread {session.finished_in!r}, where stepwatch's stop ended that thread only"
    else:
        how = "caught stepwatch's stop (StepsDone: catch Exception, not BaseException)"
    note = f"script {config.model} {how}; after its last measured step it {what}. Every measured window had closed."
    print(f"stepwatch: {note}", file=sys.stderr, flush=True)
    return note


class ScriptExit(Exception):  # noqa: N818 - the script's own sys.exit, with its code
    def __init__(self, code: Any) -> None:
        super().__init__(code)
        self.code = code


def too_few(config: BenchmarkConfig, session: steps.Session, total: int) -> dict[str, str]:
    """Why a script that ran to its end is no measurement: it marked no step, or fewer than the trial needs."""
    if not session.done:
        return {"error_type": "NoStepsMarked",
                "error_message": f"script {config.model} ran to its end without marking a step: wrap its training "
                f"loop in stepwatch.steps(loader, examples_per_step=N) ({GUIDE})"}  # fmt: skip
    return {"error_type": "TooFewSteps",
            "error_message": f"script {config.model} ended after {session.done} of the {total} steps the trial needs "
            f"(1 first, {config.warmup_steps} warm-up, {config.steps} measured): give it more data or epochs in its "
            "arguments, or ask for fewer --warmup/--steps"}  # fmt: skip
