"""Runs a suite: trials interleaved across configs, one fresh process each, a row for every trial."""

from __future__ import annotations

import contextlib
import functools
import shutil
import sys
import tempfile
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stepwatch.collector.config import BenchmarkConfig, config_columns
from stepwatch.collector.project import identity
from stepwatch.collector.runner import catalog, max_batch, spawn
from stepwatch.collector.runner.results import ResultFile
from stepwatch.collector.trial import profiles
from stepwatch.collector.trial.host import host_environment
from stepwatch.collector.trial.profiles import PROFILE_ENV
from stepwatch.collector.trial.runtime import COMPILE_CACHE_DIRS, COMPILE_CACHE_ENV
from stepwatch.trainers.user import UserModelError
from stepwatch.trainers.workload import source_of

PROFILES_DIR = "profiles"  # beside the results file: one folder per profiled trial, named by its run_id


@dataclass
class RunOptions:
    label: str | None = None
    price_per_hour: float | None = None
    prices: list[catalog.Price] = field(default_factory=catalog.load_prices)
    peaks: list[catalog.Peak] = field(default_factory=catalog.load_peaks)
    python: str = sys.executable
    workers: int = 2  # local worker processes of a multi-worker trial (when TF_CONFIG is not set by hand)
    max_batches: dict[str, max_batch.MaxBatch] = field(default_factory=dict)  # config key -> --find-max-batch result
    profile: int = 0  # --profile: the first this many trials of every config record a profile after their timing
    profile_home: str | None = None  # where the profiles will be read from, if not beside the results (--out s3://)
    compile_cache: Path | None = None  # --compile-cache: where trials keep the compiler's output between them
    project: dict[str, Any] = field(default_factory=identity)  # the repository and commit run in
    folder: Path | None = None  # where trials run and read their workload's path (a commit's checkout); None: here


@dataclass(frozen=True)
class Outcome:
    config: BenchmarkConfig
    trial: int
    row: dict[str, Any]

    @property
    def broken(self) -> bool:
        """Crashed before its first step was done (importing or building the workload, a script that raised before
        it marked a step): the same code fails the same way in every trial, so a check runs no more of them."""
        return self.row.get("status") == "crash" and self.row.get("startup_s") is None


def interleave(configs: list[BenchmarkConfig], trials: int) -> list[tuple[BenchmarkConfig, int]]:
    """Round robin: trial 0 of every config, then trial 1 of every config, ... (ABAB, not AABB)."""
    return [(config, trial) for trial in range(trials) for config in configs]


def pending(plan: list[tuple[BenchmarkConfig, int]], rows: list[dict[str, Any]]) -> list[tuple[BenchmarkConfig, int]]:
    """The plan less the trials that already have a row (what --resume skips)."""
    done = {(row["config_key"], row["trial"]) for row in rows}
    return [(config, trial) for config, trial in plan if (config.key, trial) not in done]


@dataclass(frozen=True)
class Resumed:
    """The results file a run appends to, its suite run id, and how many planned trials it already holds."""

    results: ResultFile
    suite_run_id: str
    done: int
    nothing_to_resume: bool  # --resume was asked for and found no file of this suite


def open_results(out: Path, suite: str, plan: list[tuple[BenchmarkConfig, int]], resume: bool) -> Resumed:
    """A new results file for ``suite`` in ``out``, or with ``resume`` the latest one and its suite run id."""
    results = ResultFile.latest(out, suite) if resume else None
    if results is None:
        suite_run_id = str(uuid.uuid4())
        return Resumed(ResultFile.create(out, suite, suite_run_id), suite_run_id, 0, nothing_to_resume=resume)
    suite_run_id = results.rows[0]["suite_run_id"] if results.rows else str(uuid.uuid4())
    return Resumed(results, suite_run_id, len(plan) - len(pending(plan, results.rows)), nothing_to_resume=False)


@functools.cache
def _parent_host(device: str) -> dict[str, Any]:
    return host_environment(device)


def make_row(
    config: BenchmarkConfig,
    trial: int,
    child: dict[str, Any],
    wall_s: float,
    code: int | None,
    started: datetime,
    suite: str,
    suite_run_id: str,
    options: RunOptions,
) -> dict[str, Any]:
    """The full result row: identity and config from the parent, measurements from the child, then cost and MFU."""
    row: dict[str, Any] = {
        "run_id": str(uuid.uuid4()),
        "suite_run_id": suite_run_id,
        "suite": suite,
        "trial": trial,
        "started_at": started,
        "finished_at": datetime.now(UTC),
        "label": options.label,
        "source": "real",
        "config_key": config.key,
        "global_batch": config.global_batch,
        **config_columns(config),
    }
    row.update(_parent_host(config.device))  # so that a trial that died early still has its host and series
    row.update(child)
    row.update(options.project)
    row.update(wall_s=wall_s, exit_code=code)
    searched = options.max_batches.get(config.key)
    if searched is not None:  # how the search ended, and its probes (kept in extras)
        row.update(max_per_device_batch=searched.largest, max_batch_ended=searched.ended,
                   max_batch_probes=searched.record or [list(probe) for probe in searched.probes])  # fmt: skip
    if row["status"] != "ok":
        row["examples_per_sec"] = None  # a failed trial has no throughput, even if some windows closed
    eps = row.get("examples_per_sec")
    if eps is not None:
        row["examples_per_sec_per_device"] = eps / max(row.get("replicas") or config.num_devices, 1)
        row["units_per_sec"] = eps * (row.get("units_per_example") or 1)
    accelerator = row.get("accelerator")
    cores = row.get("cpu_cores")
    price = catalog.find_price(options.prices, config.device, accelerator, cores)
    missing = None if price else catalog.no_price_note(config.device, accelerator, cores)
    row.update(catalog.cost_columns(price, options.price_per_hour, config.devices, wall_s, eps, missing))
    peak, source = catalog.peak_tflops(options.peaks, accelerator, config.precision, config.devices)
    if peak is None and config.device != "cpu":  # kept in extras: why MFU is empty
        row["peak_missing"] = (
            f"no dense peak of {accelerator or 'an unnamed device'} at {config.precision} in the "
            "peak table (accelerators.toml): MFU left empty"
        )
    flops = row.get("flops_per_example")
    achieved = flops * eps / 1e12 if flops and eps else None
    row.update(
        achieved_tflops=achieved,
        peak_tflops=peak,
        peak_tflops_source=source,
        mfu=achieved / peak if achieved and peak else None,
    )
    return row


def run_one(
    config: BenchmarkConfig,
    trial: int,
    results: ResultFile,
    suite: str,
    suite_run_id: str,
    options: RunOptions,
    workdir: Path,
) -> Outcome:
    """One trial in a fresh process; its row is in the parquet file before this returns. Trial i runs with the
    suite's seed plus i: each trial its own initial weights and data, and trial i of every side of a check the
    same (``collector.analysis.numerics`` pairs them)."""
    outcome_config, config = config, config.with_changes(seed=config.seed + trial)
    started = datetime.now(UTC)
    # Before the trial imports it: the code that ran, even if edited during the trial.
    source = model_hash(config, options.folder)
    task = spawn.tf_config_task()
    profile_dir = workdir / "profile"
    if config.strategy == "multi-worker" and task is None:
        child, wall_s, exit_code = spawn.run_local_workers(
            config, options.python, workdir, options.workers, options.folder
        )
    else:
        env = cache_env(options.compile_cache)
        cache = options.compile_cache / COMPILE_CACHE_DIRS[config.keras_backend] if options.compile_cache else None
        cached_before = cache_entries(cache)
        if trial < options.profile and config.strategy != "multi-worker":
            shutil.rmtree(profile_dir, ignore_errors=True)
            profile_dir.mkdir(parents=True)
            env[PROFILE_ENV] = str(profile_dir)
        child, wall_s, exit_code = spawn.run_child(config, options.python, workdir, env, options.folder)
        cached_after = cache_entries(cache)
        if config.xla and cached_after:  # cold: it compiled what the cache did not hold (none kept: nothing to say)
            child["compile_cache"] = "cold" if cached_after > cached_before else "warm"
    if source:
        child["model_hash"] = source
    row = make_row(config, trial, child, wall_s, exit_code, started, suite, suite_run_id, options)
    if row.get("op_types") is not None and profile_dir.exists():
        row.update(keep_profile(profile_dir, results.path.parent, row["run_id"], options.profile_home))
    if task is None or task[0] == 0:  # across hosts, the chief (worker 0) records the row
        results.append(row)
    return Outcome(outcome_config, trial, row)


def model_hash(config: BenchmarkConfig, folder: Path | None = None) -> str | None:
    """Which code of a model or script of yours runs (its source's hash: another hash is another model's), read in
    ``folder`` (default here); None for a bundled model, or a file gone since the suite was read (the trial's row then
    says why it failed)."""
    try:
        source = source_of(config.model)
        if source is None:
            return None
        with contextlib.chdir(folder or Path.cwd()):
            return source.source_hash()
    except UserModelError:
        return None


def cache_env(cache: Path | None) -> dict[str, str]:
    """What tells a trial to keep its compiler's output in ``cache`` (``runtime.prepare`` reads it)."""
    if cache is None:
        return {}
    cache.mkdir(parents=True, exist_ok=True)
    return {COMPILE_CACHE_ENV: str(cache.resolve())}


def cache_entries(cache: Path | None) -> int:
    """The files a compile cache holds (a trial that adds some compiled what was not there)."""
    if cache is None or not cache.is_dir():
        return 0
    return sum(1 for path in cache.rglob("*") if path.is_file())


def keep_profile(profile_dir: Path, results_dir: Path, run_id: str, home: str | None) -> dict[str, Any]:
    """Move a trial's raw profile to ``profiles/RUN_ID/`` beside the results (uploaded with them by ``run --out``
    to object storage, which ``home`` names): its address, for the row, and its size, in extras."""
    kept = results_dir / PROFILES_DIR / run_id
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(profile_dir), kept)
    except OSError as error:  # a full disk: the row and its op table are still recorded, the raw profile is not
        shutil.rmtree(kept, ignore_errors=True)
        return {"profile_error": f"cannot keep the raw profile in {kept}: {error.strerror or error}"}
    uri = f"{home.rstrip('/')}/{PROFILES_DIR}/{run_id}" if home else str(kept.resolve())
    return {"profile_uri": uri, "profile_bytes": profiles.size_bytes(kept)}


def run_plan(
    plan: list[tuple[BenchmarkConfig, int]],
    results: ResultFile,
    suite: str,
    suite_run_id: str,
    options: RunOptions,
    on_start: Callable[[BenchmarkConfig, int], None] = lambda config, trial: None,
    on_done: Callable[[Outcome], None] = lambda outcome: None,
) -> list[Outcome]:
    """Run every (config, trial) in order; each row is in the parquet file before the next trial starts."""
    outcomes = []
    queue = deque(plan)
    with tempfile.TemporaryDirectory(prefix="stepwatch-trial-") as tmp:
        while queue:
            config, trial = queue.popleft()
            on_start(config, trial)
            outcome = run_one(config, trial, results, suite, suite_run_id, options, Path(tmp))
            outcomes.append(outcome)
            on_done(outcome)
    return outcomes
