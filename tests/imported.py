"""Other tools' benchmark output for the import tests: each made by the real tool where it installs from the package
index (pytest-benchmark, Google Benchmark's Python package, asv on a repository of its own, torch's SummaryWriter
with torchtitan's tag names, mlperf-logging's logger), else written exactly as the format's documentation and
source show (PyTorch's v3 records, github-action-benchmark's custom JSON, Bencher's Metric Format).

``history`` turns one real output into a night's file: its time moved to that night, its commit to that night's,
and its values scaled (by a little noise, and by the planted step from STEP_NIGHT on), so that a history of nights
comes from what the tool itself wrote."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.conftest import commit, git

FIRST_NIGHT = datetime(2026, 11, 1, 2, tzinfo=UTC)
NIGHTS, STEP_NIGHT, STEP = 12, 8, 1.15  # times 15% longer, rates 15% lower from STEP_NIGHT on
NOISE = 0.01


def night_at(n: int) -> datetime:
    return FIRST_NIGHT + timedelta(days=n)


def sha(n: int) -> str:
    return f"{n + 1:040x}"


def _python(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # A tool run on its own, as a team runs it: not as a worker of this test session (pytest-benchmark turns itself
    # off where it sees xdist's worker variables).
    own = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**own, **(env or {})})  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def pytest_benchmark_output(folder: Path) -> Path:
    """pytest-benchmark's --benchmark-json of a real session: two tests, one parametrized (each waits, so that a loaded
    runner moves its rounds little)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_speed.py").write_text(textwrap.dedent("""
        import time
        import pytest

        def test_sleep(benchmark):
            benchmark.pedantic(time.sleep, args=(0.001,), rounds=8, iterations=1)

        @pytest.mark.parametrize("n", [1, 2])
        def test_wait(benchmark, n):
            benchmark.pedantic(time.sleep, args=(0.001 * n,), rounds=8, iterations=1)
    """))  # fmt: skip
    out = folder / "benchmark.json"
    _python("-m", "pytest", "-q", "-p", "no:cacheprovider", "test_speed.py", f"--benchmark-json={out}", cwd=folder)
    return out


def google_benchmark_output(folder: Path) -> Path:
    """Google Benchmark's JSON from its Python package: repetitions, aggregates, a counter and an error."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench.py").write_text(textwrap.dedent("""
        import time
        import google_benchmark as benchmark

        @benchmark.register
        @benchmark.option.repetitions(3)
        def sleep_1ms(state):
            while state:
                time.sleep(0.001)
            state.items_processed = state.iterations

        @benchmark.register
        def broken(state):
            while state:
                state.skip_with_error("bad input")

        if __name__ == "__main__":
            benchmark.main()
    """))  # fmt: skip
    out = folder / "gbench.json"
    _python("bench.py", f"--benchmark_out={out}", "--benchmark_out_format=json", "--benchmark_min_time=0.005s",
            cwd=folder)  # fmt: skip
    return out


ASV_CONF = {"version": 1, "project": "tiny", "project_url": "http://127.0.0.1/", "repo": ".", "branches": ["main"],
            "environment_type": "existing", "benchmark_dir": "benchmarks", "results_dir": "results",
            "html_dir": "html"}  # fmt: skip
ASV_BENCHMARKS = '''
import time


class Suite:
    params = [1, 2]
    param_names = ["n"]
    repeat = (3, 3, 10.0)
    number = 1
    rounds = 1
    warmup_time = 0

    def time_sleep(self, n):
        time.sleep(0.001 * n)


def peakmem_list():
    [0] * 100_000


def track_widgets():
    return 42.0
track_widgets.unit = "widgets"
'''


def asv_output(folder: Path) -> Path:
    """An asv results folder: ``asv run --record-samples`` on two commits of a tiny repository of its own."""
    repo = folder / "project"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    files = {"asv.conf.json": json.dumps(ASV_CONF), "benchmarks/__init__.py": "",
             "benchmarks/bench.py": ASV_BENCHMARKS,
             "setup.py": "from setuptools import setup\nsetup(name='tiny', version='0.1')\n"}  # fmt: skip
    shas = [commit(repo, "one", files), commit(repo, "two", {"README": "two\n"})]
    asv = str(Path(sys.executable).parent / "asv")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    subprocess.run([asv, "machine", "--yes", "--machine", "ci-box"], cwd=repo, capture_output=True, check=True,
                   env=env, timeout=120)  # fmt: skip
    for done in shas:
        run = [asv, "run", "-E", f"existing:{sys.executable}", "--machine", "ci-box", "--record-samples",
               "--set-commit-hash", done]  # fmt: skip
        found = subprocess.run(run, cwd=repo, capture_output=True, text=True, env=env, timeout=300)
        assert found.returncode == 0, found.stdout[-2000:] + found.stderr[-2000:]
    return repo / "results"


TORCHTITAN_TAGS = {"throughput(tps)": 9000.0, "tflops": 120.0, "mfu(%)": 38.0, "time_metrics/end_to_end(s)": 0.9,
                   "memory/max_reserved(GiB)": 60.0, "loss_metrics/global_avg_loss": 5.0}  # fmt: skip


def torchtitan_night(folder: Path, n: int, factor: float) -> Path:
    """A torchtitan job's TensorBoard folder as its MetricsProcessor writes it (torch's SummaryWriter under
    ``<dump folder>/tb/<timestamp>``), with its tags, every 5 steps to 40, at night ``n``'s time."""
    from torch.utils.tensorboard import SummaryWriter

    logdir = folder / "llama3_debug" / "tb" / night_at(n).strftime("%Y%m%d-%H%M")
    writer = SummaryWriter(log_dir=str(logdir))
    noise = random.Random(n)
    start = night_at(n).timestamp()
    for step in range(1, 41, 5):
        for tag, value in TORCHTITAN_TAGS.items():
            slower = tag in ("time_metrics/end_to_end(s)", "memory/max_reserved(GiB)")
            scaled = value * (factor if slower else 1 / factor) * noise.gauss(1, NOISE)
            writer.add_scalar(tag, scaled, step, walltime=start + step)
    writer.close()
    return logdir


def mlperf_output(folder: Path) -> Path:
    """One MLPerf training log from mlperf-logging's own logger (its constants, its event types)."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "result_0.txt"
    _python("-c", textwrap.dedent(f"""
        import time
        from mlperf_logging import mllog
        from mlperf_logging.mllog import constants
        mllog.config(filename={str(log)!r})
        log = mllog.get_mllogger()
        log.event(key=constants.SUBMISSION_BENCHMARK, value=constants.LLAMA2_70B_LORA)
        log.event(key=constants.SUBMISSION_PLATFORM, value="1xTEST")
        log.event(key=constants.GLOBAL_BATCH_SIZE, value=8)
        log.start(key=constants.INIT_START)
        log.end(key=constants.INIT_STOP)
        log.start(key=constants.RUN_START)
        time.sleep(0.05)
        log.event(key="throughput", value=12.5, metadata={{"unit": "samples/s"}})
        log.end(key=constants.RUN_STOP, metadata={{"status": constants.SUCCESS}})
    """), cwd=folder)  # fmt: skip
    return log


def pytorch_v3_records(n: int, factor: float) -> list[dict[str, Any]]:
    """Records as torchao's benchmarks/utils write them for the PyTorch OSS benchmark database (``schema_version``
    v3: https://github.com/pytorch/pytorch/wiki/How-to-integrate-with-PyTorch-OSS-benchmark-database), with
    runners and dependencies as the uploader fills them in."""
    noise = random.Random(n)
    return [{
        "timestamp": int(night_at(n).timestamp()), "schema_version": "v3", "name": "nightly", "repo": "pytorch/ao",
        "head_branch": "main", "head_sha": sha(n), "workflow_id": 1000 + n, "run_attempt": 1, "job_id": 2000 + n,
        "benchmark": {"name": "TorchAO benchmark", "mode": "inference", "dtype": "bfloat16",
                      "extra_info": {"device": "cuda", "arch": "NVIDIA H100", "compile": True, "min_sqnr": 30.1}},
        "model": {"name": "Llama-2-7b-chat-hf", "type": "model", "origins": ["torchao"]},
        "metric": {"name": "tokens_per_second", "benchmark_values": [150.0 / factor * noise.gauss(1, NOISE)
                                                                     for _ in range(3)], "target_value": 0},
        "runners": [{"name": "gpu-runner-1", "type": "linux.aws.h100", "cpu_info": "Intel Xeon", "cpu_count": 16,
                     "gpu_info": "NVIDIA H100 80GB HBM3", "gpu_count": 1}],
        "dependencies": {"pytorch": {"repo": "pytorch/pytorch", "branch": "main", "sha": "abc", "version": "2.13.0"}},
    }]  # fmt: skip


def github_action_entries(n: int, factor: float) -> list[dict[str, Any]]:
    """github-action-benchmark's custom JSON (README, "Examples": customSmallerIsBetter's input)."""
    noise = random.Random(n)
    return [{"name": "parse config", "unit": "ms", "value": 12.0 * factor * noise.gauss(1, NOISE),
             "range": "± 0.2", "extra": "rounds: 100"},
            {"name": "load weights", "unit": "ms", "value": 30.0 * noise.gauss(1, NOISE)}]  # fmt: skip


def bencher_metrics(n: int, factor: float) -> dict[str, Any]:
    """Bencher Metric Format (bencher.dev/docs/reference/bencher-metric-format): a benchmark's latency measure."""
    noise = random.Random(n)
    value = 3_000_000.0 * factor * noise.gauss(1, NOISE)
    quiet = 1_000_000.0 * noise.gauss(1, NOISE)
    return {"bench::decode": {"latency": {"value": value, "lower_value": value * 0.98, "upper_value": value * 1.02}},
            "bench::encode": {"latency": {"value": quiet}}}  # fmt: skip


def _scaled(values: list[Any], factor: float, noise: random.Random) -> list[Any]:
    return [v * factor * noise.gauss(1, NOISE) for v in values]


def pytest_night(template: dict, n: int, factor: float) -> dict:
    found, noise = copy.deepcopy(template), random.Random(n)
    found["datetime"] = night_at(n).isoformat()
    found["commit_info"].update(id=sha(n), branch="main")
    for bench in found["benchmarks"]:
        bench["stats"]["data"] = _scaled(bench["stats"]["data"], factor, noise)
    return found


def gbench_night(template: dict, n: int, factor: float) -> dict:
    found, noise = copy.deepcopy(template), random.Random(n)
    found["context"]["date"] = night_at(n).isoformat()
    for bench in found["benchmarks"]:
        shift = factor * noise.gauss(1, NOISE)
        for key in ("real_time", "cpu_time"):
            bench[key] *= shift
        if "items_per_second" in bench:
            bench["items_per_second"] /= shift
    return found


def asv_night(results: Path, out: Path, n: int, factor: float) -> None:
    """Night ``n`` of an asv results folder: the real run's result file at that night's commit and date."""
    if not (out / "benchmarks.json").exists():
        out.mkdir(parents=True)
        (out / "benchmarks.json").write_text((results / "benchmarks.json").read_text())
        (out / "ci-box").mkdir()
        (out / "ci-box" / "machine.json").write_text((results / "ci-box" / "machine.json").read_text())
    source = sorted(p for p in (results / "ci-box").glob("*.json") if p.name != "machine.json")[0]
    found, noise = json.loads(source.read_text()), random.Random(n)
    found["commit_hash"], found["date"] = sha(n), int(night_at(n).timestamp() * 1000)
    for name, entry in found["results"].items():
        if name.endswith("track_widgets"):
            continue
        entry[0] = [v * factor * noise.gauss(1, NOISE) if v is not None else v for v in entry[0]]
        samples = found["result_columns"].index("samples")
        if len(entry) > samples and entry[samples]:
            entry[samples] = [_scaled(s, factor, noise) if s else s for s in entry[samples]]
    (out / "ci-box" / f"{sha(n)[:8]}-{found['env_name']}.json").write_text(json.dumps(found))


def mlperf_night(template: Path, folder: Path, n: int, factor: float, logs: int = 3) -> Path:
    """Night ``n``'s logs: the real log's events, its run from run_start to run_stop taking 600 s (times the step)."""
    folder.mkdir(parents=True, exist_ok=True)
    noise = random.Random(n)
    for log in range(logs):
        start_ms = int((night_at(n) + timedelta(hours=log)).timestamp() * 1000)
        took = int(600_000 * factor * noise.gauss(1, NOISE))
        lines = []
        for line in template.read_text().splitlines():
            event = json.loads(line.split(":::MLLOG", 1)[1])
            event["time_ms"] = start_ms + took if event["key"] in ("run_stop",) else start_ms
            if event["key"] == "throughput":
                event["value"] = 12.5 / factor * noise.gauss(1, NOISE)
            lines.append(":::MLLOG " + json.dumps(event))
        (folder / f"result_{log}.txt").write_text("\n".join(lines) + "\n")
    return folder


def factor_of(n: int) -> float:
    return STEP if n >= STEP_NIGHT else 1.0


def write_json(path: Path, data: Any, lines: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(d) for d in data) + "\n" if lines else json.dumps(data))
    return path

