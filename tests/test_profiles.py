"""Per-op statistics (collector.trial.profiles) and their diff (collector.analysis.ops, ``stepwatch explain``):
self times from nested spans, which events are ops, and a diff of synthetic op tables whose shares are known.
Profiles of real trials on every backend: tests/test_counters.py, whose trials also record one."""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from stepwatch.collector.analysis import ops
from stepwatch.collector.schema import OP_COLUMNS
from stepwatch.collector.trial import counters, profiles
from stepwatch.collector.trial.profiles import Event, Span
from tests.conftest import REPO, SHORT, result_rows, stepwatch, write_results

MS = 1e6  # nanoseconds


def test_an_ops_self_time_leaves_out_the_ops_nested_in_it() -> None:
    spans = [
        Span("t1", "call", "outer", "host", 0, 10 * MS),
        Span("t1", "mm", "mm.1", "host", 2 * MS, 5 * MS),
        Span("t1", "add", "add.1", "host", 6 * MS, 8 * MS),
        Span("t1", "mm", "mm.2", "host", 12 * MS, 14 * MS),
        Span("t2", "call", "outer", "host", 0, 20 * MS),  # another thread: nothing of t1 is nested in it
    ]
    found = profiles.self_times(spans)
    assert found[("call", "outer", "host")] == pytest.approx((0.005 + 0.020, 2))
    assert found[("mm", "mm.1", "host")] == pytest.approx((0.003, 1))
    assert found[("mm", "mm.2", "host")] == pytest.approx((0.002, 1))
    assert found[("add", "add.1", "host")] == pytest.approx((0.002, 1))
    table = profiles.op_table(found, steps=2)
    assert list(table) == list(OP_COLUMNS)
    assert table["op_names"][0] == "outer" and table["op_time_s"][0] == pytest.approx(0.0125)  # per step
    assert table["op_counts"][0] == 1.0


@pytest.mark.parametrize(
    ("event", "op"),
    [
        (Event("add_fusion.12", 0, 1, hlo_op="add_fusion.12"), ("add_fusion", "add_fusion.12")),
        (Event("MatMul_1.42", 0, 1, hlo_op="MatMul_1.42"), ("MatMul", "MatMul_1.42")),  # TensorFlow's names in XLA
        (Event("model/dense/MatMul:MatMul", 0, 1), ("MatMul", "model/dense/MatMul")),  # a TensorFlow graph op
        (Event("volta_sgemm_128x64_nn", 0, 1, tf_op="model/dense/MatMul:MatMul"), ("MatMul", "model/dense/MatMul")),
        # oneDNN's rewrites (on by default on CPUs with AVX-512 VNNI or newer) by the stock op they replace; the
        # remapper's fused ops are TensorFlow's own.
        (Event("lstm/MatMul_1:_MklMatMul", 0, 1), ("MatMul", "lstm/MatMul_1")),
        (Event("logits/BiasAdd:_MklNativeFusedMatMul", 0, 1), ("_FusedMatMul", "logits/BiasAdd")),
        (Event("conv1/Relu:_MklNativeFusedConv2D", 0, 1), ("_FusedConv2D", "conv1/Relu")),
        (Event("bn/FusedBatchNormV3:_MklNativeFusedBatchNormV3", 0, 1), ("FusedBatchNormV3", "bn/FusedBatchNormV3")),
        (Event("conv1/Relu:_FusedConv2D", 0, 1), ("_FusedConv2D", "conv1/Relu")),
        (Event("ThunkExecutor::Execute", 0, 1), None),  # the framework's own work, not an op
        (Event("IteratorGetNextOp::DoCompute", 0, 1), None),
        (Event("end: dot.1", 0, 1), None),
    ],
)  # fmt: skip
def test_which_events_are_ops(event: Event, op: tuple[str, str] | None) -> None:
    assert profiles.op_of(event) == op


def test_an_hlo_instruction_is_typed_by_its_opcode_where_the_module_was_read() -> None:
    """TensorFlow 2.21 names some dots after their TensorFlow op (``MatMul.86``), 2.20 ``dot.21``: typed by
    the opcode of the step's optimized HLO, both are dots; a fusion keeps the type its name gives."""
    hlo = (
        "ENTRY %main (a: f32[4,4]) -> f32[4,4] {\n"
        "  %MatMul.86 = f32[4,4]{1,0} dot(f32[4,4]{1,0} %a, f32[4,4]{1,0} %a), lhs_contracting_dims={1}\n"
        "  ROOT %multiply_add_fusion.3 = f32[4,4]{1,0} fusion(f32[4,4]{1,0} %MatMul.86), kind=kLoop\n"
        "}\n"
    )
    opcodes = dict(counters.hlo_instructions(hlo))
    assert profiles.op_of(Event("MatMul.86", 0, 1, hlo_op="MatMul.86"), opcodes) == ("dot", "MatMul.86")
    assert profiles.op_of(Event("x", 0, 1, hlo_op="multiply_add_fusion.3"), opcodes)[0] == "multiply_add_fusion"
    assert profiles.op_of(Event("MatMul.86", 0, 1, hlo_op="MatMul.86"))[0] == "MatMul"  # without the module


def test_ops_on_a_device_plane_are_device_ops() -> None:
    planes = [
        ("/host:CPU", [("tf_Compute", [Event("a/MatMul:MatMul", 0, 5)])]),
        ("/device:GPU:0", [("Stream #7", [Event("sgemm", 1, 3, hlo_op="dot.3")])]),
    ]
    spans = list(profiles.xspace_spans(planes))
    assert [(s.op_type, s.where) for s in spans] == [("MatMul", "host"), ("dot", "device")]
    assert profiles.torch_type("Torch-Compiled Region: 42/0") == "Torch-Compiled Region"
    assert profiles.torch_type("aten::addmm") == "aten::addmm"


def _trials(step_ms: float, ops_ms: dict[str, float], jitter: tuple[float, ...] = (0.0, 0.1, -0.1)) -> list:
    """Three profiled trials (step time, op table) whose means are exactly the given figures."""
    return [
        ((step_ms + j) / 1e3, {(op, "host"): (ms + j * ms / 10) / 1e3 for op, ms in ops_ms.items()}) for j in jitter
    ]


def test_a_diff_of_two_op_tables_gives_each_ops_share_of_the_change() -> None:
    """The step grows by 3 ms: the matmul by 2 ms (two thirds), an op that appears adds 0.5 ms (a sixth), one that
    disappears saves 1 ms (minus a third), one is unchanged; the remaining 1.5 ms is no op's."""
    baseline = _trials(10.0, {"mm": 4.0, "add": 3.0, "gone": 1.0})
    candidate = _trials(13.0, {"mm": 6.0, "add": 3.0, "new": 0.5})
    changes, remainder = ops.diff(baseline, candidate)
    by_op = {c.op: c for c in changes}
    assert [c.op for c in changes] == ["mm", "gone", "new", "add"]  # largest absolute change first
    assert by_op["mm"].share == pytest.approx(2 / 3)
    assert by_op["gone"].share == pytest.approx(-1 / 3) and by_op["gone"].only == "baseline"
    assert by_op["new"].share == pytest.approx(1 / 6) and by_op["new"].only == "candidate"
    assert by_op["new"].step_share == pytest.approx(0.5 / 13)
    assert remainder == pytest.approx(1.5e-3)
    assert by_op["mm"].ratio.ratio == pytest.approx(1.5, rel=1e-3) and by_op["mm"].moved
    assert by_op["mm"].ratio.ci_low > 1.4
    assert by_op["add"].ratio.ratio == pytest.approx(1.0) and not by_op["add"].moved
    assert math.isnan(by_op["new"].q_value)  # on one side only: nothing to test


def test_an_a_a_of_noisy_op_tables_moves_nothing() -> None:
    """The same 200 ops, each trial 10% noisy, three trials a side: no op moves (BH across the ops)."""
    rng = np.random.default_rng(7)
    means = {f"op{i}": float(m) for i, m in enumerate(rng.lognormal(-1, 1.5, 200))}

    def side() -> list:
        trials = []
        for _ in range(3):
            table = {(op, "host"): ms * rng.lognormal(0, 0.1) / 1e3 for op, ms in means.items()}
            trials.append((sum(table.values()) * 1.2, table))
        return trials

    changes, _ = ops.diff(side(), side())
    assert [c.op for c in changes if c.moved or c.appeared] == []
    assert sum(c.ratio.p_value < 0.05 for c in changes) > 0  # unadjusted, some would have fired


def test_one_profiled_trial_a_side_gives_no_interval_and_moves_nothing() -> None:
    changes, _ = ops.diff(_trials(10.0, {"mm": 4.0}, (0.0,)), _trials(13.0, {"mm": 8.0}, (0.0,)))
    assert changes[0].ratio.ratio == pytest.approx(2.0) and math.isnan(changes[0].ratio.ci_low)
    assert not changes[0].moved


def _profiled(label: str, step_ms: float, ops_ms: dict[str, float], **fields: object) -> list[dict]:
    rows = result_rows(3, label=label, **fields)
    for row, (step_s, table) in zip(rows, _trials(step_ms, ops_ms)):
        keys = sorted(table)
        row.update(
            profile_steps=5, profile_step_time_s=step_s, profile_uri=f"/profiles/{row['run_id']}",
            op_types=[op for op, _ in keys], op_names=[f"{op}.1" for op, _ in keys],
            op_where=[where for _, where in keys], op_time_s=[table[k] for k in keys], op_counts=[1.0] * len(keys),
        )  # fmt: skip
    return rows


def test_explain_reads_the_stores_op_tables(tmp_path: Path) -> None:
    """Profiled rows through ingest and ``stepwatch explain``: the op that moved first with its share; a row
    without a profile is not read; an A/A moves nothing; JSON has the figures."""
    rows = _profiled("before", 10.0, {"MatMul": 4.0, "Mul": 3.0})
    rows += _profiled("after", 13.1, {"MatMul": 7.0, "Mul": 3.0, "Cast": 0.1})  # Cast: on the candidate only
    rows += _profiled("again", 10.0, {"MatMul": 4.0, "Mul": 3.0})
    rows += result_rows(2, label="after", start=3)  # not profiled
    write_results(tmp_path / "results" / "rows.parquet", rows)
    db = str(tmp_path / "store.duckdb")
    assert stepwatch("ingest", str(tmp_path / "results"), "--db", db).returncode == 0
    done = stepwatch("explain", "--baseline", "label=before", "--candidate", "label=after", "--db", db)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "3 + 3 profiled trials" in lines[0] and "+3.100 ms" in lines[0]
    assert lines[1].split()[:2] == ["MatMul", "(host)"] and "share   +97%" in lines[1] and "moved" in lines[1]
    assert "Mul (host)" in lines[3] and "moved" not in lines[3]
    assert "1 moved, 1 on one side only" in done.stdout
    assert "Cast (host)" in lines[2] and "candidate only, 0.100 ms a step" in lines[2]
    out = tmp_path / "explain.json"
    assert stepwatch("explain", "--baseline", "label=before", "--candidate", "label=after", "--db", db,
                     "--format", "json", "--out", str(out), "--by", "op_name").returncode == 0  # fmt: skip
    pair = json.loads(out.read_text())[0]
    assert (
        pair["trials"] == [3, 3]
        and pair["ops"][0]["op"] == "MatMul.1"
        and pair["ops"][0]["share"] == pytest.approx(3 / 3.1)
    )
    assert pair["ops"][1]["op"] == "Cast.1" and pair["ops"][1]["appeared"] is True
    assert pair["remainder_s"] == pytest.approx(0, abs=1e-12)  # every op's change adds up to the step's
    aa = stepwatch("explain", "--baseline", "label=before", "--candidate", "label=again", "--db", db)
    assert "0 moved, 0 on one side only" in aa.stdout
    none = stepwatch("explain", "--baseline", "label=before", "--candidate", "label=missing", "--db", db)
    assert none.returncode == 0 and "profiled on the baseline only" in none.stdout
    bad = stepwatch("explain", "--baseline", "label=before", "--candidate", "label=after", "--db", db, "--top", "0")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_explain_says_when_the_sides_name_their_ops_differently(tmp_path: Path) -> None:
    """XLA off against on pairs the series as compare does, and says that graph ops and HLO instructions do not
    align: the ops are on one side only, the step's change still compares."""
    rows = _profiled("x", 10.0, {"MatMul": 4.0, "Mul": 3.0}) + _profiled(
        "x", 8.0, {"dot": 3.0}, xla_requested=True, compiler="xla"
    )
    write_results(tmp_path / "results" / "rows.parquet", rows)
    db = str(tmp_path / "store.duckdb")
    assert stepwatch("ingest", str(tmp_path / "results"), "--db", db).returncode == 0
    done = stepwatch("explain", "--baseline", "xla=off", "--candidate", "xla=on", "--db", db)
    assert done.returncode == 0, done.stderr
    assert "TensorFlow graph ops against HLO instructions" in done.stdout and "-2.000 ms" in done.stdout
    assert "0 moved, 3 on one side only" in done.stdout


def test_the_compare_page_draws_the_op_diff(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Compare page, for two labels with profiled trials: the op diff as a chart (the op that moved first,
    drawn red), and each side's raw profile with its viewer (a download where it is on this machine)."""
    from tests.test_dashboard import figures, render, values

    rows = _profiled("before", 10.0, {"MatMul": 4.0, "Mul": 3.0}) + _profiled(
        "after", 13.0, {"MatMul": 7.0, "Mul": 3.0}
    )
    raw = tmp_path / "profiles" / rows[0]["run_id"]
    (raw / "plugins" / "profile" / "run").mkdir(parents=True)
    (raw / "plugins" / "profile" / "run" / "host.xplane.pb").write_bytes(b"\0" * 1000)
    for row in rows[:3]:
        row["profile_uri"] = str(raw)
    write_results(tmp_path / "results" / "rows.parquet", rows)
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(tmp_path / "results"), "--db", str(db)).returncode == 0
    at = render(db, "compare", monkeypatch, baseline="label=before", candidate="label=after")
    forest, diff = figures(at)
    bars = diff["data"][0]
    assert values(bars["y"])[-1] == "MatMul (host)" and values(bars["x"])[-1] == pytest.approx(3.0)  # on top
    assert bars["marker"]["color"][-1] == "#d62728"  # moved, slower
    shown = " ".join(m.value for m in at.markdown)
    assert "XProf" in shown and "not on this machine" in shown  # the baseline's is here, the candidate's is not
    assert [b.label for b in at.get("download_button")][-1].startswith("Download host.xplane.pb")


def test_a_raw_profile_that_cannot_be_kept_leaves_the_row(tmp_path: Path) -> None:
    """Moving the raw profile beside the results fails (here the results folder is a file, as a full disk
    fails a write): one line in the row's extras, no exception, and the op table stays in the row."""
    from stepwatch.collector.runner import execution

    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "trace.json.gz").write_bytes(b"\0" * 10)
    blocked = tmp_path / "results"
    blocked.write_text("not a folder")
    kept = execution.keep_profile(profile, blocked, "run-1", None)
    assert list(kept) == ["profile_error"] and kept["profile_error"].startswith("cannot keep the raw profile in ")
    moved = execution.keep_profile(profile, tmp_path / "ok", "run-1", "s3://bucket/nightly/")
    assert moved == {"profile_uri": "s3://bucket/nightly/profiles/run-1", "profile_bytes": 10}
    assert (tmp_path / "ok" / "profiles" / "run-1" / "trace.json.gz").exists()


# A GPU profile as XLA writes it (the H100's ResNet-50 step, in small): a host plane of the framework's own work,
# and the device's plane with the lines XProf derives and one stream of kernels, each kernel carrying the
# instruction that launched it. One step of 10 ms: a fusion, a cuDNN convolution, a cuBLAS gemm, and a command
# buffer (a CUDA graph) of two kernels the profiler attributes only to the buffer.
GPU_HLO = """HloModule jit_train_step
ENTRY %main.9 {
  %p.1 = bf16[256,224,224,3]{3,2,1,0} parameter(0)
  %loop_multiply_fusion.2 = bf16[256,64]{1,0} fusion(%p.1), kind=kLoop, calls=%fused_multiply
  %custom-call.7 = (bf16[256,112,112,64]{3,2,1,0}, u8[0]{0}) custom-call(%p.1), custom_call_target="__cudnn$convForward"
  %custom-call.9 = (bf16[256,1000]{1,0}, s8[4194304]{0}) custom-call(%p.1), custom_call_target="__cublas$lt$matmul"
  ROOT %command_buffer = bf16[256,64]{1,0} call(%p.1), to_apply=%command_buffer.1
}
"""
MS = 1_000_000


def gpu_planes() -> profiles.Planes:
    kernels = [
        Event("loop_multiply_fusion", 0, 2 * MS, hlo_op="loop_multiply_fusion.2"),
        Event(
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", 2 * MS, 3 * MS, hlo_op="custom-call.7"
        ),
        Event("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNN", 5 * MS, 2 * MS, hlo_op="custom-call.9"),
        Event("input_reduce_fusion_3", 7 * MS, 1 * MS, hlo_op="command_buffer"),
        Event("sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32", 8 * MS, 1.5 * MS, hlo_op="command_buffer"),
    ]
    derived = [Event("command_buffer", 7 * MS, 2.5 * MS, hlo_op="command_buffer"),
               Event("custom-call.7", 2 * MS, 3 * MS, hlo_op="custom-call.7")]  # fmt: skip
    host = [Event("PjitFunction(train_step)", 0, 0.4 * MS), Event("ThunkExecutor::Execute", 0.1 * MS, 0.2 * MS)]
    return [
        ("/host:CPU", [("python3", host)]),
        ("/device:GPU:0", [("XLA Modules", [Event("jit_train_step(42)", 0, 10 * MS)]), ("XLA Ops", derived),
                           ("Stream #13(compute)", kernels)]),
    ]  # fmt: skip


def test_a_gpu_profile_names_fusions_and_library_calls_not_custom_call_or_command_buffer() -> None:
    """explain on the hardware it is for: each kernel on the device typed by what launched it (a custom call by
    the library call it makes, a command buffer's kernel by its own name), the derived lines not counted twice,
    and the share of the step the named ops cover."""
    spans = list(profiles.xspace_spans(gpu_planes(), counters.hlo_op_types(GPU_HLO)))
    assert {s.where for s in spans} == {"device"}  # the host's events are the framework's, not ops
    table = profiles.op_table(profiles.self_times(spans), steps=1)
    per_type = dict(zip(table["op_types"], table["op_time_s"]))
    assert per_type == pytest.approx({
        "cuDNN convolution forward": 0.003, "cuBLASLt matmul": 0.002, "loop_multiply_fusion": 0.002,
        "cuDNN convolution backward (input)": 0.0015, "input_reduce_fusion": 0.001,
    })  # fmt: skip
    assert not {"custom-call", "command_buffer", "call"} & set(per_type)
    step = {(t, w): s for t, w, s in zip(table["op_types"], table["op_where"], table["op_time_s"])}
    assert ops.coverage(0.010, step) == pytest.approx(0.95)  # 9.5 of the step's 10 ms are in named kernels
    assert profiles.kernel_type("sm90_xmma_wgrad_implicit_gemm") == "cuDNN convolution backward (filter)"
    assert counters.library_call("__cudnn$convBackwardFilter") == "cuDNN convolution backward (filter)"
    assert counters.library_call("__my_own$kernel") == "custom-call __my_own$kernel"


def test_coverage_is_the_host_share_where_no_op_ran_on_a_device() -> None:
    assert ops.coverage(0.010, {("MatMul", "host"): 0.004, ("AddV2", "host"): 0.001}) == pytest.approx(0.5)
    assert math.isnan(ops.coverage(0.0, {}))


# torch's profiler trace of plain PyTorch ResNet-50 (bf16, batch 256, eager) on an H200: the events the reader
# reads (operators, runtime calls, kernels, memsets, annotations) and the profiled trial's row fields.
TORCH_GPU_TRACE = Path(__file__).parent / "data" / "profiles" / "torch-resnet50-bf16-eager-h200.trace.json.gz"


def test_a_torch_gpu_profile_counts_each_kernel_once_under_the_operator_that_launched_it() -> None:
    """torch's own per-op totals named 193% of this step: each kernel under its operator and again under its own
    name. Read from the trace, each kernel is counted once, typed by its operator and named by itself."""
    trace = json.loads(gzip.decompress(TORCH_GPU_TRACE.read_bytes()))
    row = trace["stepwatch_row"]
    totals = profiles.self_times(profiles.torch_spans(trace))
    table = profiles.op_table(totals, row["profile_steps"])
    by_type: dict[tuple[str, str], float] = {}
    for op_type, where, time_s in zip(table["op_types"], table["op_where"], table["op_time_s"]):
        by_type[(op_type, where)] = by_type.get((op_type, where), 0.0) + time_s
    assert 0.80 <= ops.coverage(row["profile_step_time_s"], by_type) <= 1.0

    kernels = [e for e in trace["traceEvents"] if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    device = [i for i, where in enumerate(table["op_where"]) if where == "device"]
    assert sum(table["op_counts"][i] for i in device) * row["profile_steps"] == pytest.approx(len(kernels))
    # The stream's busy time: a kernel that starts before the one ahead of it ends (on an H100 or H200, a dependent
    # launch) counts from where that one ends.
    busy, end = 0.0, -math.inf
    for start, stop in sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels):
        busy, end = busy + max(stop - max(start, end), 0.0), max(end, stop)
    assert sum(table["op_time_s"][i] for i in device) * row["profile_steps"] == pytest.approx(busy / 1e6)
    device_types = {table["op_types"][i] for i in device}
    assert all(t.startswith("aten::") for t in device_types), sorted(device_types)  # every kernel has an operator
    names = {table["op_names"][i] for i in device if table["op_types"][i] == "aten::native_batch_norm"}
    assert any(name.startswith("void at::native::batch_norm_collect_statistics") for name in names), names
    host_types = {t for t, where in zip(table["op_types"], table["op_where"]) if where == "host"}
    assert "aten::native_batch_norm" in host_types
    assert not host_types & {"cudaLaunchKernel", "Optimizer.step#SGD.step"}  # runtime calls, annotations


def test_torch_compiles_regions_are_not_ops_and_their_kernels_are_typed_by_name() -> None:
    def event(cat: str, name: str, ts: float, dur: float, external: int, tid: int = 1) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                "args": {"External id": external}}  # fmt: skip

    trace = {
        "traceEvents": [
            event("cpu_op", "TorchDynamo Cache Lookup", 0, 5, 1),
            event("cpu_op", "Torch-Compiled Region: 0/0", 10, 100, 2),
            event("cpu_op", "aten::mm", 20, 10, 3),
            event("kernel", "triton_poi_fused_add_relu_0", 40, 30, 2, tid=7),
            event("kernel", "sm90_xmma_gemm_bf16", 70, 20, 3, tid=7),
        ]
    }
    totals = profiles.self_times(profiles.torch_spans(trace))
    assert set(totals) == {
        ("aten::mm", "aten::mm", "host"),
        ("triton_poi_fused_add_relu", "triton_poi_fused_add_relu_0", "device"),
        ("aten::mm", "sm90_xmma_gemm_bf16", "device"),
    }
    assert totals[("aten::mm", "sm90_xmma_gemm_bf16", "device")] == pytest.approx((20e-6, 1))


# A trial process that cannot import pyarrow, as in an upgrade check's side environment (its packages are the side's
# and stepwatch's trial dependencies: numpy, psutil, nvidia-ml-py): the parent, which writes the parquet, keeps it.
NO_PYARROW = """import os, sys
if "STEPWATCH_SPAWN_TIME" in os.environ:  # set for a trial process by the parent that starts it
    class NoPyarrow:
        def find_spec(self, name, path=None, target=None):
            if name == "pyarrow" or name.startswith("pyarrow."):
                raise ModuleNotFoundError("No module named 'pyarrow'", name=name)
    sys.meta_path.insert(0, NoPyarrow())
"""


@pytest.mark.large
def test_a_trial_profiles_where_pyarrow_is_not_installed(tmp_path: Path) -> None:
    """An upgrade check's sides recorded `profile_error: ModuleNotFoundError: No module named 'pyarrow'` in every
    trial: the op table imported the store's schema for its column names. A trial now profiles with what a side has."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(NO_PYARROW)
    flags = ("--keras-backend", "jax", "--xla", "on", "--precision", "fp32", "--trials", "1", "--profile", "1")
    small = ("--models", "tests/data/models/sentiment.py:sentiment", "--preset", "tiny", *SHORT)  # quick to compile
    done = stepwatch("run", *small, *flags, "--out", str(tmp_path / "out"),
                     env={"PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPO}"})  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [path] = (tmp_path / "out").glob("*.parquet")
    [row] = pq.read_table(path).to_pylist()
    assert "profile_error" not in json.loads(row["extras"]), row["extras"]
    assert "dot" in set(row["op_types"]) and len(row["op_time_s"]) == len(row["op_types"])


def test_explain_says_why_there_is_no_op_table_when_the_profiles_failed(tmp_path: Path) -> None:
    """Trials asked to profile whose profiles failed: explain (and a check's report, which prints it) names the
    error per side, where it said to run with --profile."""
    failed = json.dumps({"profile_error": "ModuleNotFoundError: No module named 'pyarrow'"})
    rows = result_rows(3, label="before", extras=failed) + result_rows(3, label="after", start=3, extras=failed)
    write_results(tmp_path / "results" / "rows.parquet", rows)
    db = str(tmp_path / "store.duckdb")
    assert stepwatch("ingest", str(tmp_path / "results"), "--db", db).returncode == 0
    done = stepwatch("explain", "--baseline", "label=before", "--candidate", "label=after", "--db", db)
    assert done.stdout == ("no op table on either side: the profiles failed (baseline: ModuleNotFoundError: No module "
                           "named 'pyarrow'; candidate: ModuleNotFoundError: No module named 'pyarrow')\n")  # fmt: skip
    plain = result_rows(2, label="plain", start=6)
    write_results(tmp_path / "results" / "plain.parquet", plain)
    assert stepwatch("ingest", str(tmp_path / "results"), "--db", db).returncode == 0
    asked = stepwatch("explain", "--baseline", "label=plain", "--candidate", "label=plain", "--db", db)
    assert "run with --profile" in asked.stdout  # none asked for: the hint stays


def test_a_reports_profiles_are_named_from_the_checkout_not_the_runners_absolute_path(tmp_path: Path) -> None:
    """A check's report (a pull request's comment prints it) names each side's profile relative to the folder the
    command ran in; an address in a bucket as it is. Before: /home/runner/work/..., which no reader can open."""
    rows = _profiled("before", 10.0, {"MatMul": 4.0}) + _profiled("after", 13.0, {"MatMul": 7.0})
    for row in rows:
        kept = tmp_path / "data" / "upgrade-check" / "profiles" / row["run_id"]
        row["profile_uri"] = str(kept) if row["label"] == "before" else f"s3://bucket/profiles/{row['run_id']}"
    write_results(tmp_path / "results" / "rows.parquet", rows)
    db = str(tmp_path / "store.duckdb")
    assert stepwatch("ingest", str(tmp_path / "results"), "--db", db).returncode == 0
    done = stepwatch("explain", "--baseline", "label=before", "--candidate", "label=after", "--db", db, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "  baseline profile: data/upgrade-check/profiles/" in done.stdout, done.stdout
    assert "  candidate profile: s3://bucket/profiles/" in done.stdout and str(tmp_path) not in done.stdout
