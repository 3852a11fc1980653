"""The suite runner with real trial processes: failure rows, kills, timeouts, NaN, --resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from stepwatch.collector.config import (
    FIELD_NAMES,
    BenchmarkConfig,
    auto_threads,
    column,
    config_from_row,
    thread_counts,
    usable_cores,
)
from stepwatch.collector.runner import execution
from stepwatch.collector.runner.results import read_rows
from stepwatch.collector.schema import COLUMNS, SCHEMA
from stepwatch.collector.trial import machine
from tests.conftest import REPO, stepwatch, write_suite

BAD = "tests/data/scripts/bad.py"
FAST = """
[defaults]
model = "teacher"  # the quickest bundled model to build and compile: the runner is under test, not a model
preset = "tiny"
steps = 20
warmup_steps = 20
window_steps = 10
timeout_s = 180
"""


def rows_of(out: Path) -> list[dict]:
    files = sorted(out.glob("*.parquet"))
    assert len(files) == 1, files
    return pq.read_table(files[0]).to_pylist()


def wait_for(condition, timeout: float = 120.0, what: str = "condition"):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def row_count(out: Path) -> int:
    files = list(out.glob("*.parquet"))
    return pq.read_metadata(files[0]).num_rows if files else 0


def test_ok_nan_and_hang_each_give_a_row_and_the_suite_goes_on(tmp_path: Path) -> None:
    suite = write_suite(
        tmp_path / "mixed.toml",
        FAST
        + f"""
[[configs]]
loop = "ctl"
xla = "on"
threads = "2/1"

[[configs]]
learning_rate = nan  # every update is NaN by IEEE arithmetic, on any CPU

[[configs]]
model = "{BAD}"  # no framework to import: it only has to outlast its timeout
script_args = "hangs"
timeout_s = 5

[[configs]]
precision = "mixed_bfloat16"
threads = "auto"
""",
    )
    out = tmp_path / "out"
    result = stepwatch("run", "--suite", str(suite), "--out", str(out), "--label", "test")
    assert result.returncode == 4, result.stderr
    assert "2 of 4 trials failed" in result.stderr
    rows = rows_of(out)
    ok_ctl, nan, hang, ok_bf16 = rows
    assert [r["status"] for r in rows] == ["ok", "nonfinite_loss", "timeout", "ok"]

    assert nan["error_type"] == "NonFiniteLoss" and "nan" in nan["error_message"]
    assert nan["examples_per_sec"] is None and nan["loss_finite"] is False
    # A trial that hangs is killed at its timeout, whatever it runs (a bundled model's own: test_dashboard's store).
    assert "ran past its timeout of 5 s" in hang["error_message"]
    assert hang["wall_s"] == pytest.approx(5, abs=2)
    assert "waiting for a batch that never comes" in hang["log_tail"]  # what it printed before it was killed

    for row in (ok_ctl, ok_bf16):
        assert row["xla_effective"] == row["xla_requested"]
        assert row["examples_per_sec"] > 0 and row["loss_finite"]
        assert len(row["window_step_times_s"]) == 2 and len(row["window_losses"]) == 2
        assert row["compile_s"] > 0 and row["startup_s"] > row["compile_s"]
        if row["price_key"]:  # a hosted runner the catalog knows (GitHub's, by its size)
            assert row["cost_usd"] > 0 and row["price_source"] and row["price_date"] and row["price_covers"]
        else:  # any other machine: no cost, and why
            assert row["cost_usd"] is None and "matches no entry of the price catalog" in row["price_note"]
            assert os.environ.get("RUNNER_ENVIRONMENT") != "github-hosted" or row["cpu_cores"] not in (2, 4, 8, 16)
        assert row["tf_version"] and row["keras_version"] and row["cpu_cores"] >= 1
        assert row["peak_memory_bytes"] > 0 and row["flops_per_example"] > 0
        assert row["label"] == "test" and row["source"] == "real"
        # TensorFlow imports JAX whenever it is installed; the trial hides it and records what it loaded.
        assert json.loads(row["extras"])["frameworks_loaded"] == ["tensorflow"]
    assert ok_ctl["loop"] == "ctl" and ok_ctl["xla_effective"] is True and ok_ctl["tf32_enabled"] is False
    # Host threads: set as asked, read back from TensorFlow; auto is what it picks for this host, recorded.
    assert (ok_ctl["threads"], ok_ctl["intra_op_threads"], ok_ctl["inter_op_threads"]) == ("2/1", 2, 1)
    picked = auto_threads("cpu", "tensorflow", usable_cores())
    assert ok_bf16["threads"] == picked and (ok_bf16["intra_op_threads"], ok_bf16["inter_op_threads"]) == (
        thread_counts(picked)
    )
    extras = json.loads(ok_bf16["extras"])
    assert extras["usable_cores"] == usable_cores()
    # How busy the host was while it measured: this process kept at least part of a core busy. The machine's load
    # was read from /proc/stat (Linux), so "shared" was decided, and as its limits say; "throttled" was decided
    # wherever a quota was read.
    assert 0.2 < extras["process_cpu_per_s"] <= usable_cores() + 0.5
    other, steal = ok_bf16["host_other_cpu"], ok_bf16["host_steal_cpu"]
    assert other is not None and steal is not None and isinstance(ok_bf16["shared"], bool)
    limit = max(machine.SHARED_OTHER_CORES, machine.SHARED_OTHER_SHARE * (os.cpu_count() or 1))
    rounding = 0.001  # the row keeps three decimals
    assert ok_bf16["shared"] == ("shared: " in (ok_bf16["machine_note"] or ""))
    if not ok_bf16["shared"]:
        assert other < limit + rounding and steal < machine.SHARED_STEAL_CORES + rounding
    else:
        assert other >= limit - rounding or steal >= machine.SHARED_STEAL_CORES - rounding
    assert ok_bf16["cpu_throttled_s"] is None or isinstance(ok_bf16["throttled"], bool)
    assert ok_bf16["compute_dtype"] == "bfloat16" and ok_bf16["xla_effective"] is False

    schema = pq.read_schema(sorted(out.glob("*.parquet"))[0])
    assert schema.names == SCHEMA.names
    # Every config field is stored in a config column, and each row's config columns give back its series.
    config_columns = {name for name, _, group in COLUMNS if group == "config"}
    assert {column(name) for name in FIELD_NAMES} <= config_columns
    for row in rows:
        assert config_from_row(row).key == row["config_key"]


def test_sigkilled_trial_gets_a_row_and_resume_skips_finished_trials(tmp_path: Path) -> None:
    suite = write_suite(
        tmp_path / "three.toml",
        # Scripts without a framework (tests/data/scripts/bad.py): a kill is the runner's to handle, whatever ran.
        # The last two could not finish on their own before the test stops waiting for them.
        FAST
        + "".join(
            f'[[configs]]\nmodel = "{BAD}"\nscript_args = "{way}"\n{steps}\n'
            for way, steps in (
                ("good", ""),
                ("marks-each-step", "steps = 1000000"),
                ("marks-each-step again", "steps = 1000000"),
            )
        ),
    )
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "stepwatch", "run", "--suite", str(suite), "--out", str(out)]
    suite_proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    parent = psutil.Process(suite_proc.pid)
    third = None
    try:
        wait_for(lambda: row_count(out) == 1, what="the first trial's row")
        second = wait_for(lambda: parent.children(), what="the second trial's process")[0]
        second.send_signal(signal.SIGKILL)
        wait_for(lambda: row_count(out) == 2, what="the killed trial's row")
        third = wait_for(lambda: parent.children(), what="the third trial's process")[0]
        suite_proc.send_signal(signal.SIGKILL)  # the whole suite dies mid-trial
        suite_proc.wait(timeout=30)
        _, alive = psutil.wait_procs([third], timeout=10)
        assert not alive, "a trial must not outlive its killed suite"
    finally:
        if suite_proc.poll() is None:
            suite_proc.kill()
        suite_proc.communicate()
        if third is not None and third.is_running():  # never leave the long trial behind if the check failed
            third.kill()

    before = rows_of(out)
    assert [r["status"] for r in before] == ["ok", "killed"]
    assert before[1]["error_type"] == "SIGKILL" and "killed by SIGKILL" in before[1]["error_message"]

    # --steps does not change a config's identity, so the finished trials are still recognised
    resumed = stepwatch("run", "--suite", str(suite), "--out", str(out), "--resume", "--steps", "20")
    assert resumed.returncode == 0, resumed.stderr
    assert "2 of 3 trials already recorded" in resumed.stderr
    after = rows_of(out)
    assert [r["status"] for r in after] == ["ok", "killed", "ok"]
    assert [r["script_args"] for r in after] == ["good", "marks-each-step", "marks-each-step again"]
    assert after[0]["run_id"] == before[0]["run_id"]
    assert len({r["suite_run_id"] for r in after}) == 1


def test_trials_are_interleaved_round_robin() -> None:
    a, b = BenchmarkConfig(model="bert"), BenchmarkConfig(model="bilstm")
    plan = execution.interleave([a, b], trials=3)
    assert [(c.model, t) for c, t in plan] == [
        ("bert", 0),
        ("bilstm", 0),
        ("bert", 1),
        ("bilstm", 1),
        ("bert", 2),
        ("bilstm", 2),
    ]
    done = [{"config_key": a.key, "trial": 0}, {"config_key": b.key, "trial": 1}]
    assert [(c.model, t) for c, t in execution.pending(plan, done)] == [
        ("bilstm", 0),
        ("bert", 1),
        ("bert", 2),
        ("bilstm", 2),
    ]


@pytest.mark.large
def test_a_multi_worker_trial_spans_two_local_workers(tmp_path: Path) -> None:
    done = stepwatch(
        "run", "--suite", "smoke", "--models", "bilstm", "--xla", "off", "--precision", "fp32",
        "--strategy", "multi-worker", "--loop", "ctl", "--workers", "2", "--trials", "1",
        "--steps", "20", "--warmup", "20", "--window", "10", "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [path] = tmp_path.glob("*.parquet")
    [row] = read_rows(path)
    assert (row["status"], row["strategy"], row["loop"], row["replicas"]) == ("ok", "multi-worker", "ctl", 2)
    assert row["global_batch"] == row["per_device_batch"] * 2 == 16
    workers = json.loads(row["extras"])["workers"]
    assert [w["index"] for w in workers] == [0, 1] and all(w["status"] == "ok" and w["host"] for w in workers)
    assert len({w["address"] for w in workers}) == 2 and all(w["address"].startswith("127.0.0.1:") for w in workers)


def test_multi_worker_with_fit_is_refused_in_one_line() -> None:
    done = stepwatch("run", "--models", "bilstm", "--strategy", "multi-worker", "--loop", "fit", "--dry-run")
    assert done.returncode == 2 and "keras-team/keras#20585" in done.stderr
