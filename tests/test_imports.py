"""Results stepwatch did not run (collector/imports): each format from its real tool's output (tests/imported.py), a
history with a planted 15% step imported night by night and confirmed on its night, the series in the Overview and
History pages of a real browser, importing again adding nothing, and bad input refused file by file with the rest
imported."""

from __future__ import annotations

import json
import math
import os
import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest

from stepwatch.collector.store import database
from tests import imported
from tests.conftest import commit, git, stepwatch
from tests.imported import NIGHTS, STEP_NIGHT, factor_of, night_at, write_json
from tests.test_results import tiny_disk  # noqa: F401 (a fixture)


def ingest(db: Path, *sources: Path | str, cwd: Path) -> tuple[int, str]:
    done = stepwatch("ingest", *map(str, sources), "--db", str(db), "--imported-to", str(cwd / "imported"), cwd=cwd)
    return done.returncode, done.stdout + done.stderr


def series(db: Path) -> dict[str, tuple]:
    with database.open_store(db) as reader:
        rows = reader.connection().execute(
            "SELECT model, preset, imported_from, imported_metric, imported_better, unit, count(*), "
            "count(*) FILTER (WHERE status = 'ok'), any_value(project_commit), any_value(accelerator) "
            "FROM runs GROUP BY ALL ORDER BY ALL"
        ).fetchall()
    return {f"{r[2]}|{r[0]}|{r[1]}|{r[3]}": r[4:] for r in rows}


def test_a_pytest_benchmark_session_imports_once_with_its_rounds_commit_and_machine(tmp_path: Path) -> None:
    out = imported.pytest_benchmark_output(tmp_path / "bench")
    db = tmp_path / "s.duckdb"
    code, text = ingest(db, out, cwd=tmp_path)
    assert code == 0, text
    assert "imported" in text and "(pytest-benchmark): 24 result row(s)" in text
    found = series(db)
    better, unit, trials, ok, commit, accelerator = found["pytest-benchmark|test_wait|n=1|time"]
    assert (better, unit, trials, ok) == ("lower", "s", 8, 8)  # each round a trial
    assert commit is None  # the session ran outside a git repository: pytest-benchmark says "unversioned"
    assert accelerator  # its machine_info's CPU
    assert set(found) == {"pytest-benchmark|test_sleep||time", "pytest-benchmark|test_wait|n=1|time",
                          "pytest-benchmark|test_wait|n=2|time"}  # fmt: skip
    code, again = ingest(db, out, cwd=tmp_path)
    assert code == 0, again
    assert "as before" in again and "0 new rows" in again
    assert series(db) == found


def test_bad_input_is_refused_file_by_file_with_its_reason_and_the_rest_imported(tmp_path: Path) -> None:
    gab = [{"name": "parse", "unit": "ms", "value": 12.0}]
    files = {
        "good.json": gab,
        "truncated.json": '[{"name": "parse", "unit": "ms", "val',
        "novalue.json": [{"name": "parse", "unit": "ms", "range": "1"}],
        "nan.json": '[{"name": "parse", "unit": "ms", "value": NaN}]',
        "negative.json": [{"name": "parse", "unit": "ms", "value": -3.0}],
        "unit.json": {"context": {"date": "2026-11-01T00:00:00+00:00"}, "benchmarks": [
            {"name": "BM_x", "run_name": "BM_x", "run_type": "iteration", "real_time": 3.0, "cpu_time": 3.0,
             "time_unit": "fortnights", "iterations": 1}]},
        "sql.json": [{"name": "x'; DROP TABLE runs; --", "unit": "ms", "value": 1.0}],
        "markup.json": [{"name": "<script>alert(1)</script>", "unit": "ms", "value": 1.0}],
        "unknown.json": {"hello": "world"},
    }  # fmt: skip
    for name, content in files.items():
        (tmp_path / name).write_text(content if isinstance(content, str) else json.dumps(content))
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:  # 1 GiB, sparse: a JSON array that never ends
        handle.write(b'[{"name": "x", "unit": "ms", "value": 1.0},')
        handle.truncate(2**30)
    db = tmp_path / "s.duckdb"
    code, text = ingest(db, *(tmp_path / n for n in files), huge, cwd=tmp_path)
    assert code == 4, text
    reasons = {
        "truncated.json": "not valid JSON", "novalue.json": "a record without a value",
        "nan.json": "value nan cannot be a measurement", "negative.json": "value -3.0 cannot be a measurement",
        "unit.json": "unknown unit 'fortnights'", "sql.json": "holds SQL", "markup.json": "holds markup",
        "unknown.json": "JSON of no format stepwatch knows", "huge.json": "1.0 GiB of JSON",
    }  # fmt: skip
    lines = text.splitlines()
    for name, why in reasons.items():
        said = [line for line in lines if line.startswith("skipped") and name in line]
        assert len(said) == 1 and why in said[0], (name, said, text)
    assert "(github-action-benchmark): 1 result row(s)" in text  # the good file, beside the bad ones
    assert set(series(db)) == {"github-action-benchmark|parse||value"}
    with database.open_store(db) as reader:
        assert reader.connection().execute("SELECT count(*) FROM runs").fetchall() == [(1,)]  # the tables stand


def test_a_full_disk_refuses_the_file_it_cannot_write_and_keeps_what_the_store_holds(
    tmp_path: Path, tiny_disk: Path  # noqa: F811 (the fixture of tests/test_results.py: a tmpfs that fills up)
) -> None:
    db = tmp_path / "s.duckdb"
    first = write_json(tmp_path / "first.json", [{"name": "parse", "unit": "ms", "value": 12.0}])
    code, text = ingest(db, first, cwd=tmp_path)
    assert code == 0, text
    big = [{"name": f"case {i}", "unit": "ms", "value": 1.0 + i, "extra": os.urandom(2000).hex()} for i in range(400)]
    second = write_json(tmp_path / "second.json", big)
    done = stepwatch("ingest", str(second), "--db", str(db), "--imported-to", str(tiny_disk), cwd=tmp_path)
    assert done.returncode == 4, done.stdout + done.stderr
    [line] = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("skipped")]
    assert "second.json" in line and "No space left on device" in line, line
    assert "Traceback" not in done.stderr
    assert set(series(db)) == {"github-action-benchmark|parse||value"}  # what was recorded stays
    assert not [p for p in tiny_disk.iterdir() if p.name.endswith(".partial")]


def test_a_format_without_a_direction_asks_for_one_and_a_commit_can_be_named(tmp_path: Path) -> None:
    entries = [{"name": "accuracy", "unit": "points", "value": 91.0}]
    path = write_json(tmp_path / "custom.json", entries)
    db = tmp_path / "s.duckdb"
    code, text = ingest(db, path, cwd=tmp_path)
    assert code == 4 and "pass --better higher or --better lower" in text, text
    done = stepwatch("ingest", str(path), "--db", str(db), "--imported-to", str(tmp_path / "imported"), "--better",
                     "higher", "--commit", "c0ffee", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    better, unit, _, _, commit, _ = series(db)["github-action-benchmark|accuracy||value"]
    assert (better, unit, commit) == ("higher", "points", "c0ffee")


def _history(root: Path) -> tuple[Path, dict[str, list[Path]]]:
    """Every format's real output, and its nights: {format: [night 0's sources, ...]}."""
    pytest_json = json.loads(imported.pytest_benchmark_output(root / "pytest").read_text())
    gbench_json = json.loads(imported.google_benchmark_output(root / "gbench").read_text())
    asv_results = imported.asv_output(root / "asv")
    mlperf_log = imported.mlperf_output(root / "mlperf")
    nights: dict[str, list[list[Path]]] = {}
    for n in range(NIGHTS):
        f = factor_of(n)
        at = root / "nights" / f"{n:02d}"
        imported.asv_night(asv_results, at / "asv" / "results", n, f)
        written = {
            "pytest-benchmark": [write_json(at / "pytest.json", imported.pytest_night(pytest_json, n, f))],
            "google-benchmark": [write_json(at / "gbench.json", imported.gbench_night(gbench_json, n, f))],
            "asv": [at / "asv" / "results"],
            "torchtitan": [imported.torchtitan_night(at / "titan", n, f)],
            "mlperf": [imported.mlperf_night(mlperf_log, at / "mlperf", n, f)],
            "pytorch-v3": [write_json(at / "v3.json", imported.pytorch_v3_records(n, f), lines=True)],
            "github-action-benchmark": [write_json(at / "gab.json", imported.github_action_entries(n, f))],
            "bencher": [write_json(at / "bmf.json", imported.bencher_metrics(n, f))],
        }
        for name in ("gab.json", "bmf.json"):  # formats without a time: the file's
            os.utime(at / name, (night_at(n).timestamp(), night_at(n).timestamp()))
        for fmt, sources in written.items():
            nights.setdefault(fmt, []).append(sources)
    return root / "store.duckdb", nights


@pytest.fixture(scope="module")
def imported_history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """Every format's history imported night by night into one store, and detect's output after the last night."""
    root = tmp_path_factory.mktemp("imported")
    db, nights = _history(root)
    texts = []
    for n in range(NIGHTS):
        code, text = ingest(db, *(s for sources in nights.values() for s in sources[n]), cwd=root)
        assert code == 4, text  # asv's track_ benchmark asks for its direction, every night
        texts.append(text)
    assert all(text.count("skipped") == 1 and "track_widgets" in text for text in texts), texts[-1]
    found = stepwatch("detect", "--db", str(db), "--issue-on", "confirmed", "--format", "json", cwd=root)
    return db, found.stdout + found.stderr, str(found.returncode)


QUIET = ["load weights", "bench::encode"]  # series of the same history without a step (its A/A)


@pytest.mark.large
def test_every_format_imported_night_by_night_confirms_its_planted_step_on_its_night(
    imported_history: tuple[Path, str, str],
) -> None:
    db, text, code = imported_history
    assert code == "1", text  # confirmed regressions
    with database.open_store(db) as reader:
        con = reader.connection()
        alerts = con.execute(
            "SELECT s.imported_from, s.model, s.imported_metric, a.status, a.change_at, a.ratio, s.imported_better, "
            "s.preset FROM alerts a JOIN series s USING (series_key) ORDER BY 1, 2, 3"
        ).fetchall()
        every = con.execute(
            "SELECT DISTINCT imported_from, model, preset, imported_metric FROM series WHERE model NOT IN ('broken') "
            "AND NOT (imported_from = 'asv' AND model LIKE '%track_widgets') AND NOT list_contains(?, model)", [QUIET]
        ).fetchall()
        quiet = con.execute("SELECT count(*) FROM series WHERE list_contains(?, model)", [QUIET]).fetchall()[0][0]
        nights = con.execute(
            "SELECT imported_from, model, preset, imported_metric, max(cv) FROM (SELECT imported_from, model, preset, "
            "imported_metric, stddev_samp(imported_value) / avg(imported_value) AS cv FROM runs WHERE status = 'ok' "
            "GROUP BY imported_from, model, preset, imported_metric, suite_run_id) GROUP BY ALL"
        ).fetchall()
    spread = {tuple(row[:4]): row[4] or 0.0 for row in nights}  # the widest night's coefficient of variation
    formats = {a[0] for a in alerts}
    assert formats == {"pytest-benchmark", "google-benchmark", "asv", "torchtitan", "mlperf", "pytorch-v3",
                       "github-action-benchmark", "bencher"}, alerts  # fmt: skip
    night = night_at(STEP_NIGHT)
    for fmt, model, metric, status, change_at, ratio, better, _ in alerts:
        assert status == "confirmed", (fmt, model, metric, status)
        assert night <= change_at < night + timedelta(days=1), (fmt, model, metric, change_at)
        worse = imported.STEP if better == "lower" else 1 / imported.STEP
        assert abs(math.log(ratio / worse)) < 0.05, (fmt, model, metric, ratio)
    # Every series that stepped has its alert, unless the real tool's own repeats spread wider than its step can be
    # confirmed in 4 nights (a compute-bound round, a sleep's CPU time, on a loaded runner): those are said.
    alerted = {(a[0], a[1], a[7], a[2]) for a in alerts}
    missing = [s for s in every if tuple(s) not in alerted]
    assert all(spread[s] > 0.05 for s in missing), [(s, spread[s]) for s in missing]
    assert quiet == len(QUIET) and not [a for a in alerts if a[1] in QUIET]  # the A/A: the quiet ones raised none


@pytest.mark.large
def test_imported_series_show_in_the_overview_and_history_of_a_real_browser(
    imported_history: tuple[Path, str, str],
) -> None:
    """The Overview of the imported history, then one series' History."""
    from playwright.sync_api import sync_playwright

    from stepwatch.collector.store.selection import NOT_RECORDED
    from stepwatch.dashboard.browser_harness import CHROMIUM, serve
    from tests.test_dashboard_browser import no_errors, settled

    if CHROMIUM is None:
        pytest.skip("needs chromium")
    db = imported_history[0]
    shots = Path(os.environ.get("STEPWATCH_SCREENSHOTS") or db.parent)
    with database.open_store(db) as reader:
        con = reader.connection()
        count = con.execute("SELECT count(*) FROM series").fetchall()[0][0]
        alerts = con.execute("SELECT count(*) FROM alerts").fetchall()[0][0]
        found = con.execute(
            "SELECT DISTINCT ON (imported_from) model, accelerator, precision, CASE WHEN xla THEN 'on' WHEN NOT xla "
            "THEN 'off' END FROM series JOIN alerts USING (series_key) ORDER BY imported_from, model"
        ).fetchall()
        named = dict(con.execute("SELECT model, list(DISTINCT imported_metric) || list(DISTINCT preset) FROM series "
                                 "GROUP BY model").fetchall())  # fmt: skip
    picks = [dict(zip(("model", "accelerator", "precision", "xla"), row, strict=True)) for row in found]
    assert len(picks) == 8
    with serve(db) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/")  # a store of imported results alone: the Overview shows their metric first
        settled(page, "Overview")
        no_errors(page, "overview")
        body = page.locator("body").inner_text()
        assert "Latest suite run per series: imported result" in body, body[:2000]
        tiles = [" ".join(tile.split()) for tile in page.locator('[data-testid="stMetric"]').all_inner_texts()]
        assert f"Series {count}" in tiles and f"Open alerts {alerts}" in tiles, tiles  # every series, every alert
        page.screenshot(path=str(shots / "dashboard-overview-imported.png"), full_page=True)
        for fields in picks:  # one series of each format, picked by its link as a user would
            query = urlencode({"metric": "imported_value", **{k: v or NOT_RECORDED for k, v in fields.items()}})
            page.goto(f"{url}/history?{query}")
            settled(page, "History")
            page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
            no_errors(page, f"history {fields}")
            legend = page.locator(".js-plotly-plot .legend").first.text_content() or ""
            # Its lines, each named by what tells it apart from the others: its model, or its metric or parameters.
            assert "change point" in legend, (fields, legend[:2000])
            words = [w for w in named[fields["model"]] if w]
            assert any(w in legend for w in [fields["model"], *words]), (fields, legend)
        page.screenshot(path=str(shots / "dashboard-history-imported.png"), full_page=True)
        browser.close()


BENCH = '''"""The team's own benchmark: five timed waits of its decoder (a wait, not computing: a loaded runner does not
move it), written as PyTorch's v3 records. NIGHT sets its timestamp; SLOW_HOST, milliseconds a slow host adds."""
import json
import os
import time

WAITS = 4
values = []
for _ in range(5):
    start = time.perf_counter()
    time.sleep((WAITS + float(os.environ.get("SLOW_HOST", "0"))) / 1000)
    values.append(time.perf_counter() - start)
record = {"timestamp": int(os.environ.get("NIGHT", time.time())), "schema_version": "v3",
          "benchmark": {"name": "decode", "mode": "inference"}, "model": {"name": "ours"},
          "metric": {"name": "latency(s)", "benchmark_values": values}}
with open("out.json", "w") as out:
    out.write(json.dumps(record) + "\\n")
'''


def imported_nights(tmp_path: Path, changes: list[dict[str, str]], slow_last: float = 0.0) -> tuple[Path, Path, list]:
    """A team's repository whose nightly is its own benchmark command (``import`` in stepwatch.toml, as ``init
    --import`` writes it), one night at each of three commits (``changes``: each commit's files), ingested."""
    from tests.test_verify import repository

    settings = f'import = "{sys.executable} bench.py"\nimport-results = "out.json"\ntrials = 3\n'
    repo, first = repository(tmp_path / "team", "the benchmark", {"bench.py": BENCH, "stepwatch.toml": settings,
                                                                  ".gitignore": "out.json\ndata/\n*.duckdb\n"})
    shas = [first, *(commit(repo, f"change {i}", files) for i, files in enumerate(changes, 1))]
    db = tmp_path / "history.duckdb"
    for night, sha in enumerate(shas):
        git(repo, "checkout", "-q", sha)
        env = {"NIGHT": str(int(night_at(night).timestamp())), "SLOW_HOST": str(slow_last if night == 2 else 0)}
        ran = stepwatch("run", "--out", str(tmp_path / f"night-{night}"), cwd=repo, env=env)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "(pytorch-v3): 5 result row(s)" in ran.stdout, ran.stdout
        assert stepwatch("ingest", str(tmp_path / f"night-{night}"), "--db", str(db)).returncode == 0
    git(repo, "checkout", "-q", "main")
    return repo, db, shas


@pytest.mark.large
def test_an_imported_series_slowed_by_a_commit_is_reproduced_by_its_own_command_on_both_commits(tmp_path: Path) -> None:
    """The nightly runs the team's command (``run --import``); a commit makes it 25% slower (5 ms of waiting, not
    4). The history nominates the change after its night, and the check runs the command in a checkout of the
    commits either side, interleaved, with an A/A: reproduced, and only then does the night fail."""
    changes = [{"README.md": "Ours.\n"}, {"bench.py": BENCH.replace("WAITS = 4", "WAITS = 5")}]
    repo, db, shas = imported_nights(tmp_path, changes)
    detected = stepwatch("detect", "--db", str(db), "--format", "json", cwd=repo)
    assert detected.returncode == 0, detected.stderr  # a store of imported results: their metric, without --metric
    [alert] = json.loads(detected.stdout)
    assert alert["status"] == "new" and alert["ratio"] > 1.15 and alert["metric"] == "imported_value"
    done = stepwatch("alerts", "verify", "--db", str(db), "--format", "json", cwd=repo, timeout=600)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    [verified] = json.loads(done.stdout)
    assert verified["verification"] == "reproduced", verified["verify_note"]
    assert verified["verify_sides"] == f"commit {shas[1][:12]} -> {shas[2][:12]}"
    assert verified["verify_aa"] == "quiet" and verified["verify_ratio"] > 1.15 and verified["verify_ci_low"] > 1.05
    # The pull request's check: the same command on the merge base and the head.
    checked = stepwatch("code-check", "--base", shas[1], "--head", shas[2], "--aa", "--out", str(tmp_path / "pr.md"),
                        cwd=repo, timeout=600)  # fmt: skip
    assert checked.returncode == 1, checked.stdout[-2000:] + checked.stderr[-2000:]
    [line] = [row for row in (tmp_path / "pr.md").read_text().splitlines() if "decode / ours" in row]
    assert "| regression |" in line and line.endswith("| quiet |"), line  # its A/A: the base's second checkout
    assert git(repo, "worktree", "list").count("\n") == 0  # no checkout left behind


def test_init_writes_a_project_around_a_teams_own_benchmark_command_and_run_takes_it(tmp_path: Path) -> None:
    half = stepwatch("init", "--import", "make bench", "--dir", str(tmp_path), cwd=tmp_path)
    assert half.returncode == 2 and "--import COMMAND and --import-results PATH go together" in half.stderr
    command = ("--import", "pytest --benchmark-json=bench.json", "--import-results", "bench.json")
    done = stepwatch("init", *command, "--dir", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "stepwatch.toml").read_text()
    assert 'import = "pytest --benchmark-json=bench.json"\nimport-results = "bench.json"\n' in text
    assert "\n# models = " in text  # the command measures: no model of stepwatch's runs
    assert (tmp_path / ".github" / "workflows" / "stepwatch-nightly.yml").exists()
    planned = stepwatch("run", "--dry-run", cwd=tmp_path)
    assert planned.returncode == 0 and "would run `pytest --benchmark-json=bench.json` and import bench.json" in (
        planned.stdout
    ), planned.stdout + planned.stderr


@pytest.mark.large
def test_an_imported_series_on_a_slow_host_stays_quiet_when_its_command_measures_both_commits(tmp_path: Path) -> None:
    """The A/A of the verdict path: three commits that touch only the README, the third night on a host that adds
    1.25 ms to every wait. The history nominates it; the command on both commits says no change, A/A quiet."""
    repo, db, shas = imported_nights(tmp_path, [{"README.md": "Ours.\n"}, {"README.md": "Ours, again.\n"}], 1.25)
    detected = stepwatch("detect", "--db", str(db), "--format", "json", cwd=repo)
    [alert] = json.loads(detected.stdout)
    assert alert["ratio"] > 1.15, alert
    done = stepwatch("alerts", "verify", "--db", str(db), "--format", "json", cwd=repo, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    [verified] = json.loads(done.stdout)
    # Never reproduced: no change, or on a loaded runner still undecided after its last look; its interval holds 1.
    assert verified["verification"] in ("not reproduced", "inconclusive"), verified["verify_note"]
    assert verified["verify_aa"] == "quiet" and verified["verify_ci_low"] < 1 < verified["verify_ci_high"]
