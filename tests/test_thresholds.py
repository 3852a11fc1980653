"""Per-series thresholds: overrides select series with the one selection language."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepwatch.collector.analysis.thresholds import load_overrides, threshold_for
from stepwatch.collector.metrics import METRICS, MetricError
from stepwatch.collector.store.selection import Selection

THROUGHPUT = METRICS["examples_per_sec"]


def overrides(tmp_path: Path, *entries: str) -> list:
    path = tmp_path / "thresholds.toml"
    path.write_text("".join(f"[[override]]\n{entry}\n" for entry in entries))
    return load_overrides(path)


def test_the_last_matching_override_wins_and_values_are_typed(tmp_path: Path) -> None:
    found = overrides(
        tmp_path,
        'where = "model=bilstm,xla=on"\nmetric = "examples_per_sec"\nthreshold = 0.10\nreason = "bimodal"',
        'where = "per_device_batch=8|16,xla=yes"\nmetric = "examples_per_sec"\nthreshold = 0.2',
    )
    series = {"model": "bilstm", "xla": True, "per_device_batch": 8, "accelerator": "CPU"}
    assert threshold_for(THROUGHPUT, series, found) == 0.2
    assert threshold_for(THROUGHPUT, {**series, "per_device_batch": 4}, found) == 0.10
    assert threshold_for(THROUGHPUT, {**series, "xla": False}, found) == THROUGHPUT.threshold
    assert threshold_for(METRICS["peak_memory_bytes"], series, found) == METRICS["peak_memory_bytes"].threshold


def test_a_series_matches_by_its_field_names_or_its_run_columns() -> None:
    selection = Selection.parse("xla=on,model=bert")
    assert selection.matches({"xla": True, "model": "bert"})
    assert selection.matches({"xla_requested": True, "model": "bert"})
    assert not selection.matches({"xla_requested": False, "model": "bert"})


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("modle=bert", "unknown field 'modle' in selection (did you mean model?)"),
        ("xla=maybe", "xla_requested='maybe': expected on or off"),
        ("since=2026-11-01", "a threshold selects series, not dates"),
    ],
)
def test_a_broken_override_is_one_line_naming_it(tmp_path: Path, where: str, message: str) -> None:
    with pytest.raises(MetricError, match="override 1: ") as error:
        overrides(tmp_path, f'where = "{where}"\nmetric = "examples_per_sec"\nthreshold = 0.1')
    assert message in str(error.value) and "\n" not in str(error.value)
