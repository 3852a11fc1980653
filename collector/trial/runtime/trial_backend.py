"""What every trial backend shares, Keras' or not, without importing any framework: what was set up
(``Runtime``), the host's peak memory on a CPU, and ``TrialBackend``, the framework-free half of the
``collector.trial.runtime.Backend`` skeleton (profiling a few steps, memory, devices). ``common.KerasBackend``
adds Keras' ``fit``; ``pytorch.PlainTorchBackend`` a plain PyTorch loop."""

from __future__ import annotations

import contextlib
import gc
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.metrics import ANON_KIND
from stepwatch.collector.trial import memory, profiles


@dataclass
class Runtime:
    """What was set up for one trial, read back from the framework rather than assumed."""

    replicas: int
    tf32_enabled: bool | None
    matmul_precision: str | None  # the framework's own word for its float32 matmul setting
    compute_dtype: str
    variable_dtype: str
    strategy: Any = None  # TensorFlow: the tf.distribute strategy; JAX: the keras.distribution, if any
    intra_op_threads: int | None = None  # host threads, read back (0: TensorFlow picks; None: not readable)
    inter_op_threads: int | None = None


def cudnn_text(version: int | None) -> str | None:
    """cuDNN's integer version as text: 90800 -> '9.8.0' (cuDNN 9+), 8906 -> '8.9.6' (cuDNN 8)."""
    if not version:
        return None
    if version >= 10000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


@contextlib.contextmanager
def wrapped(owner: Any, name: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    """``owner.name`` replaced by ``wrap(original)`` for the block, and restored whatever happens: how a backend
    watches Keras make its train step (``KerasBackend.recording``)."""
    original = getattr(owner, name)
    setattr(owner, name, wrap(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def host_peak_memory() -> tuple[int | None, str]:
    """A CPU trial's peak memory on every backend: its peak anonymous memory, which the parent samples from
    outside (collector.trial.memory), so nothing to read here."""
    return None, ANON_KIND


def host_memory_fields() -> dict[str, int]:
    """What the trial itself says about its host memory at its end, on every device: ``ru_maxrss`` (the peak
    resident set, shared libraries included) and the floor that checks the parent's sampled peak."""
    fields = {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    return {**fields, **memory.trial_end_fields(memory.own_status()), **memory.own_anon_fields()}


class TrialBackend:
    """What a backend does the same whatever trains: profile a few more steps, the host's peak memory on a CPU,
    and defaults for what an accelerator, a compiler or a framework fills in."""

    def configure(self, config: BenchmarkConfig) -> Runtime:
        raise NotImplementedError

    def software_environment(self) -> dict[str, Any]:
        raise NotImplementedError

    def counters(self, model: Any, data: Any, config: BenchmarkConfig, runtime: Runtime) -> dict[str, Any]:
        return {}

    def profiled(
        self, run: Callable[[int], None], config: BenchmarkConfig, logdir: Path, warm: int = 1
    ) -> dict[str, Any]:
        """``run(steps)`` ``warm`` steps unprofiled, then ``profiles.PROFILE_STEPS`` under the profiler: the op
        table and the wall time of a profiled step (``run`` returns once its last step has finished)."""
        run(warm)
        steps = profiles.PROFILE_STEPS
        with self.profiler(logdir, config):
            start = time.perf_counter()
            run(steps)
            wall_s = time.perf_counter() - start
        table = profiles.op_table(self.op_totals(logdir), steps)
        return {**table, "profile_steps": steps, "profile_step_time_s": wall_s / steps}

    def profiler(self, logdir: Path, config: BenchmarkConfig) -> contextlib.AbstractContextManager[None]:
        """The framework's profiler, recording into ``logdir`` for the block."""
        raise NotImplementedError

    def peak_memory(self, config: BenchmarkConfig) -> tuple[int | None, str | None]:
        """On a CPU the peak anonymous host memory (sampled by the parent); else the device allocator's peak."""
        return host_peak_memory() if config.device == "cpu" else self.device_peak_memory(config)

    def device_peak_memory(self, config: BenchmarkConfig) -> tuple[int | None, str | None]:
        return None, None

    def accelerator_details(self, config: BenchmarkConfig) -> dict[str, Any]:
        """Product name, count and compute capability of the accelerators (none on a CPU)."""
        return {} if config.device == "cpu" else self.device_details(config)

    def device_details(self, config: BenchmarkConfig) -> dict[str, Any]:
        return {}

    def is_out_of_memory(self, error: BaseException) -> bool:
        return False

    def step_memory(self, global_batch: int) -> int | None:
        """The device memory the train step that ran last needs at ``global_batch`` examples, from its compiler's
        analysis of the step compiled for those shapes (nothing runs); None where the backend cannot tell."""
        return None

    def release(self) -> None:
        """Let go of what the last model held on the device (``run --find-max-batch`` builds one per batch)."""
        gc.collect()
