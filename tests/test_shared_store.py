"""One store for many writers (``collector.store.shared``): Iceberg tables whose catalog is a real PostgreSQL started
here (initdb, pg_ctl, on 127.0.0.1) and whose files are on moto's S3, written by several stepwatch processes at once,
each with a local copy of its own, as several runners would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import pyarrow.parquet as pq
import pytest

from dashboard.browser_harness import CHROMIUM, served
from tests import services
from tests.conftest import REFERENCE, REPO, result_rows, stepwatch, write_results
from tests.test_alerts import add_nights

pytestmark = pytest.mark.skipif(
    services.postgres_bin() is None, reason="needs PostgreSQL's server (apt-get install postgresql; make test does)"
)


class Servers:
    def __init__(self, pg: services.Postgres, endpoint: str) -> None:
        self.pg, self.endpoint = pg, endpoint
        self.env = services.environment(endpoint)

    def store(self, name: str) -> str:
        """The address of a new, empty shared store: a database of the catalog's server and a bucket of its own."""
        self.pg.create_database(name)
        services.bucket(self.endpoint, name.replace("_", "-"))
        return f"iceberg+{self.pg.url(name)}?warehouse=s3://{name.replace('_', '-')}/stepwatch"


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    with services.postgres() as pg, services.s3() as endpoint:
        yield Servers(pg, endpoint)


def machine(servers: Servers, cache: Path) -> dict[str, str]:
    """The environment of one runner: the storage's credentials, and a local copy of its own."""
    return {**servers.env, "STEPWATCH_CACHE": str(cache)}


def query(address: str, sql: str, env: dict[str, str]) -> list[list[str]]:
    done = stepwatch("query", sql, "--db", address, "--format", "csv", env=env)
    assert done.returncode == 0, done.stderr
    return [[cell.strip('"') for cell in line.split(",")] for line in done.stdout.strip().splitlines()[1:]]


def at_once(commands: list[tuple[list[str], dict[str, str]]]) -> list[subprocess.CompletedProcess]:
    """stepwatch processes started together, each with its own environment; their outcomes, in order."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "stepwatch", *args],
            cwd=REPO,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for args, env in commands
    ]
    done = []
    for (args, _), proc in zip(commands, procs):
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
    return done


def added(done: subprocess.CompletedProcess) -> int:
    return int(re.search(r"\(([\d,]+) new rows? of", done.stderr)[1].replace(",", ""))


@pytest.mark.large
def test_four_writers_at_once_leave_every_row_exactly_once(servers: Servers, tmp_path: Path) -> None:
    address = servers.store("four_writers")
    files = [write_results(tmp_path / "results" / f"night-{i:02d}.parquet", result_rows(3, f"night-{i}"))
             for i in range(40)]  # fmt: skip
    # Each file goes to two of the four writers: what one commits, the other finds there and leaves. And each writer
    # ingests the whole reference history (the issue's `stepwatch ingest data/reference/cpu-tf-history` from four
    # processes at once).
    commands = [
        (["ingest", *[str(files[(10 * w + k) % 40]) for k in range(20)], str(REFERENCE), "--db", address],
         machine(servers, tmp_path / f"runner-{w}"))
        for w in range(4)
    ]  # fmt: skip
    done = at_once(commands)
    assert [d.returncode for d in done] == [0] * 4, [d.stderr[-1500:] for d in done]
    assert sum(added(d) for d in done) == 120 + 96  # every row committed once, by one writer
    retries = sum(int(m[1]) for d in done for m in re.finditer(r"(\d+) commit\(s\) made again", d.stderr))
    print(f"commits lost to another writer and made again: {retries}")
    reader = machine(servers, tmp_path / "reader")
    [[rows, ids]] = query(address, "SELECT count(*), count(DISTINCT run_id) FROM runs", reader)
    assert (rows, ids) == ("216", "216")
    reference = {
        r["run_id"] for f in REFERENCE.glob("*.parquet") for r in pq.read_table(f, columns=["run_id"]).to_pylist()
    }
    ours = {row["run_id"] for f in files for row in pq.read_table(f).to_pylist()}
    assert {r[0] for r in query(address, "SELECT run_id FROM runs", reader)} == ours | reference
    [[windows]] = query(address, "SELECT count(*) FROM samples WHERE run_id LIKE 'night-%'", reader)
    assert windows == str(120 * 3)  # each trial's windows came with it
    # Every file is recorded: ingesting them all again from another runner reads none.
    again = stepwatch("ingest", str(tmp_path / "results"), "--db", address, env=machine(servers, tmp_path / "late"))
    assert again.returncode == 0 and "0 ingested (0 new rows of 0 read), 40 already in the store" in again.stderr


def _blocked_commits(pg: services.Postgres, database: str) -> int:
    con = psycopg2.connect(host=pg.host, port=pg.port, user=services.USER, dbname=database)
    try:
        cur = con.cursor()
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE 'UPDATE%'")
        return cur.fetchone()[0]
    finally:
        con.close()


@pytest.mark.large
def test_a_writer_killed_mid_commit_leaves_the_store_as_it_was(servers: Servers, tmp_path: Path) -> None:
    address = servers.store("killed_writer")
    files = [write_results(tmp_path / f"night-{i}.parquet", result_rows(3, f"night-{i}")) for i in range(3)]
    runner = machine(servers, tmp_path / "runner")
    done = stepwatch("ingest", str(files[0]), str(files[1]), "--db", address, env=runner)
    assert done.returncode == 0, done.stderr
    # The catalog's row of the runs table held by another transaction: the writer's commit (a conditional UPDATE of
    # that row) waits on it, after its data, manifests and metadata are written. Killed there.
    lock = psycopg2.connect(host=servers.pg.host, port=servers.pg.port, user=services.USER, dbname="killed_writer")
    cur = lock.cursor()
    cur.execute("SELECT metadata_location FROM iceberg_tables WHERE table_name = 'runs' FOR UPDATE")
    writer = subprocess.Popen([sys.executable, "-m", "stepwatch", "ingest", str(files[2]), "--db", address], cwd=REPO,
                              env={**os.environ, **machine(servers, tmp_path / "killed")},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 120
    while _blocked_commits(servers.pg, "killed_writer") == 0:
        assert writer.poll() is None, writer.stderr.read().decode()[-1500:]
        assert time.monotonic() < deadline, "the writer never reached its commit"
        time.sleep(0.05)
    writer.kill()
    writer.wait()
    lock.rollback()
    lock.close()
    reader = machine(servers, tmp_path / "reader")
    assert query(address, "SELECT count(*), count(DISTINCT run_id) FROM runs", reader) == [["6", "6"]]
    # Run again, the night lands once.
    done = stepwatch("ingest", str(files[2]), "--db", address, env=machine(servers, tmp_path / "killed"))
    assert done.returncode == 0 and "(3 new rows of 3 read)" in done.stderr, done.stderr
    assert query(address, "SELECT count(*), count(DISTINCT run_id) FROM runs", reader) == [["9", "9"]]


@pytest.mark.large
def test_alerts_are_shared_and_the_store_reads_as_of_a_time(servers: Servers, tmp_path: Path) -> None:
    import numpy as np

    address = servers.store("alerts")
    rng = np.random.default_rng(11)
    results = tmp_path / "results"
    add_nights(results, range(30), lambda i: 1000.0, rng)
    first, second, third = (machine(servers, tmp_path / name) for name in ("first", "second", "third"))
    assert stepwatch("ingest", str(results), "--db", address, env=first).returncode == 0
    before = datetime.now(UTC)
    time.sleep(0.05)
    add_nights(results, range(30, 40), lambda i: 940.0, rng)  # a 6% drop
    assert stepwatch("ingest", str(results), "--db", address, env=second).returncode == 0

    detected = stepwatch("detect", "--db", address, "--format", "json", "--issue-on", "confirmed", env=first,
                         timeout=120)
    assert detected.returncode == 1, detected.stderr
    [alert] = json.loads(detected.stdout)
    assert alert["status"] == "confirmed" and 0.91 < alert["ratio"] < 0.97
    # Triaged on another runner; a third sees it, and detection there passes again.
    done = stepwatch("alerts", "ack", str(alert["id"]), "--note", "expected with TF 2.21", "--db", address, env=second)
    assert done.returncode == 0, done.stderr
    listed = stepwatch("alerts", "list", "--status", "all", "--format", "json", "--db", address, env=third)
    assert [(a["id"], a["status"], a["note"]) for a in json.loads(listed.stdout)] == [
        (alert["id"], "acknowledged", "expected with TF 2.21")
    ]
    again = stepwatch("detect", "--db", address, "--format", "json", env=third, timeout=120)
    assert (again.returncode, json.loads(again.stdout)) == (0, []), again.stderr

    # As it was before the drop was ingested: 30 nights of 2 series x 3 trials, no alert; and read-only.
    then = f"{address}&as_of={before.isoformat()}"
    assert query(then, "SELECT count(*) FROM runs", third) == [["180"]]
    assert query(then, "SELECT count(*) FROM alerts", third) == [["0"]]
    refused = stepwatch("alerts", "ack", str(alert["id"]), "--note", "x", "--db", then, env=third)
    assert refused.returncode != 0 and "read-only" in refused.stderr.strip().splitlines()[-1], refused.stderr
    rebuilt = stepwatch("rebuild", str(results), "--db", address, env=third)
    assert rebuilt.returncode != 0 and "is a shared store" in rebuilt.stderr, rebuilt.stderr
    # A catalog that cannot be reached: one line, naming the store with its password masked.
    down = f"iceberg+postgresql://{services.USER}:hunter2@127.0.0.1:{services.free_port()}/x?warehouse=s3://none/x"
    failed = stepwatch("query", "SELECT 1", "--db", down, env=third)
    assert failed.returncode != 0 and "hunter2" not in failed.stderr and ":***@" in failed.stderr, failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr


@pytest.mark.large
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (Debian's; `make test` installs it as root) or Chrome")
def test_the_dashboard_reads_the_shared_store_and_follows_it(servers: Servers, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    from tests.test_dashboard_browser import text_on

    address = servers.store("dashboard")
    writer = machine(servers, tmp_path / "writer")
    write_results(tmp_path / "one" / "night.parquet", result_rows(3, "first-night"))
    assert stepwatch("ingest", str(tmp_path / "one"), "--db", address, env=writer).returncode == 0
    env = {**os.environ, **machine(servers, tmp_path / "dashboard"), "STEPWATCH_DB": address,
           "STEPWATCH_SHARED_POLL_S": "0.5"}  # fmt: skip

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "stepwatch.dashboard", "--server.headless=true", "--server.address=127.0.0.1",
                f"--server.port={port}", "--browser.gatherUsageStats=false"]  # fmt: skip

    with served(command, REPO, env) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        assert "Test CPU" in text_on(page, url, "overview", "Test CPU")
        assert page.get_by_text("dashboard?warehouse=s3://dashboard/stepwatch").count() >= 1  # the sidebar names it
        # Another runner ingests a night of another machine: the next page shows it, with no restart.
        write_results(tmp_path / "two" / "night.parquet", result_rows(3, "second-night", accelerator="Another CPU"))
        assert stepwatch("ingest", str(tmp_path / "two"), "--db", address, env=writer).returncode == 0
        time.sleep(1)
        assert "Another CPU" in text_on(page, url, "overview", "Another CPU")
        assert "Another CPU" in text_on(page, f"{url}/history", "history", "Another CPU")
        browser.close()


def test_writers_making_a_new_store_at_once_all_get_it(servers: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first night of a store from several runners: each makes the namespace and tables if missing, and the
    catalog's check-then-insert races (before the fix, 3 of 30 such processes failed with a duplicate key)."""
    from concurrent.futures import ThreadPoolExecutor

    from stepwatch.collector.store import address, shared

    for key, value in servers.env.items():
        monkeypatch.setenv(key, value)
    for n in range(3):
        parsed = address.parse(servers.store(f"new_store_{n}"))
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda one: shared.SharedStore(one).ensure("real"), [parsed] * 8))
        assert set(shared.SharedStore(parsed).locations()) == set(shared.TABLES)


@pytest.mark.large  # a whole nightly, 24 s: `make test-large`
def test_the_nightly_publishes_into_the_shared_store_its_secret_names(
    servers: Servers, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """init's nightly as GitHub runs it (``tests.github``), with the repository secret STEPWATCH_STORE: the night goes
    into the shared store, with no history branch and no store cache."""
    from tests.test_publish import FAST, MODEL, nightly, team_repository

    root = tmp_path_factory.mktemp("shared-nightly")
    gh = team_repository(root, {"model.py": MODEL}, ["--models", "model.py:mlp", "--keras-backend", "jax"],
                         'xla = ["off"]\ntrials = 1\n' + FAST)  # fmt: skip
    address = servers.store("nightly")
    gh.secrets.update(STEPWATCH_STORE=address, AWS_ENDPOINT_URL=servers.endpoint,
                      AWS_ACCESS_KEY_ID=servers.env["AWS_ACCESS_KEY_ID"],
                      AWS_SECRET_ACCESS_KEY=servers.env["AWS_SECRET_ACCESS_KEY"])  # fmt: skip
    night = gh.run_workflow(nightly(gh))
    [collect], [publish] = night["collect"], night["publish"]
    assert collect.result == "success", [(s.name, s.outcome, s.stderr[-1500:]) for s in collect.steps]
    assert publish.result == "success", [(s.name, s.outcome, s.stdout[-1500:], s.stderr[-1500:])
                                         for s in publish.steps]  # fmt: skip
    outcomes = {step.name: step.outcome for step in publish.steps}
    assert outcomes["Fetch the history branch (a new one the first night)"] == "skipped"
    assert outcomes["A folder for the night's page (the shared store keeps the history)"] == "success"
    assert outcomes["Restore the store from the last publish (a cache, which may be gone)"] == "skipped"
    assert outcomes["Keep the store for the next run (also after a regression)"] == "skipped"
    assert outcomes["Maintain the shared store"] == "success"
    assert "No alerts." in publish.summary
    heads = subprocess.run(["git", "--git-dir", str(gh.remote), "branch", "--list"], capture_output=True, text=True)
    assert "stepwatch-history" not in heads.stdout  # nothing pushed: the store keeps the history
    night_rows = [r for f in (root / "run1-publish-0" / "stepwatch-nightly").rglob("*.parquet")
                  for r in pq.read_table(f, columns=["run_id"]).to_pylist()]  # fmt: skip
    reader = machine(servers, root / "reader")
    stored = {r[0] for r in query(address, "SELECT run_id FROM runs", reader)}
    assert night_rows and stored == {r["run_id"] for r in night_rows}
