"""A pull request's code, measured: the commit it branched from (the merge base) against its head, each checked
out in a folder of its own (``environments.worktrees``) and run by the same interpreter, their trials interleaved
(``workflows.check``): counters compared exactly, timings with their intervals.

Only the workloads of the team's own code whose code differs between the two commits run (``trainers/code.py``: a
comment, a docstring or layout is no difference); when none does and no pin file changed, nothing runs. A workload
the head adds has nothing to be compared with, one it removes nothing to measure: both are reported, neither fails.
When pin files changed too, each side is built from its own commit's pins (the upgrade check's environments,
``workflows.package_sets``), every workload runs, and the report says that code and packages changed together.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.environments import pinfiles, virtualenvs, worktrees
from stepwatch.collector.environments.worktrees import WORKING_TREE, RepositoryError
from stepwatch.collector.project import identity
from stepwatch.collector.workflows import package_sets
from stepwatch.collector.workflows.hooks import Hooks
from stepwatch.trainers import code
from stepwatch.trainers.user import UserModelError
from stepwatch.trainers.workload import code_of, source_of

RESULTS_DIR = Path("data/code-check")  # one folder per check: its sides' parquet and the report
STORE = Path("data/code-check.duckdb")  # checks are ingested here, never into the nightly history
# What a workload is between the two commits (or, LEFT_OUT, one of the suite's that --models left out).
CHANGED, UNCHANGED, NEW, GONE, BUNDLED, LEFT_OUT = "changed", "unchanged", "new", "gone", "bundled", "left out"


@dataclass(frozen=True)
class Commits:
    """The two commits a check compares, in the repository a command runs in."""

    repo: Path  # the repository's top folder
    project: Path  # the folder commands run in, relative to the top (the same in every checkout)
    base: str  # the merge base's commit
    head: str  # the head's commit, or WORKING_TREE
    base_name: str  # how the report names them
    head_name: str


def commits(where: Path, base: str | None, head: str | None) -> Commits:
    """The merge base of ``base`` (default: the default branch) and ``head`` (default HEAD; ``.``: the working
    tree with its edits), and the head; one line (RepositoryError) for a ref that names no commit, no merge base, or
    edits the check of a commit would leave out."""
    repo = worktrees.top(where)
    edits = worktrees.edited(repo)
    if head is None and edits:
        raise RepositoryError(
            f"the working tree has uncommitted changes to {len(edits)} tracked file(s) ({edits[0]}): commit them, "
            "or measure the working tree as it is with --head ."
        )
    target = base or worktrees.default_branch(repo)
    head_ref = head or "HEAD"
    tip = worktrees.commit_of(repo, "HEAD" if head_ref == WORKING_TREE else head_ref)
    start = worktrees.merge_base(repo, target, tip)
    project = where.resolve().relative_to(repo.resolve())
    base_name = f"merge base {start[:12]} of {_shown(target)}"
    if head_ref == WORKING_TREE:
        head_name = f"the working tree ({len(edits)} edited file(s) over {tip[:12]})"
        return Commits(repo, project, start, WORKING_TREE, base_name, head_name)
    head_name = tip[:12] if tip.startswith(head_ref) else f"{head_ref} {tip[:12]}"
    return Commits(repo, project, start, tip, base_name, head_name)


def _shown(ref: str) -> str:
    """A ref as a report names it: a commit by its first 12 digits, a branch or tag by its name."""
    return ref[:12] if re.fullmatch(r"[0-9a-f]{13,40}", ref) else ref


@dataclass(frozen=True)
class Workload:
    """One config's workload on both commits: its code's digest on each (None: not there) and the files of it
    that differ."""

    config: BenchmarkConfig
    base: str | None
    head: str | None
    files: tuple[str, ...] = ()
    left_out: bool = False  # in the suite, but not among the models the check was narrowed to

    @property
    def state(self) -> str:
        if self.left_out:
            return LEFT_OUT
        if source_of(self.config.model) is None:
            return BUNDLED
        if self.base is None:
            return NEW if self.head is not None else GONE
        if self.head is None:
            return GONE
        return UNCHANGED if self.base == self.head else CHANGED


def _code(name: str, folder: Path) -> tuple[list[Path], str] | None:
    """A workload's files and digest in ``folder``; None where it is not there. A file that is there but broken (no
    such function, a syntax error) is its own bytes: it runs, and its trials fail naming it."""
    try:
        return code_of(name, folder)
    except UserModelError:
        entry = folder / name.rpartition(":")[0] if ":" in name else folder / name
        if entry.is_file():
            return [entry.resolve()], code.digest([entry.resolve()], folder)
        return None


def _compared(model: str, base: Path, head: Path) -> tuple[str | None, str | None, tuple[str, ...]]:
    """A workload's digest in each checkout, and the files of its code whose own digest differs between them."""
    a, b = _code(model, base), _code(model, head)
    sides = [(folder, found[0]) for folder, found in ((base, a), (head, b)) if found]
    names = dict.fromkeys(str(path.relative_to(folder.resolve())) for folder, paths in sides for path in paths)
    differ = tuple(name for name in names if _file_digest(base / name, base) != _file_digest(head / name, head))
    return (a[1] if a else None, b[1] if b else None, differ)


def _file_digest(path: Path, folder: Path) -> str | None:
    return code.digest([path.resolve()], folder) if path.is_file() else None


def workloads(configs: list[BenchmarkConfig], base: Path, head: Path) -> list[Workload]:
    """Each config's workload in the two checkouts (folders of the project in each)."""
    compared = {model: _compared(model, base, head) for model in dict.fromkeys(c.model for c in configs)}
    return [Workload(config, *compared[config.model]) for config in configs]


def left_out(suite: Sequence[BenchmarkConfig], configs: Sequence[BenchmarkConfig]) -> list[Workload]:
    """The team's own models and scripts the suite names that the narrowing (``--models``, the ``models``
    setting) left out: never checked, so said, one per model."""
    kept = {config.model for config in configs}
    dropped = {c.model: c for c in suite if c.model not in kept and source_of(c.model) is not None}
    return [Workload(config, None, None, left_out=True) for config in dropped.values()]


def pins_changed(commits: Commits) -> bool:
    """Whether a pin file (``pinfiles.PIN_FILES``) differs between the two commits."""
    changed = worktrees.changed_files(commits.repo, commits.base, commits.head)
    return bool(pinfiles.matching(changed, pinfiles.PIN_FILES))


def _commit_identity(commits: Commits, commit: str) -> dict[str, Any]:
    """What a side's rows say of the code they ran: the repository, the side's commit, and (for the working tree)
    whether it had edits. Never the CI's own commit (in a pull request, GitHub's merge commit)."""
    here = identity(commits.repo)
    if commit == WORKING_TREE:
        return {**here, "project_commit": worktrees.commit_of(commits.repo, "HEAD"), "project_dirty": True}
    return {**here, "project_commit": commit, "project_dirty": False}


@dataclass
class Sides:
    """The check's sides (baseline: the merge base, candidate: the head, with ``aa`` a second checkout of the
    merge base) and what they were built from."""

    envs: dict[str, virtualenvs.Environment]
    pins: package_sets.Sides | None = None  # when pin files changed: each side's own package set


def _head_source(commits: Commits) -> pinfiles.Source:
    if commits.head != WORKING_TREE:
        return pinfiles.at_commit(commits.repo, commits.head, pinfiles.PIN_FILES, "head")
    listed = worktrees.git(commits.repo, "ls-files").splitlines()

    def read(path: str) -> str | None:
        file = commits.repo / path
        return file.read_text() if file.is_file() else None

    return pinfiles.Source("the working tree", tuple(pinfiles.matching(listed, pinfiles.PIN_FILES)), read)


@contextlib.contextmanager
def checked_out(commits: Commits, aa: bool) -> Iterator[dict[str, Path]]:
    """side -> the project's folder in its checkout of its commit, removed on the way out."""
    wanted = {"baseline": commits.base, "candidate": commits.head}
    if aa:
        wanted[virtualenvs.AA] = commits.base
    with worktrees.checked_out(commits.repo, wanted) as tops:
        yield {side: top / commits.project for side, top in tops.items()}


def sides(
    commits: Commits,
    folders: dict[str, Path],
    packages: bool,
    reuse: bool,
    pip_args: tuple[str, ...],
    hooks: Hooks,
) -> Sides:
    """Every side's environment in its folder: this interpreter for all of them, or with ``packages`` (pin files
    changed) each side's own, built from its commit's pins (the A/A's separately, from the merge base's)."""
    projects = {side: _commit_identity(commits, commits.head if side == "candidate" else commits.base)
                for side in folders}  # fmt: skip
    if not packages:
        envs = {side: virtualenvs.Environment.here(side, folder, projects[side]) for side, folder in folders.items()}
        return Sides(envs)
    base = pinfiles.at_commit(commits.repo, commits.base, pinfiles.PIN_FILES, "merge base")
    pins = package_sets.derive_both(base, _head_source(commits), reuse, pip_args, hooks.say)
    requirements = {"baseline": pins.baseline.requirements, "candidate": pins.candidate.requirements}
    requirements[virtualenvs.AA] = pins.baseline.requirements
    envs = {}
    for side, folder in folders.items():
        built = virtualenvs.ensure(
            side, requirements[side], reuse, pip_args, hooks.say, copy=int(side == virtualenvs.AA)
        )
        envs[side] = virtualenvs.Environment(
            side, built.requirements, built.path, built.cached, folder=folder, project=projects[side]
        )
    return Sides(envs, pins)
