"""Counters of the compiled training step (collector.trial.counters): read from a real compiled step on every
backend on this CPU, equal in two processes of one config, moved the expected way by one more layer, and
compared exactly (never by a t-test) by compare. The same trials record a profile in their first trial
(``--profile 1``): its op table is read from a real profile of every backend, and a trial without changes
nothing. torch.compile's trial, a minute of both cores, runs in the large job."""

from __future__ import annotations

import json
import math
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stepwatch.collector.analysis import stats
from stepwatch.collector.metrics import COUNTERS, METRICS
from stepwatch.collector.outcomes import CHANGED, IMPROVEMENT, INCONCLUSIVE, MISSING, NO_CHANGE, REGRESSION
from stepwatch.collector.output.comparison import exact_change
from stepwatch.collector.schema import OP_COLUMNS
from stepwatch.collector.trial import counters, profiles
from tests.conftest import (
    BILSTM,
    JAX_BILSTM,
    REPO,
    SHORT,
    TF_BASELINE,
    edited_source,
    result_rows,
    rows_in,
    shared_rows,
    stepwatch,
    two_at_a_time,
    write_suite,
)

HLO = """HloModule jit_train_step, is_scheduled=true, entry_computation_layout={(f32[8]{0})->f32[]}

%fused_computation (param_0: f32[8]) -> f32[8] {
  %param_0 = f32[8]{0} parameter(0)
  ROOT %multiply.1 = f32[8]{0} multiply(f32[8]{0} %param_0, f32[8]{0} %param_0)
}

ENTRY %main.10 (Arg_0.1: f32[8]) -> (f32[], f32[8]) {
  %Arg_0.1 = f32[8]{0} parameter(0)
  %fusion = f32[8]{0} fusion(f32[8]{0} %Arg_0.1), kind=kLoop, calls=%fused_computation
  %custom-call.3 = (f32[8]{0}, u8[16]{0}) custom-call(f32[8]{0} %fusion), custom_call_target="__onednn$matmul"
  %constant.2 = f32[] constant(0)
  ROOT %tuple.4 = (f32[], f32[8]{0}) tuple(f32[] %constant.2, f32[8]{0} %fusion)
}
"""


def test_hlo_text_is_counted_by_opcode() -> None:
    assert counters.hlo_opcodes(HLO) == ["parameter", "multiply", "parameter", "fusion", "custom-call", "constant",
                                         "tuple"]  # fmt: skip
    assert counters.hlo_counts(HLO) == {"hlo_instructions": 7, "hlo_fusions": 1, "hlo_custom_calls": 1}
    cost = {"flops": 16.0, "bytes accessed": 64.0, "transcendentals": 0.0, "optimal_seconds": 1e-9}
    expected = {"compiled_flops": 16.0, "compiled_bytes_accessed": 64.0, "compiled_transcendentals": 0.0}
    assert counters.cost_counts(cost) == counters.cost_counts([cost]) == expected  # older JAX: one per device
    with pytest.raises(KeyError, match="not counters"):
        counters.known({"hlo_instructions": 7, "instructions": 3})


def test_every_counter_is_a_deterministic_metric_with_a_column() -> None:
    from stepwatch.collector.schema import COLUMN_NAMES

    assert set(COUNTERS) <= COLUMN_NAMES
    assert all(METRICS[name].deterministic and METRICS[name].threshold == 0 for name in COUNTERS)
    assert not METRICS["examples_per_sec"].deterministic
    assert METRICS["hlo_instructions"].shown(4994) == "4,994"


@pytest.mark.parametrize(
    ("baseline", "candidate", "verdict", "ratio"),
    [
        ((4994, 4994), (4994, 4994), NO_CHANGE, 1.0),
        ((4994, 4994), (4995, 4995), REGRESSION, 4995 / 4994),  # one more instruction: a change, exactly
        ((416, 416), (400, 400), IMPROVEMENT, 400 / 416),
        ((0, 0), (2, 2), REGRESSION, math.inf),  # graph breaks appeared where there were none
        ((0, 0), (0, 0), NO_CHANGE, 1.0),
        ((10, 12), (11, 13), INCONCLUSIVE, 12 / 11),  # values varied within a side and the ranges overlap
        ((10, 11), (20, 21), REGRESSION, 41 / 21),  # varied, but far apart
    ],
)
def test_a_counter_is_compared_exactly(baseline: tuple, candidate: tuple, verdict: str, ratio: float) -> None:
    b, c = stats.Span(3, *baseline), stats.Span(3, *candidate)
    result = stats.exact(b, c, 0.0, higher_is_better=False)
    assert result.verdict == verdict
    assert result.ratio == pytest.approx(ratio)
    assert math.isnan(result.p_value) and math.isnan(result.q_value)  # nothing sampled, nothing tested
    assert stats.exact(b, stats.Span.of([]), 0.0, False).verdict == MISSING
    # Without a declared direction, a change is a change, whichever way it goes.
    undirected = stats.exact(b, c, 0.0, higher_is_better=None).verdict
    assert undirected == (CHANGED if verdict in (REGRESSION, IMPROVEMENT) else verdict)


def test_a_threshold_on_a_counter_is_honoured() -> None:
    b, c = stats.Span(2, 1000, 1000), stats.Span(2, 1004, 1004)
    assert stats.exact(b, c, 0.01, higher_is_better=False).verdict == NO_CHANGE  # +0.4%, within 1%
    assert stats.exact(b, c, 0.001, higher_is_better=False).verdict == REGRESSION


def test_an_exact_change_shows_the_values() -> None:
    metric = METRICS["hlo_instructions"]

    def shown(metric: object, baseline: tuple, candidate: tuple) -> str:
        return exact_change(metric, stats.exact(stats.Span(3, *baseline), stats.Span(3, *candidate), 0.0, False))

    assert shown(metric, (4994, 4994), (5010, 5010)) == "4,994 -> 5,010 (+16, +0.3%)"
    assert shown(metric, (416, 416), (400, 400)) == "416 -> 400 (-16, -3.8%)"
    assert shown(METRICS["graph_breaks"], (0, 0), (2, 2)) == "0 -> 2"
    assert shown(metric, (10, 12), (10, 10)) == "10..12 -> 10"


def _rows(label: str, start: datetime, timing: list[float], **counts: int) -> list[dict]:
    rows = result_rows(len(timing), label=label, **counts)
    for i, (row, speed) in enumerate(zip(rows, timing)):
        row.update(examples_per_sec=speed, started_at=start + timedelta(minutes=i))
    return rows


@pytest.mark.parametrize("by", ["label", "time"])  # the summaries, and every trial
def test_compare_judges_counters_exactly_beside_timing(tmp_path: Path, by: str) -> None:
    from stepwatch.collector.schema import to_table

    day = datetime(2026, 11, 1, tzinfo=UTC)
    noisy = [100.0, 80.0, 125.0]  # throughput as noisy as this runner's: no verdict from three trials
    before = _rows("before", day, noisy, hlo_instructions=4994, hlo_fusions=416, graph_breaks=0, compiled_graphs=1)
    after = _rows("after", day + timedelta(days=1), noisy[::-1], hlo_instructions=5010, hlo_fusions=416,
                  graph_breaks=2, compiled_graphs=1)  # fmt: skip
    results = tmp_path / "results"
    results.mkdir()
    pq.write_table(to_table(before + after), results / "rows.parquet")
    db = str(tmp_path / "store.duckdb")
    assert stepwatch("ingest", str(results), "--db", db).returncode == 0
    sides = (
        ("--baseline", "label=before", "--candidate", "label=after")
        if by == "label"
        else ("--baseline", "until=2026-11-01T12:00", "--candidate", "since=2026-11-01T12:00")
    )
    metrics = "examples_per_sec,hlo_instructions,hlo_fusions,graph_breaks,compiled_graphs,compiled_flops"
    done = stepwatch("compare", *sides, "--metric", metrics, "--db", db)
    assert done.returncode == 0, (
        done.stdout + done.stderr
    )  # counters changed: the program did, not necessarily for worse
    out = tmp_path / "c.json"
    assert (
        stepwatch("compare", *sides, "--metric", metrics, "--db", db, "--format", "json", "--out", str(out)).returncode
        == 0
    )
    rows = {r["metric"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["examples_per_sec"]["verdict"] == INCONCLUSIVE
    assert rows["hlo_instructions"]["verdict"] == CHANGED
    assert rows["hlo_instructions"]["exact"]["candidate"] == {"n": 3, "low": 5010, "high": 5010}
    assert rows["hlo_instructions"]["q_value"] is None  # not a test
    assert rows["graph_breaks"]["verdict"] == CHANGED and rows["graph_breaks"]["ratio"] is None  # 0 -> 2
    assert rows["hlo_fusions"]["verdict"] == rows["compiled_graphs"]["verdict"] == NO_CHANGE
    assert "compiled_flops" not in rows  # never read for this series (its backend has none): no row, not "missing"
    assert "4,994 -> 5,010 (+16, +0.3%)" in done.stdout and "0 -> 2" in done.stdout
    assert "verdict: 2 changed, 2 no change, 1 inconclusive" in done.stdout + done.stderr
    # A direction declared for a counter (graph breaks: fewer is better, here) makes its change a regression.
    declared = tmp_path / "thresholds.toml"
    declared.write_text('[[override]]\nmetric = "graph_breaks"\nbetter = "lower"\nreason = "a break splits the step"\n')
    judged = stepwatch("compare", *sides, "--metric", metrics, "--db", db, "--thresholds", str(declared),
                       "--format", "json")  # fmt: skip
    assert judged.returncode == 1, judged.stdout + judged.stderr
    verdicts = {r["metric"]: r["verdict"] for r in json.loads(judged.stdout)["rows"]}
    assert (verdicts["graph_breaks"], verdicts["hlo_instructions"]) == (REGRESSION, CHANGED)


# Real compiled steps on this CPU: (backend, model, xla) -> the counters its trials must read.
HLO_COUNTS = {"hlo_instructions", "hlo_fusions", "hlo_custom_calls"}
READ = {
    ("jax", "bilstm", True): {
        "compiled_flops",
        "compiled_bytes_accessed",
        "compiled_transcendentals",
        "compiled_memory_bytes",
        "step_compilations",
        *HLO_COUNTS,
    },
    ("tensorflow", "bilstm", True): HLO_COUNTS,
    ("tensorflow", "bilstm", False): {"graph_ops"},
    ("torch", "bilstm", True): {"compiled_graphs", "graph_breaks", "generated_kernels"},
}
MAY_BE_ZERO = {"compiled_transcendentals", "hlo_custom_calls", "graph_breaks"}  # none of these in some programs


# torch.compile on this CPU takes a minute of both cores for one trial (dynamo traces the LSTM's steps, inductor
# builds C++ kernels): its trial is opt-in (--run-large; CI's `large` job), the same checks on its rows.
COMPILED_TORCH = {key for key in READ if key[0] == "torch"}


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The READ configs of JAX and TensorFlow: the runs the dashboard's store and test_backends read too."""
    return shared_rows(tmp_path_factory, TF_BASELINE, JAX_BILSTM)


def check_counters(rows: list[dict], expected: set[tuple]) -> None:
    seen = {}
    for row in rows:
        key = (row["keras_backend"], row["model"], row["xla_requested"])
        assert row["status"] == "ok", (key, row["error_message"])
        found = {name for name in COUNTERS if row[name] is not None}
        assert found == READ[key], (key, found, json.loads(row["extras"]).get("counters_error"))
        assert all(row[name] > 0 for name in READ[key] - MAY_BE_ZERO), key
        # The train step compiled once: its arguments are placed as the model's own variables are (a batch
        # committed to one device made JAX compile the step again on its second call: seconds of warm-up).
        assert row["step_compilations"] in (None, 1), key
        if row["graph_breaks"] is not None:  # why dynamo broke the step, per reason, in the row
            reasons = json.loads(row["extras"])["graph_break_reasons"]
            assert sum(reasons.values()) == row["graph_breaks"] and all(reasons), reasons
        seen.setdefault(key, []).append({name: row[name] for name in COUNTERS})
    assert set(seen) == expected
    for key, values in seen.items():  # two processes of one config read the same counters
        assert all(v == values[0] for v in values), (key, values)


def check_read_after_measuring(rows: list[dict]) -> None:
    """The trial writes what it measured first (the parent then stops sampling its memory: test_memory), and
    adds the counters and what reading them took."""
    for row in rows:
        extras = json.loads(row["extras"])
        assert extras["counters_s"] >= 0 and "counters_error" not in extras
        assert row["peak_memory_bytes"] > 0 and extras["memory_samples"] > 0
        # sampled near the true peak (a loaded host wakes the parent late: about 1% missed), and never below the floor
        assert extras["peak_anon_missed_bytes"] <= 0.05 * row["peak_memory_bytes"]
        assert row["peak_memory_bytes"] >= extras["peak_anon_floor_bytes"]


# What a profile of each backend's trial must hold: op types of its compiler, and the raw profile's file.
PROFILED = {
    ("jax", "bilstm", True): ({"dot", "copy"}, "*.xplane.pb"),  # HLO opcodes (XLA's ops on this CPU)
    ("tensorflow", "bilstm", True): ({"dot", "copy"}, "*.xplane.pb"),
    ("tensorflow", "bilstm", False): ({"MatMul", "AddV2"}, "*.xplane.pb"),  # graph ops
    # torch.compile's step: the operators inside its compiled graph (its wrapper regions are no ops: below).
    ("torch", "bilstm", True): ({"aten::mm"}, "trace.json.gz"),
}
PROFILE_FIELDS = ("profile_steps", "profile_step_time_s", "profile_uri", *OP_COLUMNS)


def check_op_tables(rows: list[dict], expected: set[tuple]) -> None:
    """The first trial of every config recorded a profile after its timed steps: per-op self times and counts per
    step, all on the host on this CPU, ops of the backend's compiler among them, the raw profile kept."""
    seen = set()
    for row in rows:
        if row["trial"] != 0:
            continue
        key = (row["keras_backend"], row["model"], row["xla_requested"])
        extras = json.loads(row["extras"])
        assert "profile_error" not in extras, (key, extras.get("profile_error"))
        types, raw = PROFILED[key]
        assert types <= set(row["op_types"]), (key, sorted(set(row["op_types"]))[:40])
        assert len({len(row[c]) for c in OP_COLUMNS}) == 1 and set(row["op_where"]) == {"host"}
        assert row["profile_steps"] == 5 and 0 < row["profile_step_time_s"] < 10
        assert all(t >= 0 for t in row["op_time_s"]) and all(c > 0 for c in row["op_counts"])
        assert 0 < sum(row["op_time_s"]) < 4 * row["profile_step_time_s"]  # at most the two cores' (and some)
        assert row["op_time_s"] == sorted(row["op_time_s"], reverse=True)
        assert list(Path(row["profile_uri"]).rglob(raw)), key
        assert extras["profile_bytes"] > 0 and extras["profile_s"] > 0
        seen.add(key)
    assert seen == expected


def test_counters_are_read_from_the_compiled_step_of_every_backend(counted: list[dict]) -> None:
    check_counters(counted, set(READ) - COMPILED_TORCH)


def test_counters_are_read_once_the_trial_has_measured(counted: list[dict]) -> None:
    check_read_after_measuring(counted)


def test_a_profile_of_every_backend_gives_its_op_table(counted: list[dict]) -> None:
    check_op_tables(counted, set(PROFILED) - COMPILED_TORCH)


# Two ResNet-50 trials with profiles, 18 s of both cores: CI's `large` job. The op names of a TensorFlow profile on
# this CPU's own oneDNN setting are checked in every run by test_a_profile_of_every_backend_gives_its_op_table.
@pytest.mark.large
def test_a_tensorflow_profile_names_the_same_ops_with_and_without_onednn(tmp_path: Path) -> None:
    """TensorFlow turns oneDNN's graph rewrite on by default on some x86 CPUs (AVX-512 VNNI or newer) and off on
    others, and the rewrite renames the ops it takes over (_MklMatMul, _MklNativeFusedConv2D): a profile then
    named no MatMul and no convolution on one machine and both on the next. Forced on and off here, whatever
    this CPU's default, ResNet-50's profile names its matmul and its convolutions both times; the rewrite's only
    other trace is the one fusion it adds (the filter gradient with the bias gradient)."""
    found = {}

    def run(onednn: str) -> None:
        out = tmp_path / onednn
        flags = ("--xla", "off", "--precision", "fp32", "--steps", "10", "--warmup", "10", "--window", "5")
        done = stepwatch("run", "--models", "resnet50", *flags, "--trials", "1", "--profile", "1", "--out", str(out),
                         env={"TF_ENABLE_ONEDNN_OPTS": onednn})  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        [row] = rows_in(out)
        found[onednn] = set(row["op_types"])

    two_at_a_time(run, ("0", "1"))
    for types in found.values():
        assert {"MatMul", "_FusedConv2D", "Conv2DBackpropInput"} <= types, sorted(types)
        assert not any(t.startswith("_Mkl") for t in types), sorted(types)
    assert found["0"] ^ found["1"] <= {"Conv2DBackpropFilter", "Conv2DBackpropFilterWithBias"}, found


@pytest.mark.large
def test_torch_compile_counters_and_op_table(tmp_path: Path) -> None:
    # One trial: torch.compile on a CPU takes a minute.
    done = stepwatch("run", *BILSTM, "--keras-backend", "torch", "--xla", "on", "--precision", "fp32", "--trials",
                     "1", "--profile", "1", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = rows_in(tmp_path)
    check_counters(rows, COMPILED_TORCH)
    check_read_after_measuring(rows)
    check_op_tables(rows, COMPILED_TORCH)
    # The profiled steps ran compiled: the raw trace holds torch.compile's wrapper regions (the compiled graph's
    # call, the guard check before it). They wrap operators that have their own rows, so the op table leaves them
    # out (profiles.TORCH_WRAPPERS): counted, each step's time was counted twice.
    [row] = rows
    [written] = Path(row["profile_uri"]).rglob(profiles.TORCH_TRACE)
    trace = profiles.torch_trace(written.parent)
    ran = {profiles.torch_type(event.get("name", "")) for event in trace["traceEvents"] if event.get("ph") == "X"}
    assert set(profiles.TORCH_WRAPPERS) <= ran, sorted(ran)[:40]
    assert not set(profiles.TORCH_WRAPPERS) & set(row["op_types"]), sorted(row["op_types"])


def test_a_compile_cache_makes_the_second_trial_warm_and_says_so(counted: list[dict]) -> None:
    """--compile-cache: the first trial of a compiled config compiles (cold) and leaves its programs in the cache;
    the second finds them there (warm): it compiled nothing and read the same counters (XLA's persistent cache
    on TensorFlow and JAX). A step that is not compiled says nothing."""
    caches = {(r["keras_backend"], r["xla_requested"], r["trial"]): r["compile_cache"] for r in counted}
    for backend in ("jax", "tensorflow"):
        assert (caches[(backend, True, 0)], caches[(backend, True, 1)]) == ("cold", "warm"), caches
    assert caches[("tensorflow", False, 0)] is None and caches[("tensorflow", False, 1)] is None, caches


CACHED_MODEL = '''"""A team's Keras model."""

import keras


def mlp(preset: str = "tiny") -> dict:
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
    return {"model": model, "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "inputs": {"shape": (16,)}, "labels": {"shape": (), "dtype": "int32", "high": 4}}
'''


@pytest.mark.large
def test_a_compile_cache_filled_in_one_checkout_holds_the_programs_for_another(tmp_path: Path) -> None:
    """The nightly fills the cache in its checkout; a pull request's job restores it into its own, whose absolute
    path differs on self-hosted runners. On JAX every program was compiled again there: JAX put a folder inside the
    cache into each program's compile options, and so the cache's path into every key. Now the fill says "held
    already" in the other checkout too."""
    first, second = tmp_path / "runner-a" / "repo", tmp_path / "runner-b" / "work" / "repo"
    first.mkdir(parents=True)
    (first / "model.py").write_text(CACHED_MODEL)
    fill = ("run", "--fill-compile-cache", "--compile-cache", ".stepwatch-compile-cache", "--models", "model.py:mlp",
            "--keras-backend", "jax", "--xla", "on")  # fmt: skip
    said = []
    for checkout in (first, second):
        if checkout == second:
            shutil.copytree(first, second)  # the repository and its restored cache, elsewhere
        done = stepwatch(*fill, cwd=checkout)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        said.append(done.stdout + done.stderr)
    assert ": compiled (ok" in said[0] and ": held already (ok" in said[1], said


def test_a_trial_without_profile_is_as_before(counted: list[dict]) -> None:
    """Trial 1 (not profiled) has no profile fields; trials 0 and 1 of a config have the same other columns, and
    the profiled one measured first (what it timed is written before it profiles)."""
    by_key = {}
    for row in counted:
        by_key.setdefault((row["keras_backend"], row["xla_requested"], row["trial"]), row)
    pairs = [(by_key[(b, x, 0)], by_key[(b, x, 1)]) for b, x, t in by_key if t == 1]
    assert pairs
    for profiled, plain in pairs:
        assert all(plain[name] is None for name in PROFILE_FIELDS)
        assert not {"profile_s", "profile_bytes", "profile_error"} & set(json.loads(plain["extras"]))
        varies = {"machine_note"}  # empty where the machine was quiet: one trial may be shared, the other not
        others = {name for name, value in plain.items() if value is not None} - varies
        assert others == {name for name, value in profiled.items() if value is not None} - set(PROFILE_FIELDS) - varies


ONE_MORE_LAYER = '    "tiny": TransformerSize(2, 32, 2, 64, 512, 16, dropout=0.0),\n'


@pytest.mark.large  # four transformer trials, 1.5 minutes of both cores: opt-in (--run-large; CI's `large` job)
def test_one_more_layer_means_more_of_every_counter(tmp_path: Path) -> None:
    """The tiny transformer with one more layer per stack (the source edited in a copy): more instructions,
    fusions, flops and bytes on JAX; more ops on TensorFlow without XLA."""
    env = edited_source(
        tmp_path / "tree", (("trainers/transformer.py", '    "base": TransformerSize', ONE_MORE_LAYER),)
    )
    configs = "".join(
        f'[[configs]]\nkeras_backend = "{b}"\nmodel = "transformer"\nxla = {x}\n\n'
        for b, x in (("jax", "true"), ("tensorflow", "false"))
    )
    suite = write_suite(tmp_path / "suite.toml", f'name = "layers"\n[defaults]\npreset = "tiny"\n\n{configs}')
    rows = {}

    def run(tree: Path, where: dict[str, str]) -> None:
        out = tmp_path / f"results-{tree.name}"
        done = stepwatch("run", "--suite", str(suite), *SHORT, "--trials", "1", "--out", str(out), cwd=tree, env=where)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        for row in rows_in(out):
            rows[row["keras_backend"], tree == REPO] = row

    two_at_a_time(lambda pair: run(*pair), ((REPO, {}), (tmp_path / "tree", env)))
    jax_one, jax_two = rows["jax", True], rows["jax", False]
    for name in ("hlo_instructions", "hlo_fusions", "compiled_flops", "compiled_bytes_accessed"):
        assert jax_two[name] > jax_one[name], (name, jax_one[name], jax_two[name])
    assert rows["tensorflow", False]["graph_ops"] > rows["tensorflow", True]["graph_ops"] > 0


def test_counters_names_every_counter_in_a_list_of_metrics() -> None:
    from stepwatch.collector.cli.arguments import metric_list

    assert metric_list("examples_per_sec,counters") == ["examples_per_sec", *COUNTERS]
    assert metric_list("hlo_fusions,counters")[0] == "hlo_fusions" and len(metric_list("hlo_fusions,counters")) == len(
        COUNTERS
    )


def test_the_overview_calls_a_counter_its_backend_does_not_read_missing_not_failed(tmp_path: Path) -> None:
    from stepwatch.collector.analysis.latest import overview
    from stepwatch.collector.schema import to_table
    from stepwatch.collector.store.database import open_store
    from stepwatch.collector.store.selection import Selection

    day = datetime(2026, 11, 1, tzinfo=UTC)
    rows = _rows("night-1", day, [100.0, 101.0]) + _rows("night-2", day + timedelta(days=1), [100.0, 99.0])
    for row in rows:
        row["suite_run_id"] = row["label"]
    results = tmp_path / "results"
    results.mkdir()
    pq.write_table(to_table(rows), results / "rows.parquet")
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(results), "--db", str(db)).returncode == 0
    with open_store(db) as reader:
        table = overview(reader.connection(), Selection.of(), "hlo_fusions", [])
        timed = overview(reader.connection(), Selection.of(), "examples_per_sec", [])
    assert list(table["verdict"]) == [MISSING]  # ok trials that read no fusions (XLA off): not a failure
    assert list(timed["verdict"]) != [MISSING]


@pytest.mark.large
def test_after_a_counter_changes_the_overview_says_changed_once_then_no_change_and_its_alert_is_no_regression(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fusions 416 for 10 nights, then 322 for 4. The night of the change is "changed"; on the nights after it the
    baseline starts after the change, so they are "no change" (a baseline pooling both values called them
    inconclusive). detect's alert for it has no declared direction: the Overview counts it as changed, not in its
    Regressed tile, and the CLI exits 0."""
    from stepwatch.collector.analysis.latest import overview
    from stepwatch.collector.schema import to_table
    from stepwatch.collector.store.database import open_store
    from stepwatch.collector.store.selection import Selection
    from tests.test_dashboard import render

    day = datetime(2026, 11, 1, tzinfo=UTC)
    fusions = [416] * 10 + [322] * 4
    timing = [100.0, 101.0, 99.0]
    rows = [row for night, count in enumerate(fusions)
            for row in _rows(f"night-{night}", day + timedelta(days=night), timing, hlo_fusions=count)]  # fmt: skip
    for row in rows:
        row["suite_run_id"] = row["label"]
    results = tmp_path / "results"
    results.mkdir()
    db = tmp_path / "store.duckdb"

    def verdicts(nights: int) -> tuple[str, str]:
        for path in results.glob("*.parquet"):
            path.unlink()
        pq.write_table(to_table(rows[: 3 * nights]), results / "rows.parquet")
        db.unlink(missing_ok=True)
        assert stepwatch("ingest", str(results), "--db", str(db)).returncode == 0
        with open_store(db) as reader:
            [row] = overview(reader.connection(), Selection.of(), "hlo_fusions", []).to_dict("records")
        return row["previous_verdict"], row["baseline_verdict"]

    assert verdicts(10) == (NO_CHANGE, NO_CHANGE)
    assert verdicts(11) == (CHANGED, CHANGED)  # the night of the change
    assert verdicts(12) == (NO_CHANGE, NO_CHANGE)  # the baseline is the one night since the change
    assert verdicts(14) == (NO_CHANGE, NO_CHANGE)

    detected = stepwatch("detect", "--metric", "hlo_fusions", "--db", str(db))
    assert detected.returncode == 0, detected.stdout + detected.stderr
    page = render(db, "overview", monkeypatch, metric="hlo_fusions")
    tiles = {m.label: m.value for m in page.metric}
    assert tiles["Regressed"] == "0" and tiles["Open alerts"] == "1"
    assert [s.value for s in page.subheader if s.value in ("Confirmed regressions", "Changed")] == ["Changed"]
    [table] = [frame.value for frame in page.dataframe if "changed_alerts" in frame.value.columns]
    assert list(table["alerts"]) == [0] and list(table["changed_alerts"]) == [1]


def test_a_store_written_before_the_counters_is_read_and_then_upgraded(tmp_path: Path) -> None:
    """A store of an earlier stepwatch has no counter columns: it is read (they read as empty), and the next write
    adds them."""
    import duckdb

    from stepwatch.collector.schema import to_table
    from stepwatch.collector.store.tables import SPANS

    def ingest(label: str, days: int, **counts: int) -> None:
        rows = _rows(label, datetime(2026, 11, 1, tzinfo=UTC) + timedelta(days=days), [100.0, 101.0, 99.0], **counts)
        pq.write_table(to_table(rows), results / f"{label}.parquet")
        assert stepwatch("ingest", str(results), "--db", str(db)).returncode == 0

    results, db = tmp_path / "results", tmp_path / "store.duckdb"
    results.mkdir()
    ingest("before", 0)
    ingest("mid", 1)
    with duckdb.connect(str(db)) as con:  # as the earlier stepwatch wrote it
        con.execute("DROP INDEX runs_run_id")
        for name in COUNTERS:
            con.execute(f'ALTER TABLE runs DROP COLUMN "{name}"')
            for stat in SPANS:
                con.execute(f'ALTER TABLE summaries DROP COLUMN "{stat}_{name}"')
        con.execute("DROP TABLE ops")  # nor op tables, nor profiles
        for name in ("profile_steps", "profile_step_time_s", "profile_uri"):
            con.execute(f'ALTER TABLE runs DROP COLUMN "{name}"')
        con.execute("UPDATE store_meta SET value = 'earlier' WHERE key = 'layout'")
    read = stepwatch("compare", "--baseline", "label=before", "--candidate", "label=mid", "--metric",
                     "examples_per_sec,hlo_fusions", "--db", str(db), "--format", "json")  # fmt: skip
    assert read.returncode == 0, read.stdout + read.stderr
    assert [r["metric"] for r in json.loads(read.stdout)["rows"]] == ["examples_per_sec"]  # no counter was read
    unprofiled = stepwatch("explain", "--baseline", "label=before", "--candidate", "label=mid", "--db", str(db))
    assert unprofiled.returncode == 0 and "no profiled trials" in unprofiled.stdout, unprofiled.stderr
    ingest("after", 2, hlo_fusions=3)  # a write: the store gains the columns (and the op tables)
    ingest("later", 3, hlo_fusions=4)
    judged = stepwatch("compare", "--baseline", "label=after", "--candidate", "label=later", "--metric",
                       "hlo_fusions", "--db", str(db), "--format", "json")  # fmt: skip
    assert judged.returncode == 0, judged.stdout + judged.stderr
    assert [r["verdict"] for r in json.loads(judged.stdout)["rows"]] == [CHANGED]  # 3 -> 4 fusions
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM ops").fetchall() == [(0,)]


def test_graph_break_reasons_keep_dynamos_explanation_without_its_hints() -> None:
    backward = (
        "Unsupported Tensor.backward() call\n  Explanation: Dynamo currently does not support tracing "
        "`Tensor.backward()` when trace_autograd_ops is off.\n  Hint: Set torch._dynamo.trace_autograd_ops=True\n\n"
        "  Developer debug context: call_method TensorVariable() backward None None None None\n\n For more details "
        "about this graph break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0123.html"
    )
    reasons = counters.graph_break_reasons({backward: 3, "builtin: print": 1, "builtin: print\n  more": 2})
    assert reasons == {
        "Unsupported Tensor.backward() call: Dynamo currently does not support tracing `Tensor.backward()` when "
        "trace_autograd_ops is off.": 3,
        "builtin: print": 3,
    }
