"""The store's questions: selections, latest per series, one series' history, two sides compared."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from stepwatch.collector.analysis import comparison
from stepwatch.collector.metrics import DEFAULT_METRIC
from stepwatch.collector.outcomes import INCONCLUSIVE, NO_CHANGE, REGRESSION
from stepwatch.collector.store import database, queries
from stepwatch.collector.store.database import StoreReader
from stepwatch.collector.store.ingest import ingest
from stepwatch.collector.store.selection import Selection, SelectionError
from stepwatch.collector.workflows.synthetic import generate
from tests.conftest import result_rows, write_results


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    folder = tmp_path_factory.mktemp("history")
    generate(12_000, folder / "files", seed=3)
    db = folder / "s.duckdb"
    ingest([str(folder / "files")], db, synthetic=True)
    reader = database.StoreReader(db)
    yield reader.connection()
    reader.close()


def test_selection_parses_fields_alternatives_aliases_and_dates() -> None:
    selection = Selection.parse("model=resnet50|bert, xla=on, per_device_batch=256, since=2026-11-01")
    assert selection.equals == (
        ("model", ("resnet50", "bert")),
        ("per_device_batch", (256,)),
        ("xla_requested", (True,)),
    )
    assert selection.since == datetime(2026, 11, 1, tzinfo=UTC)
    where, params = selection.where()
    assert where.count("?") == len(params) == 5
    assert "resnet50" not in where  # values are bound, never formatted in


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("modle=bert", "unknown field 'modle' in selection (did you mean model?)"),
        ("per_device_batch=big", "per_device_batch='big': expected a whole number"),
        ("xla=maybe", "xla_requested='maybe': expected on or off"),
        ("since=last week", "since='last week': expected a date"),
        ("model", "'model' is not key=value"),
        ("label=before model=bert", "'label=before model=bert' holds two conditions: a comma separates them"),
        ("examples_per_sec=5", "unknown field 'examples_per_sec'"),
    ],
)
def test_selection_errors_name_the_bad_part(text: str, message: str) -> None:
    with pytest.raises(SelectionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        Selection.parse(text)


def test_a_value_may_hold_an_equals_sign() -> None:
    assert Selection.parse("label=tf==2.21.0").equals == (("label", ("tf==2.21.0",)),)


def test_latest_per_series_is_each_series_most_recent_suite_run(con: duckdb.DuckDBPyConnection) -> None:
    latest = queries.latest_per_series(con)
    assert len(latest) == con.execute("SELECT count(DISTINCT series_key) FROM runs").fetchall()[0][0]
    key = latest.iloc[0]["series_key"]
    last = con.execute(
        "SELECT suite_run_id, count(*), count(*) FILTER (WHERE status = 'ok'), median(examples_per_sec) "
        "FILTER (WHERE status = 'ok') FROM runs WHERE series_key = ? AND started_at = "
        "(SELECT max(started_at) FROM runs WHERE series_key = ?) GROUP BY suite_run_id",
        [key, key],
    ).fetchall()[0]
    row = latest.iloc[0]
    assert (row["suite_run_id"], row["trials"], row["ok"]) == last[:3]
    assert row["examples_per_sec"] == pytest.approx(last[3])
    tpu = queries.latest_per_series(con, Selection.parse("device=tpu"))
    assert set(tpu["device"]) == {"tpu"} and 0 < len(tpu) < len(latest)


def test_series_history_is_in_time_order_with_versions(con: duckdb.DuckDBPyConnection) -> None:
    key = con.execute("SELECT series_key FROM runs WHERE device = 'gpu' LIMIT 1").fetchall()[0][0]
    history = queries.series_history(con, key)
    assert len(history) == con.execute("SELECT count(*) FROM runs WHERE series_key = ?", [key]).fetchall()[0][0]
    assert history["started_at"].is_monotonic_increasing
    assert history["tf_version"].notna().all()
    assert len(queries.series_history(con, "no-such-series")) == 0


def test_compare_sides_gives_the_log_statistics_of_each_side(con: duckdb.DuckDBPyConnection) -> None:
    versions = [v for (v,) in con.execute("SELECT DISTINCT tf_version FROM runs ORDER BY tf_version").fetchall()]
    assert len(versions) >= 2
    base, cand = Selection.parse(f"tf_version={versions[0]}"), Selection.parse(f"tf_version={versions[1]}")
    table = queries.compare_sides(con, base, cand)
    row = table.dropna(subset=["ratio", "var_log_baseline", "var_log_candidate"]).iloc[0]
    values = {
        side: np.log(
            [
                v
                for (v,) in con.execute(
                    "SELECT examples_per_sec FROM runs WHERE series_key = ? AND tf_version = ? AND status = 'ok'",
                    [row["series_key"], version],
                ).fetchall()
            ]
        )
        for side, version in (("baseline", versions[0]), ("candidate", versions[1]))
    }
    assert row["n_baseline"] == len(values["baseline"]) and row["n_candidate"] == len(values["candidate"])
    assert row["mean_log_baseline"] == pytest.approx(values["baseline"].mean())
    assert row["var_log_candidate"] == pytest.approx(values["candidate"].var(ddof=1))
    assert row["ratio"] == pytest.approx(np.exp(values["candidate"].mean() - values["baseline"].mean()))
    with pytest.raises(SelectionError, match="not a metric stepwatch compares"):
        queries.compare_sides(con, base, cand, metric="model; DROP TABLE runs")


def test_summaries_give_every_trial_statistics_and_an_aa_stays_quiet(tmp_path: Path) -> None:
    """A comparison by version reads the per-version summaries that each write pools; they give the same counts,
    means and variances as every trial, and the same verdicts: quiet on an A/A (two versions, one distribution,
    40 series), a regression where one series was planted 10% slower."""
    rng = np.random.default_rng(7)
    results, db = tmp_path / "results", tmp_path / "s.duckdb"
    for night in range(3):  # three writes: the summaries of each series and version are pooled across them
        rows = []
        for version in ("2.20.0", "2.21.0"):
            for k in range(40):
                slower = 0.9 if (k == 0 and version == "2.21.0") else 1.0
                values = 1000.0 * (1 + k / 10) * slower * rng.lognormal(0.0, 0.01, 2)
                suite = f"{version}-{night}-{k}"
                for row, value in zip(result_rows(2, suite, accelerator=f"CPU {k}", tf_version=version), values):
                    row["examples_per_sec"] = value
                    rows.append(row)
        write_results(results / f"night-{night}.parquet", rows)
        ingest([str(results)], db)
    before, after = Selection.parse("tf_version=2.20.0"), Selection.parse("tf_version=2.21.0")
    every = [Selection(s.equals, since=datetime(1970, 1, 1, tzinfo=UTC)) for s in (before, after)]
    assert queries.summarized(before, after) and not queries.summarized(*every)
    with StoreReader(db) as reader:
        con = reader.connection()
        fast, slow = queries.compare_sides(con, before, after), queries.compare_sides(con, *every)
        pd.testing.assert_frame_equal(fast, slow, check_exact=False, rtol=1e-9, check_dtype=False)
        assert list(fast["n_baseline"]) == [6] * 40
        verdicts = {
            r.series["accelerator"]: r.verdict for r in comparison.build(con, before, after, [DEFAULT_METRIC], []).rows
        }
    assert verdicts.pop("CPU 0") == REGRESSION
    assert list(verdicts.values()).count(NO_CHANGE) >= 30  # quiet because it can tell, not because it cannot
    assert set(verdicts.values()) <= {NO_CHANGE, INCONCLUSIVE}, verdicts  # the A/A: no regression, no improvement
