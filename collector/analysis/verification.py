"""The history nominates, a controlled check decides. Pure parts of ``stepwatch alerts verify``: what differs
between the two nights either side of a suspected change (the causes a check can measure: the project's commits,
the package sets, the container images; or nothing recorded, and the change is the machine's), what a check's
verdict makes of the alert, which alerts a night's budget verifies, and the search for the first slow commit.
No I/O: the nights come in as mappings of what their rows recorded, the checks as verdicts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stepwatch.collector.analysis.changepoints import MOVE_NIGHTS
from stepwatch.collector.outcomes import FAILED, IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION
from stepwatch.collector.schema import VERSION_COLUMNS
from stepwatch.collector.store.records import INCONCLUSIVE as STILL_SUSPECTED
from stepwatch.collector.store.records import MACHINE, NOT_REPRODUCED, REPRODUCED

# A night's verifying checks spend alpha 0.005 each (over their looks), not a check's 0.05: a young history nominates
# several times a month, and each nomination that a check wrongly reproduces opens an issue (benchmarks/detection.py
# --verify: 1.5% of quiet histories on a pool of hosts at 0.01, none at 0.005). A 10% step is still seen at 3 to 12
# trials a side.
ALPHA = 0.005
COMMITS, PACKAGES, IMAGE = "commits", "packages", "image"
# Where the check of the commits either side of a change does not reproduce it, its baseline goes this many nights
# further back, and the bisect places it: the history may place a change up to that many nights late (a night on a fast
# host after a step), as alerts match a change within that many nights (changepoints.MOVE_NIGHTS).
WIDEN_NIGHTS = MOVE_NIGHTS  # what a verifying check can put on its two sides
# The version columns that name a side's packages where a night recorded no whole package set (older rows): the pip
# distribution each is the version of. The others (Python, CUDA, the driver, the image, the commits) are no package.
PACKAGE_OF_COLUMN = {"tf_version": "tensorflow", "keras_version": "keras", "keras_hub_version": "keras-hub",
                     "jax_version": "jax", "torch_version": "torch"}  # fmt: skip
# What a side's environment never pins from a night's set: stepwatch itself (the check's own trial code runs) and
# the installers that build the environment.
NOT_PINNED = frozenset({"stepwatch", "pip", "setuptools", "wheel", "uv"})
# What the rows say of the machine either side, when nothing else differs.
MACHINE_COLUMNS = {"host": "host", "runner_label": "runner", "cpu_model": "CPU", "accelerator": "accelerator",
                   "driver_version": "driver", "cuda_runtime_version": "CUDA runtime",
                   "python_version": "Python"}  # fmt: skip


@dataclass(frozen=True)
class Night:
    """What one night's rows of a series recorded (each value: the one its rows share, or None)."""

    suite_run_id: str
    fields: Mapping[str, Any]  # every column of VERSION_COLUMNS and MACHINE_COLUMNS, project_repository, package_set
    others: Mapping[str, float] = field(default_factory=dict)  # the night's other load and steal, averaged

    @property
    def commit(self) -> str | None:
        return self.fields.get("project_commit")

    @property
    def image(self) -> str | None:
        return self.fields.get("container_image")

    def packages(self) -> dict[str, str] | None:
        """The night's whole package set (name -> version), or None where its rows kept none."""
        text = self.fields.get("package_set")
        if not text:
            return None
        try:
            found = json.loads(text)
        except ValueError:
            return None
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else None

    def framework_versions(self) -> dict[str, str]:
        """The frameworks' versions the version columns name (where no whole package set was kept)."""
        return {package: str(self.fields[column]) for column, package in PACKAGE_OF_COLUMN.items()
                if self.fields.get(column)}  # fmt: skip


@dataclass(frozen=True)
class Cause:
    """One thing that differs between the two nights, which a check can put on its two sides."""

    kind: str  # COMMITS, PACKAGES or IMAGE
    baseline: tuple[str, ...]  # COMMITS: (commit,); PACKAGES: requirements; IMAGE: (image=REF,)
    candidate: tuple[str, ...]
    text: str  # what differs, in a line

    def sides(self) -> str:
        if self.kind == COMMITS:
            return f"commit {self.baseline[0][:12]} -> {self.candidate[0][:12]}"
        if self.kind == IMAGE:
            return f"{self.baseline[0]} -> {self.candidate[0]}"
        return f"package set ({self.text})"


def _pinned(packages: Mapping[str, str], changed: set[str]) -> tuple[str, ...]:
    """The requirements a side pins: the packages whose version moved between the nights, at this side's."""
    return tuple(f"{name}=={version}" for name, version in sorted(packages.items())
                 if name in changed and name not in NOT_PINNED)  # fmt: skip


def package_changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """Each package whose version moves, appears or goes between two sets, as 'name a -> b' (none: '-')."""
    names = sorted(set(before) | set(after))
    return [f"{n} {before.get(n, '-')} -> {after.get(n, '-')}" for n in names
            if before.get(n) != after.get(n) and n not in NOT_PINNED]  # fmt: skip


def causes(before: Night, after: Night) -> list[Cause]:
    """What differs between the nights either side of a change that a check can measure: the project's commits,
    the images (their packages come with them), else the package sets (whole where both nights kept theirs, else the
    frameworks their version columns name): each side pins the packages whose version moved at its night's version,
    over the environment the check runs in (a package only one night had is named in the text, on neither side)."""
    found = []
    if before.commit and after.commit and before.commit != after.commit:
        found.append(Cause(COMMITS, (before.commit,), (after.commit,), f"{before.commit[:12]} -> {after.commit[:12]}"))
    if (before.image or after.image) and before.image != after.image:
        if before.image and after.image:
            found.append(Cause(IMAGE, (f"image={before.image}",), (f"image={after.image}",),
                               f"{before.image} -> {after.image}"))  # fmt: skip
        return found  # one night ran in no image: its packages cannot be rebuilt from the other's
    sets = before.packages(), after.packages()
    if sets[0] is None or sets[1] is None:
        sets = before.framework_versions(), after.framework_versions()
    moved = package_changes(*sets)
    changed = {n for n in set(sets[0]) & set(sets[1]) if sets[0][n] != sets[1][n] and n not in NOT_PINNED}
    if changed:  # each side: this environment with the packages that moved at that night's versions
        found.append(Cause(PACKAGES, _pinned(sets[0], changed), _pinned(sets[1], changed), _listed(moved)))
    return found


def _listed(moved: Sequence[str], shown: int = 4) -> str:
    more = f" and {len(moved) - shown} more" if len(moved) > shown else ""
    return ", ".join(moved[:shown]) + more


def unexplained(before: Night, after: Night) -> list[str]:
    """What differs that no check can put on a side (Python, a driver, CUDA): said beside the machine's."""
    skip = {"project_commit", "container_image", "stepwatch_git_sha", *PACKAGE_OF_COLUMN}
    return [f"{c} {before.fields.get(c)} -> {after.fields.get(c)}" for c in VERSION_COLUMNS
            if c not in skip and before.fields.get(c) != after.fields.get(c)]  # fmt: skip


def machine_text(before: Night, after: Night) -> str:
    """The machine either side, as the rows say: the hosts, runners, CPUs, drivers, and the other load and steal
    the trials saw, so that a person can tell which host was slow."""
    parts = []
    for column, name in MACHINE_COLUMNS.items():
        a, b = before.fields.get(column), after.fields.get(column)
        if a is None and b is None:
            continue
        parts.append(f"{name} {a}" if a == b else f"{name} {a} -> {b}")
    for name in ("other load", "steal"):
        a, b = (night.others.get(name) for night in (before, after))
        if a is not None or b is not None:
            parts.append(f"{name} {_cores(a)} -> {_cores(b)} cores")
    return "; ".join(parts) or "the rows name no host"


def _cores(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def state_of(verdict: str, regression: bool) -> str:
    """What a check's verdict makes of an alert whose change is a ``regression`` (else an improvement): the same
    change measured again (REPRODUCED), no change or the other way (NOT_REPRODUCED), or undecided."""
    wanted = REGRESSION if regression else IMPROVEMENT
    if verdict == wanted:
        return REPRODUCED
    if verdict in (NO_CHANGE, REGRESSION, IMPROVEMENT):
        return NOT_REPRODUCED
    return STILL_SUSPECTED  # inconclusive, failed, missing


def trusted(state: str, aa: str) -> str:
    """A check's state beside its A/A (``aa_text``): a reproduced change whose A/A raised an alarm of its own is
    undecided, since the runner raised one where nothing changed."""
    return STILL_SUSPECTED if state == REPRODUCED and aa.startswith("raised") else state


def combined(states: Sequence[str]) -> str:
    """One state of an alert from its checks' (one per cause): reproduced where any check reproduced it, not
    reproduced where every check said so, else still suspected; with no cause, the machine's."""
    if not states:
        return MACHINE
    if REPRODUCED in states:
        return REPRODUCED
    if all(state == NOT_REPRODUCED for state in states):
        return NOT_REPRODUCED
    return STILL_SUSPECTED


def aa_text(verdict: str | None, ratio: float | None = None, low: float | None = None,
            high: float | None = None) -> str:  # fmt: skip
    """The A/A beside a check's verdict: quiet, or what it raised (a false alarm of this runner)."""
    if verdict is None:
        return "none ran"
    if verdict in (NO_CHANGE, INCONCLUSIVE):
        return "quiet"
    if verdict == FAILED:
        return "failed"
    shown = f" {ratio - 1:+.1%} [{low - 1:+.1%}, {high - 1:+.1%}]" if None not in (ratio, low, high) else ""
    return f"raised {verdict}{shown}"


def picked(alerts: Sequence[Mapping[str, Any]], most: int | None) -> list[Mapping[str, Any]]:
    """The alerts a night verifies: never one verified already, the largest change first, at most ``most``."""
    todo = [a for a in alerts if not a.get("verification")]
    todo.sort(key=lambda a: -abs(_log(a.get("ratio"))))
    return todo if most is None else todo[:most]


def _log(ratio: float | None) -> float:
    return math.log(ratio) if ratio and ratio > 0 else 0.0


@dataclass(frozen=True)
class Probe:
    """One step of a commit bisect: the commit measured against the good one, and what the check said."""

    commit: str
    slow: bool | None  # None: undecided (the bisect stops there, naming the range left)


def first_slow(
    commits: Sequence[str], measure: Callable[[str], bool | None]
) -> tuple[str | None, list[Probe], tuple[str, str]]:  # noqa: E501
    """The first slow commit of ``commits`` (oldest first, after the good one; the last is known slow), each probe
    ``measure(commit)``: True where that commit is slow against the good one. Returns it (None where a probe was
    undecided), the probes in order, and the range (last fast or the good side's successor, first slow) left."""
    lo, hi = 0, len(commits) - 1  # commits[hi] is slow; every commit before lo is fast
    probes = []
    while lo < hi:
        mid = (lo + hi) // 2
        slow = measure(commits[mid])
        probes.append(Probe(commits[mid], slow))
        if slow is None:
            return None, probes, (commits[lo], commits[hi])
        if slow:
            hi = mid
        else:
            lo = mid + 1
    return commits[hi], probes, (commits[hi], commits[hi])
