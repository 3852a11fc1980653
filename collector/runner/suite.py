"""Suite files: TOML that lists or crosses benchmark configs, and the CLI flags that narrow them.

A suite file has optional ``name``, ``description`` and ``trials``, a ``[defaults]`` table, any
number of ``[[matrix]]`` tables (every list in one is crossed with the others) and ``[[configs]]``
tables (one config each). Keys are BenchmarkConfig fields (or their former names: ``backend`` for
``device``); boolean fields (``xla``) take off/on or false/true.
"""

from __future__ import annotations

import difflib
import itertools
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepwatch.collector.config import (
    DEFAULTS,
    FIELD_NAMES,
    FORMER_NAMES,
    ROLES,
    SCRIPT_OWNS,
    TRIALS,
    TYPES,
    BenchmarkConfig,
    ConfigError,
    bool_text,
    parse_bool,
    resolve,
    script_defaults,
    validate,
)
from stepwatch.collector.errors import UsageError
from stepwatch.trainers.user import returns_torch_module
from stepwatch.trainers.workload import Kind, kind_of

SUITES_DIR = Path(__file__).parent / "suites"
TOP_LEVEL = ("name", "description", "trials", "defaults", "matrix", "configs")


class SuiteError(UsageError):
    """A suite that cannot be read, described in one line naming the file and the fix."""


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    trials: int
    configs: tuple[BenchmarkConfig, ...]
    path: Path
    defaults: Mapping[str, Any] = field(default_factory=dict)  # [defaults]: what a model of yours runs with


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _coerce(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        key = FORMER_NAMES.get(key, key)  # a suite written before a field was renamed
        if key not in FIELD_NAMES:
            raise SuiteError(f"{where}: unknown field {key!r}{_suggest(key, FIELD_NAMES)}")
        try:
            out[key] = parse_bool(value, key) if TYPES[key] is bool else value
        except ConfigError as error:
            raise SuiteError(f"{where}: {error}") from None
    return out


def resolve_path(name_or_path: str) -> Path:
    """A bundled suite name (``smoke``) or a path to a TOML file."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.exists():
        if not candidate.is_file():
            raise SuiteError(f"suite file {candidate} does not exist")
        return candidate
    bundled = SUITES_DIR / f"{name_or_path}.toml"
    if not bundled.is_file():
        known = sorted(p.stem for p in SUITES_DIR.glob("*.toml"))
        raise SuiteError(
            f"unknown suite {name_or_path!r}{_suggest(name_or_path, known)}; bundled suites: {', '.join(known)}"
        )
    return bundled


def load_suite(name_or_path: str) -> Suite:
    """Read, expand and validate a suite; any problem is one SuiteError line."""
    path = resolve_path(name_or_path)
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise SuiteError(f"{path}: not valid TOML: {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SuiteError(f"{path}: cannot read: {error}") from None
    for key in doc:
        if key not in TOP_LEVEL:
            raise SuiteError(f"{path}: unknown top-level key {key!r}{_suggest(key, TOP_LEVEL)}")
    if not isinstance(doc.get("defaults", {}), dict):
        raise SuiteError(f"{path}: [defaults] must be a table")
    for key in ("matrix", "configs"):
        if not isinstance(doc.get(key, []), list):
            raise SuiteError(f"{path}: {key} must be an array of tables ([[{key}]])")
    defaults = _coerce(doc.get("defaults", {}), f"{path} [defaults]")
    points: list[dict[str, Any]] = []
    for i, block in enumerate(doc.get("matrix", [])):
        block = {k: (v if isinstance(v, list) else [v]) for k, v in block.items()}
        keys = list(block)
        for combo in itertools.product(*(block[k] for k in keys)):
            points.append({**defaults, **_coerce(dict(zip(keys, combo)), f"{path} [[matrix]] #{i + 1}")})
    for i, block in enumerate(doc.get("configs", [])):
        points.append({**defaults, **_coerce(block, f"{path} [[configs]] #{i + 1}")})
    if not points:
        raise SuiteError(f"{path}: no configs (add a [[matrix]] or [[configs]] table)")
    configs = build_configs(points, str(path))
    trials = doc.get("trials", TRIALS)
    if not isinstance(trials, int) or trials < 1:
        raise SuiteError(f"{path}: trials must be a positive integer, got {trials!r}")
    return Suite(doc.get("name", path.stem), doc.get("description", ""), trials, configs, path, defaults)


def build_configs(points: Iterable[Mapping[str, Any]], where: str) -> tuple[BenchmarkConfig, ...]:
    """Validated, de-duplicated configs in first-seen order."""
    seen: dict[BenchmarkConfig, None] = {}
    for point in points:
        if "model" not in point:
            raise SuiteError(f"{where}: a config has no model")
        try:
            config = validate(BenchmarkConfig(**point))
        except (ConfigError, TypeError) as error:
            raise SuiteError(f"{where}: {error}") from None
        seen.setdefault(config, None)
    return tuple(seen)


def _of_script(given: Mapping[str, list[Any]]) -> dict[str, list[Any]]:
    """The matrix a script runs in: what the script sets itself (``SCRIPT_OWNS``: xla, precision, batch...) at its
    default, where the matrix has it (a project's ``xla = ["off", "on"]`` runs a script once); a matrix without
    it is refused, since the script would not run what it asks."""
    values = dict(given)
    for name in set(given) & set(SCRIPT_OWNS):
        if DEFAULTS[name] not in given[name]:
            asked = ",".join(bool_text(v) if isinstance(v, bool) else str(v) for v in given[name])
            raise SuiteError(f"{ROLES[name].flag} {asked}: a script sets its {name} itself; pass it in the script's "
                             "arguments (run --script PATH -- ARGS)")  # fmt: skip
        values[name] = [DEFAULTS[name]]
    return values


def _loop_of(name: str, given: Mapping[str, list[Any]], defaults: Mapping[str, Any]) -> dict[str, str]:
    """The loop a model of yours trains in when none is set (by a flag or the settings): the plain PyTorch loop for
    a function that returns a torch.nn.Module on the torch backend, else the suite's."""
    if "loop" in given or "torch" not in given.get("keras_backend", [defaults.get("keras_backend")]):
        return {}
    preset = (given.get("preset") or [defaults.get("preset", DEFAULTS["preset"])])[0]
    return {"loop": "pytorch", "keras_backend": "torch"} if returns_torch_module(name, str(preset)) else {}


def narrow(
    configs: Iterable[BenchmarkConfig], flags: Mapping[str, list[Any] | None], defaults: Mapping[str, Any] = {}
) -> tuple[BenchmarkConfig, ...]:
    """Apply the matrix flags (field -> listed values): a field whose flag keeps (``--models``) keeps the
    configs with one of its values; every other field is set to each of its values (lists are crossed). A model
    of yours named in ``--models`` (``path/file.py:function``) that the suite does not name runs with the suite's
    ``defaults``, crossed with the other flags like the rest; one the suite names keeps the suite's own
    configuration of it. Host dependent settings (``threads = "auto"``) are resolved for this host."""
    configs = list(configs)
    given = {name: values for name, values in flags.items() if values}
    script_args = (given.pop("script_args", None) or [""])[0]  # a script's arguments go to the scripts only
    named = {config.model for config in configs}
    yours = [name for name in given.get("model") or () if kind_of(name).yours and name not in named]
    if yours:
        given["model"] = [name for name in given["model"] if name not in yours]
        kept = list(narrow(configs, {"model": given["model"]})) if given["model"] else []
        points = (
            {**script_defaults(defaults), "model": name, "script_args": script_args}
            if kind_of(name) is Kind.SCRIPT
            else {**defaults, "model": name, **_loop_of(name, given, defaults)} for name in yours
        )  # fmt: skip
        configs = kept + list(build_configs(points, "--models"))
        given.pop("model")
    for name in [n for n in given if ROLES[n].keeps]:
        present = {getattr(c, name) for c in configs}
        missing = [v for v in given[name] if v not in present]
        if missing:
            have = ", ".join(sorted(map(str, present)))
            raise SuiteError(f"{ROLES[name].flag}: {', '.join(map(str, missing))} not in this suite (it has {have})")
        kept = given.pop(name)
        configs = [c for c in configs if getattr(c, name) in kept]
    keys = list(given)
    points = []
    for config in configs:
        values = _of_script(given) if config.workload is Kind.SCRIPT else given
        for combo in itertools.product(*(values[k] for k in keys)):
            points.append({**config.__dict__, **dict(zip(keys, combo))})
    # What runs, on this host: ``threads = "auto"`` becomes the setting it picks (and the series key holds it).
    return tuple(dict.fromkeys(resolve(c) for c in build_configs(points, "command line")))
