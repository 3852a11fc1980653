"""The whole smoke suite end to end (about 5 minutes): opt in with ``pytest --run-large``."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import stepwatch


@pytest.mark.large
def test_smoke_suite_runs_every_config(tmp_path: Path) -> None:
    result = stepwatch("run", "--suite", "smoke", "--trials", "1", "--out", str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    [path] = tmp_path.glob("smoke-*.parquet")
    assert f"results: {path}" in result.stdout
    rows = pq.read_table(path).to_pylist()
    assert len(rows) == 22 and {r["status"] for r in rows} == {"ok"}
    assert all(r["xla_effective"] == r["xla_requested"] for r in rows)
    assert all(r["tf32_enabled"] is False for r in rows if r["precision"] == "fp32")
    assert {r["model"] for r in rows} == {"resnet50", "bert", "transformer", "bilstm", "teacher", "llama"}
    assert all(r["attention_kernel"] for r in rows if r["model"] in ("bert", "transformer", "llama"))
    # Time to a target quality: the teacher-student regression reaches its target within its steps, at both
    # precisions, with and without XLA.
    reached = [r for r in rows if r["model"] == "teacher"]
    assert len(reached) == 4 and all(r["steps_to_target"] and r["time_to_target_s"] > 0 for r in reached), reached
