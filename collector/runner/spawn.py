"""A trial's process, started and waited on: ``python -m stepwatch.collector.trial.process`` in its own process group
under the config's launcher, killed with everything it started at its timeout, its result file read (and its
ranks', or its local workers', judged into one), with its log's tail where it failed."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.metrics import ANON_KIND
from stepwatch.collector.runner import launchers
from stepwatch.collector.trial import memory
from stepwatch.collector.trial.fields import SPAWN_TIME_ENV
from stepwatch.collector.trial.machine import RUNNER_PID_ENV
from stepwatch.collector.trial.ranks import die_with_parent, rank0_pid_file, rank_result
from stepwatch.trainers.workload import Kind

LOG_TAIL_LINES = 40


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
    config: BenchmarkConfig,
    python: str,
    workdir: Path,
    env_extra: dict[str, str] | None = None,
    cwd: Path | None = None,
    module: tuple[str, ...] = (TRIAL_MODULE,),
    watch: Callable[[Path], bool] | None = None,
) -> tuple[dict[str, Any], float, int | None]:
    """Start ``collector.trial.process`` (or another ``module`` with its arguments, which runs the same way: the
    batch search's probes) in its own process group (in ``cwd``, where the workload's paths are read: default
    here), wait up to the timeout, read its result.

    ``watch(result_path)``, called while the child runs (a few times a second), may read what it has written so far
    and stop it (true: the child is killed, and what it wrote is its result): the batch search's probes, said as
    they happen, and its limit on one probe's time.

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
    if cwd is not None:  # a checkout of the team's (a code check's side, its working tree): no __pycache__ left
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        trial = ["-m", *module, "--config", config.to_json(), "--result", str(result_path)]
        proc = subprocess.Popen(
            launchers.command(config, python, trial),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )
        try:  # the parent samples the child's memory while it waits (collector.trial.memory)
            sampled = proc.pid if config.processes == 1 else functools.partial(_rank0_pid, result_path)
            poll = proc.poll if watch is None else _watched(proc, lambda: watch(result_path))
            sampler, code, timed_out = memory.sample_until_exit(
                sampled, poll, config.timeout_s, measured=result_path.exists
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
        if timed_out and config.workload is Kind.SCRIPT:  # a script that ran on after its steps (it caught the stop)
            child["script_note"] = (
                f"script {config.model} ran on after its last measured step (every measured window had closed) and "
                f"was killed at the timeout of {config.timeout_s:g} s"
            )
        elif timed_out:  # after what it measured: while reading its counters, or while profiling (after them)
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


WATCH_EVERY_S = 0.25


def _watched(proc: subprocess.Popen, stop: Callable[[], bool]) -> Callable[[], int | None]:
    """``proc.poll`` that asks ``stop()`` every ``WATCH_EVERY_S`` and, where it says so, kills the child's group."""
    last = [0.0]

    def poll() -> int | None:
        now = time.monotonic()
        if now - last[0] >= WATCH_EVERY_S:
            last[0] = now
            if stop():
                _kill_group(proc)
                proc.wait()
        return proc.poll()

    return poll


def with_peak(child: dict[str, Any], sampler: memory.PeakSampler) -> dict[str, Any]:
    """A CPU trial's fields with the peak anonymous memory the parent sampled (``memory.judged_peak``). A trial in a
    container (an image side) is not the parent's to sample (its process is the engine's client): its peak is what
    it read itself, the floor from the kernel's VmHWM and its last reading."""
    if child.get("peak_memory_kind") == ANON_KIND and child.get("in_container"):
        child.update(memory.judged_peak({"peak_memory_bytes": 0}, child))
        child["peak_memory_note"] = "in a container: the trial's own VmHWM floor and last reading, not sampled"
    elif child.get("peak_memory_kind") == ANON_KIND:
        child.update(memory.judged_peak(sampler.fields(), child))
    return child


def _rank0_pid(result_path: Path) -> int | None:
    """The process id of rank 0, once it has said it (the memory a data-parallel trial reports is rank 0's)."""
    try:
        return int(rank0_pid_file(result_path).read_text())
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
        path = rank_result(result_path, index)
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
    config: BenchmarkConfig, python: str, workdir: Path, workers: int, cwd: Path | None = None
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
                pool.submit(
                    run_child, config, python, folder, {"TF_CONFIG": launchers.tf_config(addresses, index)}, cwd
                )
            )
        child, wall_s, code = run_child(config, python, workdir, {"TF_CONFIG": launchers.tf_config(addresses, 0)}, cwd)
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
