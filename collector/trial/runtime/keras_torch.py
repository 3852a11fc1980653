"""The torch backend of Keras: one CPU or CUDA device (KERAS_TORCH_DEVICE, set by ``prepare``), TF32 switches for
matmul and cuDNN, torch.compile (inductor) through jit_compile, CUDA memory statistics (``pytorch.TorchDevice``,
shared with plain PyTorch training).

Only a trial process with KERAS_BACKEND=torch imports this module. It never imports TensorFlow.
"""

from __future__ import annotations

from typing import Any

import keras

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.trial.runtime import keras_backend
from stepwatch.collector.trial.runtime.keras_backend import Runtime
from stepwatch.collector.trial.runtime.plain_pytorch import TorchDevice, sdpa_seen


class TorchBackend(TorchDevice, keras_backend.KerasBackend):
    """torch.compile (inductor) through jit_compile; the synthetic batch as tensors on Keras' device."""

    def configure(self, config: BenchmarkConfig) -> Runtime:
        settings = self.set_up(config)
        compute_dtype, variable_dtype = keras_backend.set_policy(config.precision)
        return Runtime(compute_dtype=compute_dtype, variable_dtype=variable_dtype, **settings)

    def counters(self, model: Any, data: Any, config: BenchmarkConfig, runtime: Runtime) -> dict[str, Any]:
        """torch.compile's counts (``TorchDevice.inductor_counters``), where the step was compiled."""
        return self.inductor_counters() if self.compiler(model, config) == "inductor" else {}

    def software_environment(self) -> dict[str, Any]:
        return {**self.torch_environment(), "keras_version": keras.__version__}

    def attention_kernel(self, model: Any, data: Any, config: BenchmarkConfig) -> tuple[str, str]:
        """One more step of ``fit`` under torch's profiler: the kernel SDPA ran (Keras' attention calls it)."""
        return sdpa_seen(lambda: model.fit(data, epochs=1, steps_per_epoch=1, verbose=0, shuffle=False))


BACKEND = TorchBackend()
