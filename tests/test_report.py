"""``stepwatch compare`` end to end: parquet with planted effects, ingested into a real store, compared by the CLI."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest

from stepwatch.collector.analysis import comparison
from stepwatch.collector.config import resolve
from stepwatch.collector.output import comparison as said
from stepwatch.collector.output.text import repro_command
from stepwatch.collector.runner.suite import load_suite
from stepwatch.collector.store.database import StoreReader
from stepwatch.collector.store.selection import Selection
from tests.conftest import result_rows, stepwatch, write_results


def side(version: str, accelerator: str, level: float, noise: float, trials: int, seed: int, **fields) -> list[dict]:
    """``trials`` rows of one series at one version, throughput ``level`` with log-normal ``noise``."""
    run = fields.pop("suite_run_id", None) or str(uuid.uuid4())
    rows = result_rows(trials, run, tf_version=version, accelerator=accelerator, **fields)
    rates = level * np.exp(noise * np.random.default_rng(seed).standard_normal(trials))
    for row, rate in zip(rows, rates):
        row["examples_per_sec"] = float(rate)
    return rows


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare")
    files = {
        # A: 10% slower at 2% noise, 5 trials a side.
        "a": side("2.20.0", "CPU A", 1000, 0.02, 5, 1) + side("2.21.0", "CPU A", 900, 0.02, 5, 2),
        # B: the same distribution on both sides.
        "b": side("2.20.0", "CPU B", 500, 0.005, 8, 3) + side("2.21.0", "CPU B", 500, 0.005, 8, 4),
        # C: 3 trials at 5% noise, 4% slower: too noisy to tell.
        "c": side("2.20.0", "CPU C", 800, 0.05, 3, 5) + side("2.21.0", "CPU C", 768, 0.05, 3, 6),
        # D: only run on the baseline.
        "d": side("2.20.0", "CPU D", 300, 0.01, 3, 7),
        # E: every candidate trial crashed.
        "e": side("2.20.0", "CPU E", 200, 0.01, 3, 8)
        + side("2.21.0", "CPU E", 200, 0.01, 3, 9, status="crash", error_type="ProcessExit"),
    }
    for name, rows in files.items():
        if name == "e":
            for row in rows[3:]:
                row["examples_per_sec"] = None
        write_results(root / "results" / f"{name}.parquet", rows)
    store = root / "store.duckdb"
    done = stepwatch("ingest", str(root / "results"), "--db", str(store), timeout=120)
    assert done.returncode == 0, done.stderr
    return store


def compare(db: Path, *extra: str, baseline: str = "tf_version=2.20.0", candidate: str = "tf_version=2.21.0"):
    return stepwatch("compare", "--db", str(db), "--baseline", baseline, "--candidate", candidate, *extra, timeout=120)


def test_json_report_has_a_verdict_per_series_and_exit_code_1_on_regression(db: Path) -> None:
    done = compare(db, "--format", "json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    verdicts = {row["series"]["accelerator"]: row for row in report["rows"]}
    assert verdicts["CPU A"]["verdict"] == "regression"
    assert verdicts["CPU A"]["ratio"] == pytest.approx(0.9, abs=0.03)
    assert verdicts["CPU A"]["ci_low"] < verdicts["CPU A"]["ratio"] < verdicts["CPU A"]["ci_high"] < 0.97
    assert verdicts["CPU B"]["verdict"] == "no change"
    assert verdicts["CPU C"]["verdict"] == "inconclusive"
    # The smallest change C could have called, and the trials that would call 3%, from its own noise.
    c = verdicts["CPU C"]
    assert c["detectable_change"] > 0.03 and c["trials_per_side_for_threshold"] > 3
    assert c["resolution"] == (
        f"this run can see changes of {c['detectable_change']:.1%} or more; about "
        f"{c['trials_per_side_for_threshold']} trials per side would see 3%"
    )
    assert verdicts["CPU A"]["detectable_change"] < 0.1  # 5 trials at 2% noise see its 10% step
    assert verdicts["CPU D"]["verdict"] == "missing" and verdicts["CPU D"]["n_candidate"] == 0
    assert verdicts["CPU E"]["verdict"] == "failed" and verdicts["CPU E"]["failed_candidate"] == 3
    assert report["summaries"]["examples_per_sec"]["series"] == 3  # A, B, C: on both sides with ok trials
    assert report["versions"]["candidate"]["tf_version"] == ["2.21.0"]
    assert verdicts["CPU A"]["repro"].startswith("stepwatch run --suite smoke --trials 5 --models bilstm")


def test_markdown_report_leads_with_regressions_and_names_missing_series(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    done = compare(db, "--format", "markdown", "--out", str(out))
    assert done.returncode == 1
    text = out.read_text()
    assert text == done.stdout
    table = [line for line in text.splitlines() if line.startswith("| 🔴") or line.startswith("| ❌")]
    assert table[0].startswith("| 🔴 regression | bilstm/tiny cpu noxla fp32 b8 fit on CPU A |")
    assert "Only in the baseline (1): bilstm/tiny cpu noxla fp32 b8 fit on CPU D" in text
    assert "| tf_version | 2.20.0 | 2.21.0 |" in text


@pytest.mark.parametrize(
    ("narrow", "extra", "code", "verdict"),
    [
        ("accelerator=CPU B", (), 0, "no change"),
        ("accelerator=CPU C", (), 0, "inconclusive"),
        ("accelerator=CPU C", ("--fail-on-inconclusive",), 3, "inconclusive"),
        ("accelerator=CPU E", (), 4, "metric not compared (trials failed)"),
    ],
)
def test_exit_codes_follow_the_verdicts(db: Path, narrow: str, extra: tuple[str, ...], code: int, verdict: str) -> None:
    done = compare(db, *extra, baseline=f"tf_version=2.20.0,{narrow}", candidate=f"tf_version=2.21.0,{narrow}")
    assert done.returncode == code, done.stdout + done.stderr
    assert f"verdict: 1 {verdict}" in done.stdout
    if verdict == "inconclusive":
        line = "inconclusive: bilstm/tiny cpu noxla fp32 b8 fit on CPU C examples_per_sec: this run can see changes"
        assert line in done.stdout


def test_a_series_threshold_override_changes_the_verdict(db: Path, tmp_path: Path) -> None:
    thresholds = tmp_path / "thresholds.toml"
    thresholds.write_text(
        '[[override]]\nwhere = "accelerator=CPU A"\nmetric = "examples_per_sec"\nthreshold = 0.2\nreason = "test"\n'
    )
    narrow = ("--baseline", "tf_version=2.20.0,accelerator=CPU A", "--candidate", "tf_version=2.21.0,accelerator=CPU A")
    done = stepwatch("compare", "--db", str(db), *narrow, "--thresholds", str(thresholds), "--format", "json")
    row = json.loads(done.stdout)["rows"][0]
    assert (done.returncode, row["verdict"], row["threshold"]) == (0, "no change", 0.2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--baseline", "tf_versoin=2.20.0", "--candidate", "tf_version=2.21.0"), "did you mean tf_version"),
        (("--baseline", "tf_version=9.9", "--candidate", "tf_version=2.21.0"), "baseline selection"),
        (("--baseline", "tf_version=2.20.0", "--candidate", "tf_version=2.21.0", "--metric", "speed"), "speed"),
    ],
)
def test_bad_selections_are_one_line_and_exit_2(db: Path, args: tuple[str, ...], message: str) -> None:
    done = stepwatch("compare", "--db", str(db), *args)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_repro_command_narrows_a_bundled_suite_to_exactly_that_series() -> None:
    config = resolve(load_suite("smoke").configs[0])  # a row records the threads that auto picked
    fields = {**config.__dict__, "xla_requested": config.xla, "suite": "smoke"}
    done = stepwatch(*repro_command(fields).split()[1:], "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == config.label()
    assert "1 configs x 5 trials" in done.stdout


def test_a_bimodal_series_is_flagged_in_compare_and_detect(tmp_path: Path) -> None:
    """Processes that land on one of two speeds (the 625 vs 1,150 examples/s seen on 2-core runners): the noise
    column and a warning say so in compare and in detect; a unimodal series at 5% noise is not flagged."""
    files = []
    for night in range(4):
        version = "2.20.0" if night < 2 else "2.21.0"
        bimodal = side(version, "CPU M", 1000, 0.01, 4, night)
        for i, row in enumerate(bimodal):
            row["examples_per_sec"] *= 0.625 if (i + night) % 2 else 1.15
        files.append(bimodal + side(version, "CPU U", 1000, 0.05, 4, 100 + night))
    for night, rows in enumerate(files):
        for row in rows:
            row["started_at"] = row["started_at"].replace(day=1 + night)
        write_results(tmp_path / "results" / f"night-{night}.parquet", rows)
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(tmp_path / "results"), "--db", str(db)).returncode == 0

    done = compare(db, "--format", "json")
    rows = {row["series"]["accelerator"]: row for row in json.loads(done.stdout)["rows"]}
    assert rows["CPU M"]["bimodal"] is True and rows["CPU M"]["noise_trials"] == 16
    low, high = rows["CPU M"]["modes"]
    assert low == pytest.approx(625, rel=0.03) and high == pytest.approx(1150, rel=0.03)
    assert rows["CPU U"]["bimodal"] is False and 0.02 < rows["CPU U"]["noise_cv"] < 0.09
    table = compare(db)
    assert "warning: bilstm/tiny cpu noxla fp32 b8 fit on CPU M examples_per_sec is bimodal across processes" in (
        table.stdout
    )
    assert "on CPU U examples_per_sec is bimodal" not in table.stdout

    detect = stepwatch("detect", "--db", str(db))
    assert detect.returncode == 0, detect.stderr
    assert "on CPU M examples_per_sec is bimodal across processes: its last 16 trials cluster near" in detect.stderr
    assert "CPU U examples_per_sec is bimodal" not in detect.stderr


def test_a_report_leads_with_what_the_runner_cannot_resolve(db: Path) -> None:
    """Series C alone (3 trials at 5% noise): no comparison can see 3%, and the report says so first."""
    done = compare(db, "--format", "markdown", baseline="tf_version=2.20.0,accelerator=CPU C",
                   candidate="tf_version=2.21.0,accelerator=CPU C")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines[1].startswith("**Throughput (examples_per_sec): this runner cannot resolve ±3% here; it can see")
    assert "Intervals cover process-to-process noise only" in done.stdout
    resolved = compare(db, "--format", "markdown", baseline="tf_version=2.20.0,accelerator=CPU B",
                       candidate="tf_version=2.21.0,accelerator=CPU B")  # fmt: skip
    assert "cannot resolve" not in resolved.stdout


def test_a_calibration_widens_compare_intervals_by_the_variation_between_environments(db: Path, tmp_path: Path) -> None:
    """Series A is 10% slower at 2% trial noise: a regression with the trials' own intervals, but not on a
    runner whose environments are calibrated to differ by 10% (its interval then holds no change)."""
    calibration_file = tmp_path / "runner.json"
    calibration_file.write_text(json.dumps({
        "runner": "noisy", "created_at": "2026-11-23T00:00:00+00:00", "environments": 6, "trials": 5,
        "suite": "smoke", "requirements": ["tensorflow==2.21.0"],
        "metrics": {"examples_per_sec": {"between": {"var_log": 0.01, "df": 5}, "within_cv": 0.02,
                                         "comparisons": 15, "false_alarms": 9, "false_alarms_widened": 0}},
    }))  # fmt: skip
    sides = {"baseline": "tf_version=2.20.0,accelerator=CPU A", "candidate": "tf_version=2.21.0,accelerator=CPU A"}
    plain = json.loads(compare(db, "--format", "json", **sides).stdout)
    widened_run = compare(db, "--format", "json", "--calibration", str(calibration_file), **sides)
    widened = json.loads(widened_run.stdout)
    assert plain["rows"][0]["verdict"] == "regression" and widened_run.returncode == 0
    assert widened["rows"][0]["verdict"] == "inconclusive"
    assert widened["rows"][0]["ci_high"] > 1 > plain["rows"][0]["ci_high"]
    assert widened["rows"][0]["between_environments_source"].startswith("calibrate on noisy (6 environments")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    done = compare(db, "--calibration", str(broken), **sides)
    assert done.returncode == 2 and "is not a stepwatch calibration" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_checks_noise_and_what_it_could_see_are_its_own_sides_and_never_contradict_what_it_found(
    tmp_path: Path,
) -> None:
    """A check's store holds its baseline, its A/A, its candidate and earlier checks together: a 47% slowdown there
    made the series' history look noisy and bimodal, and the report said "can see >= 99%" beside the regression it
    called. A check's noise is each side's own spread; a change it found was seen; its A/A stays quiet."""

    def trials(label: str, level: float, seed: int, run: str) -> list[dict]:
        return side("2.21.0", "CPU K", level, 0.03, 4, seed, label=label, suite_run_id=run)

    runs = {name: str(uuid.uuid4()) for name in ("baseline", "baseline-aa", "candidate", "earlier", "earlier-b")}
    rows = (trials("baseline", 1000, 1, runs["baseline"]) + trials("baseline-aa", 1000, 2, runs["baseline-aa"])
            + trials("candidate", 530, 3, runs["candidate"]) + trials("baseline", 1000, 4, runs["earlier"])
            + trials("candidate", 530, 5, runs["earlier-b"]))  # fmt: skip
    write_results(tmp_path / "results" / "check.parquet", rows)
    db = tmp_path / "check.duckdb"
    assert stepwatch("ingest", str(tmp_path / "results"), "--db", str(db)).returncode == 0

    def built(candidate: str, own_noise: bool) -> comparison.Comparison:
        with StoreReader(db) as reader:
            return comparison.build(reader.connection(), Selection.of(suite_run_id=runs["baseline"]),
                                    Selection.of(suite_run_id=runs[candidate]), ["examples_per_sec"], [],
                                    own_noise=own_noise)  # fmt: skip

    history = built("candidate", own_noise=False).rows[0]
    assert history.noise.cv > 0.25 and history.noise.bimodal  # the two levels of 20 trials, read as noise
    found = built("candidate", own_noise=True)
    [row] = found.rows
    assert row.verdict == "regression" and row.noise.n == 8 and row.noise.cv < 0.06 and not row.noise.bimodal
    assert said.row_cells(row)["can see"] == "resolved"
    text = said.to_markdown(found)
    assert "cannot resolve" not in text and "bimodal" not in text.split("Ratio of geometric means")[0]
    assert "Noise is the trial-to-trial CV within each side of this check" in text
    aa = built("baseline-aa", own_noise=True)
    assert aa.rows[0].verdict != "regression" and aa.rows[0].noise.cv < 0.06  # the A/A: quiet
