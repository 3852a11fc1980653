"""The Overview answers "did anything get slower?": a planted 10% drop in the latest night is flagged as a
regression against the previous run and the baseline, a flat series as unchanged, under Streamlit's AppTest;
and the baseline starts again after an acknowledged change (the analysis on its own)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from stepwatch.collector import outcomes
from stepwatch.collector.analysis import latest, stats
from stepwatch.collector.metrics import METRICS
from stepwatch.collector.store.ingest import ingest
from stepwatch.dashboard import labels
from tests.conftest import result_rows, write_results
from tests.test_dashboard import render

START = datetime(2026, 10, 1, 2, 0, tzinfo=UTC)
NIGHTS = 10
SPREAD = (0.995, 1.0, 1.005)  # three trials a night, 0.5% apart: a quiet series


def night(index: int, accelerator: str, level: float) -> list[dict]:
    rows = result_rows(3, f"night-{index}-{accelerator}", accelerator=accelerator)
    for row, spread in zip(rows, SPREAD):
        row["examples_per_sec"] = level * spread
        row["started_at"] = START + timedelta(days=index, minutes=row["trial"])
        row["finished_at"] = row["started_at"] + timedelta(seconds=30)
    return rows


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two series of 10 nights: 'CPU flat' at 1000/s throughout, 'CPU step' 10% slower on the last night."""
    root = tmp_path_factory.mktemp("planted")
    for i in range(NIGHTS):
        step = 0.9 if i == NIGHTS - 1 else 1.0
        write_results(
            root / "results" / f"night-{i:02d}.parquet",
            night(i, "CPU flat", 1000.0) + night(i, "CPU step", 800.0 * step),
        )
    report = ingest([str(root / "results")], root / "store.duckdb")
    assert report.rows_added == 2 * 3 * NIGHTS
    return root / "store.duckdb"


def label(cell) -> str:
    """A chip cell's text (a list of one label, or of none)."""
    return cell[0] if len(cell) else ""


def verdicts(at) -> dict[str, tuple[str, str, str]]:
    table = at.dataframe[0].value
    return {
        series.split(" on ")[-1]: (label(verdict), label(previous), label(baseline))
        for series, verdict, previous, baseline in zip(
            table["series"], table["verdict"], table["vs_previous"], table["vs_baseline"]
        )
    }


def test_overview_flags_a_planted_regression_and_calls_a_flat_series_unchanged(
    planted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = render(planted, "overview", monkeypatch)
    found = verdicts(at)
    assert found["CPU step"][0] == outcomes.REGRESSION
    assert found["CPU step"][1].startswith("-10.0% [") and found["CPU step"][2].startswith("-10.0% [")
    assert found["CPU flat"][0] == outcomes.NO_CHANGE
    assert all(re.match(r"[+-]0\.0% \[", cell) for cell in found["CPU flat"][1:])
    assert list(at.dataframe[0].value["series"].str.split(" on ").str[-1]) == ["CPU step", "CPU flat"]  # worst first
    assert {m.label: m.value for m in at.metric}["Regressed"] == "1"
    only = render(planted, "overview", monkeypatch, regressed="yes")
    assert list(verdicts(only)) == ["CPU step"] and only.toggle[0].value


def test_the_baseline_starts_again_after_an_acknowledged_change() -> None:
    """Nights 0-4 at 100, nights 5-9 at 90 (the change, acknowledged at night 5): the latest night is a
    regression against a baseline that spans the step, and unchanged against the accepted one."""
    rows = []
    for back in range(1, NIGHTS + 1):
        level = 90.0 if back <= 5 else 100.0
        night = pd.Timestamp(START - timedelta(days=back))
        rows.append({"series_key": "k", "suite_run_id": f"r{back}", "night": night, "trials": 3, "n": 3,
                     "value": level, "values": [level * s for s in SPREAD], "back": back})  # fmt: skip
    points = pd.DataFrame(rows)
    metric = METRICS["examples_per_sec"]
    # Nights that do not move at all estimate a night's offset at zero, which says nothing of its size: the
    # runner's calibration (a small one) is the floor.
    prior = stats.Between(1e-6, 50.0, "calibrate on this runner")
    spanning = latest.changes(points, metric, {}, [], {}, prior=prior)
    accepted = latest.changes(points, metric, {}, [], {"k": START - timedelta(days=5)}, prior=prior)
    assert set(spanning["night_variance"]) == {"pooled with calibrate on this runner (51 df)"}
    # No calibration and no other series: its few nights' spread, pooled with a lone runner's prior (2% a night),
    # against which a 10% step still reads as one; nothing at all would leave one night no verdict.
    alone = latest.changes(points, metric, {}, [], {})
    assert alone["baseline_verdict"].iloc[0] == outcomes.REGRESSION
    assert alone["night_variance"].iloc[0].startswith("nights' offsets, pooled with a lone runner's prior")
    assert spanning["baseline_verdict"].iloc[0] == outcomes.REGRESSION and spanning["baseline_nights"].iloc[0] == 7
    assert accepted["baseline_verdict"].iloc[0] == outcomes.NO_CHANGE and accepted["baseline_nights"].iloc[0] == 4
    assert accepted["previous_verdict"].iloc[0] == outcomes.NO_CHANGE
    assert accepted["spark"].iloc[0] == [100.0] * 5 + [90.0] * 5


def test_the_change_cells_are_coloured_by_their_verdict(planted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each status and change is a label in its verdict's colour (the regressed series' red, the flat one's
    none), coloured by the browser: no pandas Styler for the server to render on every visit."""
    at = render(planted, "overview", monkeypatch)
    found = verdicts(at)
    config = json.loads(at.dataframe[0].proto.columns)
    colour = {
        column: {o["value"]: o.get("color") for o in config[column]["type_config"]["options"]}
        for column in ("verdict", "vs_previous", "vs_baseline")
    }
    step, flat = found["CPU step"], found["CPU flat"]
    fills = labels.VERDICT_FILLS
    assert [colour[c][v] for c, v in zip(colour, step)] == [fills["regression"]] * 3
    assert [colour[c][v] for c, v in zip(colour, flat)] == [labels.NO_FILL] * 3
    assert not at.dataframe[0].proto.arrow_data.styler.styles


def test_a_young_history_says_what_its_level_and_its_reach_wait_for() -> None:
    """On a series' first nights the level has too few nights to compare, and a night's reach is past any change a
    team cares about: the cells say so (they were empty, and read "±7442.3% a night")."""
    young = {"previous_verdict": None, "baseline_verdict": "inconclusive", "baseline_ratio": 0.9,
             "baseline_ci_low": 0.1, "baseline_ci_high": 9.0, "baseline_seen": 74.423, "level_verdict": None,
             "level_seen": None}  # fmt: skip
    assert labels.change_text(young, "level") == "not yet: 3 nights before the last 7 needed"
    assert labels.seen_text(young) == "more than ±100% a night (too few nights yet)"
    grown = {**young, "baseline_seen": 0.042}
    assert labels.seen_text(grown) == "±4.2% a night"
    assert labels.change_text({**young, "baseline_verdict": None}, "level") == ""  # nothing measured at all
