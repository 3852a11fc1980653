"""Shared test setup: the opt-in ``large`` marker and helpers that run the real CLI."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from streamlit.components.v2 import manifest_scanner

from stepwatch.collector.config import BenchmarkConfig, config_columns
from stepwatch.collector.runner.results import read_rows
from stepwatch.collector.schema import to_table
from stepwatch.collector.store.database import StoreReader
from stepwatch.collector.store.ingest import ingest

REPO = Path(__file__).resolve().parents[1]

# Each new AppTest (tests/test_dashboard.py's render) has Streamlit scan every installed distribution's metadata for
# components: half a second of CPU here (about 140 distributions), a hundred times a run, where the server scans
# once at its start. Nothing is installed while the tests run, so one scan per test process answers them all.
manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["KERAS_BACKEND"] = "tensorflow"  # the in-process runtime tests are TensorFlow's; trials set their own
os.environ["STEPWATCH_CALIBRATION"] = "none"  # a calibration of this machine must not widen the tests' intervals
# One OpenMP thread a process unless the environment says otherwise: the tests run trials two or three at a time on as
# few as 2 cores, where torch's default of a thread per core spins against the other processes (a Keras-on-torch LSTM
# trial took 18 s there with 2 threads, 9.5 s with 1). Trials that set their threads (--threads auto or N/M) are
# unaffected, and each row records the variable among its environment (tf_env), as it would a user's.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-large", action="store_true", help="also run tests marked large (slow)")


# The fast tier's guard: a test of `make test` whose call or setup takes longer than this on the machine running it is
# named at the end of the run as one that belongs in the large tier or a shared fixture. Printed, never failed: timing
# on a shared machine is noisy.
SLOW_S = float(os.environ.get("STEPWATCH_TEST_SLOW_S", "10"))
# Session- and module-scoped fixtures of real runs that many tests read: their setup is the price of sharing them.
SHARED_SETUPS = ("smoke_store", "backend_rows", "counted", "rows")
_TIMES: dict[str, dict[str, float]] = {}  # nodeid -> {"setup": s, "call": s}
_SHARED: set[str] = set()  # the tests that ask for one of SHARED_SETUPS
_STARTED: list[float] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    _STARTED.append(time.monotonic())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when in ("setup", "call") and not report.skipped:
        times = _TIMES.setdefault(report.nodeid, {})
        times[report.when] = report.duration
        if dict(report.user_properties).get("shared_setup"):
            _SHARED.add(report.nodeid)


def tier(config: pytest.Config) -> str:
    """The tier this run is: `make test` (fast), `make test-large` (large) or both."""
    if not config.getoption("--run-large"):
        return "fast (make test)"
    return "large (make test-large)" if config.getoption("markexpr") == "large" else "fast and large"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _STARTED:  # a pytest-xdist worker: the controller prints it
        return
    wall = time.monotonic() - _STARTED[0]
    write = terminalreporter.write_line
    write(f"tier {tier(config)}: {len(_TIMES)} tests ran in {int(wall // 60)} min {wall % 60:.0f} s of wall time")
    if config.getoption("--run-large"):
        return
    slow = sorted(((times.get(when, 0.0), when, nodeid) for nodeid, times in _TIMES.items()
                   for when in ("setup", "call")), reverse=True)  # fmt: skip
    named = [(seconds, when, nodeid) for seconds, when, nodeid in slow if seconds > SLOW_S
             and not (when == "setup" and nodeid in _SHARED)]  # fmt: skip
    for seconds, when, nodeid in named:
        write(f"{seconds:.1f} s {when} over {SLOW_S:g} s: belongs in the large tier or a shared fixture: {nodeid}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Say in the test's reports (which pytest-xdist's workers send to the process that prints the summary) whether it
    asks for one of SHARED_SETUPS."""
    if set(SHARED_SETUPS) & set(getattr(item, "fixturenames", ())):
        item.user_properties.append(("shared_setup", True))


# pytest-xdist hands whole modules (--dist loadfile) to its two workers in the order collected
# (--no-loadscope-reorder): the order xdist itself picks, those with the most tests first, except that the modules of
# the longest large tests (FIRST, in its order: a young history's five nights 5-8 min, the new user's four tests of
# 2-2.5 min) start first, one a worker (not the whole smoke suite beside them: an A/A upgrade check beside it saw
# -31.9%), instead of running alone at the end while the other worker has nothing left, and the counters' module goes
# last (below). In `make test` FIRST's modules hold few or no tests.
# Handing out every module longest first (measured) started every module that runs trials at once on both
# workers, and the suite took 35 s longer.
# The counters' module reads TensorFlow's shared run (TF_BASELINE) that the dashboard's store starts with: handed out
# with the first modules, it waited 25-40 s idle for the other worker to make it. Handed out last, it finds it made.
FIRST = ("tests/test_publish.py", "tests/test_adoption.py")
LAST = ("tests/test_counters.py",)


def module_order(items: list[pytest.Item]) -> None:
    """Sort ``items`` as described above, keeping each module's own order."""
    modules = [item.nodeid.split("::")[0] for item in items]
    counts = Counter(modules)
    first_seen = {module: index for index, module in reversed(list(enumerate(modules)))}
    first = {module: index for index, module in enumerate(FIRST)}
    order = {id(item): (first.get(module, len(FIRST)), module in LAST, -counts[module], first_seen[module]) for item,
             module in zip(items, modules)}  # fmt: skip
    items.sort(key=lambda item: order[id(item)])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    module_order(items)
    if config.getoption("--run-large"):
        return
    skip = pytest.mark.skip(reason="large: opt in with --run-large")  # ok-skip: opt-in marker
    for item in items:
        if "large" in item.keywords:
            item.add_marker(skip)


# Commands that start trials, side environments or a server run as a process of their own, as a user starts them
# (unless they only print their plan: --dry-run). The others run in the test's process through the same ``main`` the
# console script calls, in the command's folder and environment: the same code, without a second interpreter's start
# and stepwatch's imports (a second of CPU a call, on 2 cores; most commands in the tests are these).
OWN_PROCESS = {"run", "upgrade-check", "code-check", "bisect", "calibrate", "dashboard"}


def stepwatch(
    *args: str, timeout: float = 600, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the stepwatch CLI (``python -m stepwatch``) and capture its output. A copy of the source under test
    (``PYTHONPATH`` in ``env``) and the commands of OWN_PROCESS run as ``python -m stepwatch``."""
    env = env or {}
    command = next((arg for arg in args if not arg.startswith("-")), "run")
    if (command in OWN_PROCESS and "--dry-run" not in args) or "PYTHONPATH" in env:
        return subprocess.run([sys.executable, "-m", "stepwatch", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **env})  # fmt: skip
    return _in_this_process(list(args), cwd, env)


_ONE_COMMAND_AT_A_TIME = threading.Lock()  # the folder and the environment are the process's


def _in_this_process(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    from stepwatch.collector.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _ONE_COMMAND_AT_A_TIME:
        gc.freeze()  # what exists now is the test's: the collection below looks at what the command made, only
        saved, folder = dict(os.environ), os.getcwd()
        os.environ.update(env)
        os.chdir(cwd)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(args)
                except SystemExit as leaving:  # argparse's usage errors and --help, as the process would exit
                    code = leaving.code if isinstance(leaving.code, int) else 0 if leaving.code is None else 1
                    if not isinstance(leaving.code, int | None):
                        print(leaving.code, file=sys.stderr)
                except Exception:  # what the interpreter prints of an uncaught exception, and its exit code
                    traceback.print_exc()
                    code = 1
        finally:
            os.chdir(folder)
            os.environ.clear()
            os.environ.update(saved)
            gc.collect()  # what the command left open (a store's connection) closes, as at its process's exit
    return subprocess.CompletedProcess([sys.executable, "-m", "stepwatch", *args], code, out.getvalue(), err.getvalue())


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    """A commit of ``files`` (path -> text) on the checked-out branch; its id."""
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def two_at_a_time(run: Callable[[Any], None], items: Iterable[Any]) -> None:
    """``run`` on every item, two at once: for fixtures whose trials' speed is not what their tests check (a
    trial spends most of its time importing and compiling on one core)."""
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(run, items))


def result_rows(count: int, suite_run_id: str | None = None, start: int = 0, **fields: Any) -> list[dict[str, Any]]:
    """Rows shaped like the collector's (for store tests that need many rows fast; other tests run it for real)."""
    suite_run_id = suite_run_id or str(uuid.uuid4())
    config = BenchmarkConfig(model="bilstm")
    started = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
    return [
        {
            "run_id": f"{suite_run_id}-{i}",
            "suite_run_id": suite_run_id,
            "suite": "smoke",
            "trial": i,
            "started_at": started + timedelta(minutes=i),
            "finished_at": started + timedelta(minutes=i, seconds=30),
            "host": "test-host",
            "source": "real",
            "status": "ok",
            "config_key": config.key,
            **config_columns(config),
            "accelerator": "Test CPU",
            "examples_per_sec": 1000.0 + i,
            "window_step_times_s": [0.01, 0.011, 0.012],
            "window_losses": [2.0, 1.9, 1.8],
            "tf_version": "2.21.0",
            **fields,
        }
        for i in range(start, start + count)
    ]


def write_results(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(to_table(rows), path)
    return path


def write_suite(path: Path, text: str) -> Path:
    """A test's suite file: one trial of each config unless it names its trials (a suite that names none runs
    stepwatch's default, a nightly's three)."""
    named = any(line.startswith("trials") for line in text.splitlines())
    path.write_text(text if named else "trials = 1\n" + text)
    return path


SHORT = ("--steps", "20", "--warmup", "20", "--window", "10")


REFERENCE = REPO / "data" / "reference" / "cpu-tf-history"


@pytest.fixture(scope="module")
def reference_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed reference history (real trials under four TensorFlow releases), ingested into a store of
    its own, as `make demo` does."""
    # Where `make demo` puts it when the screenshots of docs/reference.md are taken (their sidebar names the store).
    shots = os.environ.get("STEPWATCH_SCREENSHOTS")
    db = (
        REPO / "data" / "stepwatch-reference.duckdb" if shots else tmp_path_factory.mktemp("reference") / "store.duckdb"
    )
    report = ingest([str(REFERENCE)], db)
    assert not report.quarantined and not report.refused
    assert StoreReader(db).connection().execute("SELECT count(*) FROM runs").fetchone()[0] == 96
    return db


def shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this test run that every worker sees (pytest-xdist gives each worker a base folder of its own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def made_once(folder: Path, make: Callable[[Path], None]) -> Path:
    """``folder``, filled by ``make(folder)`` once per test run: on several workers the first to ask makes it under
    a lock, the others wait for it and find it made."""
    with open(folder.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".made").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            make(folder)
            (folder / ".made").touch()
    return folder


def shared_runs(tmp_path_factory: pytest.TempPathFactory, *runs: tuple[str, ...]) -> list[Path]:
    """The results folder of each run (``stepwatch run``'s arguments), made once per test run and shared by every
    test that asks for the same arguments, two runs at a time: on several workers the first to ask makes a run and
    the others wait for it. Each run keeps its compiled programs in a cache of its own (a compiled config's second
    trial is warm: test_counters)."""
    root = shared_folder(tmp_path_factory) / "shared-runs"
    root.mkdir(exist_ok=True)
    folders = [root / hashlib.sha256("\0".join(run).encode()).hexdigest()[:16] for run in runs]

    def make(job: tuple[tuple[str, ...], Path]) -> None:
        run, folder = job

        def run_into(folder: Path) -> None:
            done = stepwatch("run", *run, "--compile-cache", str(folder / "cache"), "--out", str(folder / "results"))
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

        made_once(folder, run_into)

    two_at_a_time(make, list(zip(runs, folders)))
    return [folder / "results" for folder in folders]


def rows_in(folder: Path) -> list[dict[str, Any]]:
    """The rows of every results file in ``folder``, file by file (read as ``stepwatch ingest`` reads them)."""
    return [row for path in sorted(folder.glob("*.parquet")) for row in read_rows(path)]


def shared_rows(tmp_path_factory: pytest.TempPathFactory, *runs: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows of ``shared_runs``, run by run."""
    return [row for folder in shared_runs(tmp_path_factory, *runs) for row in rows_in(folder)]


# bilstm tiny with the framework's default threads (so that labels and keys do not depend on the host's cores).
BILSTM = ("--suite", "smoke", "--models", "bilstm", *SHORT, "--threads", "default")
# Real trials more than one module reads (shared_runs): TensorFlow's fp32 steps with and without XLA and JAX's
# compiled one, two trials each, the first profiled. The dashboard's baseline, the counters' compiled steps, and
# JAX's record of what it ran (test_backends).
TF_BASELINE = (*BILSTM, "--xla", "off,on", "--precision", "fp32", "--trials", "2", "--profile", "1", "--label",
               "baseline")  # fmt: skip
JAX_BILSTM = (*BILSTM, "--keras-backend", "jax", "--xla", "on", "--precision", "fp32", "--trials", "2", "--profile",
              "1", "--label", "jax")  # fmt: skip


@pytest.fixture(scope="session")
def smoke_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real trials: bilstm tiny XLA off/on x fp32/bf16 as 'baseline' (fp32 twice), fp32 without XLA twice as
    'candidate', one trial killed by a 2 s timeout (a failure the pages must show and leave out of aggregates),
    and the fp32 config on the torch backend (eager), against TensorFlow's. Made once per test run: when the tests
    run on several workers (pytest-xdist), the first to need it makes it, the others wait."""
    root = shared_folder(tmp_path_factory) / "dashboard-store"
    return made_once(root, lambda folder: _make_smoke_store(folder, tmp_path_factory)) / "store.duckdb"


def _make_smoke_store(root: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    db = root / "store.duckdb"
    folders = shared_runs(
        tmp_path_factory,
        TF_BASELINE,
        (*BILSTM, "--xla", "off,on", "--precision", "mixed_bfloat16", "--trials", "1", "--label", "baseline"),
        (*BILSTM, "--xla", "off", "--precision", "fp32", "--trials", "2", "--label", "candidate"),
        (*BILSTM, "--keras-backend", "torch", "--xla", "off", "--precision", "fp32", "--trials", "1", "--label",
         "torch"),
    )  # fmt: skip
    broken = root / "broken"  # last, alone and this store's own: the timed-out run is the latest
    done = stepwatch("run", *BILSTM, "--xla", "on", "--precision", "fp32", "--trials", "1", "--label", "broken",
                     "--timeout", "2", "--out", str(broken))  # fmt: skip
    assert done.returncode == 4, done.stderr[-2000:]
    done = stepwatch("ingest", *map(str, folders), str(broken), "--db", str(db))
    assert done.returncode == 0, done.stderr


def copy_source(tree: Path, parts: Iterable[str] = ("collector", "trainers", "dashboard")) -> None:
    """A copy of stepwatch's source under ``tree`` in the repository's layout: ``parts`` at the top and the
    ``stepwatch`` package linking to them (run it with ``PYTHONPATH=tree``)."""
    for part in parts:
        shutil.copytree(REPO / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "stepwatch", tree / "stepwatch", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))


def edited_source(tree: Path, edits: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """A copy of the source under ``tree`` with each (file, anchor, line) edit: ``line`` inserted before the
    anchor's first occurrence (a test adds a dimension or a metric as a user would). Returns the environment
    that runs the copy."""
    copy_source(tree)
    for name, anchor, line in edits:
        path = tree / name
        text = path.read_text()
        assert anchor in text, (name, anchor)
        path.write_text(text.replace(anchor, line + anchor, 1))
    return {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "HOME": str(tree.parent), "STEPWATCH_CALIBRATION": "none"}


def probe_edited(tree: Path, env: dict[str, str], probe: str, *args: str) -> dict[str, Any]:
    """Run ``probe`` (a script printing one JSON line last) on the edited copy; what it found."""
    done = subprocess.run([sys.executable, "-c", probe, *args], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["source"].startswith(str(tree))  # the probe ran the edited copy
    assert found["errors"] == []
    return found
