"""The upgrade check: the same suite under two sets of packages, on this machine, interleaved.

Each side is a list of pip requirements (``tensorflow==2.20.0``, ``keras==3.14.0 keras-hub==0.21.0``). It gets
a virtual environment of its own, cached by its contents and reused by the next check, that holds what a trial
needs and nothing else: the side's requirements; the rest of the framework stack at the versions installed where
stepwatch runs (``--candidate keras==3.15.1`` changes Keras and nothing else); the trial's few dependencies
(numpy, psutil); and a copy of the installed stepwatch's trial code (no checkout needed, nothing the dashboard
needs). This process runs the suite and starts every trial with the
side's interpreter, so both sides are measured by the same harness; the trials alternate between the
sides (ABAB, the first side alternating each round so a steady drift of the machine favours neither).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.environments import containers, owners
from stepwatch.collector.errors import Failure
from stepwatch.collector.metrics import TIME_PARTS, trial_time
from stepwatch.collector.runner import catalog, execution
from stepwatch.collector.runner.results import ResultFile
from stepwatch.collector.trial.host import distribution_version

CACHE_ENV = "STEPWATCH_ENV_CACHE"
# What a trial process imports beyond the standard library, the framework and the model (test_upgrade checks it).
TRIAL_DEPENDENCIES = ("numpy", "psutil", "nvidia-ml-py")
# The framework stack: each one installed where stepwatch runs is installed at that version in a side that does not
# name it, or a package of its family (a side's jax==X takes the jaxlib that goes with it).
STACK_FAMILIES = (
    ("tensorflow", "tensorflow-cpu", "tensorflow-text", "tf-keras"),
    ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt"),
    ("torch", "torchvision", "torchaudio", "triton"),
    ("keras",),
    ("keras-hub",),
)
READY = ".stepwatch-ready"
SIDES = ("baseline", "candidate")
AA = "baseline-aa"  # the A/A side: the baseline's requirements in a second, separately built environment
RESULTS_DIR = Path("data/upgrade-check")  # one folder per check: both sides' parquet and the report
STORE = Path("data/upgrade-check.duckdb")  # checks are ingested here, never into the nightly history


class UpgradeError(RuntimeError, Failure):
    """An environment that could not be built, in one line."""


def cache_root() -> Path:
    """Where side environments live: $STEPWATCH_ENV_CACHE, else ~/.cache/stepwatch/envs."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "stepwatch" / "envs")


def parse_side(text: str, side: str) -> tuple[str, ...]:
    """Whitespace-separated pip requirements, or one container image (``image=REF``: collector.environments.
    containers); raises ValueError naming the one that does not parse."""
    if containers.is_image(text):
        return (f"{containers.IMAGE}{containers.parse_image(text, side)}",)
    requirements = tuple(text.split())
    if not requirements:
        raise ValueError(f"--{side} is empty: give pip requirements such as tensorflow==2.20.0")
    for requirement in requirements:
        try:
            Requirement(requirement)
        except InvalidRequirement as error:
            reason = str(error).splitlines()[0]
            raise ValueError(
                f"--{side}: {requirement!r} is not a pip requirement ({reason}); e.g. tensorflow==2.20.0"
            ) from None
    return requirements


def environment_requirements(requirements: tuple[str, ...], reuse_site_packages: bool) -> list[str]:
    """What a side's environment installs: its requirements and, unless it reuses this interpreter's packages,
    stepwatch's other runtime dependencies."""
    return [*requirements, *([] if reuse_site_packages else _base_requirements(requirements))]


def _base_requirements(pinned: tuple[str, ...]) -> list[str]:
    """What a side installs beside its own requirements: the framework stack as installed here (less the families
    the side names) and the trial's dependencies (less those the side names)."""
    named = {canonicalize_name(Requirement(r).name) for r in pinned}
    out = []
    for family in STACK_FAMILIES:
        if named & {canonicalize_name(name) for name in family}:
            continue
        for name in family:
            try:
                out.append(f"{name}=={metadata.version(name)}")
            except metadata.PackageNotFoundError:
                pass
    try:
        requires = metadata.requires("stepwatch") or []
    except metadata.PackageNotFoundError:  # the source on a path, not installed: the dependencies by their names
        requires = []
    declared = {canonicalize_name(Requirement(line).name): line for line in requires}
    for name in TRIAL_DEPENDENCIES:
        if canonicalize_name(name) not in named:
            out.append(declared.get(canonicalize_name(name), name))
    return out


@dataclass(frozen=True)
class Environment:
    """Where a side's trials run: a virtual environment (``path``) or an interpreter given as it is (``interpreter``:
    this one, for a code check whose two commits share it), and for a commit of the team's repository, the
    folder it is checked out in (``folder``: its models and scripts are read there) and its commit (``project``)."""

    side: str
    requirements: tuple[str, ...]
    path: Path
    cached: bool
    interpreter: str | None = None
    folder: Path | None = None
    project: dict[str, Any] | None = None

    @staticmethod
    def here(side: str, folder: Path | None = None, project: dict[str, Any] | None = None) -> Environment:
        """This interpreter and its packages as a side (a code check's sides, a compile cache filled by ``run``)."""
        return Environment(side, (), Path(sys.prefix), True, sys.executable, folder, project)

    @property
    def python(self) -> str:
        return self.interpreter or str(self.path / "bin" / "python")

    def options(self, options: execution.RunOptions) -> execution.RunOptions:
        """``options`` for this side's trials: labelled with the side, run by its interpreter, in its folder."""
        project = options.project if self.project is None else self.project
        return dataclasses.replace(options, label=self.side, python=self.python, folder=self.folder, project=project)

    def freeze(self) -> str:
        return (self.path / "freeze.txt").read_text() if (self.path / "freeze.txt").exists() else ""


def _site_packages(venv: Path) -> Path:
    found = list((venv / "lib").glob("python*/site-packages"))
    if not found:
        raise UpgradeError(f"no site-packages in {venv}")
    return found[0]


def _identity(
    requirements: tuple[str, ...], base: list[str], reuse: bool, pip_args: tuple[str, ...], copy: int = 0
) -> dict:
    identity = {
        "python": platform.python_version(),
        "requirements": sorted(requirements),
        "base": sorted(base),
        "reuse": sysconfig.get_paths()["purelib"] if reuse else None,
        "pip_args": list(pip_args),
    }
    return {**identity, "copy": copy} if copy else identity


# This interpreter's pip installs into a side's environment (``pip --python``), so an environment is made without
# a copy of pip of its own: ``python -m venv`` with pip takes 5-9 s on a 2-core machine, without it 0.3 s.
OWN_PIP = importlib.util.find_spec("pip") is not None


def pip_command(python: Path | str) -> list[str]:
    """pip, run on the environment of the interpreter ``python``: this interpreter's pip where it has one."""
    if OWN_PIP:
        return [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    return [str(python), "-m", "pip", "--disable-pip-version-check"]


def _trial_code(source: Path) -> list[Path]:
    """The files of the installed stepwatch a trial can import: the package, less the dashboard."""
    found = []
    for folder, dirs, names in os.walk(source, followlinks=True):  # a checkout's stepwatch/ links its folders
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (Path(folder) == source and d == "dashboard"))
        found += [Path(folder) / name for name in sorted(names)]
    return found


def copy_stepwatch(site: Path) -> None:
    """The installed stepwatch's trial code into ``site``, as plain files (a checkout's links followed), with the
    metadata that names its version where it is installed; left as it is when it is already that code (a check
    running beside another on the same cached environment never sees its files replaced under it)."""
    source = Path(importlib.util.find_spec("stepwatch").origin).parent  # found, not imported: the package's files
    files = _trial_code(source)
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes())
    stamp = site / "stepwatch" / ".source-sha256"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return
    for old in (site / "stepwatch", *site.glob("stepwatch-*.dist-info")):
        shutil.rmtree(old, ignore_errors=True)
    for path in files:
        target = site / "stepwatch" / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    stamp.write_text(digest.hexdigest())
    version = distribution_version("stepwatch")
    if version is None:  # the source on a path, not installed (a checkout on a GPU host): its trials record none
        return
    info = site / f"stepwatch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: stepwatch\nVersion: {version}\n")


def create_venv(path: Path, reuse_site_packages: bool) -> Path:
    """A fresh virtual environment at ``path`` holding a copy of the installed stepwatch's trial code (and, with
    reuse, this interpreter's packages, after its own); returns its interpreter. Without pip where this
    interpreter's pip can install into it (``pip_command``)."""
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        command = [sys.executable, "-m", "venv", *(["--without-pip"] if OWN_PIP else []), str(path)]
        subprocess.run(command, check=True, capture_output=True, text=True)
    except (subprocess.CalledProcessError, OSError) as error:
        detail = getattr(error, "stderr", None) or str(error)
        raise UpgradeError(f"cannot create a virtual environment in {path}: {detail.strip()[-300:]}") from None
    site = _site_packages(path)
    copy_stepwatch(site)
    # With reuse, this interpreter's packages come after the side's own (a .pth entry is appended to
    # sys.path), so the pinned versions win.
    if reuse_site_packages:
        (site / "stepwatch-reuse.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return path / "bin" / "python"


def ensure(
    side: str,
    requirements: tuple[str, ...],
    reuse_site_packages: bool = False,
    pip_args: tuple[str, ...] = (),
    log: Callable[[str], None] = print,
    describe: str | None = None,
    copy: int = 0,
) -> Environment:
    """The side's environment, built on first use (python -m venv, pip install) and cached by content.
    ``describe`` names the requirements in the log and errors where listing them all would not read. ``copy``
    n > 0: the n-th other environment of the same requirements, built separately (its own files on disk: an
    A/A side, a calibration's environments)."""
    if len(requirements) == 1 and containers.is_image(requirements[0]):  # a container image: its trials run in it
        ref = containers.parse_image(requirements[0], side)
        folder, launcher, said = containers.ensure(side, ref, cache_root(), copy_stepwatch, log=log, copy=copy)
        log(said)
        return Environment(side, requirements, folder, cached=False, interpreter=launcher)
    base = environment_requirements(requirements, reuse_site_packages)[len(requirements) :]
    identity = _identity(requirements, base, reuse_site_packages, pip_args, copy)
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_root() / key
    what = describe or " ".join(requirements)
    if (path / READY).exists():
        # The trial code of the stepwatch running now, not of the one that built the environment.
        copy_stepwatch(_site_packages(path))
        log(f"{side}: using the cached environment {path}")
        return Environment(side, requirements, path, cached=True)
    log(f"{side}: building an environment for {what} in {path} (pip log: {path / 'pip.log'})")
    python = create_venv(path, reuse_site_packages)
    (path / "requirements.txt").write_text("\n".join([*requirements, *base]) + "\n")
    command = [*pip_command(python), "install", *pip_args, "-r", str(path / "requirements.txt")]
    with open(path / "pip.log", "w") as pip_log:
        done = subprocess.run(command, stdout=pip_log, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        errors = [line for line in (path / "pip.log").read_text().splitlines() if line.startswith("ERROR")]
        reason = errors[0] if errors else f"pip exited with {done.returncode}"
        raise UpgradeError(f"cannot install {what} for the {side}: {reason} (see {path / 'pip.log'})")
    freeze = subprocess.run([*pip_command(python), "freeze", "--all"], capture_output=True, text=True, check=False)
    (path / "freeze.txt").write_text(freeze.stdout)
    (path / READY).write_text(json.dumps(identity, indent=2))
    return Environment(side, requirements, path, cached=False)


TRACKED = ("tensorflow", "jax", "torch", "keras", "keras-hub")  # those a side has are named in its log


def frozen(env: Environment) -> dict[str, str]:
    """canonical name -> version from the side's ``pip freeze`` (what its requirements resolved to)."""
    found = {}
    for line in env.freeze().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if match:
            found[canonicalize_name(match.group(1))] = match.group(2)
    return found


def own_packages(env: Environment) -> set[str]:
    """Canonical names of the packages in the side's own site-packages (with --reuse-site-packages, the
    reused ones are not its own)."""
    return {canonicalize_name(d.metadata["Name"]) for d in metadata.distributions(path=[str(_site_packages(env.path))])}


def installed(env: Environment, distributions: tuple[str, ...] = TRACKED) -> dict[str, str]:
    """Version of each of ``distributions`` installed in the side's environment."""
    versions = frozen(env)
    return {d: versions[canonicalize_name(d)] for d in distributions if canonicalize_name(d) in versions}


def package_diff(baseline: Environment, candidate: Environment) -> list[tuple[str, str, str]]:
    """(package, baseline version, candidate version) for every package that differs between the sides,
    "-" where a side lacks it: everything the upgrade changes, not only what was pinned."""
    a, b = frozen(baseline), frozen(candidate)
    names = sorted(a.keys() | b.keys())
    return [(name, a.get(name, "-"), b.get(name, "-")) for name in names if a.get(name) != b.get(name)]


def plan(
    configs: list[BenchmarkConfig], trials: int, sides: tuple[str, ...] = SIDES, first: int = 0
) -> list[tuple[str, BenchmarkConfig, int]]:
    """(side, config, trial) in running order, from round ``first``: per round and config every side, the order
    rotating each round (two sides alternate, ABBA...; three rotate, ABC BCA CAB) so a steady drift of the machine
    favours none."""
    order = []
    for trial in range(first, trials):
        shift = trial % len(sides)
        rotated = sides[shift:] + sides[:shift]
        for config in configs:
            order += [(side, config, trial) for side in rotated]
    return order


def ensure_all(
    sides: dict[str, tuple[str, ...]],
    reuse_site_packages: bool = False,
    pip_args: tuple[str, ...] = (),
    log: Callable[[str], None] = print,
) -> dict[str, Environment]:
    """Every side's environment (built or reused), each logged with the tracked versions it resolved to."""
    envs = {
        side: ensure(side, requirements, reuse_site_packages, pip_args, log) for side, requirements in sides.items()
    }
    for side, env in envs.items():
        tracked = installed(env)
        if tracked:
            log(f"{side}: " + ", ".join(f"{k} {v}" for k, v in tracked.items()))
    return envs


@dataclass
class Failed:
    """A side's config with failed trials: those trials, how many ran, and how many were not run (it broke)."""

    side: str
    config: BenchmarkConfig
    trials: list[execution.Outcome] = dataclasses.field(default_factory=list)
    ran: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class Check:
    """One upgrade check's trials: where its files are, each side's suite run id and every outcome."""

    out_dir: Path
    results: dict[str, ResultFile]
    suite_run_ids: dict[str, str]
    outcomes: list[execution.Outcome]
    rounds: int = 0  # rounds of trials run (a round: every config on every side once)
    skipped: tuple[tuple[str, BenchmarkConfig, int], ...] = ()  # (side, config, trial) not run: the workload broke

    def failed(self) -> list[execution.Outcome]:
        return [o for o in self.outcomes if o.row["status"] != "ok"]

    def failures(self) -> list[Failed]:
        """Every side and config with a failed trial, in the order the sides ran (a trial's row names its side)."""
        found: dict[tuple[str, str], Failed] = {}
        for outcome in self.outcomes:
            key = (outcome.row.get("label") or "", outcome.config.key)
            failed = found.setdefault(key, Failed(key[0], outcome.config))
            failed.ran += 1
            if outcome.row["status"] != "ok":
                failed.trials.append(outcome)
        for side, config, _ in self.skipped:
            found[side, config.key].skipped += 1
        order = list(self.results)
        return sorted((f for f in found.values() if f.trials), key=lambda f: order.index(f.side))

    def spent(self) -> tuple[float, float, str]:
        """What the trials cost: their seconds of this machine, their dollars where a price is known, and the prices
        they were costed at, whose and how sure (``catalog.costed_at``)."""
        rows = [o.row for o in self.outcomes]
        usd = sum(r.get("cost_usd") or 0 for r in rows)
        return sum(r.get("wall_s") or 0 for r in rows), usd, catalog.costed_at(rows, datetime.now(UTC).date())

    def time_split(self) -> dict[str, float]:
        """Where the trials' seconds went, summed over every trial that reached its first step: start-up (to the first
        step), the first step (compiling), warm-up, measured steps, profile, and the rest of the process's wall time
        (reading counters, writing the result, exiting)."""
        split = dict.fromkeys(TIME_PARTS, 0.0)
        for row in (o.row for o in self.outcomes if o.row.get("startup_s") is not None):
            for name, seconds in trial_time(row).items():
                split[name] += seconds
        return split

    def compile_caches(self) -> list[str | None]:
        """Each trial's ``compile_cache``: cold, warm, or None where no compile cache was used or kept anything."""
        return [o.row.get("compile_cache") for o in self.outcomes]

    def host(self) -> str | None:
        """The accelerator (or host) the check ran on."""
        rows = self.results["baseline"].rows
        return (rows[0].get("accelerator") or rows[0].get("host")) if rows else None


TEMP_PREFIX = "stepwatch-upgrade-"  # a check's temporary folder (its trials' work), named with its pid


def remove_left_behind(results_dir: str | Path) -> list[Path]:
    """What killed checks left (their worktrees aside: ``worktrees``): a partial results folder under
    ``results_dir`` and a temporary folder; removed, and returned."""
    return owners.remove_partial(Path(results_dir)) + owners.remove_orphans(Path(tempfile.gettempdir()), TEMP_PREFIX)


def run(
    configs: list[BenchmarkConfig],
    trials: int,
    suite: str,
    envs: dict[str, Environment],
    results_dir: str | Path,
    options: execution.RunOptions,
    on_start: Callable[[str, BenchmarkConfig, int], None] = lambda side, config, trial: None,
    on_done: Callable[[str, execution.Outcome], None] = lambda side, outcome: None,
    deadline: float | None = None,
) -> Check:
    """Run the interleaved plan of ``trials`` rounds into a new folder under ``results_dir`` (``Interleaving``)."""
    running = Interleaving(configs, suite, envs, results_dir, options)
    running.more(trials, on_start, on_done, deadline)
    return running.close()


class Interleaving:
    """An interleaved check's trials, run round by round into a new folder under ``results_dir``: one parquet file
    (and suite run id) per side of ``envs`` (baseline, candidate and, for an A/A, baseline-aa), each row labelled
    with its side. A sequential check asks for more rounds after each look (``more``); ``configs`` may change
    between them (more steps a trial: the same series); ``close`` marks the folder whole."""

    def __init__(
        self,
        configs: list[BenchmarkConfig],
        suite: str,
        envs: dict[str, Environment],
        results_dir: str | Path,
        options: execution.RunOptions,
    ) -> None:
        remove_left_behind(results_dir)
        self.out_dir = Path(results_dir) / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
        self.marker = owners.mark(self.out_dir)
        self.configs, self.suite, self.sides = list(configs), suite, tuple(envs)
        self.run_ids = {side: str(uuid.uuid4()) for side in self.sides}
        self.results = {side: ResultFile(self.out_dir / f"{suite}-{side}-{self.run_ids[side][:8]}.parquet")
                        for side in self.sides}  # fmt: skip
        self.side_options = {side: envs[side].options(options) for side in self.sides}
        self.outcomes: list[execution.Outcome] = []
        self.broken: set[tuple[str, str]] = set()  # (side, config key): crashed before its first step, run no more
        self.skipped: list[tuple[str, BenchmarkConfig, int]] = []
        self.rounds = 0
        self.last_round_s = 0.0  # how long the last whole round took

    def more(
        self,
        trials: int,
        on_start: Callable[[str, BenchmarkConfig, int], None],
        on_done: Callable[[str, execution.Outcome], None],
        deadline: float | None = None,
    ) -> None:
        """Rounds until ``trials`` per side. ``deadline`` (``time.monotonic()``): no round starts that would end past
        it at the pace of the last one (the first two always run, the least an interval needs)."""
        round_started: float | None = None
        with tempfile.TemporaryDirectory(prefix=owners.prefix(TEMP_PREFIX)) as tmp:
            for side, config, trial in plan(self.configs, trials, self.sides, first=self.rounds):
                if trial == self.rounds:  # a round starts
                    now = time.monotonic()
                    if round_started is not None:
                        self.last_round_s = now - round_started
                    if deadline is not None and self.rounds >= 2 and now + self.last_round_s > deadline:
                        round_started = None
                        break
                    self.rounds, round_started = self.rounds + 1, now
                if (side, config.key) in self.broken:
                    self.skipped.append((side, config, trial))
                    continue
                on_start(side, config, trial)
                outcome = execution.run_one(
                    config, trial, self.results[side], self.suite, self.run_ids[side], self.side_options[side],
                    Path(tmp),
                )  # fmt: skip
                self.outcomes.append(outcome)
                on_done(side, outcome)
                if outcome.broken:
                    self.broken.add((side, config.key))
        if round_started is not None:
            self.last_round_s = time.monotonic() - round_started

    def check(self) -> Check:
        """The trials so far."""
        return Check(self.out_dir, self.results, self.run_ids, list(self.outcomes), self.rounds, tuple(self.skipped))

    def close(self) -> Check:
        """Done: the folder is whole (a check killed before this leaves it marked, for the next to remove)."""
        self.marker.unlink(missing_ok=True)
        return self.check()
