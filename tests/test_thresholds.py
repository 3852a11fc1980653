"""Per-series thresholds: overrides select series with the one selection language."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepwatch.collector.analysis.thresholds import direction_for, load_overrides, threshold_for
from stepwatch.collector.metrics import METRICS, MetricError
from stepwatch.collector.outcomes import CHANGED, REGRESSION
from stepwatch.collector.store.selection import Selection
from tests.conftest import REPO, stepwatch

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


def test_a_counter_has_a_direction_only_where_one_is_declared(tmp_path: Path) -> None:
    fusions = METRICS["hlo_fusions"]
    found = overrides(tmp_path, 'where = "model=bert"\nmetric = "hlo_fusions"\nbetter = "lower"\nreason = "launches"')
    assert direction_for(fusions, {"model": "bert"}, found) is False  # declared: lower is better
    assert direction_for(fusions, {"model": "bilstm"}, found) is None  # not declared: no direction
    assert threshold_for(fusions, {"model": "bert"}, found) == fusions.threshold  # a direction alone keeps it
    assert direction_for(THROUGHPUT, {"model": "bert"}, found) is True  # a timed metric's own
    for entry, said in (
        ('metric = "examples_per_sec"\nbetter = "lower"', "better is declared for counters of the compiled step only"),
        ('metric = "hlo_fusions"\nbetter = "fewer"', "better 'fewer' is not one of higher, lower"),
    ):
        with pytest.raises(MetricError, match="override 1: ") as error:
            overrides(tmp_path, entry)
        assert said in str(error.value) and "\n" not in str(error.value)


def test_tensorflow_2_21_changes_its_compiled_steps_counters_which_is_no_regression_until_declared(
    tmp_path: Path,
) -> None:
    """The reference counters (data/reference/cpu-tf-counters): more fusions and instructions under 2.21.0 say the
    compiler emitted another program, not which is worse."""
    db = str(tmp_path / "store.duckdb")
    assert stepwatch("ingest", str(REPO / "data" / "reference" / "cpu-tf-counters"), "--db", db).returncode == 0
    sides = ("--baseline", "tf_version=2.20.0", "--candidate", "tf_version=2.21.0")
    metrics = ("--metric", "hlo_fusions,hlo_instructions", "--db", db, "--format", "json")
    done = stepwatch("compare", *sides, *metrics)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert len(rows) == 8 and {r["verdict"] for r in rows} == {CHANGED}
    text = stepwatch("compare", *sides, *metrics[:-2], "--format", "markdown").stdout
    assert "**8 changed**" in text and "🔷 changed" in text and "255 -> 322 (+67, +26.3%)" in text
    declared = tmp_path / "thresholds.toml"
    declared.write_text('[[override]]\nmetric = "hlo_fusions"\nbetter = "lower"\nreason = "fewer launches"\n')
    judged = stepwatch("compare", *sides, *metrics, "--thresholds", str(declared))
    assert judged.returncode == 1, judged.stdout + judged.stderr
    verdicts = [(r["metric"], r["verdict"]) for r in json.loads(judged.stdout)["rows"]]
    assert sorted(set(verdicts)) == [("hlo_fusions", REGRESSION), ("hlo_instructions", CHANGED)]
    # The Overview judges a counter the same way: the latest run's fusions against the run before, exactly.
    from stepwatch.collector.analysis import latest
    from stepwatch.collector.store.database import StoreReader

    table = latest.overview(StoreReader(Path(db)).connection(), Selection.of(xla=True), "hlo_fusions", [])
    assert len(table) == 4 and set(table["previous_verdict"]) == set(table["verdict"]) == {CHANGED}
