"""What differs between two environments, and which of those changes pip can install without which: the
packages side of ``stepwatch bisect`` (its search is ``collector.workflows.search``).

The two ends are upgrade-check's sides (their cached environments). What differs between them is read from
their ``pip freeze``: every package whose version moves, appears or goes, not only what was pinned. An
intermediate environment is the good side's freeze with some of those changes applied, every package pinned.

Not every subset can be installed. pip's resolver says which changes need which: for each change it resolves
the good side plus that change (``pip install --dry-run --report``) and, while that fails, adds the changes the
resolver names (its conflict, or a removed package something still requires, or a new one a change brings
in). Changes that need each other form one group (a framework and its tensorflow-text); a change that needs
another, but not back, is ordered after it (tensorflow 2.21 needs an older h5py). In that order every prefix
of the groups can be installed, and the search is a binary search over prefixes: the shortest prefix whose
environment reproduces the regression ends with the culprit group. Its effect alone is then measured on its
own (with only what it needs), so the report says what it does by itself, not only in company.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from stepwatch.collector.environments import virtualenvs

# Never pinned: the installer's own tools (a new environment brings its own, and pip upgrades them where a
# package needs it), and stepwatch (the environments import this checkout).
UNPINNED = frozenset({"pip", "setuptools", "wheel", "stepwatch"})


@dataclass(frozen=True, order=True)
class Change:
    """One package's move between the good and the bad environment; None where a side lacks it."""

    name: str
    good: str | None
    bad: str | None

    def text(self) -> str:
        if self.good is None:
            return f"{self.name} {self.bad} (added)"
        if self.bad is None:
            return f"{self.name} {self.good} (removed)"
        return f"{self.name} {self.good} -> {self.bad}"


def changes(good: dict[str, str], bad: dict[str, str]) -> list[Change]:
    """Every package whose version differs between two ``pip freeze`` readings (name -> version)."""
    names = sorted((good.keys() | bad.keys()) - UNPINNED)
    return [Change(n, good.get(n), bad.get(n)) for n in names if good.get(n) != bad.get(n)]


def pins(good: dict[str, str], applied: Iterable[Change], own: set[str] | None = None) -> tuple[str, ...]:
    """The good side's packages, each pinned, with ``applied`` moved to their bad versions (or gone). With
    ``own``, only those of the good side's packages (an environment that reuses another's packages pins what
    it installed itself, not what it reuses)."""
    versions = {n: v for n, v in good.items() if n not in UNPINNED and (own is None or n in own)}
    for change in applied:
        if change.bad is None:
            versions.pop(change.name, None)
        else:
            versions[change.name] = change.bad
    return tuple(f"{n}=={v}" for n, v in sorted(versions.items()))


def describe(applied: Iterable[Change]) -> str:
    return ", ".join(c.text() for c in sorted(applied)) or "nothing"


# --- What the resolver says ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """A dry run of pip on a set of pins: what it would install (name -> version and each one's requirements),
    or the packages its conflict names and its reason."""

    ok: bool
    installs: dict[str, str] = field(default_factory=dict)
    requires: dict[str, list[str]] = field(default_factory=dict)
    conflict: frozenset[str] = frozenset()
    reason: str = ""


_CANNOT = re.compile(r"Cannot install (.+?) because these package versions have conflicting dependencies")
_NAME = r"([A-Za-z0-9_.\-]+)"
_CAUSE = re.compile(rf"^\s+(?:The user requested {_NAME}|{_NAME} \S+ depends on {_NAME})")


def conflict_names(output: str) -> frozenset[str]:
    """The packages a pip ResolutionImpossible names: those it cannot install together, and those in the lines
    under 'The conflict is caused by'."""
    names: set[str] = set()
    for match in _CANNOT.finditer(output):
        for part in re.split(r",\s*|\s+and\s+", match.group(1)):
            try:
                names.add(canonicalize_name(Requirement(part.strip()).name))
            except InvalidRequirement:
                continue
    for line in output.splitlines():
        cause = _CAUSE.match(line)
        if cause:
            names.update(canonicalize_name(n) for n in cause.groups() if n)
    return frozenset(names)


def _requirement_names(requires_dist: list[str]) -> list[str]:
    """The distributions a package requires when installed without extras."""
    out = []
    for text in requires_dist:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            out.append(canonicalize_name(requirement.name))
    return out


class Resolver:
    """pip's resolver in a bare environment built like the steps' (so with reuse, this interpreter's packages
    count as installed, as they will when a step is built); answers to exact pins are cached by them."""

    def __init__(self, reuse_site_packages: bool, pip_args: tuple[str, ...], log: Callable[[str], None]) -> None:
        self.reuse, self.pip_args, self.log = reuse_site_packages, pip_args, log
        identity = {"resolver": 1, "python": sys.version, "reuse": reuse_site_packages}
        key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
        self.home = virtualenvs.cache_root() / f"resolver-{key}"
        self.python: Path | None = None
        self.runs = 0  # dry runs done (not answered from the cache)

    def _interpreter(self) -> Path:
        if self.python is None:
            ready = self.home / "venv" / virtualenvs.READY
            if not ready.exists():
                virtualenvs.create_venv(self.home / "venv", self.reuse)
                ready.write_text("")
            self.python = self.home / "venv" / "bin" / "python"
        return self.python

    def resolve(self, pinned: tuple[str, ...]) -> Resolution:
        key = hashlib.sha256(json.dumps([pinned, list(self.pip_args)]).encode()).hexdigest()[:20]
        cached = self.home / "answers" / f"{key}.json"
        if cached.exists() and _exact(pinned):
            return _resolution(json.loads(cached.read_text()))
        report = self.home / "answers" / f"{key}.report.json"
        report.parent.mkdir(parents=True, exist_ok=True)
        command = [*virtualenvs.pip_command(self._interpreter()), "install", "--dry-run", "--report", str(report),
                   *self.pip_args, *pinned]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        self.runs += 1
        if done.returncode == 0 and report.exists():
            installs = json.loads(report.read_text()).get("install", [])
            answer = {
                "ok": True,
                "installs": {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installs},
                "requires": {
                    canonicalize_name(i["metadata"]["name"]): _requirement_names(i["metadata"].get("requires_dist", []))
                    for i in installs
                },
            }
        else:
            output = done.stdout + done.stderr
            errors = [line for line in output.splitlines() if line.startswith("ERROR") and "Ignored" not in line]
            answer = {"ok": False, "conflict": sorted(conflict_names(output)),
                      "reason": errors[0] if errors else f"pip exited with {done.returncode}"}  # fmt: skip
        report.unlink(missing_ok=True)
        cached.write_text(json.dumps(answer))
        return _resolution(answer)


def _exact(requirements: tuple[str, ...]) -> bool:
    """Whether every requirement pins one version: only then is a resolver's answer the same tomorrow (a range
    takes the newest release the index has then)."""
    try:
        return all(
            [s.operator for s in Requirement(r).specifier] in (["=="], ["==="])
            and "*" not in str(Requirement(r).specifier)
            for r in requirements
        )
    except InvalidRequirement:
        return False


def _resolution(answer: dict) -> Resolution:
    return Resolution(
        answer["ok"], answer.get("installs", {}), answer.get("requires", {}),
        frozenset(answer.get("conflict", ())), answer.get("reason", ""),
    )  # fmt: skip


# --- Which changes need which --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Needs:
    """What applying one change takes: the changes it cannot be installed without (itself included), found by
    the resolver; ``reason`` where no subset of the changes lets it install alone (then it needs them all)."""

    change: Change
    closure: frozenset[Change]
    reason: str = ""


def needs(
    change: Change,
    all_changes: list[Change],
    good: dict[str, str],
    resolve: Callable,
    own: set[str] | None = None,
    known: dict[Change, Needs] | None = None,
) -> Needs:
    """Grow {change} by what the resolver names until the good side plus those changes resolves exactly: no
    conflict, no removed package pulled back in, no added package brought in at another version. A change
    named whose needs are ``known`` brings them along at once (fewer resolver runs)."""
    by_name = {c.name: c for c in all_changes}
    applied = {change}
    for _ in range(len(all_changes) + 1):
        pinned = pins(good, applied, own)
        answer = resolve(pinned)
        if answer.ok:
            wanted = dict(p.split("==", 1) for p in pinned)
            extra = {n for n in answer.installs if n not in wanted and n not in UNPINNED}
            more = {by_name[n] for n in extra if n in by_name and by_name[n] not in applied}
            # A removed package pulled back in: what requires it must move too.
            pulled = sorted(n for n in extra if n in by_name and by_name[n] in applied)
            for name in pulled:
                requirers = {r for r, names in answer.requires.items() if name in names}
                more |= {by_name[r] for r in requirers if r in by_name and by_name[r] not in applied}
            if not more and pulled:
                held = sorted({r for r, names in answer.requires.items() if pulled[0] in names})
                reason = f"{pulled[0]} is still required by {', '.join(held) or 'a package of the good side'}"
                return Needs(change, frozenset(all_changes), reason)
            if not more:
                return Needs(change, frozenset(applied))
        else:
            more = {by_name[n] for n in answer.conflict if n in by_name and by_name[n] not in applied}
            if not more:
                return Needs(change, frozenset(all_changes), answer.reason)
        for other in more:
            applied |= known[other].closure if known and other in known and not known[other].reason else {other}
    return Needs(change, frozenset(all_changes), "the resolver kept asking for more")


@dataclass(frozen=True)
class Group:
    """Changes that need each other (one unit of the search), and every change the group needs to install."""

    changes: tuple[Change, ...]
    closure: frozenset[Change]
    reason: str = ""  # why it could only be applied with everything, if so

    def text(self) -> str:
        return describe(self.changes)


def all_needs(
    all_changes: list[Change], good: dict[str, str], resolve: Callable, own: set[str] | None = None
) -> list[Needs]:
    """Every change's needs, those that install alone first, so that later ones can take them along."""
    known: dict[Change, Needs] = {}
    for change in sorted(all_changes, key=lambda c: (c.bad is None, c.name)):  # removals last: they pull most
        known[change] = needs(change, all_changes, good, resolve, own, known)
    return [known[c] for c in all_changes]


def groups(all_needs: list[Needs]) -> list[Group]:
    """The changes as groups in search order: a group after every group it needs, so every prefix installs."""
    closure = {n.change: set(n.closure) for n in all_needs}
    changed = True
    while changed:  # transitive: what a needed change needs is needed too
        changed = False
        for mine in closure.values():
            extra = set().union(*(closure[c] for c in mine)) - mine
            if extra:
                mine |= extra
                changed = True
    reasons = {n.change: n.reason for n in all_needs}
    seen: set[Change] = set()
    out = []
    for change in sorted(closure):
        if change in seen:
            continue
        members = tuple(sorted(c for c in closure[change] if change in closure[c]))
        seen.update(members)
        reason = "; ".join(sorted({reasons[c] for c in members if reasons[c]}))
        out.append(Group(members, frozenset(closure[change]), reason))
    return sorted(out, key=lambda g: (len(g.closure), g.changes))


def prefix(ordered: list[Group], k: int) -> frozenset[Change]:
    return frozenset().union(*(g.closure for g in ordered[:k]))
