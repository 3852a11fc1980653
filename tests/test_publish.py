"""The nightly as GitHub runs it (``tests.github``): the workflows ``stepwatch init`` writes, in a team's repository
with a bare remote standing for GitHub, two nights in a row, every step in order; and ``stepwatch publish``
(``collector.workflows.publish``), which finds, ingests, archives and pushes a night whatever layout its artifacts
arrive in, on bad input: a corrupt file, a history branch with foreign files, two publishes racing."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from playwright.sync_api import sync_playwright

from stepwatch.collector.cli.dashboard import branch_folder
from stepwatch.dashboard.browser_harness import CHROMIUM, served
from tests.conftest import REPO, stepwatch
from tests.github import GitHub, conflict

ACTION = "stepwatch/stepwatch@" + "c" * 40
WHO = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@u", "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@u"}
FAST = "steps = 20\nwarmup = 20\nwindow = 10\n"
MODEL = '''"""A team's Keras model."""

import keras


def mlp(preset: str = "tiny") -> dict:
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
    return {"model": model, "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "inputs": {"shape": (16,)}, "labels": {"shape": (), "dtype": "int32", "high": 4}}
'''
NET = '''"""A team's plain PyTorch model: the function returns a torch.nn.Module."""

import torch


def mlp(preset: str = "tiny") -> dict:
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return {"model": model, "loss": torch.nn.CrossEntropyLoss(), "inputs": {"shape": (16,)},
            "labels": {"shape": (), "dtype": "int64", "high": 4}}
'''


def sh(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
    return done.stdout.strip()


def environment(root: Path) -> dict[str, str]:
    """What the steps run with: this Python (stepwatch installed) first on the PATH, a home of their own."""
    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(root), **WHO,
            "XDG_CACHE_HOME": str(root / "cache"), "STEPWATCH_CALIBRATION": "none",
            **{k: v for k, v in os.environ.items() if k.startswith(("PIP_", "UV_"))}}  # fmt: skip


def team_repository(root: Path, files: dict[str, str], init: list[str], settings: str) -> GitHub:
    """A team's repository after ``stepwatch init`` (its settings edited as a team would), committed and pushed to a
    bare remote that stands for GitHub."""
    repo = root / "work"
    repo.mkdir(parents=True)
    env = environment(root)
    for name, text in files.items():
        (repo / name).write_text(text)
    sh("git", "init", "-q", "-b", "main", cwd=repo, env=env)
    done = stepwatch("init", *init, "--action", ACTION, cwd=repo, env={**env, "GITHUB_ACTIONS": ""})
    assert done.returncode == 0, done.stderr
    config = repo / "stepwatch.toml"
    edited = {line.split("=")[0].strip() for line in settings.splitlines()}
    kept = [line for line in config.read_text().splitlines() if line.split("=")[0].strip() not in edited]
    config.write_text("\n".join(kept) + "\n" + settings)
    sh("git", "add", ".", cwd=repo, env=env)
    sh("git", "commit", "-q", "-m", "our model", cwd=repo, env=env)
    gh = GitHub(root, "their-org/their-project", env)
    gh.remote.parent.mkdir(parents=True)
    sh("git", "clone", "-q", "--bare", str(repo), str(gh.remote), cwd=root, env=env)
    return gh


def branch_files(gh: GitHub, folder: str) -> list[str]:
    tree = f"stepwatch-history:{folder}"
    listed = subprocess.run(["git", "--git-dir", str(gh.remote), "ls-tree", "--name-only", tree], capture_output=True,
                            text=True)  # fmt: skip
    return listed.stdout.split() if listed.returncode == 0 else []


def nightly(gh: GitHub) -> dict:
    return yaml.safe_load((gh.root / "work" / ".github" / "workflows" / "stepwatch-nightly.yml").read_text())


def query(db: Path, sql: str, cwd: Path) -> list[str]:
    done = stepwatch("query", sql, "--db", str(db), "--format", "csv", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[1:]


@pytest.fixture(scope="module")
def two_nights(tmp_path_factory: pytest.TempPathFactory) -> tuple[GitHub, list[dict]]:
    """A team with a Keras model on JAX and init's workflows: two nights as GitHub runs them, the store's cache
    evicted between them."""
    root = tmp_path_factory.mktemp("nightly")
    gh = team_repository(root, {"model.py": MODEL}, ["--models", "model.py:mlp", "--keras-backend", "jax"],
                         'xla = ["off"]\ntrials = 1\n' + FAST)  # fmt: skip
    nights = [gh.run_workflow(nightly(gh))]
    gh.caches.evict()  # GitHub evicts a cache unused for 7 days, or past 10 GB: the history must not need it
    nights.append(gh.run_workflow(nightly(gh)))
    return gh, nights


@pytest.mark.large
def test_two_nights_reach_the_history_branch_and_the_store_survives_its_cache(
    two_nights: tuple[GitHub, list[dict]],
) -> None:
    gh, nights = two_nights
    for night in nights:
        [collect], [publish], [pages] = night["collect"], night["publish"], night["pages"]
        assert collect.result == "success", [(s.name, s.outcome, s.stderr[-1500:]) for s in collect.steps]
        assert publish.result == "success", [(s.name, s.outcome, s.stdout[-1500:], s.stderr[-1500:])
                                             for s in publish.steps]  # fmt: skip
        assert pages.result == "skipped"  # the page is on the branch; GitHub Pages only where the team turns it on
        assert "| cpu 1/1 | 1 | 1 | 1 |" in publish.summary, publish.summary
        # An A/A: the same code two nights running; detection stays quiet (exit code 0, no alert).
        [step] = [s for s in publish.steps if s.name.startswith("Ingest, archive and push")]
        assert step.outputs["exit-code"] == "0" and "No alerts." in publish.summary
    # Both nights' parquet are on the history branch, with the alerts and the page.
    assert len([n for n in branch_files(gh, "results") if n.endswith(".parquet")]) == 2
    assert branch_files(gh, "state") == ["alerts.parquet"]
    # The nightly profiles a trial of each config: one a night, in the folder of the night's date (both ran today).
    [today] = branch_files(gh, "profiles")
    assert len(branch_files(gh, f"profiles/{today}")) == 2
    # The branch is one commit (stepwatch publish squashes it): a clone fetches what the history holds now.
    assert subprocess.run(["git", "--git-dir", str(gh.remote), "rev-list", "--count", "stepwatch-history"],
                          capture_output=True, text=True).stdout.strip() == "1"  # fmt: skip
    assert sorted(branch_files(gh, "site")) == ["index.html", "plotly.min.js"]
    # The second night found no store (its cache evicted): rebuilt from the branch, then the night added.
    second = nights[1]["publish"][0]
    assert "the store was gone: rebuilt from the history (1 rows)" in second.summary, second.summary
    db = second.workspace / "stepwatch-store" / "stepwatch.duckdb"
    assert query(db, "SELECT count(*), count(DISTINCT suite_run_id) FROM runs", second.workspace) == ["2,2"]


@pytest.mark.large
def test_the_team_opens_the_history_branch_in_the_dashboard_and_the_page_in_a_browser(
    two_nights: tuple[GitHub, list[dict]], tmp_path: Path
) -> None:
    gh, nights = two_nights
    laptop = tmp_path / "laptop"
    env = environment(tmp_path)
    sh("git", "clone", "-q", str(gh.remote), str(laptop), cwd=tmp_path, env=env)
    published = nights[1]["publish"][0].workspace / "stepwatch-store" / "stepwatch.duckdb"
    runs = query(published, "SELECT run_id FROM runs ORDER BY run_id", laptop)
    db = tmp_path / "branch.duckdb"
    command = [
        sys.executable,
        "-m",
        "stepwatch",
        "dashboard",
        "git:stepwatch-history",
        "--db",
        str(db),
        "--refresh",
        "0",
    ]
    with served(lambda port: [*command, "--port", str(port)], laptop, env) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(url, timeout=60_000)  # the Overview is the app's main page
        cells = page.locator('td[role="gridcell"]')
        cells.filter(has_text="model.py:mlp").first.wait_for(state="attached", timeout=120_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        # The store rebuilt from the branch holds exactly what the nightly's own store holds: both nights.
        assert query(db, "SELECT run_id FROM runs ORDER BY run_id", laptop) == runs and len(runs) == 2

        # The static page, as the branch holds it: no server, no network, no error, every series named.
        site = tmp_path / "site"
        sh("bash", "-c", f"git archive origin/stepwatch-history site | tar -x -C {tmp_path}", cwd=laptop, env=env)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto((site / "index.html").as_uri())
        body = page.inner_text("body")
        assert "model.py:mlp" in body and "1 series" in body, body[:500]
        assert page.evaluate("typeof Plotly") == "object" and errors == []
        # It names its night (its date, commit and workflow run, linked; its jobs), draws every series' history,
        # the unchanged one too, and writes its numbers as people read them.
        night = next(line for line in body.splitlines() if line.startswith("The night of 20"))
        assert "; commit " in night and "; the workflow run; all 1 collect job(s) ran." in night, night
        assert page.get_by_role("link", name="the workflow run").get_attribute("href").endswith("/actions/runs/1002")
        assert page.locator(".js-plotly-plot").count() == 1 and "The other series (1)" in body
        assert " examples/s" in body and "e+0" not in body
        browser.close()


@pytest.mark.large
def test_any_artifact_layout_reaches_the_history(two_nights: tuple[GitHub, list[dict]], tmp_path: Path) -> None:
    """The layouts a night can arrive in: one folder per artifact (as the workflow downloads them), merged into one,
    and the nested one three upload paths made (their least common ancestor the workspace): the same files kept."""
    gh, _ = two_nights
    [night] = [p for p in (gh.root / "run2-publish-0" / "stepwatch-nightly").rglob("*.parquet")]
    rows = pq.read_table(night).num_rows
    layouts = {
        "per-artifact": "results-cpu-0/{name}",
        "merged": "{name}",
        "three-paths": "stepwatch-nightly/{name}",
    }
    for layout, where in layouts.items():
        folder = tmp_path / layout
        target = folder / "stepwatch-nightly" / where.format(name=night.name)
        target.parent.mkdir(parents=True)
        shutil.copyfile(night, target)
        (folder / "history").mkdir()
        sh(
            "git",
            "init",
            "-q",
            "-b",
            "stepwatch-history",
            str(folder / "history"),
            cwd=folder,
            env=environment(tmp_path),
        )
        done = stepwatch("publish", "stepwatch-nightly", "--history", "history", "--db", "store.duckdb", cwd=folder,
                         env=environment(tmp_path))  # fmt: skip
        assert done.returncode == 0, (layout, done.stdout, done.stderr)
        assert [p.name for p in (folder / "history" / "results").glob("*.parquet")] == [night.name], layout
        assert query(folder / "store.duckdb", "SELECT count(*) FROM runs", folder) == [str(rows)], layout


@pytest.mark.large
def test_a_corrupt_file_is_quarantined_not_archived_and_foreign_history_is_read_as_far_as_valid(
    two_nights: tuple[GitHub, list[dict]], tmp_path: Path
) -> None:
    gh, _ = two_nights
    [night] = list((gh.root / "run2-publish-0" / "stepwatch-nightly").rglob("*.parquet"))
    env = environment(tmp_path)
    (tmp_path / "stepwatch-nightly" / "results-cpu-0").mkdir(parents=True)
    shutil.copyfile(night, tmp_path / "stepwatch-nightly" / "results-cpu-0" / night.name)
    shutil.copytree(night.parent / "profiles", tmp_path / "stepwatch-nightly" / "results-cpu-0" / "profiles")
    (tmp_path / "stepwatch-nightly" / "results-gpu-1").mkdir()
    (tmp_path / "stepwatch-nightly" / "results-gpu-1" / "half.parquet").write_bytes(b"PAR1 cut short by a killed job")
    (tmp_path / "stepwatch-nightly" / "results-gpu-1" / "job.txt").write_text("gpu 1/2\n")
    history = tmp_path / "history"
    history.mkdir()
    sh("git", "init", "-q", "-b", "stepwatch-history", cwd=history, env=env)
    (history / "results").mkdir()
    (history / "results" / "foreign.parquet").write_bytes(b"not a parquet file at all")
    (history / "README.md").write_text("someone's notes\n")
    done = stepwatch("publish", "stepwatch-nightly", "--history", "history", "--db", "store.duckdb",
                     "--profiles-budget", "0.1", cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "quarantined, not archived: half.parquet" in done.stdout
    assert "1 raw profile(s) past the night's budget for the branch" in done.stdout  # ~2 MB against 0.1
    assert "wrote no row: gpu 1/2" in done.stdout
    assert "skipped in the history: foreign.parquet" in done.stdout  # the store was rebuilt from it: read past it
    kept = sorted(p.name for p in (history / "results").glob("*.parquet"))
    assert kept == [night.name]  # the corrupt file never reached the history; the foreign one was moved aside
    assert (history / "results" / "quarantine" / "foreign.parquet").exists()
    assert query(tmp_path / "store.duckdb", "SELECT count(*) FROM runs", tmp_path) == [
        str(pq.read_table(night).num_rows)]  # fmt: skip


@pytest.mark.large
def test_two_publishes_racing_lose_no_night(two_nights: tuple[GitHub, list[dict]], tmp_path: Path) -> None:
    """A manual run beside the schedule: both clone the branch, the second pushes after the first; both nights are
    on the branch."""
    gh, _ = two_nights
    env = environment(tmp_path)
    remote = tmp_path / "remote.git"
    shutil.copytree(gh.remote, remote)
    files = sorted((gh.root / "run2-publish-0" / "stepwatch-nightly").rglob("*.parquet"))
    clones = []
    for name, night in zip(("scheduled", "manual"), [files[0], files[0]]):
        folder = tmp_path / name
        sh("git", "clone", "-q", "--branch", "stepwatch-history", str(remote), str(folder / "history"), cwd=tmp_path,
           env=env)  # fmt: skip
        (folder / "night").mkdir()
        table = pq.read_table(night)
        renamed = table.set_column(table.column_names.index("run_id"), "run_id",
                                   [[f"{name}-{i}" for i in range(table.num_rows)]])  # fmt: skip
        pq.write_table(renamed, folder / "night" / f"{name}.parquet")
        clones.append(folder)
    for folder in clones:
        done = stepwatch("publish", "night", "--history", "history", "--push", "stepwatch-history", "--db",
                         "store.duckdb", cwd=folder, env=env)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    assert "moved meanwhile: replaying this night on it" in done.stderr
    listed = sh("git", "--git-dir", str(remote), "ls-tree", "--name-only", "stepwatch-history:results", cwd=tmp_path)
    assert {"scheduled.parquet", "manual.parquet"} <= set(listed.split())


@pytest.mark.large
def test_the_history_can_live_in_another_repository(
    two_nights: tuple[GitHub, list[dict]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the repository variable STEPWATCH_HISTORY_REPOSITORY, the night goes to that repository's history branch
    (a clone of the team's repository never fetches it); the page says how to read it, and that reads it."""
    gh, _ = two_nights
    before = branch_files(gh, "results")
    other = gh.server / "their-org" / "perf-history"
    sh("git", "init", "-q", "--bare", str(other), cwd=tmp_path)
    gh.variables = {**gh.variables, "STEPWATCH_HISTORY_REPOSITORY": "their-org/perf-history"}
    try:
        run = gh.run_workflow(nightly(gh))
    finally:
        gh.variables.pop("STEPWATCH_HISTORY_REPOSITORY")
    [publish] = run["publish"]
    assert publish.result == "success", [(s.name, s.outcome, s.stderr[-1500:]) for s in publish.steps]
    assert branch_files(gh, "results") == before  # the team's own repository: as it was
    results = sh("git", "--git-dir", str(other), "ls-tree", "--name-only", "stepwatch-history:results", cwd=tmp_path)
    assert len(results.split()) == 1
    page = sh("git", "--git-dir", str(other), "show", "stepwatch-history:site/index.html", cwd=tmp_path)
    source = f"git:{other.as_uri()}#stepwatch-history"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert f"stepwatch dashboard {source}</code>" in page
    done = stepwatch("ingest", str(branch_folder(source[4:], tmp_path) / "results"), "--db", "read.duckdb",
                     cwd=tmp_path, env=environment(tmp_path))  # fmt: skip
    assert done.returncode == 0 and query(tmp_path / "read.duckdb", "SELECT count(*) FROM runs", tmp_path) == ["1"]


@pytest.mark.large
def test_triage_by_hand_skips_collection_and_an_unknown_alert_is_one_line(
    two_nights: tuple[GitHub, list[dict]],
) -> None:
    """The workflow run by hand with an alert id: no collect job; the publish job triages (here an alert that does
    not exist: one line, the job fails) and the history branch is left as it was."""
    gh, _ = two_nights
    before = branch_files(gh, "results")
    run = gh.run_workflow(nightly(gh), "workflow_dispatch", {"alert_id": "999", "alert_action": "ack", "note": "x"})
    assert {job.result for job in run["collect"]} == {"skipped"}
    [publish] = run["publish"]
    [triage] = [s for s in publish.steps if s.name == "Triage an alert"]
    assert publish.result == "failure" and triage.outcome == "failure"
    assert (
        triage.stderr.strip().splitlines()[-1] == "stepwatch: error: no alert with id 999 (see `stepwatch alerts list`)"
    )
    assert branch_files(gh, "results") == before


@pytest.mark.large
def test_a_triage_run_deploys_its_page_so_that_pages_stops_showing_the_regression(tmp_path: Path) -> None:
    """Five nights of one series on the history branch, the last three 4x slower: one confirmed regression. The
    workflow run by hand acknowledges it; its publish job uploads the page and the pages job deploys it, which says
    "0 regressed". Before, a triage run skipped the pages job, and Pages said "1 regressed" until the next night."""
    gh = team_repository(tmp_path, {"model.py": MODEL}, ["--models", "model.py:mlp", "--keras-backend", "jax"],
                         'xla = ["off"]\ntrials = 1\npages = true\nissue-on = "confirmed"\n' + FAST)  # fmt: skip
    env, local = environment(tmp_path), tmp_path / "local"
    history = local / "history"
    sh("git", "init", "-q", "-b", "stepwatch-history", str(history), cwd=tmp_path, env=env)
    sh("git", "-C", str(history), "remote", "add", "origin", str(gh.remote), cwd=tmp_path, env=env)
    source = pq.read_table(sorted((REPO / "data" / "reference" / "cpu-tf-history").glob("*.parquet"))[0])
    rows = [row for row in source.to_pylist() if row["model"] == "bilstm" and not row["xla_requested"]]
    nights = ("2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23", "2026-11-24")
    for number, night in enumerate(nights):  # published at once: each row keeps its night
        slower = 0.25 if number >= 2 else 1.0
        made = [{**row, "run_id": f"{night}-{i}", "suite_run_id": f"night-{night}",
                 "started_at": datetime.fromisoformat(f"{night}T02:30:00+00:00"),
                 **{k: row[k] * slower for k in ("examples_per_sec", "examples_per_sec_per_device", "units_per_sec")
                    if row.get(k) is not None}} for i, row in enumerate(rows)]  # fmt: skip
        (local / "night" / night).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(made, source.schema), local / "night" / night / "rows.parquet")
    done = stepwatch("publish", *(f"night/{n}" for n in nights), "--history", "history", "--push",
                     "stepwatch-history", "--db", "store.duckdb", "--night", nights[-1], "--issue-on", "confirmed",
                     cwd=local, env=env)  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]  # a confirmed regression
    alerts = json.loads(stepwatch("alerts", "list", "--format", "json", "--db", "store.duckdb", cwd=local).stdout)
    [alert] = [a for a in alerts if a["status"] == "confirmed"]
    (tmp_path / "gh-state").mkdir()
    (tmp_path / "gh-bin").mkdir()
    (tmp_path / "gh-bin" / "gh").write_text(STAND_IN_ISSUES)  # no issue open: the triage closes none
    (tmp_path / "gh-bin" / "gh").chmod(0o755)
    gh.env = {**gh.env, "PATH": f"{tmp_path / 'gh-bin'}:{gh.env['PATH']}", "GH_STATE": str(tmp_path / "gh-state")}
    run = gh.run_workflow(nightly(gh), "workflow_dispatch", {"alert_id": str(alert["id"]), "alert_action": "ack",
                                                             "note": "slower on purpose"})  # fmt: skip
    [publish], [pages] = run["publish"], run["pages"]
    assert publish.result == "success", [(s.name, s.stdout[-1500:], s.stderr[-1500:]) for s in publish.steps
                                         if s.outcome == "failure"]  # fmt: skip
    assert pages.result == "success", [(s.name, s.outcome, s.stderr[-1500:]) for s in pages.steps]
    with tarfile.open(fileobj=io.BytesIO(gh.artifacts[gh.run[0]]["github-pages-1"]["artifact.tar"])) as tar:
        page = tar.extractfile("./index.html").read().decode()
    assert "1 series; 0 regressed." in page, page[:3000]


FLAKY = (
    MODEL
    + """

import os

if os.environ.get("STEPWATCH_TEST_FLAKY_RUNNER"):  # a runner that lost its device this once
    raise RuntimeError("the runner lost its device")
"""
)


@pytest.mark.large
def test_every_job_of_a_night_can_be_run_again_and_no_night_is_lost_or_doubled(tmp_path: Path) -> None:
    """A night whose collect job failed on a flaky runner, then "Re-run failed jobs" (collect, and the publish and
    pages jobs that need it), then "Re-run all jobs", as GitHub runs attempts of one run (its id and artifacts kept):
    each attempt's results reach the history, none is archived twice, and the page of the latest attempt deploys.
    Before, the re-run's upload failed with 409 Conflict (the artifact's name was the first attempt's) and its results
    were lost, and a re-run of publish failed on the page's artifact."""
    gh = team_repository(tmp_path, {"model.py": FLAKY}, ["--models", "model.py:mlp", "--keras-backend", "jax"],
                         'xla = ["off"]\ntrials = 1\npages = true\n' + FAST)  # fmt: skip
    steady = dict(gh.env)
    gh.env = {**steady, "STEPWATCH_TEST_FLAKY_RUNNER": "1"}
    first = gh.run_workflow(nightly(gh))
    run_id = gh.run[0]
    # Every collect job failed: publish archives the night (its crash rows) and says so; the page deploys, naming
    # the job and why it failed (before, publish failed too, its page upload ran only on success, and the pages job
    # found no artifact: three red jobs). Every job but the crashed collect is green.
    assert [first[job][0].result for job in ("collect", "compile-cache", "publish", "pages")] == [
        "failure", "success", "success", "success"]  # fmt: skip
    assert "every collect job failed tonight" in first["publish"][0].summary + "".join(
        s.stdout + s.stderr for s in first["publish"][0].steps)  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(gh.artifacts[run_id]["github-pages-1"]["artifact.tar"])) as tar:
        page = tar.extractfile("./index.html").read().decode()
    assert "1 of 1 collect job(s) ran no trial ok" in page
    assert "<li>cpu 1/1: " in page and "the runner lost its device" in page, page[:3000]
    gh.env = steady
    again = gh.rerun(run_id, failed_only=True)
    everything = gh.rerun(run_id)
    for attempt in (again, everything):
        for job in ("collect", "publish", "pages"):
            [ran] = attempt[job]
            assert ran.result == "success", (job, [(s.name, s.outcome, s.stderr[-1500:]) for s in ran.steps])
    # Each attempt of publish uploaded its page under a name of its own, and the pages job deployed that one.
    assert {"github-pages-1", "github-pages-2", "github-pages-3"} <= set(gh.artifacts[run_id])
    # The branch: one results file an attempt of collect (the failed one's rows kept: they are what happened).
    assert len([n for n in branch_files(gh, "results") if n.endswith(".parquet")]) == 3
    last = everything["publish"][0]
    db = last.workspace / "stepwatch-store" / "stepwatch.duckdb"
    assert query(db, "SELECT status, count(*), count(DISTINCT run_id) FROM runs GROUP BY ALL ORDER BY 1",
                 last.workspace) == ['"crash",1,1', '"ok",2,2']  # fmt: skip
    # The rule the re-run needed: a second upload of a name fails unless it overwrites.
    assert "(409) Conflict" in (conflict({"results-cpu-0": {}}, "results-cpu-0", overwrite=False) or "")
    assert conflict({"results-cpu-0": {}}, "results-cpu-0", overwrite=True) is None


def a_night(folder: Path, night: str, source: Path) -> list[str]:
    """A night's artifact as a collect job leaves it: real rows (the reference history's) given run ids and start
    times of that night, and a raw profile folder per row; the run ids."""
    table = pq.read_table(source)
    ids = [f"{night}-{i}" for i in range(table.num_rows)]
    started = pa.array([datetime.fromisoformat(f"{night}T02:30:00+00:00")] * table.num_rows, table["started_at"].type)
    table = table.set_column(table.column_names.index("run_id"), "run_id", pa.array(ids))
    table = table.set_column(table.column_names.index("started_at"), "started_at", started)
    (folder / "results-cpu-0").mkdir(parents=True)
    pq.write_table(table, folder / "results-cpu-0" / f"smoke-{night}.parquet")
    for run_id in ids[:2]:
        (folder / "results-cpu-0" / "profiles" / run_id).mkdir(parents=True)
        (folder / "results-cpu-0" / "profiles" / run_id / "trace.json.gz").write_bytes(os.urandom(4096))
    return ids


@pytest.mark.large
def test_the_history_keeps_its_last_nights_profiles_a_file_a_month_and_one_commit(tmp_path: Path) -> None:
    """A history with a bound: three nights across a month's end published with --keep-profiles 2. The raw profiles
    of the oldest night leave the branch, October's results are one file once November starts, and the branch is one
    commit, so a clone fetches what it holds now; a store rebuilt from that clone has every row once."""
    env = environment(tmp_path)
    remote = tmp_path / "github.git"
    sh("git", "init", "-q", "--bare", str(remote), cwd=tmp_path, env=env)
    sources = sorted((REPO / "data" / "reference" / "cpu-tf-history").glob("*.parquet"))
    ran, said = [], []
    for number, night in enumerate(("2026-10-31", "2026-11-01", "2026-11-02")):
        work = tmp_path / night
        history = work / "history"
        done = subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "stepwatch-history", str(remote),
                               str(history)], capture_output=True, text=True, env=env)  # fmt: skip
        if done.returncode:  # the first night: no branch yet (as the nightly's fetch step does)
            sh("git", "init", "-q", "-b", "stepwatch-history", str(history), cwd=tmp_path, env=env)
            sh("git", "-C", str(history), "remote", "add", "origin", str(remote), cwd=tmp_path, env=env)
        ran += a_night(work / "night", night, sources[number])
        done = stepwatch("publish", "night", "--history", "history", "--push", "stepwatch-history", "--db",
                         "store.duckdb", "--night", night, "--keep-profiles", "2", cwd=work, env=env)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        said.append(done.stdout)
    assert "1 result file(s) of past months compacted into one file a month" in said[1], said[1]
    assert "1 older night(s) of raw profiles left the history branch" in said[2], said[2]
    gh = GitHub(tmp_path, "o/r", env)
    gh.remote.parent.mkdir(parents=True)
    shutil.move(remote, gh.remote)
    assert branch_files(gh, "profiles") == ["2026-11-01", "2026-11-02"]
    assert len(branch_files(gh, "profiles/2026-11-02")) == 2
    assert branch_files(gh, "results") == ["2026-10.parquet", "smoke-2026-11-01.parquet", "smoke-2026-11-02.parquet"]
    count = sh("git", "--git-dir", str(gh.remote), "rev-list", "--count", "stepwatch-history", cwd=tmp_path)
    assert count == "1"
    # A fresh clone rebuilds the store: every night's rows, each once.
    clone = tmp_path / "clone"
    sh("git", "clone", "-q", "--branch", "stepwatch-history", str(gh.remote), str(clone), cwd=tmp_path, env=env)
    done = stepwatch("ingest", str(clone / "results"), "--db", str(tmp_path / "rebuilt.duckdb"), cwd=tmp_path,
                     env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    counted = query(tmp_path / "rebuilt.duckdb", "SELECT count(*), count(DISTINCT run_id) FROM runs", tmp_path)
    assert counted == [f"{len(ran)},{len(ran)}"]


def with_issues(gh: GitHub, root: Path) -> Callable[[], list[dict]]:
    """The GitHub CLI's issue commands for the workflow's steps (STAND_IN_ISSUES, keeping them in a file under
    ``root``); returns what lists the issues so far."""
    state, bin_dir = root / "gh-state", root / "gh-bin"
    state.mkdir()
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(STAND_IN_ISSUES)
    (bin_dir / "gh").chmod(0o755)
    gh.env = {**gh.env, "PATH": f"{bin_dir}:{gh.env['PATH']}", "GH_STATE": str(state)}
    return lambda: json.loads((state / "issues.json").read_text()) if (state / "issues.json").exists() else []


STAND_IN_ISSUES = '''#!/usr/bin/env python3
"""A stand-in for the GitHub CLI's issue commands the nightly runs, keeping issues in $GH_STATE/issues.json."""
import json, os, sys
from pathlib import Path

state = Path(os.environ["GH_STATE"]) / "issues.json"
issues = json.loads(state.read_text()) if state.exists() else []
args = sys.argv[1:]
assert args[0] == "issue", args
flag = lambda name: args[args.index(name) + 1]
if args[1] == "list":
    title = flag("--search").removesuffix(" in:title")
    found = [i for i in issues if i["state"] == "open" and title in i["title"]]
    assert flag("--jq") == ".[0].number // empty", args
    print(found[0]["number"] if found else "")
elif args[1] == "create":
    issues.append({"number": len(issues) + 1, "title": flag("--title"), "state": "open",
                   "body": Path(flag("--body-file")).read_text(), "edits": 0, "comments": []})
    print(f"https://github.invalid/issues/{len(issues)}")
else:
    issue = issues[int(args[2]) - 1]
    if args[1] == "edit":
        issue["body"], issue["edits"] = Path(flag("--body-file")).read_text(), issue["edits"] + 1
    elif args[1] == "close":
        issue["state"] = "closed"
        issue["comments"].append(flag("--comment"))
    else:
        raise SystemExit(f"gh {args[1]}: not stood in for")
state.write_text(json.dumps(issues))
'''
HELPER = '''"""The team's blocks."""

import keras

WIDTH = 256


def block(x):
    return keras.layers.Dense(WIDTH, activation="relu")(keras.layers.Dense(WIDTH, activation="relu")(x))
'''
WIDE_MODEL = '''"""A team's Keras model on its helper's blocks."""

import keras

from helper import block


def mlp(preset: str = "tiny") -> dict:
    inputs = keras.Input((64,))
    model = keras.Model(inputs, keras.layers.Dense(4)(block(inputs)))
    return {"model": model, "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "inputs": {"shape": (64,)}, "labels": {"shape": (), "dtype": "int32", "high": 4}}
'''


@pytest.mark.large
def test_a_young_history_confirms_both_slowed_series_by_the_third_slow_night_in_one_issue_closed_by_triage(
    tmp_path: Path,
) -> None:
    """The first nights of a new installation, as GitHub runs them: two quiet nights, then the helper made 8x wider
    on main. Both of the model's series (XLA off and on) are confirmed on the third slow night, in one issue that
    names both with their levels, interval and commit range; the issue closes once the workflow run by hand has
    acknowledged both. Before, the two quiet nights were set aside as outliers and nothing was reported."""
    gh = team_repository(tmp_path, {"model.py": WIDE_MODEL, "helper.py": HELPER},
                         ["--models", "model.py:mlp", "--keras-backend", "jax"],
                         'xla = ["off", "on"]\ntrials = 2\nbatch = [256]\nissue-on = "confirmed"\n' + FAST)  # fmt: skip
    issues = with_issues(gh, tmp_path)

    def night() -> tuple[str, dict]:
        [publish] = gh.run_workflow(nightly(gh))["publish"]
        [step] = [s for s in publish.steps if s.name.startswith("Ingest, archive and push")]
        return step.outputs.get("exit-code", ""), publish

    for _ in range(2):
        assert night()[0] == "0"
    work = gh.root / "work"
    (work / "helper.py").write_text(HELPER.replace("WIDTH = 256", "WIDTH = 2048"))
    sh("git", "commit", "-q", "-am", "Wider blocks", cwd=work, env=gh.env)
    sh("git", "push", "-q", str(gh.remote), "main", cwd=work, env=gh.env)
    codes = [night()[0] for _ in range(2)]
    assert codes == ["0", "0"] and issues() == []  # suspected after two slow nights, not yet confirmed
    code, publish = night()
    assert code == "1" and publish.result == "failure"
    failing = next(s for s in publish.steps if s.name == "Fail on a confirmed regression")
    assert "run this workflow by hand" in failing.stdout and "alert_id, alert_action" in failing.stdout
    [issue] = issues()
    rows = [line.split(" | ") for line in issue["body"].splitlines() if line.startswith("| ") and " confirmed " in line]
    assert len(rows) == 2, issue["body"]  # both series, each with its levels, change and commit range
    assert {row[2].split()[0] for row in rows} == {"model.py:mlp/tiny"} and all(" -> " in row[5] for row in rows)
    assert all(row[8].startswith("[`") and "/compare/" in row[8] for row in rows), rows
    assert "workflow run" in issue["body"] and issue["state"] == "open"
    for number, row in enumerate(rows):
        done = gh.run_workflow(
            nightly(gh),
            "workflow_dispatch",
            {"alert_id": row[0].lstrip("| "), "alert_action": "ack", "note": "wider on purpose"},
        )
        [triage] = done["publish"]
        assert triage.result == "success", [(s.name, s.stdout[-1000:], s.stderr[-1500:]) for s in triage.steps]
        [issue] = issues()
        assert issue["state"] == ("open" if number == 0 else "closed")
    assert "Every confirmed regression in it is triaged" in issue["comments"][-1]
