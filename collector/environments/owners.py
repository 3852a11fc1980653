"""Folders a check makes and removes on its way out, named with its process id, so that the next check removes
those a killed one left behind (a SIGKILL runs no cleanup): a worktree, a temporary folder, a partial results
folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from stepwatch.collector.store import files

MARK = ".stepwatch-check-"  # a results folder being written holds MARK + the writer's pid until it is done


def alive(pid: str) -> bool:
    """Whether process ``pid`` still runs (an unreadable pid is taken as running: nothing is removed for it)."""
    return not pid.isdigit() or files.alive(int(pid))


def owner_alive(path: Path, prefix: str) -> bool:
    """Whether the process whose pid follows ``prefix`` in ``path``'s name still runs."""
    return alive(path.name[len(prefix) :].split("-")[0])


def prefix(name: str) -> str:
    """The start of a folder's name that says it is this process's: ``name`` and the pid."""
    return f"{name}{os.getpid()}-"


def remove_orphans(parent: Path, name: str) -> list[Path]:
    """Remove the folders in ``parent`` named ``name`` + a pid whose process is gone; returns them."""
    if not parent.is_dir():
        return []
    gone = [p for p in parent.glob(f"{name}*") if p.is_dir() and not owner_alive(p, name)]
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone


def mark(folder: Path) -> Path:
    """Mark ``folder`` as being written by this process; the marker, which the writer unlinks when it is done."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / f"{MARK}{os.getpid()}"
    marker.touch()
    return marker


def remove_partial(parent: Path) -> list[Path]:
    """Remove the folders in ``parent`` still marked by a process that is gone (killed while writing); returns them."""
    if not parent.is_dir():
        return []
    partial = [p for p in parent.iterdir() if p.is_dir()
               and any(not alive(m.name[len(MARK):]) for m in p.glob(f"{MARK}*"))]  # fmt: skip
    for path in partial:
        shutil.rmtree(path, ignore_errors=True)
    return partial
