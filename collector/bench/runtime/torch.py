"""The torch backend: one CPU or CUDA device (KERAS_TORCH_DEVICE, set by ``prepare``), TF32 switches for
matmul and cuDNN, torch.compile (inductor) through jit_compile, CUDA memory statistics.

Only a trial process with KERAS_BACKEND=torch imports this module. It never imports TensorFlow.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keras
import torch

from collector.bench import counters, profiles
from collector.bench.runtime import common
from collector.bench.runtime.common import Runtime
from collector.config import BenchmarkConfig, ConfigError, thread_counts


class TorchBackend(common.KerasBackend):
    """torch.compile (inductor) through jit_compile; the synthetic batch as tensors on Keras' device."""

    compiled_by = "inductor"

    def configure(self, config: BenchmarkConfig) -> Runtime:
        """fp32 is true fp32 (TF32 off for matmuls and cuDNN); every other mode allows TF32, as TensorFlow does."""
        if config.device == "gpu" and not torch.cuda.is_available():
            raise ConfigError("device gpu: torch sees no CUDA device")
        counts = thread_counts(config.threads)
        if counts:
            torch.set_num_threads(counts[0])
            torch.set_num_interop_threads(counts[1])  # before any inter-op work, or torch refuses
        tf32 = config.precision != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        compute_dtype, variable_dtype = common.set_policy(config.precision)
        return Runtime(
            replicas=1,
            tf32_enabled=bool(torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32),
            matmul_precision=torch.get_float32_matmul_precision(),
            compute_dtype=compute_dtype,
            variable_dtype=variable_dtype,
            intra_op_threads=torch.get_num_threads(),
            inter_op_threads=torch.get_num_interop_threads(),
        )

    def counters(self, model: Any, data: Any, config: BenchmarkConfig, runtime: Runtime) -> dict[str, Any]:
        """torch.compile's own counts for this process (only the train step was compiled): graphs (a recompile
        is one more), graph breaks and why dynamo broke (per reason, in the row's extras), kernels inductor
        generated, and its bytes-accessed estimate where it makes one (0 on a CPU: not recorded)."""
        if self.compiler(model, config) != "inductor":
            return {}
        from torch._dynamo.utils import counters as dynamo
        from torch._inductor import metrics

        return {
            "compiled_graphs": dynamo["stats"]["unique_graphs"],
            "graph_breaks": sum(dynamo["graph_break"].values()),
            "graph_break_reasons": counters.graph_break_reasons(dynamo["graph_break"]),
            "generated_kernels": metrics.generated_kernel_count,
            "compiled_bytes_accessed": float(metrics.num_bytes_accessed) or None,
        }

    averages: Any = None  # the profiled steps' per-op totals, as torch's profiler sums them

    @contextlib.contextmanager
    def profiler(self, logdir: Path, config: BenchmarkConfig) -> Iterator[None]:
        """torch's profiler (operators on the host; on a GPU, CUDA kernels too); its trace is kept as Chrome
        trace JSON, which Perfetto opens."""
        activities = [torch.profiler.ProfilerActivity.CPU]
        if config.device == "gpu":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as recorded:
            yield
        recorded.export_chrome_trace(str(logdir / "trace.json.gz"))
        self.averages = recorded.key_averages()

    def op_totals(self, logdir: Path) -> dict[tuple[str, str, str], tuple[float, int]]:
        """An operator's self time on the host and, where it launched kernels, on the device (torch sums both
        per operator; user annotations are left out)."""
        totals = {}
        for entry in self.averages:
            if getattr(entry, "is_user_annotation", False) or entry.key.startswith("ProfilerStep"):
                continue
            host = entry.self_cpu_time_total / 1e6
            device = getattr(entry, "self_device_time_total", 0) / 1e6
            op_type = profiles.torch_type(entry.key)
            if host > 0:
                totals[(op_type, entry.key, "host")] = (host, entry.count)
            if device > 0:
                totals[(op_type, entry.key, "device")] = (device, entry.count)
        return totals

    def device_peak_memory(self, config: BenchmarkConfig) -> tuple[int | None, str | None]:
        """torch.cuda.max_memory_allocated."""
        try:
            return int(torch.cuda.max_memory_allocated(0)), "device"
        except RuntimeError:
            return None, None

    def software_environment(self) -> dict[str, Any]:
        """torch's version, the CUDA it was built with and the cuDNN it loads."""
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        return {
            "torch_version": torch.__version__,
            "keras_version": keras.__version__,
            "cuda_build_version": torch.version.cuda,
            "cudnn_runtime_version": common.cudnn_text(cudnn),
        }

    def device_details(self, config: BenchmarkConfig) -> dict[str, Any]:
        """Product name and compute capability of the GPU, from torch."""
        major, minor = torch.cuda.get_device_capability(0)
        return {
            "accelerator": torch.cuda.get_device_name(0),
            "accelerator_count": config.num_devices,
            "compute_capability": f"{major}.{minor}",
        }

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, torch.OutOfMemoryError)


BACKEND = TorchBackend()
