"""A user's own model, named wherever a bundled model is named, by where it lives: ``path/to/file.py:function``
or ``package.module:function``. docs/reference.md ("Your own model") has the contract the function meets.

The parent process never imports the user's file (it must stay free of every framework): it checks that the file
exists and defines the function by reading its source, and hashes the source, so that a row says which code ran.
The trial process imports it, calls the function once (after the precision policy and the seed are set) and
checks what it returned; every error there names the file and the function.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stepwatch.trainers.spec import Batch, ModelSpec, TorchParts, adam

DEFAULT_LEARNING_RATE = 1e-3
# What a model of yours may say of itself, and what each must be: the unit its throughput counts (tokens) and how many
# of them an example holds (its sequence length), and whether it has attention or experts (its rows then name the
# kernels that ran, and the experts' routing balance, as a bundled model's do).
SAYS = (("unit", str), ("units_per_example", int), ("attention", bool), ("experts", bool))
KEYS = ("model", "loss", "inputs", "labels", "batch", "optimizer", "flops_per_example", *(said for said, _ in SAYS))


class UserModelError(ValueError):
    """A user model that cannot be found or used, in one line naming its file and function."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Reference:
    """``where:function``: where is a .py file (absolute, or relative to the working folder) or a module."""

    name: str
    where: str
    function: str

    @classmethod
    def parse(cls, name: str) -> Reference:
        where, _, function = name.rpartition(":")
        if not where or not function.isidentifier():
            raise UserModelError(f"model {name!r}: name a model of yours as path/to/file.py:function or "
                                 "package.module:function")  # fmt: skip
        return cls(name, where, function)

    @property
    def is_file(self) -> bool:
        return self.where.endswith(".py") or "/" in self.where

    def source(self) -> Path:
        """The file that defines the function, found without importing anything: a module where the trial process
        finds it, in the folder it runs in (this command's) and then on the Python path (a console script's path
        does not hold that folder)."""
        if self.is_file:
            path = Path(self.where).resolve()
            if not path.is_file():
                raise UserModelError(f"model {self.name}: no file {self.where}")
            return path
        spec = None
        locations: Sequence[str] | None = [os.getcwd(), *sys.path]
        parts = self.where.split(".")
        for i in range(len(parts)):
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), locations)
            if spec is None:
                break
            locations = spec.submodule_search_locations
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            raise UserModelError(f"model {self.name}: no module {self.where} on the Python path")
        return Path(spec.origin)

    def check(self) -> Path:
        """The source file, once it is known to define the function (read, never imported)."""
        path = self.source()
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError) as error:
            line = f" at line {error.lineno}" if isinstance(error, SyntaxError) and error.lineno else ""
            raise UserModelError(f"model {self.name}: cannot read {path}{line}: {type(error).__name__}") from None
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
        defined |= {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                    if isinstance(t, ast.Name)}  # fmt: skip
        if self.function not in defined:
            raise UserModelError(f"model {self.name}: {path.name} defines no function {self.function}")
        return path

    def imports(self, module: str) -> bool:
        """Whether the source file imports ``module`` (or a module below it) at any depth: read, never run."""
        tree = ast.parse(self.check().read_bytes())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            if any(name == module or name.startswith(f"{module}.") for name in names):
                return True
        return False

    def source_hash(self) -> str:
        """The first 16 hex digits of the SHA-256 of the source file: a changed model is another model."""
        return hashlib.sha256(self.check().read_bytes()).hexdigest()[:16]

    def load(self) -> Callable[..., Any]:
        """Import the file or module (in the trial process only) and return the function."""
        path = self.check()
        try:
            if self.is_file:
                sys.path.insert(0, str(path.parent))  # its own imports of the files beside it
                spec = importlib.util.spec_from_file_location(f"stepwatch_model_{path.stem}", path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
            else:
                module = importlib.import_module(self.where)
        except Exception as error:  # noqa: BLE001 - whatever the user's file raises on import, in one line
            raise UserModelError(f"model {self.name}: importing {path.name} failed: {_one_line(error)}") from error
        function = getattr(module, self.function, None)
        if not callable(function):
            raise UserModelError(f"model {self.name}: {self.function} in {path.name} is not a function")
        return function


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


class AnyPreset(Mapping[str, str]):
    """A user model's presets: whatever preset name its function accepts (it is passed the name)."""

    def __getitem__(self, name: str) -> str:
        return name

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str)

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0


class Built:
    """What the user's function returned, checked; the function is called once, on first need."""

    def __init__(self, reference: Reference) -> None:
        self.reference = reference
        self.declared: dict[str, Any] | None = None

    def get(self, preset: str) -> dict[str, Any]:
        if self.declared is None:
            self.declared = self._call(preset)
        return self.declared

    def given(self, key: str) -> Any:
        """What the function returned under ``key`` (None if it did not, or has not run yet)."""
        return (self.declared or {}).get(key)

    def _call(self, preset: str) -> dict[str, Any]:
        name = self.reference.name
        function = self.reference.load()
        takes_preset = bool(inspect.signature(function).parameters)
        try:
            declared = function(preset) if takes_preset else function()
        except Exception as error:  # noqa: BLE001 - the user's function raised: one line naming it
            raise UserModelError(f"model {name}: {self.reference.function}() raised {_one_line(error)}") from error
        if not isinstance(declared, dict) or "model" not in declared:
            raise UserModelError(f"model {name}: {self.reference.function}() returned {type(declared).__name__}, "
                                 "not a dict with 'model' (docs/reference.md, 'Your own model')")  # fmt: skip
        unknown = sorted(set(declared) - set(KEYS))
        if unknown:
            raise UserModelError(f"model {name}: unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})")
        for key, kind in SAYS:
            given = declared.get(key)
            if given is not None and (type(given) is not kind or (kind is int and given < 1) or given == ""):
                want = {str: "a unit's name", int: "a positive integer", bool: "True or False"}[kind]
                raise UserModelError(f"model {name}: '{key}' must be {want}, not {given!r}")
        if "loss" not in declared:
            raise UserModelError(f"model {name}: no 'loss' (a Keras loss, or its name)")
        if "batch" not in declared:
            for key in ("inputs", "labels"):
                if key not in declared:
                    raise UserModelError(f"model {name}: no '{key}' (or a 'batch' function)")
                _each(declared[key], lambda one, key=key: _check_declared(name, key, one))
        return declared

    def keras_model(self, preset: str) -> Any:
        """The model, for Keras' ``fit``: a keras.Model."""
        import keras

        model = self.get(preset)["model"]
        if not isinstance(model, keras.Model):
            hint = ": a torch.nn.Module trains with --loop pytorch --keras-backend torch" if _is_torch(model) else ""
            raise UserModelError(f"model {self.reference.name}: 'model' is a {type(model).__name__}, not a "
                                 f"keras.Model{hint}")  # fmt: skip
        return model

    def torch_module(self, preset: str) -> Any:
        """The model, for the plain PyTorch loop: a torch.nn.Module that is not a Keras model."""
        model = self.get(preset)["model"]
        keras = sys.modules.get("keras")
        if not _is_torch(model) or (keras is not None and isinstance(model, keras.Model)):
            raise UserModelError(f"model {self.reference.name}: 'model' is a {type(model).__name__}, not a "
                                 "torch.nn.Module (a Keras model trains with --loop fit)")  # fmt: skip
        return model


PROBE_TIMEOUT_S = 300.0


@functools.cache
def returns_torch_module(name: str, preset: str) -> bool:
    """Whether the function ``name`` returns a torch.nn.Module that is not a Keras model: asked of a child process
    (this one never imports the user's file), only where the file imports torch at all. A probe that fails says no:
    the trial then fails with the function's own error, in a row."""
    reference = Reference.parse(name)
    if not reference.imports("torch"):
        return False
    code = (
        "import sys; from stepwatch.trainers.user import Built, Reference, _is_torch; "
        "model = Built(Reference.parse(sys.argv[1])).get(sys.argv[2])['model']; keras = sys.modules.get('keras'); "
        "print('torch' if _is_torch(model) and not (keras and isinstance(model, keras.Model)) else 'other')"
    )
    env = {**os.environ, "KERAS_BACKEND": "torch", "CUDA_VISIBLE_DEVICES": ""}
    try:
        done = subprocess.run([sys.executable, "-c", code, name, preset], capture_output=True, text=True, env=env,
                              timeout=PROBE_TIMEOUT_S)  # fmt: skip
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and done.stdout.strip().endswith("torch")


def _is_torch(model: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def _each(declared: Any, one: Callable[[Any], Any]) -> Any:
    """``one`` applied to every declared input of a list or dict of them (or to the one), in the same structure."""
    if isinstance(declared, dict) and "shape" not in declared:
        return {key: _each(value, one) for key, value in declared.items()}
    if isinstance(declared, list | tuple):
        return [_each(value, one) for value in declared]
    return one(declared)


def _check_declared(name: str, key: str, one: Any) -> None:
    if not isinstance(one, dict) or "shape" not in one:
        raise UserModelError(f"model {name}: '{key}' must be {{'shape': (...), 'dtype': ...}} (or a list or "
                             f"dict of them), not {one!r}")  # fmt: skip
    dtype = np.dtype(one.get("dtype", "float32"))
    if dtype.kind in "iu" and "high" not in one:
        raise UserModelError(f"model {name}: '{key}' of dtype {dtype} needs 'high' (values are drawn below it)")


def _draw(declared: dict[str, Any], batch: int, rng: np.random.Generator) -> Any:
    """A batch of ``batch`` examples of one declared input."""
    shape = (batch, *tuple(declared["shape"]))
    dtype = np.dtype(declared.get("dtype", "float32"))
    if dtype.kind in "iu":
        return rng.integers(declared.get("low", 0), declared["high"], size=shape, dtype=dtype)
    return rng.standard_normal(shape).astype(dtype)


def loss_with(given: Any, options: Mapping[str, Any]) -> Any:
    """The model's loss, with a custom loop's ``reduction`` where it asks for one: a Keras loss object copied with
    it, a loss named by its name as Keras' function of that name (per example, as that reduction gives)."""
    if not options:
        return given
    import keras

    if isinstance(given, str):
        return keras.losses.get(given)
    if isinstance(given, keras.losses.Loss):
        own = copy.copy(given)
        own.reduction = options.get("reduction")
        return own
    return given


def said_of(built: Built) -> dict[str, Any]:
    """The spec's fields as the model's function said them (``SAYS``): its unit, units per example (a field that is
    a function of the preset), attention and experts; none it did not say."""
    said: dict[str, Any] = {key: built.given(key) for key, _ in SAYS if built.given(key)}
    if "units_per_example" in said:
        count = said["units_per_example"]
        said["units_per_example"] = lambda preset: count
    return said


def user_spec(name: str) -> ModelSpec:
    """The ModelSpec of a user's model: its function is called (once) when the model is built; batches, loss,
    optimizer and FLOPs come from what it returned."""
    reference = Reference.parse(name)
    reference.check()
    built = Built(reference)

    def batch(preset: str, size: int, seed: int) -> Batch:
        declared = built.get(preset)
        if "batch" in declared:
            return declared["batch"](size, seed)
        rng = np.random.default_rng(seed)
        return tuple(_each(declared[key], lambda one: _draw(one, size, rng)) for key in ("inputs", "labels"))

    def optimizer(learning_rate: float) -> Any:
        given = built.given("optimizer")
        return given if given is not None else adam(learning_rate)

    def torch_optimizer(parameters: Any, learning_rate: float) -> Any:
        import torch

        given = built.given("optimizer")
        return given if given is not None else torch.optim.Adam(parameters, lr=learning_rate)

    return ModelSpec(
        name=name,
        unit="examples",
        presets=AnyPreset(),
        build=built.keras_model,
        synthetic_batch=batch,
        flops_per_example=lambda preset: built.given("flops_per_example"),
        units_per_example=lambda preset: 1,
        optimizer=optimizer,
        default_learning_rate=DEFAULT_LEARNING_RATE,
        description=f"your model: {name}",
        loss=lambda **options: loss_with(built.given("loss"), options),
        torch=TorchParts(build=built.torch_module, optimizer=torch_optimizer, loss=lambda: built.given("loss")),
        said=lambda: said_of(built),
    )
