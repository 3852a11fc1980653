"""Runs a suite: trials interleaved across configs, one fresh process each, a row for every trial."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from stepwatch.collector.config import BenchmarkConfig, config_columns
from stepwatch.collector.metrics import ANON_KIND
from stepwatch.collector.project import identity
from stepwatch.collector.runner import catalog, launchers
from stepwatch.collector.runner.results import ResultFile
from stepwatch.collector.trial import memory, profiles, ranks
from stepwatch.collector.trial.host import host_environment
from stepwatch.collector.trial.machine import RUNNER_PID_ENV
from stepwatch.collector.trial.process import SPAWN_TIME_ENV
from stepwatch.collector.trial.profiles import PROFILE_ENV
from stepwatch.collector.trial.runtime import COMPILE_CACHE_DIRS, COMPILE_CACHE_ENV
from stepwatch.trainers.user import UserModelError
from stepwatch.trainers.workload import source_of

LOG_TAIL_LINES = 40
PROFILES_DIR = "profiles"  # beside the results file: one folder per profiled trial, named by its run_id


@dataclass
class RunOptions:
    label: str | None = None
    price_per_hour: float | None = None
    prices: list[catalog.Price] = field(default_factory=catalog.load_prices)
    peaks: list[catalog.Peak] = field(default_factory=catalog.load_peaks)
    python: str = sys.executable
    workers: int = 2  # local worker processes of a multi-worker trial (when TF_CONFIG is not set by hand)
    max_batches: dict[str, MaxBatch] = field(default_factory=dict)  # config key -> --find-max-batch result
    profile: int = 0  # --profile: the first this many trials of every config record a profile after their timing
    profile_home: str | None = None  # where the profiles will be read from, if not beside the results (--out s3://)
    compile_cache: Path | None = None  # --compile-cache: where trials keep the compiler's output between them
    project: dict[str, Any] = field(default_factory=identity)  # the repository and commit run in


@dataclass(frozen=True)
class Outcome:
    config: BenchmarkConfig
    trial: int
    row: dict[str, Any]


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


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the trial's process group and every process it started, also those in sessions of their own (the
    ranks of torch's launcher): listed before the kill, while they are still its descendants."""
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    for pid in (proc.pid, *(p.pid for p in descendants)):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for process in descendants:
        try:
            process.kill()
        except psutil.Error:
            pass
    proc.wait()


TRIAL_MODULE = "stepwatch.collector.trial.process"


def run_child(
    config: BenchmarkConfig, python: str, workdir: Path, env_extra: dict[str, str] | None = None
) -> tuple[dict[str, Any], float, int | None]:
    """Start ``collector.trial.process`` in its own process group, wait up to the timeout, read its result.

    Returns the child's fields (or a failure description), the wall time and the exit code.
    """
    result_path = workdir / "result.json"
    log_path = workdir / "trial.log"
    result_path.unlink(missing_ok=True)
    for stale in workdir.glob("rank-*"):  # an earlier trial's ranks in this folder
        stale.unlink()
    env = {**os.environ, SPAWN_TIME_ENV: repr(time.time()), "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    env[RUNNER_PID_ENV] = str(os.getpid())  # this process's tree is the trial's own (collector.trial.machine)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        trial = ["-m", TRIAL_MODULE, "--config", config.to_json(), "--result", str(result_path)]
        proc = subprocess.Popen(
            launchers.command(config, python, trial),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=ranks.die_with_parent if sys.platform == "linux" else None,
        )
        try:  # the parent samples the child's memory while it waits (collector.trial.memory)
            sampled = proc.pid if config.processes == 1 else functools.partial(_rank0_pid, result_path)
            sampler, code, timed_out = memory.sample_until_exit(
                sampled, proc.poll, config.timeout_s, measured=result_path.exists
            )
            if timed_out:
                _kill_group(proc)
                code = proc.returncode
            else:  # what the trial left running (a compiler's worker pool: it leaves without tearing down)
                _kill_group(proc)
        except BaseException:  # Ctrl-C or a kill of the parent: take the child down with us
            _kill_group(proc)
            raise
    wall_s = time.perf_counter() - start
    tail = _tail(log_path)

    def failure(status: str, error_type: str, message: str) -> tuple[dict[str, Any], float, int | None]:
        return {"status": status, "error_type": error_type, "error_message": message, "log_tail": tail}, wall_s, code

    if config.processes > 1 and (not result_path.exists() or timed_out or code != 0):  # what each rank says
        judged = judge_ranks(config, result_path, code, tail, timed_out)
        if judged:
            child = with_peak(json.loads(result_path.read_text()) if result_path.exists() else {}, sampler)
            return {**child, **judged, "log_tail": tail}, wall_s, code
    if timed_out and not result_path.exists():
        return failure("timeout", "Timeout", f"trial ran past its timeout of {config.timeout_s:g} s and was killed")
    if result_path.exists():  # written once measured; a timeout after that only cut the counters short
        child = json.loads(result_path.read_text())
        if timed_out:  # after what it measured: while reading its counters, or while profiling (after them)
            doing = ("profile_error", "profiling") if "counters_s" in child else ("counters_error", "reading counters")
            child[doing[0]] = f"killed at the timeout of {config.timeout_s:g} s while {doing[1]}"
        child = with_peak(child, sampler)
        if child.get("status") != "ok":
            child["log_tail"] = tail
        return child, wall_s, code
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        hint = " (the kernel's out-of-memory killer or a user)" if name == "SIGKILL" else ""
        return failure("killed", name, f"trial process was killed by {name}{hint}")
    last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
    return failure("crash", "ProcessExit", f"trial process exited with code {code}: {last[:300]}")


def with_peak(child: dict[str, Any], sampler: memory.PeakSampler) -> dict[str, Any]:
    """A CPU trial's fields with the peak anonymous memory the parent sampled (``memory.judged_peak``)."""
    if child.get("peak_memory_kind") == ANON_KIND:
        child.update(memory.judged_peak(sampler.fields(), child))
    return child


def _rank0_pid(result_path: Path) -> int | None:
    """The process id of rank 0, once it has said it (the memory a data-parallel trial reports is rank 0's)."""
    try:
        return int(ranks.rank0_pid_file(result_path).read_text())
    except (OSError, ValueError):
        return None


def judge_ranks(
    config: BenchmarkConfig, result_path: Path, code: int | None, log: str, timed_out: bool
) -> dict[str, Any]:
    """A data-parallel trial is ok only if every rank was (empty: it was, or no rank ran at all and the launcher's
    own exit is the failure): otherwise one failure, naming the rank that most likely failed first and why, in
    its own words where it wrote any. First: a rank that ended on its own without a result (it died: the others'
    errors are its consequences, "connection reset by peer"); then the ranks that caught an error, earliest
    first; last, ranks the launcher stopped (a signal, no result)."""
    ranks: dict[int, dict[str, Any] | None] = {}
    for index in range(config.processes):
        path = ranks.rank_result(result_path, index)
        ranks[index] = json.loads(path.read_text()) if path.exists() else None
    failed = [i for i, r in ranks.items() if r is None or r.get("status") != "ok"]
    if not failed and code == 0 and not timed_out:
        return {}
    codes = launchers.rank_exit_codes(log)
    if not timed_out and not codes and all(r is None for r in ranks.values()):
        return {}  # no rank ever ran (the launcher itself failed: no torch): the process's own failure row

    def order(index: int) -> tuple[int, float]:
        own = ranks[index]
        if own is None:
            return (0, 0.0) if codes.get(index, -1) > 0 else (2, 0.0)
        return 1, own.get("failed_at") or 0.0

    if not failed:
        ended = f"the launcher was still running at the timeout of {config.timeout_s:g} s" if timed_out else (
            f"the launcher exited with code {code}")  # fmt: skip
        return {"status": "timeout" if timed_out else "crash", "error_type": "RankFailed", "examples_per_sec": None,
                "error_message": f"{config.processes} ranks: every rank finished, but {ended}"}  # fmt: skip
    first, *others = sorted(failed, key=order)
    own = ranks[first]
    if own is not None:
        why = own.get("error_message") or own.get("status")
    elif timed_out:
        why = (
            f"was still running at the timeout of {config.timeout_s:g} s and was killed (it hung, or waited on a rank)"
        )
    else:
        ended = codes.get(first)
        how = f"exit code {ended}" if ended is not None and ended >= 0 else "a signal" if ended else "no exit code"
        why = f"ended without a result ({how})"
    also = f"; rank(s) {', '.join(map(str, others))} failed after it" if others else ""
    status = own["status"] if own is not None and own.get("status") in ("oom", "timeout") else "crash"
    status = "timeout" if own is None and timed_out else status
    return {"status": status, "error_type": "RankFailed", "failed_rank": first, "examples_per_sec": None,
            "error_message": f"rank {first} of {config.processes}: {why}{also}"}  # fmt: skip


def tf_config_task() -> tuple[int, int] | None:
    """(this worker's index, worker count) from TF_CONFIG, when a multi-worker cluster is set up by hand."""
    try:
        spec = json.loads(os.environ.get("TF_CONFIG") or "null")
        return int(spec["task"]["index"]), len(spec["cluster"]["worker"])
    except (TypeError, KeyError, ValueError):
        return None


def run_local_workers(
    config: BenchmarkConfig, python: str, workdir: Path, workers: int
) -> tuple[dict[str, Any], float, int | None]:
    """A multi-worker trial on this host: ``workers`` processes on 127.0.0.1, each with its TF_CONFIG. The
    chief (worker 0) measures; the row also lists every worker's address, host and outcome."""
    addresses = [f"127.0.0.1:{launchers.free_port()}" for _ in range(workers)]

    # Helpers run through the same run_child as any trial (own folder, timeout, kill), on threads.
    folders = [workdir / f"worker-{index}" for index in range(1, workers)]
    with ThreadPoolExecutor(max_workers=max(1, workers - 1)) as pool:
        helpers = []
        for index, folder in enumerate(folders, 1):
            folder.mkdir(exist_ok=True)
            helpers.append(
                pool.submit(run_child, config, python, folder, {"TF_CONFIG": launchers.tf_config(addresses, index)})
            )
        child, wall_s, code = run_child(config, python, workdir, {"TF_CONFIG": launchers.tf_config(addresses, 0)})
        results = [helper.result()[0] for helper in helpers]
    members = [
        {"index": index, "address": addresses[index], "host": result.get("host"), "status": result.get("status")}
        for index, result in enumerate([child, *results])
    ]
    child["extras"] = json.dumps({"workers": members})
    if child.get("status") == "ok" and any(m["status"] != "ok" for m in members):
        bad = next(m for m in members if m["status"] != "ok")
        child.update(status="crash", error_type="WorkerFailed", examples_per_sec=None,
                     error_message=f"worker {bad['index']} at {bad['address']} ended with {bad['status']}")  # fmt: skip
    return child, wall_s, code


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
                   max_batch_probes=[list(probe) for probe in searched.probes])  # fmt: skip
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
    """One trial in a fresh process; its row is in the parquet file before this returns."""
    started = datetime.now(UTC)
    source = model_hash(config)  # before the trial imports it: the code that ran, even if edited during the trial
    task = tf_config_task()
    profile_dir = workdir / "profile"
    if config.strategy == "multi-worker" and task is None:
        child, wall_s, exit_code = run_local_workers(config, options.python, workdir, options.workers)
    else:
        env = cache_env(options.compile_cache)
        cache = options.compile_cache / COMPILE_CACHE_DIRS[config.keras_backend] if options.compile_cache else None
        cached_before = cache_entries(cache)
        if trial < options.profile and config.strategy != "multi-worker":
            shutil.rmtree(profile_dir, ignore_errors=True)
            profile_dir.mkdir(parents=True)
            env[PROFILE_ENV] = str(profile_dir)
        child, wall_s, exit_code = run_child(config, options.python, workdir, env)
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
    return Outcome(config, trial, row)


def model_hash(config: BenchmarkConfig) -> str | None:
    """Which code of a model or script of yours runs (its source's hash: another hash is another model's); None
    for a bundled model, or a file gone since the suite was read (the trial's row then says why it failed)."""
    try:
        source = source_of(config.model)
        return source.source_hash() if source is not None else None
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


@dataclass(frozen=True)
class MaxBatch:
    """What a batch-size search found: the largest per-device batch that trained (None if not even the first),
    how the search ended, in words, and every probe as (batch, the trial's status) in the order run."""

    largest: int | None
    ended: str
    probes: tuple[tuple[int, str], ...]


ENDED_BY = {"oom": "out of memory", "timeout": "timeout", "nonfinite_loss": "non-finite loss"}


def search_max_batch(
    probe: Callable[[int], str], start: int, limit: int = 1 << 16, bound: Callable[[], int | None] = lambda: None
) -> MaxBatch:
    """The largest batch that trains: ``probe(batch)`` runs it and gives the trial's status. Doubling from
    ``start`` while it is ``ok``; out of memory above the largest that ran bisects between the two; any other
    failure (a timeout, a crash) ends the search there, with what ran so far. ``bound()``, once it knows (a
    compiler's estimate of the memory a batch needs against the device's), caps the batches tried like ``limit``."""
    probes: list[tuple[int, str]] = []

    def run(batch: int) -> str:
        status = probe(batch)
        probes.append((batch, status))
        return status

    def result(largest: int | None, ended: str) -> MaxBatch:
        return MaxBatch(largest, ended, tuple(probes))

    def failed(status: str, batch: int) -> str:
        return f"{ENDED_BY.get(status, status)} at batch {batch}"

    status = run(start)
    if status != "ok":
        return result(None, failed(status, start))
    good, bad = start, None  # the largest batch that ran, and the smallest that ran out of memory
    while True:
        if bad is None:  # doubling, up to the limit and the bound
            cap = min(limit, bound() or limit)
            candidate = min(good * 2, cap)
            if candidate <= good:
                why = "the memory bound of the compiler's analysis" if cap < limit else "the search's limit"
                return result(good, f"reached {why} ({cap})")
        elif bad - good > 1:  # bisecting
            candidate = (good + bad) // 2
        else:
            return result(good, f"out of memory at batch {bad}")
        status = run(candidate)
        if status == "ok":
            good = candidate
        elif status == "oom":
            bad = candidate
        else:
            return result(good, failed(status, candidate))


def memory_bound(points: dict[int, int], capacity: int | None) -> int | None:
    """The largest batch whose compiled step fits in ``capacity`` bytes, from XLA's memory analysis of steps
    that ran (batch -> compiled_memory_bytes): a line through the two largest (a step's buffers are a fixed part
    and a part per example). None until two batches are known, or without a capacity."""
    if capacity is None or len(points) < 2:
        return None
    (b1, m1), (b2, m2) = sorted(points.items())[-2:]
    per_example = (m2 - m1) / (b2 - b1)
    if per_example <= 0:
        return None
    return max(b2, int((capacity - (m1 - per_example * b1)) / per_example))


def device_capacity(row: dict[str, Any]) -> int | None:
    """The memory a trial's framework may allocate on its device: the device's memory, times the fraction JAX's
    allocator takes by default (XLA_PYTHON_CLIENT_MEM_FRACTION, 0.75)."""
    total = row.get("accelerator_memory_bytes")
    if not total:
        return None
    fraction = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75"))
    return int(total * fraction)


def find_max_batch(config: BenchmarkConfig, python: str, log: Callable[[str], None] = lambda _: None) -> MaxBatch:
    """Largest per-device batch that trains a few steps (out-of-memory caught in the child, on accelerators).
    Where XLA's memory analysis of the steps that ran tells how the step's memory grows (JAX), the search stops
    at the batch the device's memory allows instead of probing beyond it."""
    probe_base = config.with_changes(steps=2, warmup_steps=10, window_steps=1, steps_per_execution=1)
    points: dict[int, int] = {}  # batch -> compiled_memory_bytes of the probes that ran
    capacity: int | None = None

    def probe(batch: int) -> str:
        nonlocal capacity
        with tempfile.TemporaryDirectory(prefix="stepwatch-maxbatch-") as tmp:
            child, wall_s, _ = run_child(probe_base.with_changes(per_device_batch=batch), python, Path(tmp))
        if child["status"] == "ok" and child.get("compiled_memory_bytes"):
            points[batch] = int(child["compiled_memory_bytes"])
            capacity = capacity or device_capacity(child)
        detail = f": {child.get('error_message')}" if child["status"] not in ("ok", "oom") else ""
        log(f"  batch {batch}: {child['status']} ({wall_s:.0f} s){detail}")
        return child["status"]

    def bound() -> int | None:
        return memory_bound(points, capacity)

    return search_max_batch(probe, config.per_device_batch, bound=bound)
