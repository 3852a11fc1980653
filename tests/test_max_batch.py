"""``run --find-max-batch``: the search (doubling, bisecting, guided by a compiler's memory analysis), its probes in
one process, and the same answer as probing by whole trials, each in a process of its own, found in less time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stepwatch.collector.cli.arguments import parse_bytes
from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.metrics import METRICS
from stepwatch.collector.runner import max_batch
from stepwatch.collector.runner.results import read_rows
from stepwatch.collector.trial import batch_search
from stepwatch.collector.trial.batch_search import BUDGET, memory_bound, search_max_batch
from tests.conftest import result_rows, stepwatch, write_results
from tests.test_dashboard import figures, render, values


def test_the_search_finds_the_out_of_memory_boundary() -> None:
    found = search_max_batch(lambda b: "ok" if b <= 300 else "oom", 8)
    assert (found.largest, found.ended) == (300, "out of memory at batch 301")
    assert len(found.probes) < 20 and found.probes[0] == (8, "ok") and (512, "oom") in found.probes
    assert search_max_batch(lambda b: "ok", 8, limit=64).ended == "reached the search's limit (64)"
    nothing = search_max_batch(lambda b: "oom", 8)
    assert (nothing.largest, nothing.ended, nothing.probes) == (None, "out of memory at batch 8", ((8, "oom"),))


def test_a_search_that_times_out_or_spends_its_budget_reports_the_largest_that_ran() -> None:
    """As on the H100: batch 2048 ran past the trial's timeout. The search ends there with the largest batch that
    trained and how it ended, not with an error; a crash, or the time budget spent, ends it the same way."""
    timed_out = search_max_batch(lambda b: "ok" if b < 2048 else "timeout", 256)
    assert (timed_out.largest, timed_out.ended) == (1024, "timeout at batch 2048")
    assert [b for b, _ in timed_out.probes] == [256, 512, 1024, 2048]
    crashed = search_max_batch(lambda b: {1024: "oom"}.get(b, "crash" if b == 768 else "ok"), 256)
    assert (crashed.largest, crashed.ended) == (512, "crash at batch 768")
    spent = search_max_batch(lambda b: "ok" if b < 64 else BUDGET, 8)
    assert (spent.largest, spent.ended) == (32, "the time budget spent before batch 64")


@pytest.mark.parametrize("fixed", [300 * 2**20, 0])
def test_the_compilers_memory_analysis_names_the_batch_to_try(fixed: int) -> None:
    """XLA's memory analysis of two batches gives the step's memory per example: the search tries the largest batch
    it says fits, then the one above to show it does not, in a few probes instead of a dozen."""
    per_example, capacity = 10 * 2**20, 16 * 2**30
    assert memory_bound({64: fixed + 64 * per_example}, capacity) is None  # one point: no slope yet
    points = {b: fixed + b * per_example for b in (64, 128)}
    allowed = memory_bound(points, capacity)
    assert allowed == (capacity - fixed) // per_example
    assert memory_bound(points, None) is None
    seen: dict[int, int] = {}

    def probe(batch: int) -> str:
        seen[batch] = fixed + batch * per_example
        return "ok" if seen[batch] <= capacity else "oom"

    found = search_max_batch(probe, 64, bound=lambda: memory_bound(seen, capacity))
    assert (found.largest, found.ended) == (allowed, f"out of memory at batch {allowed + 1}")
    assert [b for b, _ in found.probes] == [64, 128, allowed, allowed + 1]
    plain = search_max_batch(probe, 64)
    assert plain.largest == allowed and len(plain.probes) > 2 * len(found.probes)


def test_an_estimate_that_is_off_still_ends_at_the_boundary() -> None:
    """Memory that grows faster than a line (padding, another algorithm at a larger batch): the estimate says too
    much fits, the probes say otherwise, and after ``GUIDED_PROBES`` the search bisects plainly."""
    seen: dict[int, int] = {}

    def probe(batch: int) -> str:
        seen[batch] = batch * batch
        return "ok" if seen[batch] <= 500 * 500 else "oom"

    found = search_max_batch(probe, 8, bound=lambda: memory_bound(seen, 500 * 500))
    assert (found.largest, found.ended) == (500, "out of memory at batch 501")
    assert len(found.probes) < 20


def test_the_device_capacity_is_the_allocators_share_of_the_accelerator() -> None:
    host = {"accelerator_memory_bytes": 80 * 2**30}
    jax = BenchmarkConfig(model="resnet50", device="gpu", keras_backend="jax")
    torch = BenchmarkConfig(model="resnet50", device="gpu", keras_backend="torch", loop="pytorch")
    assert batch_search.device_capacity(host, jax) == 60 * 2**30  # XLA_PYTHON_CLIENT_MEM_FRACTION's default
    assert batch_search.device_capacity(host, torch) == 80 * 2**30
    assert batch_search.device_capacity({"accelerator_memory_bytes": None}, jax) is None
    assert batch_search.device_capacity(host, BenchmarkConfig(model="resnet50")) is None  # a CPU: the host's memory


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "--find-max-batch on a CPU needs --max-batch-memory BYTES"),
        (("--max-batch-memory", "1GiB", "--keras-backend", "tensorflow"), "needs --keras-backend jax with --xla on"),
        (("--max-batch-memory", "lots"), "'lots' is not an amount of memory, e.g. 12GiB"),
    ],
)
def test_a_search_on_a_cpu_needs_a_capacity_and_xlas_analysis(args: tuple[str, ...], said: str) -> None:
    result = stepwatch("run", "--suite", "smoke", "--models", "bilstm", "--xla", "on", "--find-max-batch", *args)
    assert result.returncode == 2 and said in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 or "usage:" in result.stderr


def test_the_search_says_each_probe_as_its_record_has_it_and_stops_one_past_its_limit(tmp_path: Path) -> None:
    """The parent's watch of the search process (``max_batch.Watcher``): each probe said once, as soon as the record
    the process writes before and after every probe has it; the probe under way stopped once it has run past the
    limit (its start as the parent first saw it), a record not yet written skipped."""
    record = tmp_path / "result.json"
    said: list[str] = []
    watcher = max_batch.Watcher(said.append, limit_s=0.05)
    assert watcher(record) is False  # nothing written yet
    probe = {"batch": 8, "status": "ok", "how": "ran", "bytes": 2 * 2**20, "s": 12.5}
    record.write_text(json.dumps({"probes": [probe], "current": {"batch": 16, "how": "compiling", "since_s": 13.0}}))
    assert watcher(record) is False and said == ["  batch 8: ok (ran, 2.00 MiB, 12.5 s)"]
    assert watcher(record) is False and len(said) == 1  # said once
    import time

    time.sleep(0.1)
    assert watcher(record) is True and watcher.stopped == {"batch": 16, "how": "compiling", "since_s": 13.0}
    patient = max_batch.Watcher(said.append, limit_s=None)
    assert patient(record) is False


def test_a_step_that_needs_more_than_its_compiled_analysis_goes_on_from_the_analysis_scaled() -> None:
    """A search whose answer, compiled at batch 100 (fits in 1,000 bytes: 10 a batch), ran out of memory when it ran
    (1,100 bytes: 10% more): it goes on from the batch the compiled analysis scaled by 1.1 says fits (90), not from
    the smallest batch that ran; without a running step's bytes, from that batch."""
    record = [{"batch": 8, "how": "ran", "bytes": 80}, {"batch": 50, "how": "compiled", "bytes": 500},
              {"batch": 100, "how": "compiled", "bytes": 1000},
              {"batch": 100, "how": "ran", "bytes": 1100}]  # fmt: skip
    assert batch_search.scaled_start(record, 1000, failed=100, floor=8) == 90
    assert batch_search.scaled_start(record[:3], 1000, failed=100, floor=8) == 8


SENTIMENT = "tests/data/models/sentiment.py:sentiment"  # a small Keras model of yours: quick to compile


def searched(tmp_path: Path, model: str, capacity: str) -> dict:
    """``run --find-max-batch`` of ``model`` tiny on JAX with a capacity: the row's search, and what it said."""
    done = stepwatch(
        "run", "--models", model, "--preset", "tiny", "--keras-backend", "jax", "--xla", "on", "--precision", "fp32",
        "--trials", "1", "--steps", "10", "--warmup", "20", "--window", "10", "--find-max-batch",
        "--max-batch-memory", capacity, "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [row] = read_rows(next(tmp_path.glob("*.parquet")))
    return {**row, "probes": json.loads(row["extras"])["max_batch_probes"], "said": done.stdout + done.stderr}


@pytest.mark.large
def test_a_search_in_one_process_compiles_where_it_need_not_run(tmp_path: Path) -> None:
    """A model of yours on JAX with 2 MiB: the first batch ran, every larger one was only compiled (XLA's memory
    analysis against the capacity), the answer ran once in the search and once as a whole trial, and the row keeps
    the largest batch beside the one it ran, how the search ended and every probe."""
    row = searched(tmp_path, SENTIMENT, "2MiB")
    probes = row["probes"]
    largest = row["max_per_device_batch"]
    assert row["per_device_batch"] == 8 < largest and row["max_batch_ended"] == f"out of memory at batch {largest + 1}"
    assert probes[0]["how"] == "ran" and {p["how"] for p in probes[1:-1]} == {"compiled"}
    assert probes[-1] == {**probes[-1], "batch": largest, "how": "ran", "status": "ok"}
    fits = {p["batch"]: p["bytes"] <= 2 * 2**20 for p in probes}
    assert fits[largest] and not fits[largest + 1]
    assert all(p["status"] == ("ok" if fits[p["batch"]] else "oom") for p in probes)
    assert len(probes) < 10, probes  # guided by the analysis (5-6 here); doubling and bisecting from 8 took 13
    assert f"a whole trial at batch {largest}: ok" in row["said"]


@pytest.mark.large
def test_a_probe_past_its_limit_stops_the_search_which_says_each_probe_and_answers_what_fit(tmp_path: Path) -> None:
    """A search whose probes may take half a second each: the first (a step that compiles and runs) takes longer on
    any machine, so the search stops there and says so, with no batch that fit before it; the run goes on to its
    trials at the batch it was given."""
    done = stepwatch(
        "run", "--models", SENTIMENT, "--preset", "tiny", "--keras-backend", "jax", "--xla", "on", "--precision",
        "fp32", "--trials", "1", "--steps", "10", "--warmup", "20", "--window", "10", "--find-max-batch",
        "--max-batch-memory", "2MiB", "--max-batch-probe-limit", "0.5", "--out", str(tmp_path),
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    [row] = read_rows(next(tmp_path.glob("*.parquet")))
    # The first probe compiles and runs a step: on any machine longer than half a second, so the search stops there.
    assert row["max_per_device_batch"] is None, said[-3000:]
    assert row["max_batch_ended"] == "a probe at batch 8 (running) ran past its limit of 0.5 s"
    assert "  batch 8: stopped (running past 0.5 s)" in said


@pytest.mark.large
@pytest.mark.parametrize(("model", "capacity"), [(SENTIMENT, "2MiB"), ("transformer", "20MiB")])
def test_probing_in_one_process_finds_todays_answer_by_trials(tmp_path: Path, model: str, capacity: str) -> None:
    """The same largest batch as probing by short trials, each in a process of its own (start-up, compile, warm-up
    and two steps to learn whether one step fits). Both searches are the same, guided by the same analysis: only
    how a probe runs differs (how long each takes: benchmarks/max_batch.py)."""
    new = searched(tmp_path, model, capacity)
    config = BenchmarkConfig(model=model, preset="tiny", keras_backend="jax", xla=True, precision="fp32",
                             per_device_batch=8, timeout_s=300)  # fmt: skip
    old = max_batch.find_max_batch_by_trials(config, sys.executable, capacity=parse_bytes(capacity))
    assert (new["max_per_device_batch"], new["max_batch_ended"]) == (old.largest, old.ended)
    assert [(p["batch"], p["status"]) for p in new["probes"][:-1]] == list(old.probes)


@pytest.mark.large
@pytest.mark.parametrize(
    ("model", "backend", "loop"), [("resnet50", "torch", "pytorch"), ("teacher", "tensorflow", "fit")]
)
def test_probes_that_run_build_a_model_a_batch_in_one_process_until_the_budget(
    tmp_path: Path, model: str, backend: str, loop: str
) -> None:
    """The probe process on its own, on plain PyTorch and on Keras with TensorFlow: no compiler analysis there, so
    each batch is built and steps once in the same process (what a GPU's out-of-memory is caught in: torch's cache
    emptied, Keras' session cleared after each); on a CPU nothing runs out of memory, so the search doubles until its
    time budget is spent and says so."""
    config = BenchmarkConfig(model=model, preset="tiny", keras_backend=backend, loop=loop, xla=False,
                             precision="fp32", per_device_batch=2, timeout_s=300)  # fmt: skip

    def searched(*args: str) -> dict:
        result = tmp_path / "search.json"
        done = subprocess.run(
            [sys.executable, "-m", "stepwatch.collector.trial.probe", "--config", config.to_json(), "--result",
             str(result), *args],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(result.read_text())

    # Up to the search's limit, whatever this CPU's speed: three builds and steps in one process.
    found = searched("--limit", "8")
    probes = found["probes"]
    assert [p["batch"] for p in probes] == [2, 4, 8]
    assert all(p["how"] == "ran" and p["status"] == "ok" and p["bytes"] is None for p in probes)
    assert (found["largest"], found["ended"]) == (8, "reached the search's limit (8)")
    assert found["capacity_bytes"] is None and found["error"] is None
    # A budget spent: the first probe always runs, and no larger batch is tried after it.
    spent = searched("--budget-s", "0")
    assert [p["batch"] for p in spent["probes"]] == [2]
    assert (spent["largest"], spent["ended"]) == (2, "the time budget spent before batch 4")


def test_the_versions_page_draws_the_largest_batch_beside_the_batch_the_trials_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = result_rows(3, max_per_device_batch=175, max_batch_ended="out of memory at batch 176")
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(write_results(tmp_path / "r.parquet", rows)), "--db", str(db)).returncode == 0
    at = render(db, "versions", monkeypatch, panel=METRICS["max_per_device_batch"].label)
    [figure] = figures(at)
    [box] = [t for t in figure["data"] if t["type"] == "box"]
    [ran] = [t for t in figure["data"] if t["type"] == "scatter"]
    assert values(box["median"]) == [175] and values(ran["y"]) == [8] and ran["name"].endswith(": its trials' batch")
