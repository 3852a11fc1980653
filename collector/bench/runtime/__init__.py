"""One module per Keras backend (tensorflow, jax, torch) behind one small interface, imported only inside a
trial process. This package's own module imports no framework: ``prepare`` sets the process environment a
backend reads at import time, then ``load`` imports the backend's module.

Each backend module provides:

- ``configure(config) -> Runtime``: devices, distribution, TF32 / matmul precision and the Keras dtype
  policy, every setting read back from the framework;
- ``build_model(spec, config, runtime) -> (model, optimizer)``: built, seeded and compiled for ``fit``;
- ``make_data(spec, config, runtime)``: what the train loop consumes (synthetic batches on the device);
- ``train(model, optimizer, data, clock, total_steps, config, runtime)``: the timed loop;
- ``compiler(model, config) -> str``: what jit_compile really ran (``xla``, ``inductor`` or ``none``);
- ``peak_memory(config)``, ``is_out_of_memory(error)``, ``software_environment()``,
  ``accelerator_details(config)``.

The backend-neutral parts (dtype policy, build and compile, the ``fit`` timing callback) live in
``keras_fit``.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

from collector.config import BenchmarkConfig

# Each backend's top-level modules. A trial hides the other backends' (``import`` raises ImportError, as on a
# host without them): keras-hub imports TensorFlow and TensorFlow imports JAX whenever they are installed,
# which would load a second framework into the trial and into its peak memory.
FRAMEWORK_MODULES = {
    "tensorflow": ("tensorflow", "tensorflow_text", "tf_keras"),
    "jax": ("jax", "jaxlib", "flax"),
    "torch": ("torch", "torchvision"),
}
JAX_PLATFORMS = {"cpu": "cpu", "gpu": "cuda", "tpu": "tpu"}


def prepare(config: BenchmarkConfig) -> None:
    """Set what the backend reads when it is imported: KERAS_BACKEND, and the device JAX or torch uses.
    Must run before anything imports Keras."""
    if "keras" in sys.modules and os.environ.get("KERAS_BACKEND") != config.keras_backend:
        raise RuntimeError(f"Keras was imported before its backend was set to {config.keras_backend}")
    os.environ["KERAS_BACKEND"] = config.keras_backend
    for backend, modules in FRAMEWORK_MODULES.items():
        if backend == config.keras_backend:
            continue
        for name in modules:
            if sys.modules.get(name) is None:
                sys.modules[name] = None  # type: ignore[assignment]  # `import name` raises ImportError
    if config.keras_backend == "jax":
        os.environ["JAX_PLATFORMS"] = JAX_PLATFORMS[config.device]
    if config.keras_backend == "torch":
        os.environ["KERAS_TORCH_DEVICE"] = "cuda" if config.device == "gpu" else "cpu"


def load(config: BenchmarkConfig) -> ModuleType:
    """The runtime module of the config's Keras backend (after ``prepare``)."""
    module = importlib.import_module(f"{__name__}.{config.keras_backend}")
    import keras

    if keras.backend.backend() != config.keras_backend:
        raise RuntimeError(f"Keras runs on {keras.backend.backend()}, not {config.keras_backend}")
    return module
