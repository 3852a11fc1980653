"""The JAX backend: devices (JAX_PLATFORMS, set by ``prepare``), keras.distribution.DataParallel across
several devices, float32 matmul precision, XLA through jit_compile, device memory statistics.

Only a trial process with KERAS_BACKEND=jax imports this module. It never imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import keras

from stepwatch.collector.config import BenchmarkConfig, ConfigError
from stepwatch.collector.trial import counters, profiles
from stepwatch.collector.trial.runtime import keras_backend
from stepwatch.collector.trial.runtime.keras_backend import Runtime

# fp32 is true fp32 (no TF32 on tensor cores), tf32 asks for TF32; the mixed modes keep JAX's default, which
# allows TF32 for the float32 matmuls that remain, as TensorFlow does. (Setting a precision for every dot
# would also apply it to float16 dots, which XLA's CPU backend refuses.)
MATMUL_PRECISION = {"fp32": "highest", "tf32": "tensorfloat32"}
# How the profiled copy of the step is compiled, per device: on a GPU without command buffers (CUDA graphs),
# so that the profiler sees each fusion and library call instead of one ``command_buffer`` op.
PROFILE_COMPILER_OPTIONS = {"gpu": {"xla_gpu_enable_command_buffer": ""}}
EXACT = ("highest", "float32")


def _devices(config: BenchmarkConfig) -> list[Any]:
    found = jax.devices()
    if len(found) < config.num_devices:
        raise ConfigError(f"device {config.device} asks for {config.num_devices} device(s), JAX sees {len(found)}")
    return found[: config.num_devices]


def running_loss_reader(model: Any) -> Callable[[Any], float]:
    """The running mean loss read straight from the trainer's current state (the loss tracker's total and count),
    the same value the model's own tracker gives. A callback's ``self.model`` on JAX would first copy every
    variable of that state back into the model (``jax_state_sync``: a Python loop over the weights and optimizer
    slots), and the next step would rebuild the state from them, once per window; a bare ``model.fit`` never
    syncs mid-epoch. Falls back to the synced read where the trainer keeps no such state."""
    positions: dict[str, int] = {}

    def read(trained: Any) -> float:
        state = getattr(trained, "_jax_state", None)
        if not state or getattr(trained, "_jax_state_synced", True) or not state.get("metrics_variables"):
            return float(next(m for m in trained.metrics if m.name == "loss").result())
        if not positions:
            tracker = next(m for m in trained.metrics if m.name == "loss")
            index = {id(v): i for i, v in enumerate(trained.metrics_variables)}
            positions.update(total=index[id(tracker.total)], count=index[id(tracker.count)])
        values = state["metrics_variables"]
        return float(values[positions["total"]]) / float(values[positions["count"]])

    return read


def abstract(value: Any) -> Any:
    """An argument's shape, dtype and sharding: enough to lower the step again without holding its buffers."""
    if isinstance(value, jax.Array):
        return jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=value.sharding)
    return value


# A fused attention call in optimized HLO: cuDNN's (``custom_call_target="__cudnn$fmhaSoftmax"``...) or a Pallas kernel
# named for splash or flash attention.
FUSED_ATTENTION = re.compile(r'(?:custom_call_target|kernel_name)="([^"]*(?:fmha|flash|splash)[^"]*)"')


def forward_hlo(model: Any, data: Any) -> str:
    """The model's forward on one batch of ``data``, compiled by XLA: its optimized HLO."""
    inputs, _ = next(data)
    trainable = [v.value for v in model.trainable_variables]
    fixed = [v.value for v in model.non_trainable_variables]

    def forward(trainable: Any, fixed: Any, inputs: Any) -> Any:
        return model.stateless_call(trainable, fixed, inputs, training=True)[0]

    return jax.jit(forward).lower(trainable, fixed, inputs).compile().as_text()


class JaxBackend(keras_backend.KerasBackend):
    """XLA through jit_compile; DataParallel over several devices; the loss read from the trainer's state."""

    step: Any = None  # the jitted train step Keras made (recorded while it makes the train function)
    step_args: Any = None  # the abstract arguments of its first call
    next_args: Any = None  # what a next call would take: the last call's new state and its batch
    compiled: dict[str, Any] | None = None  # compiler options (as text) -> the step compiled again with them

    def recording(self) -> contextlib.AbstractContextManager[None]:
        """Keras jits its train step with its trainer module's ``jit``; keep the jitted step and the shapes of its
        first call's arguments (donated buffers cannot be kept)."""
        from keras.src.backend.jax import trainer

        def keeping(original: Any) -> Any:
            def jit(function: Any, **kwargs: Any) -> Any:
                jitted = self.step = original(function, **kwargs)
                self.step_args = self.compiled = None  # a new model's step (a batch search builds several)

                def step(*args: Any) -> Any:
                    if self.step_args is None:
                        self.step_args = jax.tree.map(abstract, args)
                    logs, state = jitted(*args)  # Keras' train_step(state, data) -> (logs, state)
                    self.next_args = (state, *args[1:])
                    return logs, state

                return step

            return jit

        return keras_backend.wrapped(trainer, "jit", keeping)

    def counters(self, model: Any, data: Any, config: BenchmarkConfig, runtime: Runtime) -> dict[str, Any]:
        """The step lowered and compiled again for the same argument shapes: XLA's cost and memory analyses and its
        optimized HLO."""
        if self.step is None or self.step_args is None:
            return {}
        # How often the step was compiled while it trained (one program: once; a second entry is a recompile,
        # e.g. for arguments placed differently on a later call), read before lowering it again below.
        compilations = self.step._cache_size()
        compiled = self.compiled_step({})
        self.hlo_text = compiled.as_text()
        return {
            "step_compilations": compilations,
            **counters.cost_counts(compiled.cost_analysis()),
            **counters.memory_counts(compiled.memory_analysis()),
            **counters.hlo_counts(self.hlo_text),
        }

    def step_memory(self, global_batch: int) -> int | None:
        """The recorded train step lowered and compiled for its first call's shapes with the batch's leading
        dimension changed (the state's arrays keep theirs): XLA's memory analysis of that program."""
        if self.step is None or self.step_args is None:
            return None
        state, data, *rest = self.step_args
        batches = {leaf.shape[0] for leaf in jax.tree.leaves(data) if getattr(leaf, "shape", ())}
        if len(batches) != 1:  # no one batch dimension to change
            return None
        (recorded,) = batches

        def resized(leaf: Any) -> Any:
            if isinstance(leaf, jax.ShapeDtypeStruct) and leaf.shape and leaf.shape[0] == recorded:
                return jax.ShapeDtypeStruct((global_batch, *leaf.shape[1:]), leaf.dtype, sharding=leaf.sharding)
            return leaf

        compiled = self.step.lower(state, jax.tree.map(resized, data), *rest).compile()
        return counters.memory_counts(compiled.memory_analysis()).get("compiled_memory_bytes")

    def compiled_step(self, options: dict[str, str]) -> Any:
        """The train step lowered and compiled again for its first call's argument shapes, with XLA ``options``;
        once per set of options."""
        key = repr(sorted(options.items()))
        if self.compiled is None:
            self.compiled = {}
        if key not in self.compiled:
            self.compiled[key] = self.step.lower(*self.step_args).compile(compiler_options=options or None)
        return self.compiled[key]

    def profile(self, model: Any, data: Any, config: BenchmarkConfig, logdir: Path) -> dict[str, Any]:
        """The train step compiled again for the profile and called directly, ``profiles.PROFILE_STEPS`` times,
        on the state the timed steps left: the step's ops, and none of ``fit``'s own work between steps. On a GPU
        it is compiled without command buffers (``PROFILE_COMPILER_OPTIONS``): inside a command buffer (a CUDA
        graph) the profiler sees one op, ``command_buffer``, where the step ran dozens of fusions and library
        calls. The timed steps ran as compiled for training; only the profile's copy differs."""
        if self.step is None or self.step_args is None or self.next_args is None:
            return super().profile(model, data, config, logdir)
        options = PROFILE_COMPILER_OPTIONS.get(config.device, {})
        compiled = self.compiled_step(options)  # on a CPU the counters' compilation, not a second one
        self.hlo_text = compiled.as_text()  # what types the profiled ops: this compilation's instructions
        args = self.next_args
        self.next_args = None  # its state is donated to the calls below

        def run(steps: int) -> Any:
            nonlocal args
            for _ in range(steps):
                logs, state = compiled(*args)
                args = (state, *args[1:])
            return jax.block_until_ready(logs)

        found = self.profiled(run, config, logdir)  # the first call of a new executable loads it: unprofiled
        flags = ",".join(f"{key}={value}" for key, value in options.items())
        return {**found, "profile_compiler_options": flags or None}

    @contextlib.contextmanager
    def profiler(self, logdir: Path, config: BenchmarkConfig) -> Iterator[None]:
        """JAX's profiler (XLA's ops on the host or the device's kernels; no Python tracing)."""
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
        options.host_tracer_level = 2
        jax.profiler.start_trace(str(logdir), profiler_options=options)
        try:
            yield
        finally:
            jax.profiler.stop_trace()

    def xspace_planes(self, path: Path) -> profiles.Planes:
        """Through jaxlib's reader."""
        return profiles.profile_data_planes(jax.profiler.ProfileData.from_file(str(path)))

    def attention_kernel(self, model: Any, data: Any, config: BenchmarkConfig) -> tuple[str, str]:
        """The fused attention call in the compiled train step's HLO (read by ``counters``), or in the model's forward
        compiled for one batch where the step was not (jit_compile off): cuDNN's fused attention
        (``__cudnn$fmha...``), the splash kernel on a TPU, else XLA's math (its own fusions)."""
        text = self.hlo_text or forward_hlo(model, data)
        found = sorted(set(FUSED_ATTENTION.findall(text)))
        if any("cudnn" in target for target in found):
            return "cudnn", ", ".join(found)
        if any("splash" in target or "flash" in target for target in found):
            return "flash", ", ".join(found)
        return "math", "XLA's own fusions (no fused attention call in the compiled step)"

    def configure(self, config: BenchmarkConfig) -> Runtime:
        """Matmul precision and the dtype policy; DataParallel over the devices when there are several."""
        jax.config.update("jax_default_matmul_precision", MATMUL_PRECISION.get(config.precision))
        compute_dtype, variable_dtype = keras_backend.set_policy(config.precision)
        devices = _devices(config)
        distribution = None
        if len(devices) > 1:
            distribution = keras.distribution.DataParallel(devices=devices)
            keras.distribution.set_distribution(distribution)
        precision = jax.config.jax_default_matmul_precision
        return Runtime(
            replicas=len(devices),
            tf32_enabled=str(precision) not in EXACT,
            matmul_precision=str(precision) if precision is not None else "default",
            compute_dtype=compute_dtype,
            variable_dtype=variable_dtype,
            strategy=distribution,
        )

    def place(self, runtime: Runtime) -> Callable[[Any], Any]:
        """As jax.Arrays, sharded on the batch axis as the distribution lays out inputs (so Keras' per-step
        device_put has nothing to move)."""
        distribution = runtime.strategy

        def place(array: Any) -> Any:
            if distribution is None:
                return jax.device_put(array)  # uncommitted, as the model's own variables are
            layout = distribution.get_data_layout(array.shape)
            return keras.distribution.distribute_tensor(array, layout)

        return place

    def loss_reader(self, model: Any) -> Callable[[Any], float]:
        return running_loss_reader(model)

    def device_peak_memory(self, config: BenchmarkConfig) -> tuple[int | None, str | None]:
        """peak_bytes_in_use summed over the devices used (GPU/TPU)."""
        try:
            stats = [device.memory_stats() or {} for device in jax.devices()[: config.num_devices]]
        except RuntimeError:
            return None, None
        peaks = [s.get("peak_bytes_in_use") for s in stats]
        if any(p is None for p in peaks):
            return None, None
        return int(sum(peaks)), "device"

    def software_environment(self) -> dict[str, Any]:
        """JAX's versions and the CUDA / cuDNN its plugin loaded (on a CUDA build)."""
        import jaxlib

        env: dict[str, Any] = {
            "jax_version": jax.__version__,
            "jaxlib_version": jaxlib.__version__,
            "keras_version": keras.__version__,
        }
        try:  # not public API; absent on CPU-only installs
            from jax._src.lib import cuda_versions

            if cuda_versions is not None:
                cuda = cuda_versions.cuda_runtime_get_version()
                env["cuda_runtime_version"] = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None  # 12080 -> 12.8
                env["cudnn_runtime_version"] = keras_backend.cudnn_text(cuda_versions.cudnn_get_version())
        except (ImportError, AttributeError, RuntimeError):
            pass
        return env

    def device_details(self, config: BenchmarkConfig) -> dict[str, Any]:
        """Product name, count and compute capability of the devices, from JAX."""
        device = jax.devices()[0]
        name = device.device_kind
        capability = getattr(device, "compute_capability", None)
        if config.device == "tpu":
            name = f"TPU {os.environ.get('TPU_ACCELERATOR_TYPE') or name}"
        return {
            "accelerator": name,
            "accelerator_count": config.num_devices,
            "compute_capability": str(capability) if capability else None,
        }

    def is_out_of_memory(self, error: BaseException) -> bool:
        """XLA's RESOURCE_EXHAUSTED, raised as a JaxRuntimeError (XlaRuntimeError in older jaxlib)."""
        return type(error).__name__ in ("JaxRuntimeError", "XlaRuntimeError") and "RESOURCE_EXHAUSTED" in str(error)


BACKEND = JaxBackend()
