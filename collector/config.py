"""One benchmark configuration: a frozen dataclass whose fields are result columns."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from trainers import get_model

BACKENDS = ("cpu", "gpu", "tpu")
STRATEGIES = ("default", "mirrored", "multi-worker", "tpu")
PRECISIONS = ("fp32", "tf32", "mixed_float16", "mixed_bfloat16")
LOOPS = ("fit", "ctl")
DATA = ("synthetic", "pipeline")

ACCELERATOR_MIN_WARMUP = 10

# Fields that decide what is measured; with the accelerator product name they form the series key.
SERIES_FIELDS = (
    "model",
    "preset",
    "backend",
    "num_devices",
    "strategy",
    "xla",
    "precision",
    "per_device_batch",
    "steps_per_execution",
    "loop",
    "data",
)


class ConfigError(ValueError):
    """A configuration that cannot be run, described in one line."""


@dataclass(frozen=True)
class BenchmarkConfig:
    """One point of the benchmark matrix plus how it is measured."""

    model: str
    preset: str = "tiny"
    backend: str = "cpu"
    num_devices: int = 1
    strategy: str = "default"
    xla: bool = False
    precision: str = "fp32"
    per_device_batch: int = 8
    steps_per_execution: int = 1
    loop: str = "fit"
    data: str = "synthetic"
    steps: int = 100  # measured steps, after warm-up
    warmup_steps: int = 20  # excluded from the measurement; the first (compiling) step comes before these
    window_steps: int = 10  # steps between two device syncs
    learning_rate: float | None = None  # None: the model's default
    timeout_s: float = 600.0
    seed: int = 0

    @property
    def global_batch(self) -> int:
        return self.per_device_batch * self.num_devices

    @property
    def key(self) -> str:
        """Short stable hash of the series fields (the accelerator name is added by the store)."""
        payload = json.dumps({name: getattr(self, name) for name in SERIES_FIELDS}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def label(self) -> str:
        """Human-readable one-liner for progress and tables."""
        devices = f"{self.backend}x{self.num_devices}" if self.num_devices > 1 else self.backend
        xla = "xla" if self.xla else "noxla"
        return f"{self.model}/{self.preset} {devices} {xla} {self.precision} b{self.per_device_batch} {self.loop}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BenchmarkConfig:
        return cls(**json.loads(text))

    def with_changes(self, **changes: Any) -> BenchmarkConfig:
        return replace(self, **changes)


FIELD_NAMES = tuple(f.name for f in fields(BenchmarkConfig))


def config_from_row(row: Mapping[str, Any]) -> BenchmarkConfig:
    """The config a result row was measured with (rows store ``xla`` as ``xla_requested``)."""
    values = {name: row[name] for name in FIELD_NAMES if name in row and name != "xla"}
    return BenchmarkConfig(xla=bool(row["xla_requested"]), **values)


def _one_of(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} {value!r} is not one of {', '.join(allowed)}")


def validate(config: BenchmarkConfig) -> BenchmarkConfig:
    """Raise ConfigError naming the first thing wrong with ``config``; return it unchanged otherwise."""
    try:
        get_model(config.model).preset(config.preset)
    except KeyError as error:
        raise ConfigError(str(error.args[0])) from None
    _one_of("backend", config.backend, BACKENDS)
    _one_of("strategy", config.strategy, STRATEGIES)
    _one_of("precision", config.precision, PRECISIONS)
    _one_of("loop", config.loop, LOOPS)
    _one_of("data", config.data, DATA)
    if config.strategy == "multi-worker" and config.loop != "ctl":
        raise ConfigError(
            "strategy multi-worker needs loop ctl: Keras 3's fit does not support MultiWorkerMirroredStrategy "
            "(keras-team/keras#20585)"
        )
    for name in ("num_devices", "per_device_batch", "steps_per_execution", "steps", "window_steps"):
        if not isinstance(getattr(config, name), int) or getattr(config, name) < 1:
            raise ConfigError(f"{name} must be a positive integer, got {getattr(config, name)!r}")
    if config.warmup_steps < 2 * config.window_steps:
        raise ConfigError(
            f"warmup_steps ({config.warmup_steps}) must cover at least 2 windows of {config.window_steps} steps"
        )
    if config.backend != "cpu" and config.warmup_steps < ACCELERATOR_MIN_WARMUP:
        raise ConfigError(
            f"warmup_steps ({config.warmup_steps}) must be at least {ACCELERATOR_MIN_WARMUP} on {config.backend}: "
            "accelerators need steps to reach a steady clock and memory state"
        )
    if config.window_steps % config.steps_per_execution:
        raise ConfigError(
            f"window_steps ({config.window_steps}) must be a multiple of "
            f"steps_per_execution ({config.steps_per_execution})"
        )
    for name in ("steps", "warmup_steps"):
        if getattr(config, name) % config.window_steps:
            value = getattr(config, name)
            raise ConfigError(f"{name} ({value}) must be a multiple of window_steps ({config.window_steps})")
    if config.strategy == "tpu" and config.backend != "tpu":
        raise ConfigError("strategy 'tpu' needs backend 'tpu'")
    if config.backend == "tpu" and config.strategy != "tpu":
        raise ConfigError("backend 'tpu' runs under strategy 'tpu'")
    if config.backend == "cpu" and (config.num_devices != 1 or config.strategy not in ("default", "multi-worker")):
        raise ConfigError("backend 'cpu' runs one device per process, under the default or multi-worker strategy")
    if config.strategy == "default" and config.num_devices != 1:
        raise ConfigError("num_devices > 1 needs strategy 'mirrored' (GPU) or 'tpu'")
    if config.timeout_s <= 0:
        raise ConfigError(f"timeout_s must be positive, got {config.timeout_s!r}")
    return config
