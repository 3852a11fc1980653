"""What every Keras backend shares: the dtype policy, building and compiling for ``fit``, synthetic batches
placed once on the device, the ``fit`` timing callback and the host's peak memory. Imported after
``collector.trial.runtime.prepare`` has set KERAS_BACKEND."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import keras

from stepwatch.collector.config import FP8, BenchmarkConfig
from stepwatch.collector.trial import counters, profiles, routing
from stepwatch.collector.trial.measure import WindowClock, window_mean_from_running
from stepwatch.collector.trial.runtime.trial_backend import (  # noqa: F401 - the backends read these here too
    Runtime,
    TrialBackend,
    cudnn_text,
    wrapped,
)
from stepwatch.trainers.spec import POOL, ModelSpec, batch_pool

# fp8: bfloat16 compute, and the model's Dense and EinsumDense layers quantized for float8 training after the build.
POLICIES = {"fp32": "float32", "tf32": "float32", "mixed_float16": "mixed_float16", "mixed_bfloat16": "mixed_bfloat16",
            FP8: "mixed_bfloat16"}  # fmt: skip


def set_policy(precision: str) -> tuple[str, str]:
    """Set the global Keras dtype policy of a precision mode; its compute and variable dtypes, read back."""
    keras.mixed_precision.set_global_policy(POLICIES[precision])
    policy = keras.mixed_precision.global_policy()
    return policy.compute_dtype, policy.variable_dtype


def pin_attention(config: BenchmarkConfig) -> None:
    """Keras' flash-attention switch for a pinned kernel: off for math (attention layers then run as einsums and a
    softmax), on for JAX's cuDNN or splash kernel and torch's flash (an error where the inputs cannot use it); left
    to Keras for auto, and for torch's other kernels, which ``plain_pytorch.pin_sdpa`` pins."""
    if config.attention == "math":
        keras.config.disable_flash_attention()
    elif config.attention in ("flash", "cudnn"):
        keras.config.enable_flash_attention()


def build_model(spec: ModelSpec, config: BenchmarkConfig, scope: Any = None) -> tuple[Any, Any]:
    """Model and optimizer (inside ``scope``: a TF strategy's), seeded so every loop and backend starts from the
    same weights; compiled for fit with ``jit_compile`` = the config's ``xla`` (XLA on TensorFlow and JAX,
    torch.compile on torch). Keras wraps the optimizer in a LossScaleOptimizer itself under mixed_float16. fp8 is
    Keras' float8 training: every Dense and EinsumDense layer quantized (``model.quantize("float8")``) before the
    model is compiled."""
    pin_attention(config)
    with scope or contextlib.nullcontext():
        keras.utils.set_random_seed(config.seed)
        model = spec.build(spec.preset(config.preset, config.sequence_length))
        if config.precision == FP8:
            model.quantize("float8")
        optimizer = spec.optimizer(spec.learning_rate(config.learning_rate))
        if config.loop == "fit":
            model.compile(
                optimizer=optimizer,
                loss=spec.loss(),
                jit_compile=config.xla,
                steps_per_execution=config.steps_per_execution,
            )
        elif config.precision == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return model, optimizer


def loss_scaling(model: Any, optimizer: Any) -> bool:
    """Whether the optimizer that trained scales the loss (read back, not inferred from the precision)."""
    used = getattr(model, "optimizer", None) or optimizer
    return isinstance(used, keras.optimizers.LossScaleOptimizer)


def device_batches(spec: ModelSpec, config: BenchmarkConfig, global_batch: int, place: Callable[[Any], Any]) -> Any:
    """The trial's synthetic batches (``spec.batch_pool``), placed on the device once by ``place`` (array -> device
    tensor) and cycled through forever: what ``fit`` consumes on JAX and torch, so no step pays a host-to-device
    copy."""
    pool = [
        keras.tree.map_structure(place, batch)
        for batch in batch_pool(spec, spec.preset(config.preset, config.sequence_length), global_batch, config.seed)
    ]

    def cycle() -> Iterator[Any]:  # a generator: what fit takes as data (an iterator of another type it refuses)
        yield from itertools.cycle(pool)

    return cycle()


class FitWindows(keras.callbacks.Callback):
    """Closes windows at the start of the execution that follows them, so Keras keeps async dispatch.

    The loss tracker's running mean is read at the boundary: reading it waits for the previous step, and two
    running means give the exact mean loss of the window. Only batch-begin does work, so the callback is
    ``async_safe``: Keras does not add a sync per step for it (an overridden ``on_train_batch_end`` would).
    ``read_loss`` (model -> running mean loss) replaces the default read where a backend has a cheaper one.
    """

    async_safe = True

    def __init__(self, clock: WindowClock, total_steps: int, read_loss: Callable[[Any], float] | None = None) -> None:
        super().__init__()
        self.clock = clock
        self.total_steps = total_steps
        self.prev = (0, 0.0)
        self.read_loss = read_loss

    def _running_loss(self) -> float:
        if self.read_loss is not None:
            return self.read_loss(self._model)
        return float(next(m for m in self.model.metrics if m.name == "loss").result())

    def _close(self, steps_done: int) -> None:
        prev_steps, prev_mean = self.prev
        mean = self._running_loss()
        self.prev = (steps_done, mean)
        self.clock.close(steps_done, lambda: window_mean_from_running(prev_steps, prev_mean, steps_done, mean))

    def on_train_begin(self, logs: Any = None) -> None:
        self.clock.begin()

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if 0 < batch <= self.total_steps and self.clock.due(batch):
            self._close(batch)

    def on_train_end(self, logs: Any = None) -> None:
        if not self.clock.marks or self.clock.marks[-1].steps < self.total_steps:  # fit stopped short of the end
            self._close(self.total_steps)


def train_fit(
    model: Any, data: Any, clock: WindowClock, total_steps: int, read_loss: Callable[[Any], float] | None = None
) -> None:
    """model.fit over ``total_steps`` steps with window marks, what most users run; and one execution more,
    whose start closes the last window: closed at the end of training instead, the last window would also hold
    what ``fit`` does when it ends (the epoch's logs; on JAX the state copied back into the model's variables
    and the loss tracker's result, compiled on first use: 12 ms in a 4 ms window of bilstm tiny here)."""
    model.fit(
        data,
        epochs=1,
        steps_per_epoch=total_steps + clock.first_steps,
        verbose=0,
        shuffle=False,
        callbacks=[FitWindows(clock, total_steps, read_loss)],
    )


def compiler_of(model: Any, config: BenchmarkConfig, compiled_by: str) -> str:
    """``compiled_by`` (xla, inductor) when jit_compile is still on after training (Keras turns it off where a
    model cannot compile), else ``none``."""
    effective = bool(model.jit_compile) if config.loop == "fit" else config.xla
    return compiled_by if effective else "none"


class KerasBackend(TrialBackend):
    """The skeleton of a Keras backend (``collector.trial.runtime.Backend``), written once: building and compiling
    for ``fit``, batches placed on the device once, the ``fit`` loop with window marks, what jit_compile ran. A
    backend subclasses it and fills in what differs: ``configure``, its software versions, and on an accelerator
    its peak memory, device details and out-of-memory error."""

    compiled_by = "xla"  # what jit_compile runs on this backend

    def build_model(self, spec: ModelSpec, config: BenchmarkConfig, runtime: Runtime) -> tuple[Any, Any]:
        """Built and compiled for ``fit`` (under ``scope``), with its train function made while ``recording``, so
        that ``counters`` can find the step the framework compiles."""
        model, optimizer = build_model(spec, config, self.scope(runtime))
        if config.loop == "fit":
            with self.recording():
                model.make_train_function()  # what fit would make first; fit then keeps it
        return model, optimizer

    def scope(self, runtime: Runtime) -> Any:
        """Where the model and optimizer are built (TensorFlow: the strategy's scope)."""
        return None

    def recording(self) -> contextlib.AbstractContextManager[None]:
        """While Keras makes the train function: note what a backend needs to find its compiled step again."""
        return contextlib.nullcontext()

    def profile(self, model: Any, data: Any, config: BenchmarkConfig, logdir: Path) -> dict[str, Any]:
        """``profiles.PROFILE_STEPS`` more steps of ``fit`` under the framework's profiler, which writes its raw
        profile into ``logdir``: the op table (``collector.metrics.OP_COLUMNS``) and the wall time of a profiled
        step."""
        if config.loop != "fit":
            raise NotImplementedError(f"the {config.loop} loop is not profiled (only fit)")

        def run(steps: int) -> None:
            model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)

        # Once unprofiled first: the first fit after the timed one compiles the step again on JAX (2.2 s for bert
        # tiny, which a profile would take for the step's own time).
        return self.profiled(run, config, logdir, warm=profiles.PROFILE_STEPS)

    def op_totals(self, logdir: Path) -> dict[tuple[str, str, str], tuple[float, int]]:
        """(op type, op name, where) -> (self time in seconds, occurrences) over the profiled steps: from the
        XSpace the profiler wrote (TensorFlow, JAX), its HLO instructions typed by the step's opcodes."""
        planes = self.xspace_planes(profiles.xspace_file(logdir))
        return profiles.self_times(profiles.xspace_spans(planes, self.opcodes()))

    def xspace_planes(self, path: Path) -> profiles.Planes:
        """An XSpace file read with what the framework has."""
        raise NotImplementedError

    hlo_text: str = ""  # the step's optimized HLO, where ``counters`` read it: what types its ops (profiles.op_of)

    def opcodes(self) -> dict[str, str]:
        """Instruction name -> type of the step's optimized HLO: its opcode, or what a custom call calls (empty
        where the HLO was not read)."""
        return counters.hlo_op_types(self.hlo_text)

    def place(self, runtime: Runtime) -> Callable[[Any], Any]:
        """How an array of the synthetic batch goes onto the device."""
        return keras.ops.convert_to_tensor

    def make_data(self, spec: ModelSpec, config: BenchmarkConfig, runtime: Runtime) -> Any:
        return device_batches(spec, config, config.per_device_batch * runtime.replicas, self.place(runtime))

    def loss_reader(self, model: Any) -> Callable[[Any], float] | None:
        """A cheaper read of the running mean loss than the model's tracker, if the backend has one."""
        return None

    def train(self, model: Any, optimizer: Any, data: Any, clock: WindowClock, total_steps: int,
              config: BenchmarkConfig, runtime: Runtime) -> None:  # fmt: skip
        train_fit(model, data, clock, total_steps, self.loss_reader(model))

    def compiler(self, model: Any, config: BenchmarkConfig) -> str:
        return compiler_of(model, config, self.compiled_by)

    def routed_tokens(self, model: Any, data: Any, config: BenchmarkConfig) -> list[list[int]]:
        """The trial's batches (``POOL`` of what ``fit`` took) through the model, eagerly: the tokens its routers
        sent to each expert."""
        return routing.keras_routed(model, data, POOL)

    def loss_scaling(self, model: Any, optimizer: Any) -> bool:
        return loss_scaling(model, optimizer)

    def release(self) -> None:
        """Keras' global state (layer names, the graph on TensorFlow) cleared, then what is unreferenced collected."""
        keras.backend.clear_session()
        super().release()
