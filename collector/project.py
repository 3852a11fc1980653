"""The user's project: its settings (``[tool.stepwatch]`` in its pyproject.toml, or a ``stepwatch.toml``) and the
repository and commit a command runs in.

The project is the nearest directory, from where a command runs upwards, that holds a ``stepwatch.toml`` or a
pyproject.toml with a ``[tool.stepwatch]`` table (as pytest finds its rootdir). Its settings are the long option
names of the commands, without the dashes (``models``, ``keras-backend``, ``xla``, ``trials``, ``db``,
``thresholds``, ``prices``, ...), and ``results`` (where ``run`` writes and what ``ingest`` reads): each is the
default of that option in every command that has it, and a flag given on the command line wins. Paths in it are
relative to the project's directory. The CLI resolves them once, at the door (``collector.cli``); nothing below
it reads this file again.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from stepwatch.collector.errors import UsageError

CONFIG_FILE = "stepwatch.toml"
PYPROJECT = "pyproject.toml"
# Settings whose values are paths (relative to the project's directory). A model's ``path/file.py:function`` is
# not one of them: it names the model in every row, so it stays as written (run commands from the project's root).
PATH_SETTINGS = frozenset({"results", "db", "thresholds", "prices", "calibration", "compile_cache", "suite"})


# The stepwatch extra that installs a Keras backend's build on a device (a CPU's is named as the backend; PyPI's torch
# for Linux is its CUDA build already).
GPU_EXTRAS = {"tensorflow": "tensorflow-cuda", "jax": "jax-cuda12", "torch": "torch"}
TPU_EXTRA = "jax-tpu"  # JAX with libtpu: plain jax finds no TPU


def extras_for(backends: list[str], devices: list[str]) -> list[str]:
    """The stepwatch extras that install these Keras backends' builds for these devices, in order, once each."""
    found = []
    for device in devices or ["cpu"]:
        for backend in backends:
            found.append(TPU_EXTRA if device == "tpu" else GPU_EXTRAS[backend] if device == "gpu" else backend)
    return list(dict.fromkeys(found))


class ProjectError(UsageError):
    """A project settings file that cannot be used, in one line naming it."""


@dataclass(frozen=True)
class Project:
    """The settings of the project a command runs in (empty where there is none) and where they came from."""

    root: Path | None = None
    source: Path | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def find(start: Path | None = None) -> Project:
        """The project of the directory ``start`` (default: the current one) or of the nearest above it."""
        here = (start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            own = folder / CONFIG_FILE
            if own.is_file():
                return Project(folder, own, _settings(_read(own), own, ""))
            pyproject = folder / PYPROJECT
            if pyproject.is_file():
                table = _read(pyproject).get("tool", {}).get("stepwatch")
                if table is not None:
                    return Project(folder, pyproject, _settings(table, pyproject, "[tool.stepwatch]"))
        return Project()

    def resolved(self, name: str, value: Any) -> Any:
        """A setting's value with its paths made absolute against the project's directory."""
        assert self.root is not None
        if name in PATH_SETTINGS and isinstance(value, str) and not _is_uri_or_name(name, value):
            return str((self.root / value).resolve())
        return value


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ProjectError(f"{path}: not valid TOML: {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ProjectError(f"{path}: cannot read: {error}") from None


def _settings(table: Any, path: Path, where: str) -> dict[str, Any]:
    """The settings of ``table`` (the file's top level, or its ``where`` table), their names with underscores."""
    at = f"{path}: {where}: " if where else f"{path}: "
    if not isinstance(table, dict):
        raise ProjectError(f"{at}must be a table of settings")
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            raise ProjectError(f"{at}{key!r} is a table; settings are plain values or lists")
        out[key.replace("-", "_")] = value
    return out


def _is_uri_or_name(name: str, value: str) -> bool:
    """An object-storage URI (``s3://``), or a bundled suite's name: not a path to resolve."""
    if "://" in value:
        return True
    return name == "suite" and not value.endswith(".toml") and "/" not in value


def version() -> str:
    """The installed stepwatch's version."""
    try:
        return metadata.version("stepwatch")
    except metadata.PackageNotFoundError:  # the source on a path, not installed
        return "unknown"


# The repository and commit a command ran in: recorded in every row beside stepwatch's own version.
PROJECT_COLUMNS = ("project_repository", "project_commit", "project_dirty")


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (subprocess.SubprocessError, OSError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _repository_name(url: str) -> str:
    """``owner/name`` of a remote URL (https, ssh or scp-like), never its credentials; else the URL's path."""
    if "://" in url:
        path = urlsplit(url).path
    else:  # git@host:owner/name.git
        path = url.split(":", 1)[-1]
    path = re.sub(r"\.git$", "", path.strip("/"))
    return "/".join(path.split("/")[-2:]) if path else ""


def identity(where: Path | None = None) -> dict[str, Any]:
    """The repository, commit and dirtiness of the project a command runs in: ``GITHUB_REPOSITORY`` and
    ``GITHUB_SHA`` in GitHub Actions, else ``git`` in ``where`` (default: the current directory); None where
    there is no repository."""
    root = (where or Path.cwd()).resolve()
    top = _git(root, "rev-parse", "--show-toplevel")
    status = _git(root, "status", "--porcelain", "--untracked-files=no") if top else None
    dirty = None if status is None else bool(status)
    if os.environ.get("GITHUB_ACTIONS") == "true" and os.environ.get("GITHUB_SHA"):
        return {
            "project_repository": os.environ.get("GITHUB_REPOSITORY") or None,
            "project_commit": os.environ["GITHUB_SHA"],
            "project_dirty": dirty,
        }
    if top is None:
        return dict.fromkeys(PROJECT_COLUMNS)
    remote = _git(root, "config", "--get", "remote.origin.url")
    return {
        "project_repository": (_repository_name(remote) if remote else "") or Path(top).name,
        "project_commit": _git(root, "rev-parse", "HEAD"),  # None in a repository without a commit yet
        "project_dirty": dirty,
    }
