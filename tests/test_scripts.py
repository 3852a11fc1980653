"""A training script of the user's as the benchmark (``run --script PATH -- ARGS``): the markers do nothing outside a
trial, and in one count the steps and end the script's loop; the examples run for real (the PyTorch one
data-parallel, two processes under torch's launcher with gloo); every way a script goes wrong is one row that
names it while the suite goes on, and no process outlives its trial. A script written from the docs alone runs
from an installed wheel in tests/test_adoption.py; the A/A comparison of the PyTorch example and the A/A upgrade
check of both examples are in the large job here."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import uuid
from importlib import metadata
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from playwright.sync_api import sync_playwright

import stepwatch as api
from stepwatch.collector.config import TRIALS, BenchmarkConfig
from stepwatch.collector.environments import virtualenvs
from stepwatch.collector.output.text import repro_command
from stepwatch.collector.trial import script as script_trial
from stepwatch.collector.trial import steps
from stepwatch.collector.trial.measure import WindowClock
from stepwatch.dashboard.browser_harness import CHROMIUM, serve
from stepwatch.dashboard.pages import TITLES
from tests.conftest import stepwatch, write_suite
from tests.test_dashboard_browser import NEEDS_CHROMIUM, no_errors, settled
from tests.test_runner import wait_for

BAD = "tests/data/scripts/bad.py"
TORCH_EXAMPLE = "examples/torch_ddp_train.py"
KERAS_EXAMPLE = "examples/keras_fit_train.py"
FAST = ("--steps", "20", "--warmup", "20", "--window", "10")


def rows_of(out: Path) -> list[dict]:
    return [row for path in sorted(out.rglob("*.parquet")) for row in pq.read_table(path).to_pylist()]


def test_outside_a_trial_the_markers_give_back_what_they_were_given() -> None:
    assert steps.active() is None
    loader = [("x", 1), ("y", 2)]
    assert api.steps(loader, examples_per_step=2) is loader  # the script's own loader, untouched
    assert api.steps(range(3), examples_per_step=0) == range(3)  # not even checked
    assert api.step(examples=4) is None


def test_a_scripts_framework_versions_are_the_frameworks_own_as_a_keras_models_trial_records_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the H200, torch's CUDA build said "2.11.0+cu130" and its distribution "2.11.0": the script's trials
    recorded the one, the Keras model's the other, two versions of one torch on the Versions page."""
    import torch

    monkeypatch.setattr(torch, "__version__", f"{metadata.version('torch').split('+')[0]}+cu130")  # a CUDA build's
    assert script_trial.framework_versions()["torch_version"] == torch.__version__ != metadata.version("torch")


def test_a_session_counts_steps_across_loops_ends_the_loop_and_refuses_a_step_marked_twice() -> None:
    synced = []
    session = steps.Session(WindowClock(first_steps=1, window_steps=2), total_steps=7, sync=lambda: synced.append(1))
    finished = []
    session.on_done = lambda: finished.append(session.done)
    steps.start(session)
    try:
        seen = []
        with pytest.raises(steps.StepsDone):
            for _epoch in range(10):  # epochs of three: the count goes on across loops
                for item in api.steps(range(3), examples_per_step=4):
                    seen.append(item)
        assert len(seen) == 7 and finished == [7] and session.examples_per_step == 4
        assert len(api.steps(range(3), examples_per_step=4)) == 3  # a progress bar still knows its total
        assert [mark.steps for mark in session.clock.marks] == [1, 3, 5, 7] and len(synced) == 4
        assert all(math.isnan(mark.loss) for mark in session.clock.marks)  # a script's loss is not read

        for twice, said in (
            (lambda: [list(api.steps(range(2), examples_per_step=4)) for _ in api.steps(range(2), examples_per_step=4)],
             "inside another stepwatch.steps loop"),
            (lambda: [api.step(examples=4) for _ in api.steps(range(2), examples_per_step=4)], "is counting the steps"),
            (lambda: list(api.steps(range(2), examples_per_step=8)), "examples per step changed from 4 to 8"),
        ):  # fmt: skip
            steps.start(steps.Session(WindowClock(1, 2), total_steps=100))
            steps.active().examples(4)
            with pytest.raises(steps.StepsMisuse, match=said):
                twice()
    finally:
        steps.start(None)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--script", "no/such/train.py"), "script no/such/train.py: no such file"),
        (("--", "--epochs", "1"), "'--epochs 1': arguments after -- are a script's; name the script with --script"),
        (("--script", BAD, "--xla", "on"), "--xla on: a script sets its xla itself; pass it in the script's arg"),
        (("--script", BAD, "--batch", "64"), "--batch 64: a script sets its per_device_batch itself"),
        (("--script", "tests/data/scripts"), "a script is a Python file"),
        (("--models", "resnet50", "--nproc", "2"), "nproc is a script's (run --script PATH)"),
    ],
    ids=["missing", "args-without-script", "xla", "batch", "folder", "nproc-of-a-model"],
)
def test_what_cannot_run_as_a_script_is_one_line_and_exit_2_before_anything_runs(args: tuple, said: str) -> None:
    done = stepwatch("run", "--dry-run", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_script_runs_with_the_suites_measurement_and_its_own_arguments() -> None:
    done = stepwatch("run", "--suite", "smoke", "--script", BAD, "--nproc", "1,2", "--xla", "off,on", "--dry-run", "--",
                     "good", "x y")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{BAD} good 'x y' cpu tensorflow",
        f"{BAD} good 'x y' cpu tensorflow nproc=2",
        f"2 configs x {TRIALS} trials",  # a suite that names no trial count: stepwatch's one default
    ]


WAYS = {  # script_args -> (status, error_type, what the message says)
    "never-marks": ("crash", "NoStepsMarked", f"script {BAD} ran to its end without marking a step"),
    "fewer": ("crash", "TooFewSteps", "ended after 15 of the 41 steps the trial needs"),
    "raises": ("crash", "ValueError", f"script {BAD} raised ValueError: the loss went the wrong way"),
    "hangs": ("timeout", "Timeout", "ran past its timeout of 2 s"),
    "exits": ("crash", "ScriptExit", "exited with code 5 after marking 5 of 41 steps"),
    "twice": ("crash", "StepsMisuse", "stepwatch.steps inside another stepwatch.steps loop"),
}
# The ranks of a data-parallel script that go wrong under torch's launcher (torch.distributed.run: torch imported by
# the launcher and by both ranks): the large tier's test below. Under stepwatch's own launcher they are checked here.
RANK_WAYS = {
    "rank-1-dies": ("crash", "RankFailed", "rank 1 of 2: ended without a result (exit code 7)"),
    "rank-1-hangs": ("timeout", "RankFailed", "rank 1 of 2: was still running at the timeout of 5 s"),
}


def run_ways(tmp_path: Path, configs: list[str], failed: str) -> list[dict]:
    """The rows of a suite of ``configs`` (``[[configs]]`` tables) of scripts, once its run exits 4 saying ``failed``
    (``N of M trials failed``); no process this run started outlives it."""
    suite = write_suite(tmp_path / "bad.toml", "[defaults]\nsteps = 20\ntimeout_s = 60\n\n" + "\n".join(configs))
    out = tmp_path / "out"
    mark = {OWN_MARK: uuid.uuid4().hex}  # inherited by every process this run starts, and by no other's
    done = stepwatch("run", "--suite", str(suite), "--out", str(out), env=mark)
    assert done.returncode == 4 and f"{failed} trials failed" in done.stderr, done.stderr[-3000:]
    # Every rank was killed with its trial: the hung ones, and those torch's launcher put in sessions of their own.
    # Only this run's processes are looked at: another test may be running the same script beside this one.
    assert started_by(mark) == [], started_by(mark)
    return rows_of(out)


def check_ways(rows: list[dict], ways: dict[str, tuple[str, str, str]], backend: str) -> None:
    """Each of ``ways`` is one row of its status and error that names what went wrong."""
    found = {(r["script_args"], r["keras_backend"]): r for r in rows}
    for way, (status, error_type, said) in ways.items():
        row = found[way, backend]
        assert (row["status"], row["error_type"]) == (status, error_type), (way, row["error_message"])
        assert said in row["error_message"], (way, row["error_message"])
        assert row["model"] == BAD and row["model_hash"] and row["examples_per_sec"] is None


def test_what_goes_wrong_in_a_script_is_one_row_naming_it_the_suite_goes_on_and_no_process_outlives_it(
    tmp_path: Path,
) -> None:
    configs = []
    for way in WAYS:
        extra = {"hangs": "timeout_s = 2\n"}.get(way, "")
        configs.append(f'[[configs]]\nmodel = "{BAD}"\nscript_args = "{way}"\n{extra}')
    # A rank's death under stepwatch's own launcher (TensorFlow's TF_CONFIG), and two that go well.
    configs.append(f'[[configs]]\nmodel = "{BAD}"\nscript_args = "rank-1-dies"\nnproc = 2\n')
    configs += [f'[[configs]]\nmodel = "{BAD}"\nscript_args = "good"\nnproc = {n}\n' for n in (1, 2)]
    configs += [f'[[configs]]\nmodel = "{BAD}"\nscript_args = "{way}"\n' for way in
                ("marks-each-step", "swallows-the-stop", "marks-in-a-thread")]  # fmt: skip
    configs.append(f'[[configs]]\nmodel = "{BAD}"\nscript_args = "swallows-and-stays"\ntimeout_s = 3\n')
    rows = run_ways(tmp_path, configs, "7 of 13")
    check_ways(rows, WAYS, "tensorflow")
    found = {(r["script_args"], r["keras_backend"]): r for r in rows}
    check_ways(rows, {"rank-1-dies": RANK_WAYS["rank-1-dies"]}, "tensorflow")
    raised = found["raises", "tensorflow"]
    assert "ValueError: the loss went the wrong way" in raised["log_tail"]  # the traceback is in the log
    good = [r for r in rows if r["script_args"] == "good"]
    assert [(r["status"], r["nproc"], r["replicas"], r["per_device_batch"], r["global_batch"]) for r in good] == [
        ("ok", 1, 1, 4, 4), ("ok", 2, 2, 4, 8)]  # fmt: skip
    assert all(r["examples_per_sec"] > 0 and len(r["window_step_times_s"]) == 2 for r in good)
    [each] = [r for r in rows if r["script_args"] == "marks-each-step"]
    assert each["status"] == "ok" and each["measured_steps"] == 20 and each["per_device_batch"] == 4
    # Every measured window closed, whatever the script did after: ok rows, saying what it did.
    caught, threaded, stays = (found[way, "tensorflow"] for way in ("swallows-the-stop", "marks-in-a-thread",
                                                                     "swallows-and-stays"))  # fmt: skip
    for row in (caught, threaded, stays):
        assert row["status"] == "ok" and row["measured_steps"] == 20 and row["examples_per_sec"] > 0, row
    assert "caught stepwatch's stop" in json.loads(caught["extras"])["script_note"]
    assert "marked its steps in thread 'trainer'" in json.loads(threaded["extras"])["script_note"]
    assert "ran on after its last measured step" in json.loads(stays["extras"])["script_note"]
    assert "was killed at the timeout of 3 s" in json.loads(stays["extras"])["script_note"]


@pytest.mark.large  # torch imported by its launcher and two ranks, twice, and two JAX ranks: 12 s of one worker
def test_ranks_that_go_wrong_under_a_frameworks_launcher_are_one_row_and_no_rank_outlives_its_trial(
    tmp_path: Path,
) -> None:
    """The ranks under torch's launcher, which puts them in sessions of their own, and two JAX processes that
    initialise jax.distributed and run a collective across them."""
    configs = [f'[[configs]]\nmodel = "{BAD}"\nscript_args = "rank-1-dies"\nkeras_backend = "torch"\nnproc = 2\n',
               f'[[configs]]\nmodel = "{BAD}"\nscript_args = "rank-1-hangs"\ntimeout_s = 5\nkeras_backend = "torch"\n'
               "nproc = 2\n",
               '[[configs]]\nmodel = "tests/data/scripts/jax_ranks.py"\nkeras_backend = "jax"\nnproc = 2\n',
               ]  # fmt: skip
    rows = run_ways(tmp_path, configs, "2 of 3")
    check_ways(rows, RANK_WAYS, "torch")
    [jax_ranks] = [r for r in rows if r["keras_backend"] == "jax"]  # jax.distributed, then a collective
    assert jax_ranks["status"] == "ok" and jax_ranks["replicas"] == 2, jax_ranks["error_message"]


OWN_MARK = "STEPWATCH_TEST_RUN"


def started_by(mark: dict[str, str]) -> list[list[str]]:
    """The command lines of the live processes whose environment carries ``mark``: those a run started (the run is
    started with it; its trials, their ranks and launchers inherit it), wherever they were reparented."""
    found = []
    for process in psutil.process_iter(["cmdline", "environ"]):  # unreadable ones (zombies, gone) have None
        if (process.info["environ"] or {}).get(OWN_MARK) == mark[OWN_MARK] and process.pid != os.getpid():
            found.append(process.info["cmdline"])
    return found


def test_only_the_processes_a_run_started_are_its_own(tmp_path: Path) -> None:
    """The same script run by someone else (another test worker's upgrade check runs bad.py too) is not this run's;
    a process this run started is, also once its parent is gone."""
    mark = {OWN_MARK: uuid.uuid4().hex}
    others = subprocess.Popen([sys.executable, BAD, "hangs"], stdout=subprocess.DEVNULL)
    ours = subprocess.Popen(["sh", "-c", f"{shlex.quote(sys.executable)} {BAD} hangs & wait"],
                            env={**os.environ, **mark}, stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        found = wait_for(lambda: [c for c in started_by(mark) if BAD in c], what="the marked script")
        assert found == [[sys.executable, BAD, "hangs"]]
        ours.kill()  # its child is reparented, and still the run's
        ours.wait()
        assert [c for c in started_by(mark) if BAD in c] == found
    finally:
        killed = []
        for process in psutil.process_iter(["environ"]):
            if (process.info["environ"] or {}).get(OWN_MARK) == mark[OWN_MARK]:
                process.kill()
                killed.append(process)
        # A kill is delivered, not done: on a loaded machine the process is still listed a moment later.
        psutil.wait_procs(killed, timeout=30)
        others.kill()
        others.wait()
    assert started_by(mark) == []


def run_torch_example(tmp_path: Path, labels: tuple[str, ...], trials: int) -> list[dict]:
    out = tmp_path / "out"
    for label in labels:
        done = stepwatch("run", "--script", TORCH_EXAMPLE, "--keras-backend", "torch", "--nproc", "2", *FAST,
                         "--trials", str(trials), "--label", label, "--out", str(out), "--", "--batch", "16",
                         "--data", str(tmp_path / "shards"))  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    rows = rows_of(out)
    assert len(rows) == len(labels) * trials and {r["status"] for r in rows} == {"ok"}, [
        r["error_message"] for r in rows
    ]
    return rows


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both examples run once (the PyTorch one data-parallel), into one folder; the folder."""
    root = tmp_path_factory.mktemp("examples")
    run_torch_example(root, ("torch",), trials=1)
    done = stepwatch("run", "--script", KERAS_EXAMPLE, *FAST, "--trials", "1", "--label", "keras", "--out",
                     str(root / "out"), "--", "--batch", "16", "--records",
                     str(root / "examples.tfrecord"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return root


@pytest.mark.large
def test_the_pytorch_example_trains_data_parallel_from_its_files_through_its_loaders_workers(examples: Path) -> None:
    [row] = [r for r in rows_of(examples / "out") if r["label"] == "torch"]
    assert (row["model"], row["nproc"], row["replicas"], row["per_device_batch"], row["global_batch"]) == (
        TORCH_EXAMPLE, 2, 2, 16, 32)  # fmt: skip
    assert row["script_args"] == f"--batch 16 --data {examples / 'shards'}" and row["loop"] == "script"
    assert json.loads(row["extras"])["frameworks_loaded"] == ["torch"] and row["torch_version"]
    assert row["peak_memory_kind"] == "host_anon" and row["peak_memory_bytes"] > 0
    assert sorted((examples / "shards").glob("*.npz"))  # the script wrote its dataset and read it back


@pytest.mark.large  # four data-parallel trials: 30 s of both cores
def test_an_aa_comparison_of_the_pytorch_example_stays_quiet(tmp_path: Path) -> None:
    run_torch_example(tmp_path, ("aa",), trials=4)  # both sides interleaved in time: trials 0, 2 against 1, 3
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(tmp_path / "out"), "--db", str(db)).returncode == 0
    selected = f"model={TORCH_EXAMPLE},nproc=2"  # the script by name, in the selection language
    compare = stepwatch("compare", "--baseline", f"trial=0|2,{selected}", "--candidate", f"trial=1|3,{selected}",
                        "--db", str(db), "--format", "json")  # fmt: skip
    assert compare.returncode == 0, compare.stdout + compare.stderr
    verdicts = {r["verdict"] for r in json.loads(compare.stdout)["rows"]}
    assert verdicts <= {"no change", "inconclusive"}, compare.stdout


@pytest.mark.large
def test_the_keras_example_trains_with_fit_on_tf_data(examples: Path) -> None:
    [row] = [r for r in rows_of(examples / "out") if r["label"] == "keras"]
    records = examples / "examples.tfrecord"
    assert row["status"] == "ok" and row["per_device_batch"] == 16 and row["tf_version"] and row["keras_version"]
    assert row["measured_steps"] == 20 and records.exists()
    # The time to its first step is the script's own start (its imports, its tf.data pipeline, its model), not a
    # compilation: TensorFlow reports none.
    assert row["compile_s"] is None and 0 < row["startup_script_s"] < row["startup_s"]
    assert row["startup_s"] == pytest.approx(
        row["startup_python_s"] + row["startup_environment_s"] + row["startup_script_s"], abs=0.05
    )


@pytest.mark.large  # 3 environments x 2 trials of each example: about 2 minutes of both cores
def test_an_aa_upgrade_check_of_both_examples_runs_each_script_in_every_side_environment_and_stays_quiet(
    tmp_path: Path,
) -> None:
    pins = f"pytz=={metadata.version('pytz')}"  # installed already: the sides are this interpreter's packages
    for script, backend, args in ((TORCH_EXAMPLE, "torch", ("--nproc", "2")), (KERAS_EXAMPLE, "tensorflow", ())):
        folder = tmp_path / Path(script).stem
        done = stepwatch(
            "upgrade-check", "--baseline", pins, "--candidate", pins, "--aa", "--reuse-site-packages",
            "--pip-arg=--no-index", "--script", script, "--keras-backend", backend, *args, *FAST, "--trials", "2",
            "--max-trials", "2", "--results", str(folder / "results"), "--db", str(folder / "check.duckdb"),
            "--format", "json", "--", "--batch", "16", env={virtualenvs.CACHE_ENV: str(tmp_path / "envs")}, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        rows = rows_of(folder / "results")
        assert sorted(r["label"] for r in rows) == ["baseline"] * 2 + ["baseline-aa"] * 2 + ["candidate"] * 2
        assert {(r["status"], r["model"], r["model_hash"]) for r in rows} == {("ok", script, rows[0]["model_hash"])}
        pythons = {label: {json.loads(r["extras"])["python_executable"] for r in rows if r["label"] == label}
                   for label in ("baseline", "baseline-aa")}  # fmt: skip
        assert pythons["baseline"] != pythons["baseline-aa"] and sys.executable not in pythons["baseline"]
        report = json.loads(done.stdout)
        assert report["rows"] and all(row["verdict"] in ("no change", "inconclusive") for row in report["rows"])


def test_a_scripts_repro_command_runs_the_same_series_again() -> None:
    config = BenchmarkConfig(model=BAD, script_args="good 'two words'", nproc=2, keras_backend="torch")
    command = repro_command({**config.__dict__, "per_device_batch": 16, "suite": "smoke"}, trials=3)
    assert command.endswith(f"--script {BAD} --keras-backend torch --device cpu --nproc 2 --steps 100 --warmup 20 "
                            "--window 10 -- good 'two words'")  # fmt: skip
    words = shlex.split(command)
    done = stepwatch(*words[1:2], "--dry-run", *words[2:])
    assert done.returncode == 0 and done.stdout.splitlines() == [config.label(), "1 configs x 3 trials"], done.stderr


@pytest.mark.large
@NEEDS_CHROMIUM
def test_the_dashboards_pages_show_the_examples_by_name(examples: Path) -> None:
    db = examples / "store.duckdb"
    assert stepwatch("ingest", str(examples / "out"), "--db", str(db)).returncode == 0
    with serve(db) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)  # the Overview's table: a row for each script's series, named by its path and arguments
        settled(page, TITLES["overview"])
        cells = page.locator('td[role="gridcell"]')
        for name in (TORCH_EXAMPLE, KERAS_EXAMPLE):
            cells.filter(has_text=f"{name} --batch 16").first.wait_for(state="attached", timeout=120_000)
        no_errors(page, "overview")
        page.goto(f"{url}/history?model={TORCH_EXAMPLE},{KERAS_EXAMPLE}")  # both picked, by link: the legend
        settled(page, TITLES["history"])
        page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
        legend = page.locator(".js-plotly-plot .legendtext").all_text_contents()
        assert all(any(name in entry for entry in legend) for name in (TORCH_EXAMPLE, KERAS_EXAMPLE)), legend
        no_errors(page, "history")
        browser.close()


def test_a_launcher_that_starts_no_rank_is_the_trial_processs_own_failure(tmp_path: Path) -> None:
    """torch's launcher in an environment without torch never starts a rank: no rank is blamed, and the row is the
    process's exit with the log's last line (No module named 'torch'), as for any trial that cannot start."""
    from stepwatch.collector.runner import spawn

    config = BenchmarkConfig(model=BAD, nproc=2, keras_backend="torch")
    log = "python: Error while finding module specification for 'torch.distributed.run' (No module named 'torch')"
    assert spawn.judge_ranks(config, tmp_path / "result.json", 1, log, timed_out=False) == {}
    judged = spawn.judge_ranks(config, tmp_path / "result.json", 1, log + "\nrank 1 exitcode 7", timed_out=False)
    assert judged["error_message"].startswith("rank 1 of 2: ended without a result (exit code 7)")
