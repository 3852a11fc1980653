"""A shared store under the faults a store meets over months: the catalog or storage lost at each point of an ingest
(a TCP link cut in front of the real PostgreSQL and S3, ``tests.faults``), PostgreSQL restarted under a commit, and
rounds of writers killed, then ``stepwatch maintain`` beside writers and after them."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import pytest

from stepwatch.collector.store import address as addresses
from stepwatch.collector.store import files as store_files
from tests import faults, services
from tests.conftest import REPO, result_rows, stepwatch, write_results
from tests.test_shared_store import Servers, _blocked_commits, machine, query

pytestmark = pytest.mark.skipif(
    services.postgres_bin() is None, reason="needs PostgreSQL's server (apt-get install postgresql; make test does)"
)


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    with services.postgres() as pg, services.s3() as endpoint:
        yield Servers(pg, endpoint)


def held(address: str, env: dict[str, str], prefix: str) -> tuple[int, int, int, int]:
    """The rows of ``prefix`` runs, their distinct run_ids, the records of their files and their distinct files."""
    [[rows, ids]] = query(address, f"SELECT count(*), count(DISTINCT run_id) FROM runs WHERE run_id LIKE '{prefix}%'",
                          env)  # fmt: skip
    [[records, uris]] = query(
        address, f"SELECT count(*), count(DISTINCT uri) FROM ingested_files WHERE uri LIKE '%/{prefix}%'", env
    )
    return int(rows), int(ids), int(records), int(uris)


def started(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """A stepwatch process started, its output kept."""
    return subprocess.Popen([sys.executable, "-m", "stepwatch", *args], cwd=REPO, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def last_line(done: subprocess.CompletedProcess) -> str:
    return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""


# Each fault: how the link is set before the ingest starts, the exit code and line it must give, and whether the
# night's rows and records are then in the store.
FAULTS = {
    "catalog lost before the commit": ("pg", "down", 4, "nothing of this ingest is in the store: the catalog", False),
    "storage lost mid-upload": ("s3", [b"/runs/data/"], 4, "nothing of this ingest is in the store: storage", False),
    "storage stalled mid-upload": ("s3", [b"/runs/data/", b"stall"], 4, "stalled: no answer in 2 s", False),
    "catalog lost at the commit, before it was sent": (
        "pg", [b"UPDATE iceberg_tables"], 4, "nothing of this ingest is in the store: the catalog", False),
    "catalog lost after the commit was sent": (
        "pg", [b"UPDATE iceberg_tables", b"COMMIT"], 5, "not known whether this ingest landed", True),
    "catalog back while the writer asks": (
        "pg", [b"UPDATE iceberg_tables", b"COMMIT"], 0, "note: the catalog did not answer the commit", True),
}  # fmt: skip


@pytest.mark.large
def test_a_fault_at_each_point_of_an_ingest_says_what_landed(servers: Servers, tmp_path: Path) -> None:
    direct = servers.store("faults")
    reader = machine(servers, tmp_path / "reader")
    port = int(re.search(r":(\d+)/", direct)[1])
    s3_port = int(servers.endpoint.rsplit(":", 1)[1])
    with faults.link(port) as pg, faults.link(s3_port) as s3:
        through = direct.replace(f":{port}/", f":{pg.port}/")
        writer = {**machine(servers, tmp_path / "writer"), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3.port}",
                  "STEPWATCH_SHARED_OUTAGE_S": "3", "STEPWATCH_SHARED_STORAGE_TIMEOUT_S": "2"}  # fmt: skip
        write_results(tmp_path / "base" / "base-0.parquet", result_rows(3, "base-0"))
        assert stepwatch("ingest", str(tmp_path / "base"), "--db", through, env=writer).returncode == 0
        for k, (name, (which, trigger, code, line, lands)) in enumerate(FAULTS.items()):
            night = tmp_path / f"fault{k}"
            for f in range(2):
                write_results(night / f"fault{k}-{f}.parquet", result_rows(3, f"fault{k}-{f}"))
            link = pg if which == "pg" else s3
            env = writer
            if trigger == "down":
                link.cut()
            else:
                stall = trigger[-1] == b"stall"
                link.arm(trigger[:-1] if stall else trigger, after=b"COMMIT" in trigger, stall=stall)
            if code == 0:  # the catalog comes back a second after the commit went unanswered
                env = {**writer, "STEPWATCH_SHARED_OUTAGE_S": "30"}
                threading.Thread(target=lambda: (pg.fired.wait(60), time.sleep(1), pg.restore()), daemon=True).start()
            done = stepwatch("ingest", str(night), "--db", through, env=env, timeout=180)
            assert link.fired.is_set() or trigger == "down", f"{name}: the fault never happened: {done.stderr[-1500:]}"
            for one in (pg, s3):
                one.arm([])
                one.restore()
            assert done.returncode == code, f"{name}: {done.stderr[-2000:]}"
            assert line in done.stderr, f"{name}: {done.stderr[-2000:]}"
            if code:
                assert "stepwatch: error: " in last_line(done) and last_line(done).count("iceberg+") == 1, done.stderr
            assert held(direct, reader, f"fault{k}-") == ((6, 6, 2, 2) if lands else (0, 0, 0, 0)), name
            # Again, with nothing in the way: every row once, every file recorded once.
            again = stepwatch("ingest", str(night), "--db", through, env=writer, timeout=180)
            assert again.returncode == 0, f"{name}: {again.stderr[-2000:]}"
            assert held(direct, reader, f"fault{k}-") == (6, 6, 2, 2), name
            print(f"{name}: exit {done.returncode}: {last_line(done)[:160]}")
        # Maintenance with storage gone: one line naming the store once, and nothing of the store lost.
        s3.arm([b"GET /"])
        stopped = stepwatch("maintain", "--db", through, "--orphans-older-than", "0", env=writer, timeout=180)
        s3.restore()
        assert stopped.returncode == 4 and last_line(stopped).count("iceberg+") == 1, stopped.stderr[-2000:]
        assert "Traceback" not in stopped.stderr and "storage" in last_line(stopped), stopped.stderr[-2000:]
        assert held(direct, reader, "fault") == (36, 36, 12, 12)


@pytest.mark.large
def test_a_file_quarantined_by_an_attempt_that_lost_a_race_is_still_said(servers: Servers, tmp_path: Path) -> None:
    """A writer's commit held back (the link stalls its UPDATE) while another writer commits: the first loses the race
    and ingests again, by then without the file it moved to quarantine; its line and exit code still say so."""
    direct = servers.store("race")
    port = int(re.search(r":(\d+)/", direct)[1])
    reader = machine(servers, tmp_path / "reader")
    with faults.link(port) as pg:
        night = tmp_path / "night"
        write_results(night / "race-0.parquet", result_rows(3, "race-0"))
        (night / "broken.parquet").write_bytes(b"not parquet")
        write_results(tmp_path / "other" / "other-0.parquet", result_rows(3, "other-0"))
        assert stepwatch("ingest", str(tmp_path / "other"), "--db", direct, env=reader).returncode == 0
        write_results(tmp_path / "other" / "other-1.parquet", result_rows(3, "other-1"))
        pg.arm([b"UPDATE iceberg_tables"], stall=True)
        first = started(["ingest", str(night), "--db", direct.replace(f":{port}/", f":{pg.port}/")],
                        machine(servers, tmp_path / "first"))  # fmt: skip
        assert pg.fired.wait(120), first.communicate()[1][-2000:]
        second = stepwatch("ingest", str(tmp_path / "other"), "--db", direct, env=machine(servers, tmp_path / "second"))
        assert second.returncode == 0, second.stderr[-2000:]
        pg.release()
        out, err = first.communicate(timeout=180)
    assert first.returncode == 4, err[-2000:]
    assert "quarantined" in err and "broken.parquet" in err and "1 commit(s) made again" in err, err[-2000:]
    assert held(direct, reader, "race-") == (3, 3, 1, 1)


@pytest.mark.large
def test_postgres_restarted_under_a_commit_is_waited_out(servers: Servers, tmp_path: Path) -> None:
    """The reproduction of a nightly marked failed though its rows had landed: the catalog row of ingested_files held
    by another transaction, the writer's commit waiting on it, and PostgreSQL restarted. With one commit, nothing had
    landed; the writer waits the catalog out and commits: exit 0, every row and file once."""
    address = servers.store("restarted")
    writer = {**machine(servers, tmp_path / "writer"), "STEPWATCH_SHARED_OUTAGE_S": "60"}
    write_results(tmp_path / "first" / "first.parquet", result_rows(3, "first"))
    assert stepwatch("ingest", str(tmp_path / "first"), "--db", address, env=writer).returncode == 0
    night = tmp_path / "night"
    for f in range(4):
        write_results(night / f"night-{f}.parquet", result_rows(20, f"night-{f}"))
    lock = psycopg2.connect(host=servers.pg.host, port=servers.pg.port, user=services.USER, dbname="restarted")
    lock.cursor().execute("SELECT 1 FROM iceberg_tables WHERE table_name = 'ingested_files' FOR UPDATE")
    proc = started(["ingest", str(night), "--db", address], writer)
    deadline = time.monotonic() + 120
    while _blocked_commits(servers.pg, "restarted") == 0:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the writer never reached its commit"
        time.sleep(0.05)
    servers.pg.restart()
    lock.close()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-2000:]
    assert "(80 new rows of 80 read)" in err, err[-2000:]
    reader = machine(servers, tmp_path / "reader")
    assert held(address, reader, "night-") == (80, 80, 4, 4)


def _bucket_files(endpoint: str, bucket: str) -> dict[str, int]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, **services._boto_credentials())
    found: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        # Keys ending in "/" are folder markers (pyarrow writes one when it deletes a file), not files.
        found |= {item["Key"]: item["Size"] for item in page.get("Contents", []) if not item["Key"].endswith("/")}
    return found


def _read_by_snapshots(address: str, env: dict[str, str]) -> tuple[set[str], int, int, int]:
    """By pyiceberg's own metadata tables (not stepwatch's code): the keys every live snapshot of every table reads,
    the runs table's live data files, and its rows and distinct run_ids as pyiceberg reads them."""
    import pyarrow.compute as pc
    from pyiceberg.catalog.sql import SqlCatalog

    parsed = addresses.parse(address)
    storage = {"s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key-id": env["AWS_ACCESS_KEY_ID"],
               "s3.secret-access-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": "us-east-1"}  # fmt: skip
    catalog = SqlCatalog("stepwatch", uri=parsed.catalog_uri, warehouse=parsed.warehouse, **storage)
    keys: set[str] = set()
    runs_files = rows = ids = 0
    for name in ("runs", "ingested_files", "alerts", "bisect_steps"):
        table = catalog.load_table(("stepwatch", name))
        keys.add(table.metadata_location)
        keys |= {s.manifest_list for s in table.snapshots()}
        keys |= set(table.inspect.all_manifests()["path"].to_pylist())
        keys |= set(table.inspect.all_files()["file_path"].to_pylist())
        if name == "runs":
            runs_files = table.inspect.files().num_rows
            read = table.scan().to_arrow()
            rows, ids = read.num_rows, len(pc.unique(read["run_id"]))
    return {key.split("://", 1)[1].split("/", 1)[1] for key in keys}, runs_files, rows, ids


@pytest.mark.large
def test_rounds_of_writers_killed_then_maintenance_leave_a_clean_warehouse(
    servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = servers.store("rounds")
    bucket = "rounds"
    files = [write_results(tmp_path / "results" / f"round-{i:02d}.parquet", result_rows(3, f"round-{i:02d}"))
             for i in range(20)]  # fmt: skip
    rng = random.Random(7)
    as_of, seen_at = "", None
    for r in range(5):
        mine = files[4 * r : 4 * r + 4] + files[max(0, 4 * r - 2) : 4 * r]  # each file to two or three writers
        procs = []
        for w in range(4):
            picked = [str(f) for f in rng.sample(mine, 3)] + [str(files[4 * r + w])]
            procs.append(started(["ingest", *picked, "--db", address], machine(servers, tmp_path / f"runner-{w}")))
        keeper = None
        if r >= 3:  # maintenance beside writers: what it removes (older than 30 s) no writer still commits
            keeper = started(["maintain", "--db", address, "--orphans-older-than", str(30 / 3600)],
                             machine(servers, tmp_path / "keeper"))  # fmt: skip
        victim = rng.randrange(4)
        time.sleep(rng.uniform(1.5, 4.0))
        procs[victim].kill()
        for w, proc in enumerate(procs):
            out, err = proc.communicate(timeout=300)
            assert w == victim or proc.returncode == 0, err[-2000:]
        if keeper is not None:
            out, err = keeper.communicate(timeout=300)
            assert keeper.returncode == 0, err[-2000:]
        if r == 2:
            time.sleep(1.1)
            as_of = datetime.now(UTC).isoformat()
            seen_at = query(f"{address}&as_of={as_of}", "SELECT count(*), count(DISTINCT run_id) FROM runs",
                            machine(servers, tmp_path / "then"))  # fmt: skip
            time.sleep(1.1)
    # A killed writer again, so that the files it did not commit are in: each run once.
    done = stepwatch("ingest", str(tmp_path / "results"), "--db", address, env=machine(servers, tmp_path / "runner-0"))
    assert done.returncode == 0, done.stderr[-2000:]
    before = _bucket_files(servers.endpoint, bucket)
    read, _, _, _ = _read_by_snapshots(address, servers.env)
    orphans = set(before) - read
    assert orphans, "the rounds left no file unread: nothing to test"
    # Staging folders beside the copy: a dead writer's (this host's; an older stepwatch's, an hour old) go; a live
    # one's, and a dead one's of another host that shares this cache, stay.
    cache = tmp_path / "keeper"
    gone = subprocess.Popen(["true"])
    gone.wait()
    monkeypatch.setenv("STEPWATCH_CACHE", str(cache))
    folder = addresses.parse(address).cache_dir()
    here = store_files.host()
    dead, old, live, elsewhere = (folder / name for name in (
        f".spool-{here}-{gone.pid}-x", f".ingest-{gone.pid}", f".spool-{here}-{os.getpid()}-x",
        f".spool-another-host-{gone.pid}-x"))  # fmt: skip
    for one in (dead, old, live, elsewhere):
        one.mkdir(parents=True)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    keep_days = (datetime.now(UTC) - datetime.fromisoformat(as_of)).total_seconds() / 86400
    done = stepwatch("maintain", "--db", address, "--orphans-older-than", "0", "--keep-days", f"{keep_days:.8f}",
                     env=machine(servers, cache), timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    print(done.stderr)  # what it removed and reclaimed
    after = _bucket_files(servers.endpoint, bucket)
    read, runs_files, rows, ids = _read_by_snapshots(address, servers.env)
    assert set(after) == read  # no file that no live snapshot reads, and none that one reads is missing
    assert runs_files <= 2 and (rows, ids) == (60, 60)
    assert re.search(r"(\d+) snapshot\(s\) older than", done.stderr)[1] != "0"
    assert (dead.exists(), old.exists(), live.exists(), elsewhere.exists()) == (False, False, True, True)
    # As of a time within the retention: the same rows as before maintenance; and a new reader reads every row once.
    then = query(f"{address}&as_of={as_of}", "SELECT count(*), count(DISTINCT run_id) FROM runs",
                 machine(servers, tmp_path / "then-after"))  # fmt: skip
    assert then == seen_at
    assert query(address, "SELECT count(*), count(DISTINCT run_id) FROM runs", machine(servers, tmp_path / "new")) == [
        ["60", "60"]
    ]
    assert query(address, "SELECT count(*), count(DISTINCT uri) FROM ingested_files",
                 machine(servers, tmp_path / "new")) == [["20", "20"]]  # fmt: skip
    sizes = sum(before.values()), sum(after.values())
    print(json.dumps({"files": [len(before), len(after)], "bytes": list(sizes)}))


def test_maintain_refuses_what_it_cannot_keep(tmp_path: Path) -> None:
    """One line and a non-zero exit: a DuckDB file (it compacts itself), a store as of a snapshot (read-only), a
    negative retention, and a catalog that cannot be reached, its password masked."""
    file = stepwatch("maintain", "--db", str(tmp_path / "store.duckdb"))
    assert file.returncode == 2 and "a DuckDB file compacts itself" in file.stderr, file.stderr
    down = f"iceberg+postgresql://{services.USER}:hunter2@127.0.0.1:{services.free_port()}/x?warehouse=s3://none/x"
    env = {"STEPWATCH_CACHE": str(tmp_path / "cache")}
    then = stepwatch("maintain", "--db", f"{down}&as_of=1", env=env)
    assert then.returncode == 4 and "read-only" in then.stderr, then.stderr
    negative = stepwatch("maintain", "--db", down, "--keep-days", "-1", env=env)
    assert negative.returncode == 2, negative.stderr
    unreachable = stepwatch("maintain", "--db", down, env=env)
    last = last_line(unreachable)
    assert unreachable.returncode == 4 and "hunter2" not in unreachable.stderr and last.count("iceberg+") == 1, last
