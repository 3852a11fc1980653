"""The package set a repository pins, read from its files at a git ref (or from files on disk): what a pull
request's two sides are, for ``stepwatch package-sets`` and the upgrade-pr workflow.

A side is made of the files that match ``PIN_FILES`` (GitHub's path-filter globs, so the workflow's
``paths:`` filter and this list are the same):

- requirement files (``requirements*.txt``, ``requirements/*.txt``, and what they include with ``-r``) and
  ``pyproject.toml``'s ``[project] dependencies`` (names of ``[tool.poetry.dependencies]``) give requirements;
- constraint files (``constraints*.txt``, ``-c``) and lock files (``uv.lock``, ``poetry.lock``, ``pdm.lock``,
  ``Pipfile.lock``) give constraints: pins that apply to a package only when the requirements install it, as
  pip's ``-c`` does. A lock file lists every platform's packages (pywin32 beside the CUDA wheels), so it is not
  installed whole.

Markers are evaluated for this interpreter. One package named twice has its specifiers intersected.
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

# The files that pin the stack, as GitHub path filters (``*`` stays inside a folder, ``**`` spans folders).
PIN_FILES = (
    "requirements*.txt",
    "requirements/*.txt",
    "constraints*.txt",
    "pyproject.toml",
    "uv.lock",
    "poetry.lock",
    "pdm.lock",
    "Pipfile.lock",
)
LOCK_FILES = ("uv.lock", "poetry.lock", "pdm.lock", "Pipfile.lock")
CONSTRAINT_FILES = ("constraints*.txt",)

Reader = Callable[[str], "str | None"]  # a repository path -> its text, None where the side lacks it


class PinFileError(ValueError):
    """A pin file that cannot be read as one, in one line naming it."""


def matches(path: str, pattern: str) -> bool:
    """Whether a repository path matches a GitHub path filter: ``*`` and ``?`` within one folder name, ``**``
    any number of folders."""

    def match(parts: list[str], globs: list[str]) -> bool:
        if not globs:
            return not parts
        if globs[0] == "**":
            return any(match(parts[i:], globs[1:]) for i in range(len(parts) + 1))
        return bool(parts) and fnmatch.fnmatchcase(parts[0], globs[0]) and match(parts[1:], globs[1:])

    return match(PurePosixPath(path).parts, pattern.strip("/").split("/"))


def matching(paths: Iterable[str], patterns: Iterable[str]) -> list[str]:
    patterns = tuple(patterns)
    return sorted(p for p in paths if any(matches(p, pattern) for pattern in patterns))


# --- Where a side's files come from --------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


@dataclass(frozen=True)
class Source:
    """One side's files: their paths and how to read them (a git commit, or a folder on disk)."""

    name: str  # how the output names the side's origin: a commit, or the file given
    paths: tuple[str, ...]
    read: Reader


def at_commit(repo: Path, commit: str, patterns: Iterable[str], what: str = "") -> Source:
    """The pin files of a commit of ``repo``, read with git (no checkout); ``what`` names the commit's role."""
    listed = _git(repo, "ls-tree", "-r", "--name-only", commit)
    if listed.returncode != 0:
        raise PinFileError(f"cannot list the files of {commit} in {repo}: {listed.stderr.strip()[:200]}")

    def read(path: str) -> str | None:
        shown = _git(repo, "show", f"{commit}:{path}")
        return shown.stdout if shown.returncode == 0 else None

    return Source(f"{what} {commit[:12]}".strip(), tuple(matching(listed.stdout.splitlines(), patterns)), read)


def on_disk(files: Iterable[str]) -> Source:
    """Files given by path; what they include (``-r``, ``-c``) is read relative to them."""
    files = tuple(files)
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        raise PinFileError(f"{missing[0]} does not exist")

    def read(path: str) -> str | None:
        return Path(path).read_text() if Path(path).is_file() else None

    return Source(", ".join(files), files, read)


# --- What the files pin --------------------------------------------------------------------------------------


@dataclass
class PackageSet:
    """A side: its requirements and constraints (canonical name -> requirement), and the files they came from."""

    requirements: dict[str, Requirement] = field(default_factory=dict)
    constraints: dict[str, Requirement] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def add(self, into: dict[str, Requirement], requirement: Requirement) -> None:
        if requirement.marker is not None and not requirement.marker.evaluate():
            return
        requirement.marker = None
        name = canonicalize_name(requirement.name)
        requirement.name = name
        if name in into:
            known = into[name]
            known.specifier = SpecifierSet(str(known.specifier & requirement.specifier))
            known.extras |= requirement.extras
        else:
            into[name] = requirement


def _requirement(text: str, path: str) -> Requirement:
    try:
        requirement = Requirement(text)
    except InvalidRequirement as error:
        raise PinFileError(f"{path}: {text!r} is not a pip requirement ({str(error).splitlines()[0]})") from None
    if requirement.url:
        raise PinFileError(f"{path}: {text!r} installs from a URL; a package set pins versions from an index")
    return requirement


def _logical_lines(text: str) -> list[str]:
    """A requirements file's lines, continuations joined and comments dropped."""
    lines, pending = [], ""
    for raw in text.splitlines():
        line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        if line:
            lines.append(line)
    return lines


def _requirements_file(path: str, text: str, into: PackageSet, read: Reader, constraint: bool, seen: set[str]) -> None:
    folder = PurePosixPath(path).parent
    for line in _logical_lines(text):
        option, _, rest = line.partition(" ")
        if option.startswith("-") and "=" in option and not rest:
            option, _, rest = option.partition("=")
        if option in ("-r", "--requirement", "-c", "--constraint"):
            include = str(folder / rest.strip()) if str(folder) != "." else rest.strip()
            _include(include, into, read, constraint or option in ("-c", "--constraint"), seen, path)
        elif line.startswith("-"):
            continue  # index and install options (-i, --extra-index-url, -e .): the environments take --pip-arg
        else:
            requirement = _requirement(line.split(" --")[0].strip(), path)  # less per-line options (--hash=...)
            into.add(into.constraints if constraint else into.requirements, requirement)


def _include(path: str, into: PackageSet, read: Reader, constraint: bool, seen: set[str], by: str) -> None:
    if path in seen:
        return
    seen.add(path)
    text = read(path)
    if text is None:
        raise PinFileError(f"{by} includes {path}, which does not exist")
    into.files.append(path)
    _requirements_file(path, text, into, read, constraint, seen)


def _toml(path: str, text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise PinFileError(f"{path} is not valid TOML ({error})") from None


def _pyproject(path: str, text: str, into: PackageSet) -> None:
    data = _toml(path, text)
    for line in data.get("project", {}).get("dependencies", []) or []:
        into.add(into.requirements, _requirement(line, path))
    poetry = data.get("tool", {}).get("poetry", {}).get("dependencies", {})
    for name in poetry:  # poetry's own version syntax: the name is required, its version comes from poetry.lock
        if name.lower() != "python":
            into.add(into.requirements, _requirement(name, path))


def _lock(path: str, text: str, into: PackageSet) -> None:
    """Every version a lock file pins, as a constraint (packages from a path, a URL or the project itself
    are not pinned from an index, so they are left out)."""
    if PurePosixPath(path).name == "Pipfile.lock":
        try:
            default = json.loads(text).get("default", {})
        except (json.JSONDecodeError, AttributeError):
            raise PinFileError(f"{path} is not a Pipfile.lock (not a JSON object)") from None
        pins = [(name, entry.get("version", "")) for name, entry in default.items() if isinstance(entry, dict)]
    else:
        packages = _toml(path, text).get("package", [])
        local = ("editable", "virtual", "directory", "path", "git", "url")
        pins = [
            (p.get("name", ""), "==" + str(p["version"]))
            for p in packages
            if isinstance(p, dict) and "version" in p and not (set(p.get("source") or {}) & set(local))
        ]
    for name, version in pins:
        if name and version.startswith("=="):
            into.add(into.constraints, _requirement(f"{name}{version}", path))


def read_set(source: Source) -> PackageSet:
    """What a side's pin files require and constrain."""
    into, seen = PackageSet(), set(source.paths)
    for path in source.paths:
        text = source.read(path)
        if text is None:
            raise PinFileError(f"{path} cannot be read")
        into.files.append(path)
        name = PurePosixPath(path).name
        if name == "pyproject.toml":
            _pyproject(path, text, into)
        elif name in LOCK_FILES:
            _lock(path, text, into)
        else:
            constraint = any(fnmatch.fnmatchcase(name, pattern) for pattern in CONSTRAINT_FILES)
            _requirements_file(path, text, into, source.read, constraint, seen)
    return into


def side_text(requirements: Iterable[Requirement]) -> tuple[str, ...]:
    """Requirements as an upgrade-check side takes them: one token each, sorted by name."""
    return tuple(sorted(str(r) for r in requirements))
