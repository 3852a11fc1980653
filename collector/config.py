"""One benchmark configuration: a frozen dataclass whose fields are result columns.

Every field declares what it is through its metadata (``Role``): whether it is a series dimension (part
of the series key: what must match for two runs to be comparable), the CLI flag that sets it, the result
column it is stored in, its allowed values and whether a repro command repeats it. Every list of
dimensions elsewhere (the CLI's matrix flags, the store's series table, the queries' grouping, the
dashboard's dimension pickers, the repro command) is derived from here, so adding a dimension is one
field with its role (plus a schema migration for its new column).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import Field, asdict, dataclass, field, fields, replace
from typing import Any, get_args, get_type_hints

from stepwatch.trainers import get_model
from stepwatch.trainers.user import UserModelError
from stepwatch.trainers.workload import Kind, kind_of, source_of

DEVICES = ("cpu", "gpu", "tpu")
KERAS_BACKENDS = ("tensorflow", "jax", "torch")
STRATEGIES = ("default", "mirrored", "multi-worker", "tpu")
PRECISIONS = ("fp32", "tf32", "mixed_float16", "mixed_bfloat16", "fp8")
# fp8 trains its matmuls in float8 (Keras' float8 training on JAX, torchao's in the plain PyTorch loop), the rest in
# bfloat16: tensor cores with fp8 came with compute capability 8.9 (Ada) and 9.0 (Hopper).
FP8 = "fp8"
FP8_COMPUTE_CAPABILITY = (8, 9)
FP8_NEEDS = (f"precision fp8 needs a GPU with fp8 tensor cores (compute capability "
             f"{'.'.join(map(str, FP8_COMPUTE_CAPABILITY))} or later: Ada, Hopper, Blackwell)")  # fmt: skip
# The attention kernel a model with attention runs (``trainers.spec.ModelSpec.attention``): the framework's own choice,
# or one pinned: FlashAttention, the memory-efficient kernel, cuDNN's fused attention, or the unfused math.
ATTENTION_AUTO = "auto"
ATTENTION = (ATTENTION_AUTO, "flash", "efficient", "cudnn", "math")
# What each backend can pin (beyond auto): torch's SDPA has every kernel; JAX's dot_product_attention cuDNN's (GPU)
# and the XLA math, Keras' splash kernel on a TPU as "flash"; TensorFlow has only the math.
ATTENTION_PINS = {"torch": ATTENTION[1:], "jax": ("flash", "cudnn", "math"), "tensorflow": ("math",)}
# The experts kernel of a model with experts (``trainers.spec.ModelSpec.experts``) in the plain PyTorch loop:
# transformers' ``experts_implementation`` (its choice, or one pinned: one grouped matmul over the experts, batched
# matmuls of each token's experts' weights, or a loop over the experts that got tokens). Keras' MoE backbones compute
# every expert for every token (dense): nothing to pin there.
EXPERTS_AUTO = "auto"
EXPERTS = (EXPERTS_AUTO, "grouped_mm", "batched_mm", "eager")
# Keras fit, a TensorFlow custom loop, a plain PyTorch loop (no Keras), the user's own training script (its loop).
SCRIPT_LOOP = "script"
LOOPS = ("fit", "ctl", "pytorch", SCRIPT_LOOP)
DATA = ("synthetic", "pipeline")
# Host threads: the framework's own pools, a count per host chosen by stepwatch, or INTRA/INTER explicitly.
THREADS_DEFAULT, THREADS_AUTO = "default", "auto"
_THREADS = re.compile(r"^([1-9][0-9]*)/([1-9][0-9]*)$")

ACCELERATOR_MIN_WARMUP = 10
# The one default trial count: trials per config of a suite that names none (the nightly), a check's first look
# (``collector.analysis.sequential``) and a calibration's trials per environment.
TRIALS = 3
DEFAULT_LOOP = "fit"

# The one set of words for a boolean, in suite files, on the command line, in selections and in the URL.
BOOL_WORDS = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}


class ConfigError(ValueError):
    """A configuration that cannot be run, described in one line."""


@dataclass(frozen=True)
class Role:
    """What a config field is, read by everything that lists fields (see the module docstring)."""

    series: bool = False  # a series dimension: part of the series key
    flag: str | None = None  # the `stepwatch run` / `upgrade-check` flag that sets it (comma lists are crossed)
    keeps: bool = False  # the flag keeps the configs that have one of its values instead of setting the field
    column: str | None = None  # the result column, where it is not the field's own name
    choices: tuple[Any, ...] = ()  # allowed values (empty: any of the field's type)
    repro: bool = True  # a repro command sets it (when it has a flag and a value)
    help: str = ""
    # Series-key stability: a field renamed since history was first recorded keeps its old name in the key
    # (``key_name``), and a dimension added later is left out of the key at its default (``added``), so every
    # series recorded before the change keeps its key.
    key_name: str | None = None
    added: bool = False


def _field(default: Any = None, *, required: bool = False, **role: Any) -> Any:
    metadata = {"role": Role(**role)}
    return field(metadata=metadata) if required else field(default=default, metadata=metadata)


@dataclass(frozen=True)
class BenchmarkConfig:
    """One point of the benchmark matrix plus how it is measured."""

    model: str = _field(required=True, series=True, flag="--models", keeps=True, help="keep only these models")
    preset: str = _field("tiny", series=True, flag="--preset", help="size preset(s), e.g. tiny")
    keras_backend: str = _field(
        "tensorflow", series=True, flag="--keras-backend", choices=KERAS_BACKENDS, added=True,
        help="Keras backend(s): tensorflow, jax, torch",
    )  # fmt: skip
    device: str = _field(
        "cpu", series=True, flag="--device", choices=DEVICES, key_name="backend", help="cpu, gpu or tpu"
    )
    num_devices: int = _field(1, series=True, flag="--devices", help="devices per run")
    strategy: str = _field("default", series=True, flag="--strategy", choices=STRATEGIES)
    xla: bool = _field(False, series=True, flag="--xla", column="xla_requested", help="off,on")
    precision: str = _field("fp32", series=True, flag="--precision", choices=PRECISIONS)
    per_device_batch: int = _field(8, series=True, flag="--batch", help="per-device batch size(s)")
    steps_per_execution: int = _field(1, series=True, flag="--steps-per-execution")
    sequence_length: int = _field(
        0, series=True, flag="--seq-len", added=True,
        help="tokens per sequence of a model with a sequence (llama, bert, transformer); 0: its preset's",
    )  # fmt: skip
    attention: str = _field(
        ATTENTION_AUTO, series=True, flag="--attention", choices=ATTENTION, added=True,
        help="the attention kernel of a model with attention: auto (the framework's choice) or one pinned: flash, "
        "efficient, cudnn, math",
    )  # fmt: skip
    experts: str = _field(
        EXPERTS_AUTO, series=True, flag="--experts", choices=EXPERTS, added=True,
        help="the experts kernel of a model with experts, in the plain PyTorch loop: auto (transformers' choice) or "
        "one pinned: grouped_mm, batched_mm, eager",
    )  # fmt: skip
    loop: str = _field(DEFAULT_LOOP, series=True, flag="--loop", choices=LOOPS)
    data: str = _field("synthetic", series=True, flag="--data", choices=DATA)
    threads: str = _field(
        THREADS_DEFAULT, series=True, flag="--threads", added=True,
        help="host threads: default (the framework's pools), auto (chosen for this host) or INTRA/INTER, e.g. 1/1",
    )  # fmt: skip
    script_args: str = _field(
        "", series=True, added=True, help="a script's arguments, quoted as a shell would (run --script PATH -- ARGS)"
    )
    nproc: int = _field(
        1, series=True, flag="--nproc", added=True,
        help="processes a script trial runs as, data-parallel (torch's elastic launcher for keras_backend torch, "
        "TF_CONFIG for tensorflow, jax.distributed for jax)",
    )  # fmt: skip
    deterministic: bool = _field(
        False, series=True, flag="--deterministic", added=True,
        help="off,on: the framework's deterministic kernels (TensorFlow's op determinism, torch's deterministic "
        "algorithms, XLA's deterministic GPU ops), which can be slower; numerics verdicts are then bitwise",
    )  # fmt: skip
    # A result another tool measured (``stepwatch ingest`` of its output, collector/imports): the format it came in,
    # its metric as the tool names it, and which way is better. Empty for what stepwatch measured itself.
    imported_from: str = _field("", series=True, added=True, repro=False)
    imported_metric: str = _field("", series=True, added=True, repro=False)
    imported_better: str = _field("", series=True, added=True, repro=False, choices=("", "higher", "lower"))
    steps: int = _field(100, flag="--steps", help="measured steps after warm-up")
    warmup_steps: int = _field(20, flag="--warmup", help="warm-up steps, excluded (>= 2 windows)")
    window_steps: int = _field(10, flag="--window", help="steps between two device syncs")
    learning_rate: float | None = _field(None, flag="--learning-rate", repro=False, help="default: the model's")
    timeout_s: float = _field(600.0, flag="--timeout", repro=False, help="seconds before a trial is killed")
    seed: int = _field(0)  # a trial's seed: the suite's plus the trial's number (both sides of a check pair on it)

    def __post_init__(self) -> None:
        if self.workload is Kind.SCRIPT and self.loop == DEFAULT_LOOP:  # a script is its own loop: named by its path
            object.__setattr__(self, "loop", SCRIPT_LOOP)

    @property
    def workload(self) -> Kind:
        """What this config runs: a bundled model, a model or script of yours, another tool's result (``Kind``)."""
        return Kind.IMPORTED if self.imported_from else kind_of(self.model)

    @property
    def compile_word(self) -> str:
        """What ``xla`` asks of this backend, in a label: jit_compile is XLA on TensorFlow and JAX, torch.compile
        on torch."""
        if self.keras_backend == "torch":
            return "compile" if self.xla else "eager"
        return "xla" if self.xla else "noxla"

    @property
    def processes(self) -> int:
        """The processes a trial runs as (its ranks): a script's nproc, or one per device for the plain PyTorch
        loop, which trains data-parallel (DistributedDataParallel) on several."""
        return self.num_devices if self.loop == "pytorch" else self.nproc

    @property
    def devices(self) -> int:
        """The accelerators a trial holds (what it is priced for): its devices per process, times its processes
        on an accelerator (a data-parallel script's rank each has its own; on a CPU they share the host)."""
        return self.num_devices * (self.nproc if self.device != "cpu" else 1)

    @property
    def global_batch(self) -> int:
        return self.per_device_batch * self.num_devices

    @property
    def key(self) -> str:
        """Short stable hash of the series fields (the accelerator name is added by the store). Renamed fields
        hash under their first name and later dimensions only off their default (see ``Role``)."""
        payload = {
            ROLES[name].key_name or name: getattr(self, name)
            for name in SERIES_FIELDS
            if not (ROLES[name].added and getattr(self, name) == DEFAULTS[name])
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def label(self) -> str:
        """Human-readable one-liner for progress and tables; any other series field off its default is added as
        ``field=value``, so two series never share a label."""
        devices = f"{self.device}x{self.num_devices}" if self.num_devices > 1 else self.device
        if self.workload is Kind.IMPORTED:  # named as its tool names it
            return " ".join(w for w in (self.model, self.preset, self.imported_metric, f"({self.imported_from})") if w)
        if self.workload is Kind.SCRIPT:  # what a script runs with is in its arguments, not in the matrix's words
            words = (" ".join(filter(None, (self.model, self.script_args))), devices, self.keras_backend)
            extra = [f"nproc={self.nproc}"] if self.nproc != 1 else []
            return " ".join([*words, *extra])
        words = (devices, self.compile_word, self.precision, f"b{self.per_device_batch}", self.loop)
        text = " ".join([f"{self.model}/{self.preset}", *words])
        extra = [f"{name}={getattr(self, name)}" for name in UNLABELLED if getattr(self, name) != DEFAULTS[name]]
        return " ".join([text, *extra])

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BenchmarkConfig:
        return cls(**json.loads(text))

    def with_changes(self, **changes: Any) -> BenchmarkConfig:
        return replace(self, **changes)


FIELDS: tuple[Field, ...] = fields(BenchmarkConfig)
FIELD_NAMES = tuple(f.name for f in FIELDS)
ROLES: dict[str, Role] = {f.name: f.metadata["role"] for f in FIELDS}
# Each field's value type (``float`` for ``float | None``).
TYPES: dict[str, type] = {
    name: next((a for a in get_args(hint) if a is not type(None)), hint)
    for name, hint in get_type_hints(BenchmarkConfig).items()
}
# Fields that decide what is measured; with the accelerator product name they form the series key.
SERIES_FIELDS = tuple(name for name in FIELD_NAMES if ROLES[name].series)
# The dimensions a series has, as the store's series table and the dashboard name them.
SERIES_DIMENSIONS = (*SERIES_FIELDS, "accelerator")
# The result column each framework's version goes into, by its import name (a Keras backend's name is its
# framework's): what a script's trial records and what Versions goes along for a backend's series.
FRAMEWORK_VERSION_COLUMNS = {
    "tensorflow": "tf_version", "keras": "keras_version", "jax": "jax_version", "torch": "torch_version",
}  # fmt: skip
FLAGGED = tuple(name for name in FIELD_NAMES if ROLES[name].flag)
DEFAULTS = {f.name: f.default for f in FIELDS}
# The series fields a label spells out in its own words; the others appear as field=value when not default.
LABELLED = ("model", "preset", "device", "num_devices", "xla", "precision", "per_device_batch", "loop", "script_args")
UNLABELLED = tuple(name for name in SERIES_FIELDS if name not in LABELLED)


def column(name: str) -> str:
    """The result column a config field is stored in."""
    return ROLES[name].column or name


# Dimensions added after history was first recorded: result column -> the value every earlier run had.
ADDED_DIMENSIONS = {column(name): DEFAULTS[name] for name in SERIES_FIELDS if ROLES[name].added}


COLUMN_ALIASES = {name: ROLES[name].column for name in FIELD_NAMES if ROLES[name].column}  # field -> column
FIELD_OF_COLUMN = {col: name for name, col in COLUMN_ALIASES.items()}  # column -> field
# Former names of renamed fields (suite files, selections, dashboard links and results files still use them).
FORMER_NAMES = {ROLES[name].key_name: name for name in FIELD_NAMES if ROLES[name].key_name}  # old -> field


def parse_bool(value: Any, name: str = "value") -> bool:
    """on/off, true/false, yes/no, 1/0 (text or a boolean) to a bool; ConfigError otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in BOOL_WORDS:
        return BOOL_WORDS[value.strip().lower()]
    raise ConfigError(f"{name} {value!r} is not one of off, on")


def bool_text(value: bool) -> str:
    return "on" if value else "off"


def config_columns(config: BenchmarkConfig) -> dict[str, Any]:
    """The config as result columns (``xla`` is stored as ``xla_requested``)."""
    return {column(name): value for name, value in asdict(config).items()}


def config_from_row(row: Mapping[str, Any]) -> BenchmarkConfig:
    """The config of a result row or of a series (fields under their own names or their columns' names)."""
    values = {}
    for name in FIELD_NAMES:
        for key in (name, column(name)):
            if row.get(key) is not None:
                values[name] = bool(row[key]) if TYPES[name] is bool else row[key]
                break
    config = BenchmarkConfig(**values)
    if config.workload is Kind.SCRIPT:  # a script's row records what it did itself; its config leaves that to it
        config = config.with_changes(**{name: DEFAULTS[name] for name in SCRIPT_OWNS})
    return config


def repro_flags(config: BenchmarkConfig) -> list[str]:
    """The flags that set every repro field of ``config`` on `stepwatch run` (last: a script's arguments, after
    ``--``); a dimension added later is left out at its default, as in the series key (``Role.added``)."""
    script = config.workload is Kind.SCRIPT
    skipped = (*SCRIPT_OWNS, "model", "preset", "loop") if script else ("nproc",)
    args = ["--script", config.model] if script else []
    for name in FIELD_NAMES:
        role, value = ROLES[name], getattr(config, name)
        if role.added and value == DEFAULTS[name]:
            continue
        if role.flag and role.repro and value is not None and name not in skipped:
            args += [role.flag, bool_text(value) if isinstance(value, bool) else str(value)]
    return [*args, "--", *shlex.split(config.script_args)] if script and config.script_args else args


def thread_counts(threads: str) -> tuple[int, int] | None:
    """(intra-op, inter-op) threads of an explicit INTRA/INTER setting; None for the framework's default."""
    if threads == THREADS_DEFAULT:
        return None
    match = _THREADS.match(threads)
    if not match:
        raise ConfigError(f"threads {threads!r} is not default, auto or INTRA/INTER (e.g. 1/1)")
    return int(match.group(1)), int(match.group(2))


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS has one, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def auto_threads(device: str, keras_backend: str, cores: int) -> str:
    """What ``threads = "auto"`` runs. On a CPU device, one intra-op thread per trial on hosts of up to 3 cores
    and half the cores on larger hosts, with two inter-op threads (one on a 1-core host). Measured on this 2-core
    machine (``benchmarks/step_floor.py``, see docs/reference.md, "Threads"): 1/2 has the fastest median step on all
    four tiny models, because TensorFlow's default pools (2/2 plus tf.data's) keep more threads runnable than
    there are cores (about 7 ms a step waiting on the run queue, 70-100 context switches a step), while 1/1
    leaves the second core idle. Larger hosts are not measured here. On an accelerator the host threads only
    feed the device, and JAX has no supported thread setting: the framework's default."""
    if device != "cpu" or keras_backend == "jax":
        return THREADS_DEFAULT
    return f"{max(1, cores // 2)}/{min(2, cores)}"


def resolve(config: BenchmarkConfig, cores: int | None = None) -> BenchmarkConfig:
    """The config with ``auto`` replaced by what it means on this host, so that keys and rows hold what ran."""
    if config.threads != THREADS_AUTO:
        return config
    cores = usable_cores() if cores is None else cores
    return replace(config, threads=auto_threads(config.device, config.keras_backend, cores))


def _validate_keras_backend(config: BenchmarkConfig) -> None:
    """What JAX and torch cannot run under Keras, refused before a process starts. TensorFlow runs everything."""
    name = config.keras_backend
    if name == "tensorflow" and config.loop != "pytorch":
        return
    if config.loop == "pytorch" and name != "torch":
        raise ConfigError(f"loop pytorch is plain PyTorch training: it runs with keras_backend torch, not {name}")
    if config.loop == "ctl":
        raise ConfigError(f"loop 'ctl' is a TensorFlow custom loop (tf.function); keras_backend {name} runs fit")
    if config.data != "synthetic":
        raise ConfigError(f"data {config.data!r} is a tf.data host pipeline; keras_backend {name} feeds synthetic "
                          "device arrays")  # fmt: skip
    if config.strategy == "multi-worker":
        raise ConfigError(f"strategy multi-worker is TensorFlow's MultiWorkerMirroredStrategy; not on {name}")
    if name == "jax" and config.threads not in (THREADS_DEFAULT, THREADS_AUTO):
        raise ConfigError(f"threads {config.threads!r}: JAX has no supported setting for its CPU threads "
                          "(jax-ml/jax#1539); use default or auto")  # fmt: skip
    if name == "torch" and config.loop != "pytorch" and (config.num_devices != 1 or config.device == "tpu"):
        raise ConfigError("keras_backend torch runs one CPU or GPU: released Keras has no multi-device torch training "
                          "(keras.distribution is JAX-only) and no torch TPU support")  # fmt: skip


# What a script decides itself (its batch, precision and compilation are in its code and arguments): a script
# config keeps these fields at their defaults, so that one script and arguments is one series.
SCRIPT_OWNS = (
    "xla", "precision", "per_device_batch", "steps_per_execution", "strategy", "data", "num_devices", "threads",
    "sequence_length", "attention", "experts",
)  # fmt: skip


def script_defaults(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """What of a suite's ``[defaults]`` a script runs with: how it is measured and where (steps, device, timeout),
    not what the script decides itself."""
    return {k: v for k, v in defaults.items() if k not in (*SCRIPT_OWNS, "preset", "loop")}


def _validate_script(config: BenchmarkConfig) -> None:
    """A script trial: the script exists (read, never imported, in this process), its loop is its own, and what it
    sets itself is not crossed by the matrix."""
    if config.workload is not Kind.SCRIPT:
        if config.script_args or config.nproc != 1:
            what = "script_args" if config.script_args else "nproc"
            raise ConfigError(f"{what} is a script's (run --script PATH); model {config.model} is not a script")
        return
    try:
        source_of(config.model).check()
    except UserModelError as error:
        raise ConfigError(str(error)) from None
    if config.loop != SCRIPT_LOOP:
        raise ConfigError(f"script {config.model} runs its own loop: loop script, not {config.loop}")
    changed = [name for name in SCRIPT_OWNS if getattr(config, name) != DEFAULTS[name]]
    if changed:
        raise ConfigError(
            f"script {config.model}: {', '.join(changed)} is set by the script itself (its code and arguments), not "
            "by stepwatch: pass it in the script's arguments (run --script PATH -- ARGS)"
        )
    if not isinstance(config.nproc, int) or config.nproc < 1:
        raise ConfigError(f"nproc must be a positive integer, got {config.nproc!r}")


def _validate_model(config: BenchmarkConfig) -> None:
    """A bundled model or a model of yours, and the loops it trains with."""
    try:
        get_model(config.model).preset(config.preset, config.sequence_length)
    except KeyError as error:
        raise ConfigError(str(error.args[0])) from None
    except UserModelError as error:
        raise ConfigError(str(error)) from None
    if config.loop == "pytorch" and config.workload is Kind.BUNDLED and get_model(config.model).torch is None:
        raise ConfigError(f"model {config.model} has no plain PyTorch build (resnet50 and llama have): run it "
                          "with loop fit")  # fmt: skip
    if config.workload is Kind.FUNCTION and config.loop == "ctl":
        raise ConfigError(f"model {config.model}: a model of yours trains with loop fit, or pytorch for a torch module "
                          "(the custom loop ctl is the bundled models' own, with their loss)")  # fmt: skip


def _validate_attention(config: BenchmarkConfig) -> None:
    """A sequence length and an attention kernel only for a model that has them, and a kernel the backend can pin."""
    spec = get_model(config.model) if config.workload is not Kind.SCRIPT else None
    if not isinstance(config.sequence_length, int) or config.sequence_length < 0:
        given = config.sequence_length
        raise ConfigError(f"sequence_length must be 0 (the preset's) or a positive integer, got {given!r}")
    if config.sequence_length and spec is not None:
        try:
            spec.preset(config.preset, config.sequence_length)
        except KeyError as error:
            raise ConfigError(str(error.args[0])) from None
    if config.attention == ATTENTION_AUTO:
        return
    if spec is None or not (spec.attention or config.workload is Kind.FUNCTION):  # yours says so once built
        raise ConfigError(f"attention {config.attention}: model {config.model} has no attention stepwatch can pin")
    backend = "torch" if config.loop == "pytorch" else config.keras_backend
    if config.attention not in ATTENTION_PINS[backend]:
        pins = ", ".join(ATTENTION_PINS[backend])
        raise ConfigError(f"attention {config.attention}: keras_backend {backend} can pin {pins} (or auto)")
    on = {("torch", "efficient"): "gpu", ("torch", "cudnn"): "gpu", ("jax", "cudnn"): "gpu", ("jax", "flash"): "tpu"}
    needs = on.get((backend, config.attention))
    if needs and config.device != needs:
        raise ConfigError(f"attention {config.attention} on {backend} runs on a {needs}, not a {config.device}")


def _validate_experts(config: BenchmarkConfig) -> None:
    """An experts kernel pinned only for a model with experts, in the plain PyTorch loop."""
    if config.experts == EXPERTS_AUTO:
        return
    spec = get_model(config.model) if config.workload is not Kind.SCRIPT else None
    if spec is None or not spec.experts:
        raise ConfigError(f"experts {config.experts}: model {config.model} has no experts stepwatch can pin")
    if config.loop != "pytorch":
        raise ConfigError(f"experts {config.experts}: only the plain PyTorch loop (loop pytorch) can pin the experts "
                          "kernel; Keras' backbone computes every expert for every token")  # fmt: skip


def _validate_fp8(config: BenchmarkConfig) -> None:
    """fp8 where it can train: on a GPU (this host's capability is checked before a run: ``fp8_refusal``), in Keras'
    float8 training on JAX or torchao's in the plain PyTorch loop."""
    if config.precision != FP8:
        return
    if config.device != "gpu":
        raise ConfigError(f"{FP8_NEEDS}; this config runs on a {config.device}")
    if config.loop != "pytorch" and config.keras_backend != "jax":
        raise ConfigError(f"precision fp8 trains with keras_backend jax (Keras' float8 training) or loop pytorch "
                          f"(torchao's float8 training), not keras_backend {config.keras_backend}")  # fmt: skip


def fp8_refusal(capability: tuple[int, int] | None, name: str | None) -> str | None:
    """One line refusing fp8 on a host whose GPU cannot train it (``capability``: its compute capability, as
    nvidia-smi reads it; None where it could not be read, when the trial says what happened)."""
    if capability is None or capability >= FP8_COMPUTE_CAPABILITY:
        return None
    major, minor = capability
    return f"{FP8_NEEDS}; this host's {name or 'GPU'} is {major}.{minor}: drop fp8 from the suite (--precision) here"


def validate(config: BenchmarkConfig) -> BenchmarkConfig:
    """Raise ConfigError naming the first thing wrong with ``config``; return it unchanged otherwise."""
    _validate_script(config)
    if config.loop == SCRIPT_LOOP and config.workload is not Kind.SCRIPT:
        raise ConfigError(f"loop script runs a training script of yours: name it by its path (run --script PATH), "
                          f"not {config.model!r}")  # fmt: skip
    if config.workload is not Kind.SCRIPT:
        _validate_model(config)
    for name in FIELD_NAMES:
        allowed = ROLES[name].choices
        if allowed and getattr(config, name) not in allowed:
            raise ConfigError(f"{name} {getattr(config, name)!r} is not one of {', '.join(map(str, allowed))}")
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
    if config.device != "cpu" and config.warmup_steps < ACCELERATOR_MIN_WARMUP:
        raise ConfigError(
            f"warmup_steps ({config.warmup_steps}) must be at least {ACCELERATOR_MIN_WARMUP} on {config.device}: "
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
    if config.strategy == "tpu" and config.device != "tpu":
        raise ConfigError("strategy 'tpu' needs device 'tpu'")
    if config.device == "tpu" and config.strategy != "tpu":
        raise ConfigError("device 'tpu' runs under strategy 'tpu'")
    if config.loop == "pytorch" and config.strategy != "default":
        raise ConfigError("loop pytorch trains on several devices with DistributedDataParallel, one process each "
                          "(--devices N), under the default strategy")  # fmt: skip
    data_parallel = config.loop == "pytorch"  # one process per device: on a CPU, N processes share it (gloo)
    if (
        config.device == "cpu"
        and not data_parallel
        and (config.num_devices != 1 or config.strategy not in ("default", "multi-worker"))
    ):
        raise ConfigError("device 'cpu' runs one device per process, under the default or multi-worker strategy")
    if config.strategy == "default" and config.num_devices != 1 and not data_parallel:
        raise ConfigError("num_devices > 1 needs strategy 'mirrored' (GPU) or 'tpu'")
    _validate_keras_backend(config)
    _validate_attention(config)
    _validate_experts(config)
    _validate_fp8(config)
    if config.threads != THREADS_AUTO:
        thread_counts(config.threads)
    if config.timeout_s <= 0:
        raise ConfigError(f"timeout_s must be positive, got {config.timeout_s!r}")
    return config
