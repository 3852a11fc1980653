"""Results on object storage, against an S3-compatible server (moto) started on 127.0.0.1 by the tests."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pyarrow.parquet as pq
import pytest

from stepwatch.collector.store import database, history, objectstore
from stepwatch.collector.store.database import StoreReader
from stepwatch.collector.store.ingest import ingest
from tests import services
from tests.conftest import REPO, result_rows, stepwatch, write_results

CREDENTIALS = {**services.CREDENTIALS, "STEPWATCH_STORAGE_BACKOFF_S": "0.1"}


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    with services.s3() as endpoint:
        yield endpoint


@pytest.fixture
def s3(s3_server: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> dict[str, str]:
    """Environment pointing at the moto server, with an empty bucket of this test's own."""
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": s3_server}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    bucket = request.node.name.replace("_", "-")[:60].lower()
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=bucket)
    return {**env, "BUCKET": bucket}


def objects(env: dict[str, str], prefix: str) -> list[str]:
    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"])
    listed = client.list_objects_v2(Bucket=env["BUCKET"], Prefix=prefix)
    return sorted(o["Key"] for o in listed.get("Contents", []) if not o["Key"].endswith("/"))  # not folder markers


def test_run_uploads_to_s3_and_ingest_reads_it_back(tmp_path: Path, s3: dict[str, str]) -> None:
    """A real (tiny) benchmark trial goes to S3, is ingested from S3, and a bad object there is quarantined."""
    uri = f"s3://{s3['BUCKET']}/nightly/cpu"
    run = stepwatch(
        *("run", "--suite", "smoke", "--models", "bilstm", "--xla", "off", "--precision", "fp32", "--trials", "1"),
        *("--steps", "20", "--out", uri, "--profile"),
        cwd=tmp_path,
        env=s3,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    local = sorted((tmp_path / "data" / "results").glob("*.parquet"))
    assert len(local) == 1
    [row] = pq.read_table(local[0]).to_pylist()
    profile = f"nightly/cpu/profiles/{row['run_id']}/"  # the trial's raw profile, beside its results
    assert row["profile_uri"] == f"{uri}/profiles/{row['run_id']}"
    uploaded = objects(s3, "nightly/cpu/")
    profiled = [key for key in uploaded if key.startswith(profile)]
    assert sorted(set(uploaded) - set(profiled)) == [f"nightly/cpu/{local[0].name}"]
    assert [key for key in profiled if key.endswith(".xplane.pb")]
    assert f"uploaded: {uri}/{local[0].name}" in run.stdout

    boto3.client("s3", endpoint_url=s3["AWS_ENDPOINT_URL"]).put_object(
        Bucket=s3["BUCKET"], Key="nightly/cpu/broken.parquet", Body=b"PAR1 not really"
    )
    db = tmp_path / "s.duckdb"
    ingest = stepwatch("ingest", uri, "--db", str(db), cwd=tmp_path, env=s3)
    assert ingest.returncode == 4
    assert f"quarantined {uri}/broken.parquet: not a readable parquet file" in ingest.stderr
    assert objects(s3, "nightly/cpu/quarantine/") == [
        "nightly/cpu/quarantine/broken.parquet",
        "nightly/cpu/quarantine/broken.parquet.reason",
    ]
    con = StoreReader(db).connection()
    got = con.execute("SELECT model, status, source_uri FROM runs").fetchall()
    con.close()
    assert got == [("bilstm", "ok", f"{uri}/{local[0].name}")]
    again = stepwatch("ingest", uri, "--db", str(db), cwd=tmp_path, env=s3)
    assert again.returncode == 0 and "1 already in the store" in again.stderr


def test_ingest_from_s3_many_files_and_a_single_object(tmp_path: Path, s3: dict[str, str]) -> None:
    for i in range(3):
        local = write_results(tmp_path / f"r{i}.parquet", result_rows(2, f"run-{i}"))
        objectstore.upload(local, f"s3://{s3['BUCKET']}/results")
    db = tmp_path / "s.duckdb"
    one = ingest([f"s3://{s3['BUCKET']}/results/r0.parquet"], db)
    assert (one.files_seen, one.rows_added) == (1, 2)
    report = ingest([f"s3://{s3['BUCKET']}/results"], db)
    assert (report.files_seen, report.files_unchanged, report.rows_added) == (3, 1, 4)

    # The alerts saved next to the results (not among them), and a store rebuilt from both.
    with database.update(db) as con:
        con.execute("INSERT INTO alerts (series_key, metric, status, note) VALUES ('k', 'examples_per_sec', ?, ?)",
                    ["acknowledged", "expected"])  # fmt: skip
    saved = f"s3://{s3['BUCKET']}/results/state/alerts.parquet"
    assert history.save_alerts(db, saved) == 1
    assert objects(s3, "results/state/") == ["results/state/alerts.parquet"]
    assert ingest([f"s3://{s3['BUCKET']}/results"], db).files_seen == 3
    rebuilt, restored = history.rebuild([f"s3://{s3['BUCKET']}/results"], tmp_path / "again.duckdb", saved)
    assert (rebuilt.rows_added, restored) == (6, 1)
    con = StoreReader(tmp_path / "again.duckdb").connection()
    assert con.execute("SELECT id, status, note FROM alerts").fetchall() == [(1, "acknowledged", "expected")]
    con.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_storage_is_retried_then_one_error_and_local_results_are_kept(tmp_path: Path) -> None:
    env = {
        **CREDENTIALS,
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}",
        "STEPWATCH_STORAGE_ATTEMPTS": "3",
        "STEPWATCH_STORAGE_BACKOFF_S": "0.2",
    }
    uri = "s3://nowhere/results"
    start = time.monotonic()
    run = stepwatch(  # the framework-free script: what is tested is the upload, not what was trained
        *("run", "--script", str(REPO / "tests" / "data" / "scripts" / "bad.py"), "--steps", "20", "--warmup", "20"),
        *("--trials", "1", "--window", "10", "--out", uri, "--", "good"),
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert run.returncode == 4
    error = run.stderr.strip().splitlines()[-1]
    local = sorted((tmp_path / "data" / "results").glob("*.parquet"))
    assert len(local) == 1
    kept = local[0].relative_to(tmp_path)
    assert error.startswith(f"stepwatch: error: uploading {kept} to {uri} failed after 3 attempt(s)")
    assert f"the results are kept in {kept}; rerun the same command with --resume" in error

    ingest = stepwatch("ingest", uri, "--db", str(tmp_path / "s.duckdb"), cwd=tmp_path, env=env)
    assert ingest.returncode == 4
    assert len(ingest.stderr.strip().splitlines()) == 1
    assert ingest.stderr.startswith(f"stepwatch: error: looking up {uri} failed after 3 attempt(s)")
    assert time.monotonic() - start < 240


def test_the_nightly_publish_with_a_bucket_ingests_it_and_archives_only_the_alerts_and_page(
    tmp_path: Path, s3: dict[str, str]
) -> None:
    """Jobs that wrote to a bucket: their rows are the night's (counted, not an empty night, even when a collect job
    failed), and the branch keeps no copy of them (the bucket is the history)."""
    for i in range(2):
        local = write_results(tmp_path / f"r{i}.parquet", result_rows(2, f"night-{i}"))
        objectstore.upload(local, f"s3://{s3['BUCKET']}/results")
    (tmp_path / "history").mkdir()
    subprocess.run(["git", "init", "-q", "-b", "stepwatch-history"], cwd=tmp_path / "history", check=True)
    done = stepwatch("publish", f"s3://{s3['BUCKET']}/results", "--history", "history", "--db", "s.duckdb",
                     "--collect-result", "failure", cwd=tmp_path, env=s3)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 new row(s) from the bucket" in done.stdout and "no job wrote a row" not in done.stdout
    assert not list((tmp_path / "history").rglob("r*.parquet"))
    assert (tmp_path / "history" / "state" / "alerts.parquet").exists()
