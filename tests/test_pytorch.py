"""Plain PyTorch training (loop ``pytorch``, no Keras) on this CPU for real: the bundled ResNet-50 beside the same
network under Keras on torch, a user's own torch module, and their speedup pair; what it cannot run is refused
in one line, and a Keras model handed to the PyTorch loop is a row that says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepwatch.collector.analysis.speedups import with_intervals
from stepwatch.collector.config import BenchmarkConfig, config_columns
from stepwatch.collector.store import queries
from stepwatch.collector.store.database import StoreReader
from stepwatch.collector.store.ingest import ingest
from stepwatch.collector.store.selection import Selection
from tests.conftest import SHORT, result_rows, rows_in, stepwatch, write_results, write_suite
from tests.test_dashboard import figures, render, values

GPT = "examples/torch_gpt.py:tiny_gpt"
HELD_OUT = "tests/data/models/recommender.py:two_tower"  # written from the docs' contract alone
KERAS_MODEL = "tests/data/models/sentiment.py:sentiment"


def plain_run(tmp_path: Path, configs: list[tuple[str, str]], failed: int = 0) -> dict[tuple[str, str], dict]:
    """One trial of each (model, loop) on torch, threads auto, the first of each profiled: its rows by config."""
    suite = write_suite(
        tmp_path / "plain.toml",
        '[defaults]\nkeras_backend = "torch"\npreset = "tiny"\nthreads = "auto"\n\n'
        + "".join(f'[[configs]]\nmodel = "{m}"\nloop = "{loop}"\n\n' for m, loop in configs),
    )
    out = tmp_path / "out"
    done = stepwatch("run", "--suite", str(suite), *SHORT, "--profile", "1", "--out", str(out))
    assert done.returncode == (4 if failed else 0), done.stderr
    assert not failed or f"{failed} of {len(configs)} trials failed" in done.stderr, done.stderr
    return {(r["model"], r["loop"]): r for r in rows_in(out)}


def ran_plain(row: dict) -> dict:
    """``row``'s extras, once it is checked to be an ok fp32 trial of torch alone, profiled."""
    assert row["status"] == "ok" and row["examples_per_sec"] > 0 and row["loss_finite"], row["error_message"]
    assert len(row["window_step_times_s"]) == 2 and row["peak_memory_bytes"] > 0
    extras = json.loads(row["extras"])
    assert extras["frameworks_loaded"] == ["torch"] and row["torch_version"]
    assert row["compiler"] == "none" and row["tf32_enabled"] is False and row["compute_dtype"] == "float32"
    assert "profile_error" not in extras and row["op_types"], extras.get("profile_error")
    return extras


def test_a_users_torch_modules_train_in_the_plain_pytorch_loop_and_a_keras_model_there_is_a_row_saying_so(
    tmp_path: Path,
) -> None:
    """Two modules of a user's (one given a dict of inputs, with declared FLOPs; one with none declared) train for
    real in the plain loop, profiled; a Keras model handed to it is a crash row naming why."""
    rows = plain_run(tmp_path, [(GPT, "pytorch"), (HELD_OUT, "pytorch"), (KERAS_MODEL, "pytorch")], failed=1)
    gpt, held_out = rows[GPT, "pytorch"], rows[HELD_OUT, "pytorch"]  # the held-out one: keyword inputs, default SGD
    for row in (gpt, held_out):
        ran_plain(row)
        assert row["keras_version"] is None
    assert gpt["model_hash"] and json.loads(gpt["extras"])["flops_missing"]  # no FLOPs declared, none compiled
    assert held_out["flops_per_example"] == 6 * 2 * 16 * 16 and json.loads(held_out["extras"])[
        "flops_source"
    ].startswith("declared")
    refused = rows[KERAS_MODEL, "pytorch"]
    assert refused["status"] == "crash"
    assert refused["error_message"] == (
        f"model {KERAS_MODEL}: 'model' is a Functional, not a torch.nn.Module (a Keras model trains with --loop fit)"
    )


def test_plain_pytorch_against_keras_fit_on_torch_is_a_speedup_pair_and_a_bar_of_the_speedups_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pair the large test below makes of real ResNet-50 trials, on rows shaped like the collector's: a plain
    PyTorch point is sped up against Keras' fit of the same config on torch, and the page draws its bar."""
    rows = []
    for loop, rate, keras_version in (("fit", 100.0, "3.15.1"), ("pytorch", 150.0, None)):
        config = BenchmarkConfig(model="resnet50", keras_backend="torch", loop=loop)
        made = result_rows(3, f"plain-{loop}", **config_columns(config), config_key=config.key,
                           keras_version=keras_version, torch_version="2.13.0")  # fmt: skip
        rows += [{**row, "examples_per_sec": rate * (1 + 0.01 * i)} for i, row in enumerate(made)]
    db = tmp_path / "store.duckdb"
    assert ingest([str(write_results(tmp_path / "rows.parquet", rows))], db).rows_added == len(rows)
    points = with_intervals(queries.speedups(StoreReader(db).connection(), Selection.of(keras_backend="torch")))
    [pair] = points[points["plain_speedup"].notna()].to_dict("records")
    assert (pair["model"], pair["loop"], pair["plain_n"]) == ("resnet50", "pytorch", "3 / 3")
    assert pair["plain_speedup"] == pytest.approx(1.5, rel=0.01)
    [chart] = [f for f in figures(render(db, "speedups", monkeypatch, kind="Plain PyTorch vs Keras"))
               if f["layout"]["title"]["text"].startswith("Plain PyTorch vs Keras on torch")]  # fmt: skip
    [bar] = chart["data"]
    assert list(bar["x"]) == ["resnet50/tiny"] and values(bar["y"]) == [pytest.approx(pair["plain_speedup"])]


@pytest.mark.large  # ResNet-50 under Keras on torch and in the plain loop, profiled: 25 s of both cores
def test_plain_pytorch_trains_resnet50_beside_keras_on_torch_and_the_speedups_page_shows_the_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = plain_run(tmp_path, [("resnet50", "fit"), ("resnet50", "pytorch"), (HELD_OUT, "pytorch")])
    keras_fit, plain, held_out = rows["resnet50", "fit"], rows["resnet50", "pytorch"], rows[HELD_OUT, "pytorch"]
    for row in (keras_fit, plain, held_out):
        ran_plain(row)
    assert keras_fit["keras_version"] and plain["keras_version"] is None
    assert plain["flops_per_example"] == keras_fit["flops_per_example"]  # the same network, counted once
    assert any(t.startswith("aten::") and "conv" in t for t in plain["op_types"]), plain["op_types"][:20]

    # The Keras-on-torch overhead is a speedup pair: plain PyTorch against Keras' fit of the same config.
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(tmp_path / "out"), "--db", str(db)).returncode == 0
    points = with_intervals(queries.speedups(StoreReader(db).connection(), Selection.of(keras_backend="torch")))
    [pair] = points[points["plain_speedup"].notna()].to_dict("records")
    assert (pair["model"], pair["loop"], pair["plain_n"]) == ("resnet50", "pytorch", "1 / 1")
    assert pair["plain_speedup"] == pytest.approx(plain["examples_per_sec"] / keras_fit["examples_per_sec"], rel=0.3)

    # The Speedups page: the plain PyTorch bar, and the plain runs (no Keras version) beside the picked version's.
    charts = {
        figure["layout"]["title"]["text"].split(" (")[0]: figure
        for kind in ("Precision vs fp32", "Plain PyTorch vs Keras")  # one tab each
        for figure in figures(render(db, "speedups", monkeypatch, kind=kind))
    }
    [bar] = charts["Plain PyTorch vs Keras on torch"]["data"]
    assert list(bar["x"]) == ["resnet50/tiny"] and values(bar["y"]) == [pytest.approx(pair["plain_speedup"])]
    shown = {x for trace in charts["Precision modes vs the fastest fp32 point"]["data"] for x in trace["x"]}
    assert shown == {"resnet50/tiny fit", "resnet50/tiny pytorch", f"{HELD_OUT}/tiny pytorch"}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("--models", "resnet50", "--loop", "pytorch"),
            "loop pytorch is plain PyTorch training: it runs with keras_backend torch, not tensorflow",
        ),  # fmt: skip
        (
            ("--models", "bert", "--loop", "pytorch", "--keras-backend", "torch"),
            "model bert has no plain PyTorch build",
        ),
    ],
    ids=["not-on-torch", "no-torch-build"],
)
def test_what_the_pytorch_loop_cannot_run_is_one_line(args: tuple[str, ...], said: str) -> None:
    done = stepwatch("run", *args, "--dry-run")
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.large
def test_the_plain_pytorch_loop_trains_data_parallel_on_several_devices_one_rank_each(tmp_path: Path) -> None:
    """--devices 2: DistributedDataParallel over two processes under torch's launcher (gloo on this CPU); rank 0's
    row, with the world size, the per-device and the global batch."""
    out = tmp_path / "out"
    done = stepwatch("run", "--models", "resnet50", "--keras-backend", "torch", "--loop", "pytorch", "--devices", "2",
                     "--precision", "fp32", "--xla", "off", *SHORT, "--trials", "1", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = rows_in(out)
    assert row["status"] == "ok" and row["loss_finite"] and row["num_devices"] == 2 and row["replicas"] == 2
    assert (row["per_device_batch"], row["global_batch"]) == (8, 16)
    assert row["examples_per_sec_per_device"] == pytest.approx(row["examples_per_sec"] / 2)
