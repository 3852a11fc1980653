"""What a benchmark runs, decided once, from the name a suite file, the settings or the command line give it:

- a model stepwatch ships (``resnet50``, ``bert``...: ``trainers/__init__.py``),
- a model of yours, a function that returns it (``path/file.py:function`` or ``package.module:function``:
  ``trainers/user.py``),
- a training script of yours, named by its path (``path/train.py``: ``trainers/script.py``).

Everything else asks a config's ``workload`` (or ``kind_of`` a name it reads), never the name's spelling; the trial
process runs each kind in one place (``collector/trial/process.py``'s ``RUNS``). A new kind (a commit, a container) is
a member here, its ``kind_of`` rule, its source and its run.
"""

from __future__ import annotations

import contextlib
from enum import StrEnum
from pathlib import Path

from stepwatch.trainers import code
from stepwatch.trainers.script import Script
from stepwatch.trainers.user import Reference


class Kind(StrEnum):
    BUNDLED = "bundled"
    FUNCTION = "function"
    SCRIPT = "script"
    IMPORTED = "imported"  # a result another tool measured: stepwatch only reads it (collector/imports)

    @property
    def yours(self) -> bool:
        """Code of the user's: hashed into every row, named in its failures, run with the suite's defaults."""
        return self not in (Kind.BUNDLED, Kind.IMPORTED)


def kind_of(name: str) -> Kind:
    """The kind of workload a model name is: a ``where:function`` is a model of yours, another ``.py`` path a
    script, anything else a bundled model's name."""
    if ":" in name:
        return Kind.FUNCTION
    return Kind.SCRIPT if name.endswith(".py") else Kind.BUNDLED


def source_of(name: str) -> Script | Reference | None:
    """The code of yours a workload runs (its ``check()`` and ``source_hash()``); None for a bundled model. A model
    of yours named wrongly raises UserModelError."""
    kind = kind_of(name)
    if kind is Kind.SCRIPT:
        return Script(name)
    return Reference.parse(name) if kind is Kind.FUNCTION else None


def code_of(name: str, folder: Path) -> tuple[list[Path], str] | None:
    """The files of a workload of yours as it runs in ``folder`` (where its path is read from: a commit's checkout),
    and their digest (``trainers/code.py``); None for a bundled model (stepwatch's code). Raises UserModelError when
    the workload is not there (a model a commit does not have)."""
    source = source_of(name)
    if source is None:
        return None
    with contextlib.chdir(folder):
        entry = source.check()
        files = code.imported_files(entry, folder)
    return files, code.digest(files, folder)
