"""A pull request's two package sets, derived from its pin files: the baseline from the commit it branched
from (the merge base), the candidate from its head, and what pip resolves each to. This is what the
upgrade-pr workflow checks, and how it knows when an edit of the pin files changes nothing installed.

Each side is resolved as its environment will be built (``virtualenvs.environment_requirements``) by the
resolver ``stepwatch bisect`` uses (``packages.Resolver``: ``pip install --dry-run --report``), in two
passes: the requirements (each narrowed by a constraint or lock pin of the same name), then again with the
constraints of every other package the first pass installs, as pip applies ``-c``. What differs between the
two resolutions, every package whose version moves, appears or goes, is ``packages.changes``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from stepwatch.collector.environments import packages, pinfiles, virtualenvs, worktrees
from stepwatch.collector.environments.pinfiles import PackageSet, PinFileError, Source


@dataclass(frozen=True)
class Side:
    """One side: where its files come from, the requirements upgrade-check gets, what they resolve to."""

    side: str
    origin: str
    files: tuple[str, ...]
    requirements: tuple[str, ...]
    resolved: dict[str, str]  # canonical name -> version pip would install
    constraints_applied: int
    constraints_unused: int  # pins of packages the requirements do not install (other platforms', dev tools)


@dataclass(frozen=True)
class Sides:
    baseline: Side
    candidate: Side
    changes: list[packages.Change]

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def _narrowed(found: PackageSet, names: set[str]) -> tuple[str, ...]:
    """The requirements, each intersected with the constraint of its name, plus the constraints of ``names``."""
    out = []
    for name, requirement in found.requirements.items():
        if name in found.constraints:
            requirement = Requirement(str(requirement))
            requirement.specifier &= found.constraints[name].specifier
        out.append(requirement)
    out += [found.constraints[n] for n in sorted(names) if n not in found.requirements]
    return pinfiles.side_text(out)


def derive(side: str, source: Source, resolver: packages.Resolver, reuse: bool) -> Side:
    """A side's requirements and resolution; PinFileError or UpgradeError (one line) when it has none or pip
    cannot resolve them."""
    found = pinfiles.read_set(source)
    if not found.requirements:
        listed = ", ".join(found.files) or "no pin file"
        raise PinFileError(f"the {side} ({source.name}) requires nothing: {listed} matched")

    def resolve(requirements: tuple[str, ...]) -> dict[str, str]:
        answer = resolver.resolve(tuple(virtualenvs.environment_requirements(requirements, reuse)))
        if not answer.ok:
            raise virtualenvs.UpgradeError(f"the {side}'s requirements do not resolve ({source.name}): {answer.reason}")
        return answer.installs

    requirements = _narrowed(found, set())
    resolved = resolve(requirements)
    transitive = {n for n in resolved if n in found.constraints and n not in found.requirements}
    if transitive:
        requirements = _narrowed(found, transitive)
        resolved = resolve(requirements)
    applied = len(transitive) + len(found.requirements.keys() & found.constraints.keys())
    return Side(side, source.name, tuple(found.files), requirements, resolved, applied,
                len(found.constraints) - applied)  # fmt: skip


def derive_both(
    baseline: Source,
    candidate: Source,
    reuse: bool = False,
    pip_args: tuple[str, ...] = (),
    log: Callable[[str], None] = print,
) -> Sides:
    resolver = packages.Resolver(reuse, pip_args, log)
    a = derive("baseline", baseline, resolver, reuse)
    b = derive("candidate", candidate, resolver, reuse)
    return Sides(a, b, packages.changes(a.resolved, b.resolved))


def of_refs(repo: Path, base: str, head: str, patterns: tuple[str, ...]) -> tuple[Source, Source]:
    """The baseline at the merge base of ``base`` and ``head``, the candidate at ``head``."""
    start, tip = worktrees.merge_base(repo, base, head), worktrees.commit_of(repo, head)
    return pinfiles.at_commit(repo, start, patterns, "merge base"), pinfiles.at_commit(repo, tip, patterns, "head")


def same_files(baseline: Source, candidate: Source) -> bool:
    """Whether both sides have the same pin files with the same text: nothing to resolve, nothing to check."""
    return baseline.paths == candidate.paths and all(baseline.read(p) == candidate.read(p) for p in baseline.paths)
