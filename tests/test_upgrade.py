"""``stepwatch upgrade-check``: side environments, the interleaved plan, and a real check end to end.

The end-to-end check builds its side environments on top of this interpreter's packages
(``--reuse-site-packages``) and pins two packages that are already installed, with ``--no-index``: it
runs the real code paths without downloading TensorFlow twice. The checks between two TensorFlow
releases are run by hand and reported in docs/reference.md.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.environments import virtualenvs
from stepwatch.collector.output.failures import failure_lines
from stepwatch.collector.runner import execution
from tests.conftest import REPO, rows_in, stepwatch

PYTZ = f"pytz=={metadata.version('pytz')}"
PSUTIL = f"psutil=={metadata.version('psutil')}"
SKLEARN = "scikit-learn"  # not installed here: pip fetches it from its configured index
SMALL = ("--models", "bilstm", "--xla", "off", "--precision", "fp32", "--steps", "20", "--warmup", "20")


def test_plan_alternates_the_first_side_every_round() -> None:
    configs = [BenchmarkConfig(model="bilstm"), BenchmarkConfig(model="bert")]
    order = [(side, config.model, trial) for side, config, trial in virtualenvs.plan(configs, 2)]
    assert order == [
        ("baseline", "bilstm", 0),
        ("candidate", "bilstm", 0),
        ("baseline", "bert", 0),
        ("candidate", "bert", 0),
        ("candidate", "bilstm", 1),
        ("baseline", "bilstm", 1),
        ("candidate", "bert", 1),
        ("baseline", "bert", 1),
    ]


@pytest.mark.parametrize(
    ("baseline", "message"),
    [("tensorflow=2.20.0", "is not a pip requirement"), ("   ", "--baseline is empty")],
)
def test_bad_requirements_are_one_line_and_exit_2(baseline: str, message: str) -> None:
    done = stepwatch("upgrade-check", "--baseline", baseline, "--candidate", "tensorflow==2.21.0", "--dry-run")
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_side_pip_cannot_install_fails_with_one_line_and_is_not_cached(tmp_path: Path) -> None:
    env = {virtualenvs.CACHE_ENV: str(tmp_path / "envs")}
    done = stepwatch(
        "upgrade-check", "--baseline", "no-such-package-stepwatch==1.0", "--candidate", PYTZ,
        "--reuse-site-packages", "--pip-arg=--no-index", *SMALL, "--trials", "2", env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert "stepwatch: error: cannot install no-such-package-stepwatch==1.0 for the baseline" in done.stderr
    assert not list((tmp_path / "envs").glob(f"*/{virtualenvs.READY}"))


def test_package_diff_lists_everything_the_upgrade_changes(tmp_path: Path) -> None:
    sides = {}
    for side, freeze in (
        ("baseline", "tensorflow==2.20.0\ntensorboard==2.20.0\nKeras==3.15.1\nh5py==3.16.0\n"),
        ("candidate", "tensorflow==2.21.0\nkeras==3.15.1\nh5py==3.14.0\n-e git+https://example.invalid/x#egg=x\n"),
    ):
        (tmp_path / side).mkdir()
        (tmp_path / side / "freeze.txt").write_text(freeze)
        sides[side] = virtualenvs.Environment(side, (), tmp_path / side, cached=True)
    assert virtualenvs.package_diff(sides["baseline"], sides["candidate"]) == [
        ("h5py", "3.16.0", "3.14.0"),
        ("tensorboard", "2.20.0", "-"),
        ("tensorflow", "2.20.0", "2.21.0"),
    ]
    assert virtualenvs.installed(sides["baseline"]) == {"tensorflow": "2.20.0", "keras": "3.15.1"}


def test_a_workload_that_breaks_before_its_first_step_runs_no_more_on_its_side_and_leads_the_report(
    tmp_path: Path,
) -> None:
    """A script that ends without marking a step fails the same way every time: after its first trial on a side, its
    other trials there are not run. A script that raises after its first step may be flaky, so every trial of it
    runs. Framework-free scripts (tests/data/scripts/bad.py), two sides on this interpreter, really run."""
    bad = "tests/data/scripts/bad.py"
    configs = [BenchmarkConfig(model=bad, script_args=way, steps=20, warmup_steps=20, window_steps=10)
               for way in ("never-marks", "raises")]  # fmt: skip
    envs = {side: virtualenvs.Environment(side, (), Path(sys.prefix), True, sys.executable, REPO)
            for side in virtualenvs.SIDES}  # fmt: skip
    check = virtualenvs.run(configs, 3, "broken", envs, tmp_path, execution.RunOptions())
    ran = [(o.row["label"], o.config.script_args, o.row["status"], o.broken) for o in check.outcomes]
    assert ran.count(("baseline", "never-marks", "crash", True)) == 1
    assert ran.count(("candidate", "never-marks", "crash", True)) == 1
    assert [r for r in ran if r[1] == "raises"] == [(side, "raises", "crash", False) for side in
                                                     ("baseline", "candidate", "candidate", "baseline", "baseline",
                                                      "candidate")]  # fmt: skip
    assert [(side, config.script_args, trial) for side, config, trial in check.skipped] == [
        ("candidate", "never-marks", 1), ("baseline", "never-marks", 1),
        ("baseline", "never-marks", 2), ("candidate", "never-marks", 2)]  # fmt: skip
    lines = failure_lines(check)
    assert lines[0].startswith(f"**Failed on the baseline: `{bad} never-marks") and lines[1].startswith(
        f"**Failed on the baseline: `{bad} raises")  # fmt: skip
    never, raises = lines[0], lines[1]
    assert f"1 of 1 trial(s) failed before its first step: NoStepsMarked: script {bad} ran to its end" in never
    assert never.endswith("Its other 2 trial(s) were not run: the same code fails the same way.")
    assert f"3 of 3 trial(s) failed: script {bad} raised ValueError: the loss" in raises and "not run" not in raises
    assert len(lines) == 5 and lines[-1] == ""  # two workloads on two sides, then a blank line


# pip fetches scikit-learn from the package index (half a minute on 2 cores): CI's `large` job. Side environments
# built and trials run in them are checked in every run by the A/A upgrade check below (pins already installed).
@pytest.mark.large
def test_run_with_a_package_set_runs_its_trials_in_that_environment(tmp_path: Path) -> None:
    """``stepwatch run --with``: the trials run in the package set's cached environment (how the reference
    history under data/reference/ was measured, one TensorFlow release at a time). Here the set adds
    scikit-learn, from the package index pip is configured with, and the trial runs on JAX: Keras imports
    scikit-learn wherever it is installed, scikit-learn imports scipy.stats, and that crashed every JAX trial on
    the first GPU host while the trial hid torch with a ``None`` in ``sys.modules``."""
    cache, out = tmp_path / "envs", tmp_path / "results"
    jax = ("--keras-backend", "jax", "--models", "bilstm", "--xla", "on", "--precision", "fp32", "--steps", "20",
           "--warmup", "20")  # fmt: skip
    command = ("run", "--with", SKLEARN, "--reuse-site-packages", *jax, "--trials", "1", "--out", str(out),
               "--label", "with-sklearn")  # fmt: skip
    done = stepwatch(*command, env={virtualenvs.CACHE_ENV: str(cache)}, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "with: building an environment for " + SKLEARN in done.stderr
    [row] = rows_in(out)
    assert row["status"] == "ok" and row["label"] == "with-sklearn" and row["keras_backend"] == "jax", row["log_tail"]
    assert json.loads(row["extras"])["frameworks_loaded"] == ["jax"]
    [ready] = cache.glob(f"*/{virtualenvs.READY}")
    assert "scikit-learn==" in (ready.parent / "freeze.txt").read_text()
    probe = "import os; os.environ['KERAS_BACKEND'] = 'jax'; import keras, sys; print('sklearn' in sys.modules)"
    python = ready.parent / "bin" / "python"
    imported = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120)
    assert imported.stdout.strip() == "True", imported.stderr[-2000:]  # the path that crashed on the GPU host ran
    again = stepwatch(*command, "--resume", env={virtualenvs.CACHE_ENV: str(cache)}, timeout=300)  # nothing left to run
    assert again.returncode == 0 and "with: using the cached environment" in again.stderr


def test_run_with_a_bad_requirement_is_one_line_and_exit_2() -> None:
    done = stepwatch("run", "--with", "tensorflow=2.20.0", "--dry-run")
    assert done.returncode == 2 and "--with: 'tensorflow=2.20.0' is not a pip requirement" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_plan_rotates_three_sides_so_none_always_runs_first() -> None:
    order = [
        (side, trial) for side, _, trial in virtualenvs.plan([BenchmarkConfig(model="bilstm")], 3, ("a", "b", "c"))
    ]
    assert order == [("a", 0), ("b", 0), ("c", 0), ("b", 1), ("c", 1), ("a", 1), ("c", 2), ("a", 2), ("b", 2)]


def aa_check(tmp_path: Path, env: dict[str, str], calibration: Path | None) -> str:
    """A real upgrade check of two pins of packages already installed (pytz -> psutil: the same code on every side)
    with --aa: a third environment, all three interleaved, the first trial of each side profiled, the A/A reported
    and the intervals widened by it (and by ``calibration``'s variation, if given). Nothing changed, so no verdict
    fires on peak memory (exit 0). Its report's text."""
    report = tmp_path / "report.json"
    calibrated = ("--calibration", str(calibration)) if calibration else ()
    done = stepwatch(
        "upgrade-check", "--baseline", PYTZ, "--candidate", PSUTIL, "--aa", "--metric", "peak_memory_bytes",
        *calibrated, "--results", str(tmp_path / "results"), "--format", "json", "--out", str(report), "--profile",
        "1", "--max-trials", "2", *common_args(tmp_path), env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "candidate: building an environment for " + PSUTIL in done.stderr
    # The A/A side is a separately built environment: not the baseline's (calibrate's second environment of the
    # same requirements is the same copy, so it may come from the cache)
    paths = {side: path for side, path in re.findall(
        r"^(baseline|baseline-aa): (?:using the cached environment|building an environment for \S+ in) (\S+)",
        done.stderr, re.M)}  # fmt: skip
    assert set(paths) == {"baseline", "baseline-aa"} and paths["baseline"] != paths["baseline-aa"], done.stderr
    check_dir, rows = quiet_and_interleaved(report, tmp_path / "results")
    assert all(r["status"] == "ok" and r["tf_version"] for r in rows)
    # The user's model ran in all three environments, the same code on every side: the report does not warn.
    assert {(r["model"], r["model_hash"]) for r in rows} == {(MINE, rows[0]["model_hash"])} and rows[0]["model_hash"]
    text = (check_dir / "report.md").read_text()
    assert text.startswith(f"## stepwatch upgrade check: {PYTZ} -> {PSUTIL}")
    assert "1 config(s) x 2 trials per side" in text and "What the check cost: " in text
    assert "A/A (the baseline in a second environment of the same packages)" in text
    assert "🔴" not in text and "🟢" not in text
    # --profile 1: the first trial of each side recorded its op table, and the report says where the time went.
    assert {(r["label"], r["trial"]) for r in rows if r["op_types"]} == {("baseline", 0), ("candidate", 0),
                                                                         ("baseline-aa", 0)}  # fmt: skip
    assert "Where the time went" in text and "1 + 1 profiled trials" in text
    return text


def quiet_and_interleaved(report: Path, results: Path) -> tuple[Path, list[dict]]:
    """An A/A check's one verdict (two ok trials a side) is quiet; its trials ran interleaved, each round starting
    with another side. The check's folder and its rows, in the order they ran."""
    payload = json.loads(report.read_text())
    [row] = payload["rows"]
    assert (row["n_baseline"], row["n_candidate"], row["failed_baseline"], row["failed_candidate"]) == (2, 2, 0, 0)
    assert row["verdict"] in ("no change", "inconclusive") and payload["exit_code"] == 0
    [check_dir] = results.iterdir()
    rows = sorted(rows_in(check_dir), key=lambda r: r["started_at"])
    assert [r["label"] for r in rows] == ["baseline", "candidate", "baseline-aa", "candidate", "baseline-aa",
                                          "baseline"]  # fmt: skip
    return check_dir, rows


# The check's model is a user's own (tests/test_user_models.py): its trials import it in both environments.
MINE = "tests/data/models/sentiment.py:sentiment"


def common_args(tmp_path: Path) -> tuple[str, ...]:
    return ("--reuse-site-packages", "--pip-arg=--no-index", "--models", MINE, *SMALL[2:], "--trials", "2", "--db",
            str(tmp_path / "check.duckdb"))  # fmt: skip


BAD = REPO / "tests" / "data" / "scripts" / "bad.py"  # framework-free scripts: a trial imports no framework


def test_an_aa_upgrade_check_of_a_script_runs_each_side_in_its_own_environment_interleaved_and_stays_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check below, of a script that imports no framework: three environments built (the A/A's its own), each
    side's trials run by its own environment's interpreter, interleaved, the A/A quiet and reported, and the
    environments cached. The same check of a Keras model (its framework imported in every side, profiled, read back
    by explain and the dashboard) costs 40 s of both cores: CI's large job."""
    env = {virtualenvs.CACHE_ENV: str(tmp_path / "envs"), "STEPWATCH_RUNNER_LABEL": "test-runner"}
    report = tmp_path / "report.json"
    done = stepwatch(
        "upgrade-check", "--baseline", PYTZ, "--candidate", PSUTIL, "--aa", "--metric", "peak_memory_bytes",
        "--reuse-site-packages", "--pip-arg=--no-index", "--script", str(BAD), "--steps", "20", "--warmup", "20",
        "--trials", "2", "--max-trials", "2", "--db", str(tmp_path / "check.duckdb"), "--results",
        str(tmp_path / "results"), "--format", "json", "--out", str(report), "--", "good", env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    built = dict(re.findall(r"^(baseline|baseline-aa|candidate): building an environment for \S+ in (\S+)",
                            done.stderr, re.M))  # fmt: skip
    assert set(built) == {"baseline", "baseline-aa", "candidate"} and len(set(built.values())) == 3, done.stderr
    check_dir, rows = quiet_and_interleaved(report, tmp_path / "results")
    assert all(r["status"] == "ok" and r["loop"] == "script" for r in rows)
    for r in rows:  # each trial ran in its side's environment, by that environment's interpreter
        assert Path(json.loads(r["extras"])["python_executable"]).is_relative_to(built[r["label"]]), (r, built)
    text = (check_dir / "report.md").read_text()
    assert text.startswith(f"## stepwatch upgrade check: {PYTZ} -> {PSUTIL}")
    assert "1 config(s) x 2 trials per side" in text and "A/A (the baseline in a second environment" in text
    assert "🔴" not in text and "🟢" not in text
    monkeypatch.setenv(virtualenvs.CACHE_ENV, env[virtualenvs.CACHE_ENV])  # asked again: the same, without pip
    again = virtualenvs.ensure("baseline", (PYTZ,), reuse_site_packages=True, pip_args=("--no-index",),
                               log=lambda _: None)  # fmt: skip
    assert again.cached and str(again.path) == built["baseline"]


@pytest.mark.large  # six trials of a Keras model in three environments, 40 s of both cores: CI's `large` job
def test_an_aa_upgrade_check_runs_interleaved_stays_quiet_and_says_what_it_covers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "envs"
    env = {virtualenvs.CACHE_ENV: str(cache), "STEPWATCH_RUNNER_LABEL": "test-runner"}
    text = aa_check(tmp_path, env, calibration=None)
    assert "calibrate on" not in text and "the A/A of this check" in text
    assert "different code" not in text

    # explain and the dashboard read the user's model from the check's store like a bundled one.
    db = tmp_path / "check.duckdb"
    explained = stepwatch("explain", "--baseline", "label=baseline", "--candidate", "label=candidate", "--db", str(db))
    assert explained.returncode == 0 and MINE in explained.stdout, explained.stdout + explained.stderr
    from tests.test_dashboard import render

    overview = render(db, "overview", monkeypatch)
    assert any(MINE in str(frame.value.to_dict()) for frame in overview.dataframe)

    # The environments are cached: asking again reuses them without pip.
    monkeypatch.setenv(virtualenvs.CACHE_ENV, str(cache))
    again = virtualenvs.ensure(
        "baseline", (PYTZ,), reuse_site_packages=True, pip_args=("--no-index",), log=lambda _: None
    )
    assert again.cached and PYTZ in again.freeze()
    assert virtualenvs.installed(again)["tensorflow"] == metadata.version("tensorflow")


@pytest.mark.large  # ten trials in five environments, 1.5 minutes of both cores: CI's `large` job
def test_calibrate_then_an_aa_upgrade_check_widens_its_intervals_by_the_runners_variation(tmp_path: Path) -> None:
    """Calibrate writes the runner's between-environment variation (pytz in two separately built environments);
    the A/A upgrade check then widens its intervals by it and says so."""
    env = {virtualenvs.CACHE_ENV: str(tmp_path / "envs"), "STEPWATCH_RUNNER_LABEL": "test-runner"}
    calibration_file = tmp_path / "calibration.json"
    done = stepwatch(
        "calibrate", "--requirements", PYTZ, "--environments", "2", "--metric", "peak_memory_bytes,examples_per_sec",
        "--out", str(calibration_file), "--results", str(tmp_path / "calibrate"), *common_args(tmp_path), env=env,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    saved = json.loads(calibration_file.read_text())
    assert saved["runner"] == "test-runner" and saved["environments"] == 2
    assert set(saved["metrics"]) == {"peak_memory_bytes", "examples_per_sec"}
    assert saved["metrics"]["peak_memory_bytes"]["comparisons"] == 1
    [check_dir] = (tmp_path / "calibrate").iterdir()
    labels = {r["label"] for r in rows_in(check_dir)}
    assert labels == {"env-0", "env-1"}

    text = aa_check(tmp_path, env, calibration_file)
    assert "calibrate on test-runner (2 environments" in text and "the A/A of this check" in text


def test_calibrate_needs_two_environments() -> None:
    done = stepwatch("calibrate", "--requirements", PYTZ, "--environments", "1")
    assert done.returncode == 2 and "--environments must be at least 2" in done.stderr


def test_the_report_says_how_many_trials_found_their_step_compiled() -> None:
    """With --compile-cache a check fills the cache first (one unrecorded trial of every compiled config on every
    side); its report says how many measured trials were cold all the same. Without one it says nothing."""
    from stepwatch.collector.output.comparison import upgrade_preface

    common = (["pytz==1"], ["pytz==2"], 1, 3, "smoke", "host", 0, 6, [])
    lines = upgrade_preface(*common, ["warm", "cold", "warm", "warm", "warm", "warm"])
    assert any("1 of 6 compiled trials compiled anyway (cold), 5 found their step compiled" in line for line in lines)
    assert not any("Compile cache" in line for line in upgrade_preface(*common, [None] * 6))
    prices = "aws-p5en.48xlarge-h200 (stepwatch's catalog, 7.912 USD per device-hour, read 2026-08-06)"
    spent = (377.0, 1.29, prices)
    [cost] = [line for line in upgrade_preface(*common, (), spent) if line.startswith("What the check cost")]
    assert f"6.3 minutes of this machine in trials, 1.29 USD at {prices} (building" in cost, cost


def test_a_side_made_from_the_source_on_a_path_gets_its_code_and_no_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stepwatch run from a checkout that is not installed (``PYTHONPATH=$PWD``, as on the GPU hosts): no
    distribution named stepwatch, so importlib.metadata finds no version and no requirements. A side still gets the
    trial code (and no version its trials would claim), and the trial's dependencies by name: the upgrade check that
    crashed there on ``metadata.version("stepwatch")`` (data/reference/h100-2026-11-26/) builds its sides."""
    found = metadata.version, metadata.requires

    def uninstalled(lookup):  # noqa: ANN001, ANN202
        def look(name: str):  # noqa: ANN202
            if name == "stepwatch":
                raise metadata.PackageNotFoundError(name)
            return lookup(name)

        return look

    monkeypatch.setattr(metadata, "version", uninstalled(found[0]))
    monkeypatch.setattr(metadata, "requires", uninstalled(found[1]))
    site = tmp_path / "site"
    virtualenvs.copy_stepwatch(site)
    assert (site / "stepwatch" / "collector" / "trial" / "process.py").is_file()
    assert not list(site.glob("stepwatch-*.dist-info"))
    installs = virtualenvs.environment_requirements(("pytz==1",), reuse_site_packages=False)
    assert installs[0] == "pytz==1" and set(virtualenvs.TRIAL_DEPENDENCIES) <= set(installs)


def test_a_side_gets_stepwatchs_trial_code_as_files_without_the_dashboard_and_keeps_it_while_unchanged(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    virtualenvs.copy_stepwatch(site)
    copied = site / "stepwatch"
    assert (copied / "collector" / "trial" / "process.py").is_file() and not (copied / "dashboard").exists()
    assert (copied / "collector" / "data" / "prices.toml").is_file() and not any(copied.rglob("__pycache__"))
    assert not any(p.is_symlink() for p in copied.rglob("*"))  # a checkout's links became files
    trial = copied / "collector" / "trial" / "process.py"
    before = trial.stat().st_mtime_ns
    virtualenvs.copy_stepwatch(site)  # the same code: nothing is rewritten under a running check
    assert trial.stat().st_mtime_ns == before
    (copied / ".source-sha256").write_text("another stepwatch")
    trial.write_text("stale")
    virtualenvs.copy_stepwatch(site)  # another stepwatch's copy is replaced
    assert trial.read_text() != "stale"
    [info] = site.glob("stepwatch-*.dist-info")
    assert f"Version: {metadata.version('stepwatch')}" in (info / "METADATA").read_text()
    # In a side environment (no packages installed yet), stepwatch is that copy.
    python = virtualenvs.create_venv(tmp_path / "side", reuse_site_packages=False)
    probe = "import stepwatch.collector.errors as e; print(e.__file__)"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=python.parent)
    assert done.stdout.strip().startswith(str(tmp_path / "side" / "lib")), done.stderr
