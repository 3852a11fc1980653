"""The rows a run writes stay what they were: one trial of each kind of workload (a bundled model, a model of yours,
a script of yours; ``tests/data/rows/kinds.toml``) against the rows the same suite wrote before the trial process,
the runner and the environments were split into packages of their own (``tests/data/rows/before.parquet``), read
as this stepwatch reads it (its schema's migrations applied).

Compared column by column: the same columns of the same types in the same order; every column filled where it was
filled before (and empty where it was empty), except what the host decides (its versions, its machine state, its
prices); and the values of everything the configuration and the code decide, which no machine changes. The timings,
losses and counts a compiler makes are the host's and are not compared.

``before.parquet`` was written on a 2-core VM whose CPU is an ``Intel(R) Xeon(R) Processor`` (its ``accelerator`` and
``cpu_model``), with TensorFlow 2.21.0. On a CPU the accelerator is the CPU model, so a row's series key (its config
and its accelerator) is the host's too: what is compared of it is that it is derived from the row's own config key
and accelerator, never that it equals a key written on another CPU."""

from __future__ import annotations

import json
from typing import Any

import pyarrow.parquet as pq
import pytest

from stepwatch.collector.config import FIELD_NAMES, column
from stepwatch.collector.schema import VERSION_COLUMNS, conform, series_key, write_parquet
from tests.conftest import REPO, stepwatch

ROWS = REPO / "tests" / "data" / "rows"
# What the configuration and the code decide: equal on every machine.
DECIDED = (
    *(column(name) for name in FIELD_NAMES),
    "schema_version", "suite", "trial", "source", "label", "config_key", "status", "error_type",
    "error_message", "exit_code", "unit", "units_per_example", "per_device_batch", "global_batch", "replicas",
    "compiler", "xla_effective", "compute_dtype", "variable_dtype", "tf32_enabled", "loss_scaling", "matmul_precision",
    "intra_op_threads", "inter_op_threads", "learning_rate", "measured_steps", "flops_per_example", "model_hash",
    "peak_memory_kind", "accelerator_count",
)  # fmt: skip
# What the host decides, filled or not: its software, its machine's state, its price and where it ran.
HOST = (
    *VERSION_COLUMNS, "host", "os", "accelerator", "cpu_model", "cpu_cores", "host_memory_bytes", "container_image",
    "package_set",
    "runner_label", "xla_flags", "tf_env", "accelerator_memory_bytes", "compute_capability", "stepwatch_git_sha",
    "project_repository", "project_commit", "project_dirty", "throttled", "shared", "machine_note", "cpu_freq_mhz",
    "cpu_governor", "cpu_throttled_s", "host_other_cpu", "host_steal_cpu", "price_key", "price_per_device_hour",
    "price_source", "price_date", "price_covers", "price_note", "cost_usd", "cost_per_1m_examples_usd",
    "compile_cache", "log_tail",
)  # fmt: skip
HOST_EXTRAS = ("usable_cores", "python_executable")
# Extras added since before.parquet was written, on purpose: the kernels' determinism in force (schema 9).
ADDED_EXTRAS = ("determinism",)
# Where the rows in tests/data were written: never this host's identity, whatever host runs the tests.
WRITTEN_ON = "Intel(R) Xeon(R) Processor"


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    out = tmp_path_factory.mktemp("rows")
    done = stepwatch("run", "--suite", str(ROWS / "kinds.toml"), "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    [written] = out.glob("*.parquet")
    # What was written before as this stepwatch reads it (schema 8 moved a script's time to its first step), written
    # as it writes it.
    migrated = out / "before-migrated.parquet"
    write_parquet(conform(pq.read_table(ROWS / "before.parquet")), migrated)
    return pq.read_table(migrated), pq.read_table(written)


def differences(was: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The columns in which ``now`` is not the row ``was`` (see the module's docstring), and ``extras`` when the
    keys the code puts there differ."""
    found = [name for name in was if (name in DECIDED and now[name] != was[name])
             or (name not in DECIDED and name not in HOST and name != "series_key"
                 and (now[name] is None) != (was[name] is None))]  # fmt: skip
    # The series key: the config's (decided) with the accelerator it ran on (the host's), on both sides.
    found += ["series_key"] * any(row["series_key"] != series_key(row["config_key"], row["accelerator"])
                                  for row in (was, now))  # fmt: skip
    keys = (set(json.loads(row["extras"] or "{}")) - set(HOST_EXTRAS) - set(ADDED_EXTRAS) for row in (was, now))
    return found + (["extras"] if next(keys) != next(keys) else [])


def test_every_kind_of_workload_writes_the_rows_it_wrote_before_column_by_column(rows: tuple[Any, Any]) -> None:
    before, after = rows
    assert after.schema.names == before.schema.names
    assert [str(t) for t in after.schema.types] == [str(t) for t in before.schema.types]
    old, new = before.to_pylist(), after.to_pylist()
    assert {row["accelerator"] for row in old} == {WRITTEN_ON}  # the rows' host, not this one
    assert [row["model"] for row in new] == [row["model"] for row in old]
    assert [row["loop"] for row in new] == ["fit", "fit", "script"]
    assert {row["status"] for row in new} == {"ok"}
    for was, now in zip(old, new):
        assert differences(was, now) == [], was["model"]


def test_the_comparison_sees_a_changed_row(rows: tuple[Any, Any]) -> None:
    """The same comparison names a decided value that moved, a measured column gone empty, and an extra lost."""
    before, after = rows
    was, now = before.to_pylist()[0], after.to_pylist()[0]
    extras = json.loads(now["extras"])
    extras.pop("flops_source")
    assert differences(was, dict(now, unit="tokens")) == ["unit"]
    assert differences(was, dict(now, step_time_p50_s=None)) == ["step_time_p50_s"]
    assert differences(was, dict(now, extras=json.dumps(extras))) == ["extras"]
    assert differences(was, dict(now, cpu_freq_mhz=None, tf_version="9.9")) == []  # the host's
    # Another CPU gives another series key, derived from the same config: not a difference. A key that is not its
    # config's and accelerator's is.
    elsewhere = f"not {now['accelerator']} nor {WRITTEN_ON}"
    moved = dict(now, accelerator=elsewhere, cpu_model=elsewhere, series_key=series_key(now["config_key"], elsewhere))
    assert moved["series_key"] != was["series_key"] and differences(was, moved) == []
    assert differences(was, dict(now, series_key=series_key(now["config_key"] + "x", now["accelerator"]))) == [
        "series_key"]  # fmt: skip
