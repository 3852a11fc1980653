"""The code a model or script of yours runs, as a change of it is judged: its file and the files of the folder it runs
in that it imports (followed through ``import`` and ``from ... import`` at any depth, read, never run), and a digest
of what they do that a comment, a blank line or a docstring leaves unchanged.

``stepwatch code-check`` asks this of both commits of a pull request: a workload whose digest is the same on both
runs the same code, and is not measured again. A file a model reads without importing it (a configuration, a
vocabulary) is not followed: its change is not seen here.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from pathlib import Path


def imported_files(entry: Path, folder: Path) -> list[Path]:
    """``entry`` and every ``.py`` file under ``folder`` it imports, directly or through another such file, in the
    order they were found. A module is looked for where the trial finds it: beside the file that imports it (a
    script's or a model file's own folder is first on its path) and at the top of ``folder`` (where the trial runs);
    a relative import in the importing file's package. Imports that resolve to nothing there (the standard library,
    installed packages) are not followed."""
    folder = folder.resolve()
    found: list[Path] = []
    queue = [entry.resolve()]
    while queue:
        path = queue.pop(0)
        if path in found:
            continue
        found.append(path)
        for module, level in _imports(path):
            base = [_package_dir(path, level)] if level else [path.parent, folder]
            for candidate in _candidates(module, base):
                if candidate.is_relative_to(folder) and candidate not in found:
                    queue.append(candidate)
    return found


def _imports(path: Path) -> Iterable[tuple[str, int]]:
    """(module, level) of every import in the file; for ``from m import a``, ``m`` and ``m.a`` (``a`` may be a
    submodule)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            out.append((module, node.level))
            out += [(f"{module}.{alias.name}".strip("."), node.level) for alias in node.names if alias.name != "*"]
    return out


def _package_dir(path: Path, level: int) -> Path:
    folder = path.parent
    for _ in range(level - 1):
        folder = folder.parent
    return folder


def _candidates(module: str, bases: list[Path]) -> list[Path]:
    """The files ``module`` is under each of ``bases``: its own (``a/b.py`` or ``a/b/__init__.py``) and its
    packages' ``__init__.py``."""
    parts = [p for p in module.split(".") if p]
    out = []
    for base in bases:
        for depth in range(1, len(parts) + 1):
            stem = base.joinpath(*parts[:depth])
            for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
                if candidate.is_file():
                    out.append(candidate.resolve())
        if not parts:  # ``from . import x`` names the package itself
            init = base / "__init__.py"
            if init.is_file():
                out.append(init.resolve())
    return out


def _normalized(source: bytes) -> str:
    """What a file does: its syntax tree without comments, layout or docstrings; its bytes where it does not parse
    (an edit that breaks it is a change)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source.hex()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


def digest(files: list[Path], folder: Path) -> str:
    """The first 16 hex digits of a SHA-256 over each file's path under ``folder`` and what it does."""
    hashed = hashlib.sha256()
    for path in sorted(files):
        name = path.relative_to(folder.resolve()) if path.is_relative_to(folder.resolve()) else path
        hashed.update(str(name).encode() + b"\0" + _normalized(path.read_bytes()).encode() + b"\0")
    return hashed.hexdigest()[:16]
