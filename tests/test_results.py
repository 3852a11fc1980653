"""The parquet file of a suite: atomic rewrites, a full disk loses nothing, foreign files are refused."""

from __future__ import annotations

import json
import random
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stepwatch.collector.runner.results import ResultFile, ResultsError, read_rows
from stepwatch.collector.schema import SCHEMA, SCHEMA_VERSION, to_table
from tests.conftest import stepwatch


def row(i: int, log: str = "") -> dict:
    return {
        "run_id": f"r{i}",
        "suite_run_id": "s",
        "config_key": "k",
        "model": "bilstm",
        "device": "cpu",
        "started_at": datetime(2026, 11, 1, tzinfo=UTC),
        "trial": i,
        "status": "ok",
        "log_tail": log,
    }


def test_append_rewrites_the_whole_file_and_folds_unknown_keys_into_extras(tmp_path: Path) -> None:
    results = ResultFile.create(tmp_path, "smoke", "abcdef123456")
    results.append(row(0))
    results.append({**row(1), "new_metric": 1.5})
    rows = read_rows(results.path)
    assert [r["run_id"] for r in rows] == ["r0", "r1"]
    assert json.loads(rows[1]["extras"]) == {"new_metric": 1.5}
    assert rows[0]["schema_version"] == SCHEMA_VERSION
    assert pq.read_schema(results.path).names == SCHEMA.names
    assert not list(tmp_path.glob(".*tmp")), "no temporary file left behind"


@pytest.fixture
def tiny_disk(tmp_path: Path):  # noqa: ANN201
    """A 256 KiB tmpfs: a real file system that fills up."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")  # ok-skip: needs root
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_full_disk_is_one_clear_error_and_keeps_what_was_recorded(tiny_disk: Path) -> None:
    results = ResultFile(tiny_disk / "smoke.parquet")
    written = 0
    with pytest.raises(ResultsError) as error:
        for i in range(100):
            results.append(row(i, random.Random(i).randbytes(30000).hex()))  # ~30 KB a row compressed
            written += 1
    assert "No space left on device" in str(error.value)
    assert f"the {written} trial(s) recorded before are still in it" in str(error.value)
    assert written >= 1
    assert [r["trial"] for r in read_rows(results.path)] == list(range(written))


def test_foreign_and_truncated_files_are_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), foreign)
    with pytest.raises(ResultsError, match="not a stepwatch results file"):
        read_rows(foreign)
    truncated = tmp_path / "truncated.parquet"
    pq.write_table(to_table([row(0)]), truncated)
    truncated.write_bytes(truncated.read_bytes()[:100])
    with pytest.raises(ResultsError, match="not a readable parquet file"):
        read_rows(truncated)


def test_resume_onto_a_corrupt_file_is_one_line_and_leaves_it_alone(tmp_path: Path) -> None:
    broken = tmp_path / "smoke-20260101T000000Z-deadbeef.parquet"
    broken.write_bytes(b"PAR1 this is not parquet")
    result = stepwatch("run", "--suite", "smoke", "--models", "bilstm", "--out", str(tmp_path), "--resume")
    assert result.returncode == 4
    assert result.stderr.strip().splitlines() == [
        f"stepwatch: error: {broken} is not a readable parquet file: " + result.stderr.split(": ", 3)[-1].strip()
    ]
    assert broken.read_bytes() == b"PAR1 this is not parquet"


def test_the_bulk_checks_flag_the_rows_the_per_file_checks_flag() -> None:
    """``hostile_sql`` (the bulk path's check, in DuckDB) and ``hostile_values`` (the per-file path's) agree on
    every value a checked column can hold, for ok and failed rows alike."""
    import duckdb

    from stepwatch.collector.metrics import METRICS
    from stepwatch.collector.schema import POSITIVE_WHEN_OK, hostile_sql, hostile_values
    from tests.conftest import result_rows

    checked = dict.fromkeys((*POSITIVE_WHEN_OK, *(m for m in METRICS if pa.types.is_floating(SCHEMA.field(m).type))))
    rows = []
    for name in checked:
        for value in (1.5, 0.0, -1.0, float("nan"), float("inf"), float("-inf"), None):
            for status in ("ok", "crash"):
                rows.append({**result_rows(1)[0], "status": status, name: value})
    planted = to_table(rows)
    expected = [reason is not None for reason in hostile_values(planted)]
    flagged = [bad for (bad,) in duckdb.sql(f"SELECT {hostile_sql()} FROM planted").fetchall()]
    assert flagged == expected
    assert sum(expected) >= len(checked) * 3  # every column has hostile values among them
