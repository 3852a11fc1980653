"""One module per Keras backend (keras_tensorflow, keras_jax, keras_torch) and the plain PyTorch loop (plain_pytorch)
behind one small interface, imported only inside a
trial process. This package's own module imports no framework: ``prepare`` sets the process environment a
backend reads at import time, then ``load`` imports the backend's module.

Each backend module's ``BACKEND`` is a ``Backend`` (the Protocol below, which a test checks); they subclass
``keras_backend.KerasBackend``, where the skeleton they share is written once (build and compile for ``fit``,
batches on the device, the ``fit`` loop and its timing callback, the host's peak memory on a CPU) and each
fills in what differs.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from stepwatch.collector.config import BenchmarkConfig

# Each backend's top-level modules. A trial hides the other backends' (``import`` raises ImportError, as on a
# host without them): keras-hub imports TensorFlow and TensorFlow imports JAX whenever they are installed,
# which would load a second framework into the trial and into its peak memory.
FRAMEWORK_MODULES = {
    "tensorflow": ("tensorflow", "tensorflow_text", "tf_keras"),
    "jax": ("jax", "jaxlib", "flax"),
    "torch": ("torch", "torchvision"),
}
JAX_PLATFORMS = {"cpu": "cpu", "gpu": "cuda", "tpu": "tpu"}
# Set by the parent (run --compile-cache): the folder where the compilers keep their output between trials, each
# backend's in its own subfolder.
COMPILE_CACHE_ENV = "STEPWATCH_COMPILE_CACHE"
COMPILE_CACHE_DIRS = {"tensorflow": "xla", "jax": "jax", "torch": "inductor"}


class Hiding:
    """A finder of ``sys.meta_path`` wrapped so that it finds nothing under the hidden top-level names, and
    everything else as before. With every finder wrapped, a hidden module is what it is on a host without it:
    ``import`` raises ModuleNotFoundError, ``importlib.util.find_spec`` answers None (torch._dynamo asks it about
    TensorFlow) and ``sys.modules`` has no entry (scipy's array-API helpers look torch up there; a ``None``
    placed there for hiding made them fail: ``'NoneType' object has no attribute 'Tensor'``)."""

    def __init__(self, finder: Any, hidden: frozenset[str]) -> None:
        self.finder = finder
        self.hidden = hidden

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.partition(".")[0] in self.hidden:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attribute: str) -> Any:  # invalidate_caches, find_distributions, ...
        return getattr(self.finder, attribute)


def hide(names: Iterable[str]) -> None:
    """Hide the top-level modules ``names`` from every import in this process from now on (those already
    imported stay: ``loaded_frameworks`` records what was loaded). Finders added to ``sys.meta_path``
    later are not wrapped; what they load is recorded all the same."""
    hidden = frozenset(names) - set(sys.modules)
    if not hidden:
        return
    wrapped = []
    for finder in sys.meta_path:
        if isinstance(finder, Hiding):
            finder = Hiding(finder.finder, finder.hidden | hidden)
        elif hasattr(finder, "find_spec"):
            finder = Hiding(finder, hidden)
        wrapped.append(finder)
    sys.meta_path[:] = wrapped
    importlib.invalidate_caches()


def loaded_frameworks() -> list[str]:
    """The deep-learning frameworks this process has imported (a JAX or torch trial must not load TensorFlow)."""
    return sorted(name for name in FRAMEWORK_MODULES if sys.modules.get(name) is not None)


def hidden_framework(error: BaseException, config: BenchmarkConfig) -> str | None:
    """Where ``error`` (or what caused it) is an import of a framework this trial hides, what to say: a model of
    yours that imports torch in a TensorFlow trial finds no torch, though it is installed."""
    while error is not None:
        missing = (getattr(error, "name", None) or "").partition(".")[0]
        if isinstance(error, ModuleNotFoundError):
            for backend, modules in FRAMEWORK_MODULES.items():
                if missing in modules and backend != config.keras_backend:
                    return (f"{missing} is hidden in a keras_backend {config.keras_backend} trial: "
                            f"run it with --keras-backend {backend}")  # fmt: skip
        error = error.__cause__ or error.__context__
    return None


def prepare(config: BenchmarkConfig) -> None:
    """Set what the backend reads when it is imported: KERAS_BACKEND, and the device JAX or torch uses; hide the
    other backends. Must run before anything imports Keras."""
    if "keras" in sys.modules and os.environ.get("KERAS_BACKEND") != config.keras_backend:
        raise RuntimeError(f"Keras was imported before its backend was set to {config.keras_backend}")
    os.environ["KERAS_BACKEND"] = config.keras_backend
    hide(name for backend, modules in FRAMEWORK_MODULES.items() if backend != config.keras_backend for name in modules)
    if config.keras_backend == "jax":
        os.environ["JAX_PLATFORMS"] = JAX_PLATFORMS[config.device]
    if config.keras_backend == "torch":
        os.environ["KERAS_TORCH_DEVICE"] = "cuda" if config.device == "gpu" else "cpu"
    os.environ.update(compile_cache_env(config.keras_backend, os.environ.get(COMPILE_CACHE_ENV)))
    if config.deterministic:
        os.environ.update(deterministic_env(config))


def deterministic_env(config: BenchmarkConfig) -> dict[str, str]:
    """What a framework reads at import for deterministic kernels: XLA's deterministic GPU ops (JAX, and
    TensorFlow's XLA clusters), TensorFlow's op determinism, and the cuBLAS workspace torch's deterministic
    algorithms need on a GPU."""
    env = {"TF_DETERMINISTIC_OPS": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    if config.device == "gpu":
        env["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_gpu_deterministic_ops=true".strip()
    return env


def determinism(config: BenchmarkConfig) -> str:
    """Turn on the deterministic kernels of the framework this trial imported, where ``config.deterministic``
    asks for them, and say what is in force (the row keeps it in extras as ``determinism``). Where a framework
    offers none, the seed spread of the numerics verdict carries its nondeterminism."""
    if not config.deterministic:
        return "the framework's default kernels"
    done = []
    if config.keras_backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
        done.append("tf.config.experimental.enable_op_determinism()")
    if config.keras_backend == "torch":
        import torch

        torch.use_deterministic_algorithms(True)
        done.append("torch.use_deterministic_algorithms(True)")
    if "--xla_gpu_deterministic_ops=true" in os.environ.get("XLA_FLAGS", ""):
        done.append("XLA_FLAGS=--xla_gpu_deterministic_ops=true")
    if config.keras_backend == "jax" and config.device == "cpu":
        done.append("JAX on a CPU (deterministic as it is)")
    return "; ".join(done)


def compile_cache_env(keras_backend: str, cache: str | None) -> dict[str, str]:
    """The environment that makes a backend's compiler keep its output in ``cache`` and look there first, read
    when the framework is imported: XLA's persistent cache on TensorFlow (TF_XLA_FLAGS) and JAX (every program,
    however quick to compile, keyed without the cache's own path), inductor's on torch (its FX graph cache, on by
    default, in this folder). Each keeps its entries valid wherever the folder is restored."""
    if not cache:
        return {}
    folder = f"{cache}/{COMPILE_CACHE_DIRS[keras_backend]}"
    if keras_backend == "tensorflow":
        flags = os.environ.get("TF_XLA_FLAGS", "")
        return {"TF_XLA_FLAGS": f"{flags} --tf_xla_persistent_cache_directory={folder}".strip()}
    if keras_backend == "jax":
        # JAX puts a folder inside the cache (the per-fusion autotuning cache) into every program's compile options,
        # and so the cache's absolute path into every key: entries restored into another checkout all missed. Off,
        # a key is the program's, wherever the repository is checked out (a program loaded from the cache is not
        # autotuned again; only a program compiled anew tunes its fusions without it).
        return {"JAX_COMPILATION_CACHE_DIR": folder, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
                "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES": "none"}  # fmt: skip
    return {"TORCHINDUCTOR_CACHE_DIR": folder, "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}


@runtime_checkable
class Backend(Protocol):
    """What a trial asks of a Keras backend. ``runtime`` is what ``configure`` set up and read back
    (``common.Runtime``); ``clock`` the trial's ``WindowClock``."""

    def configure(self, config: BenchmarkConfig) -> Any:
        """Devices, distribution, TF32 / matmul precision and the Keras dtype policy, read back."""

    def build_model(self, spec: Any, config: BenchmarkConfig, runtime: Any) -> tuple[Any, Any]:
        """Model and optimizer, built, seeded and compiled for ``fit``."""

    def make_data(self, spec: Any, config: BenchmarkConfig, runtime: Any) -> Any:
        """What the train loop consumes: synthetic batches on the device, or a host pipeline."""

    def train(self, model: Any, optimizer: Any, data: Any, clock: Any, total_steps: int, config: BenchmarkConfig,
              runtime: Any) -> None:  # fmt: skip
        """The timed loop, marking windows on ``clock``."""

    def counters(self, model: Any, data: Any, config: BenchmarkConfig, runtime: Any) -> dict[str, Any]:
        """What the compiler emitted for the training step that ran (``collector.trial.counters``); read after
        the timed steps, empty where the backend cannot tell."""

    def profile(self, model: Any, data: Any, config: BenchmarkConfig, logdir: Any) -> dict[str, Any]:
        """A few more steps under the framework's profiler (raw profile into ``logdir``): the per-op table of
        ``collector.trial.profiles`` and the wall time of a profiled step."""

    def compiler(self, model: Any, config: BenchmarkConfig) -> str:
        """What jit_compile really ran: ``xla``, ``inductor`` or ``none``."""

    def loss_scaling(self, model: Any, optimizer: Any) -> bool: ...

    def attention_kernel(self, model: Any, data: Any, config: BenchmarkConfig) -> tuple[str, str]:
        """The attention kernel a model with attention ran (flash, efficient, cudnn or math), and what the backend
        called it."""

    def routed_tokens(self, model: Any, data: Any, config: BenchmarkConfig) -> list[list[int]]:
        """A model with experts: the tokens each expert of each layer got over a forward pass of the trial's batches
        (``collector.trial.routing``)."""

    def peak_memory(self, config: BenchmarkConfig) -> tuple[int | None, str | None]:
        """The peak memory and its kind (``collector.metrics``: host_anon on a CPU, device on an accelerator)."""

    def software_environment(self) -> dict[str, Any]: ...

    def accelerator_details(self, config: BenchmarkConfig) -> dict[str, Any]: ...

    def is_out_of_memory(self, error: BaseException) -> bool: ...


def load(config: BenchmarkConfig) -> Backend:
    """The config's Keras backend (after ``prepare``), or plain PyTorch for loop ``pytorch`` (no Keras)."""
    if config.loop == "pytorch":
        return importlib.import_module(f"{__name__}.plain_pytorch").BACKEND
    module = importlib.import_module(f"{__name__}.keras_{config.keras_backend}")
    import keras

    if keras.backend.backend() != config.keras_backend:
        raise RuntimeError(f"Keras runs on {keras.backend.backend()}, not {config.keras_backend}")
    return module.BACKEND
