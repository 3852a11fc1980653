"""``stepwatch detect`` and the alert lifecycle on a real store, night by night."""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from stepwatch.collector.store.database import StoreReader, delta_dir
from tests.conftest import result_rows, stepwatch, write_results
from tests.services import chat_webhook

START = datetime(2026, 9, 1, 2, 0, tzinfo=UTC)


def night(index: int, accelerator: str, level: float, version: str, rng: np.random.Generator) -> list[dict]:
    """One nightly suite run of one series: 3 trials at 2% noise around ``level``."""
    rows = result_rows(3, f"night-{index}-{accelerator}", tf_version=version, accelerator=accelerator)
    for row, noise in zip(rows, rng.standard_normal(3)):
        row["examples_per_sec"] = float(level * np.exp(0.02 * noise))
        row["started_at"] = START + timedelta(days=index, minutes=row["trial"])
        row["finished_at"] = row["started_at"] + timedelta(seconds=30)
    return rows


def add_nights(results: Path, nights: range, level_a, rng: np.random.Generator) -> None:
    for i in nights:
        version = "2.20.0" if i < 30 else "2.21.0"
        rows = night(i, "CPU A", level_a(i), version, rng) + night(i, "CPU B", 500.0, version, rng)
        write_results(results / f"night-{i:03d}.parquet", rows)


def detect(db: Path) -> tuple[int, list[dict], str]:
    done = stepwatch("detect", "--db", str(db), "--format", "json", "--issue-on", "confirmed", timeout=120)
    return done.returncode, json.loads(done.stdout), done.stderr


def ingest(results: Path, db: Path) -> None:
    done = stepwatch("ingest", str(results), "--db", str(db), timeout=120)
    assert done.returncode == 0, done.stderr


def test_detect_confirms_a_step_and_the_alert_follows_its_lifecycle(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    results, db = tmp_path / "results", tmp_path / "store.duckdb"

    def level(i: int) -> float:
        value = 1000.0 if i < 30 else 940.0  # a 6% drop when TensorFlow moves to 2.21.0
        return value * 0.75 if i == 12 else value  # and one bad night that recovers

    add_nights(results, range(40), level, rng)
    ingest(results, db)
    code, open_alerts, log = detect(db)
    assert code == 1, log
    assert "1 outlier night(s)" in log
    [alert] = open_alerts
    assert alert["accelerator"] == "CPU A" and alert["status"] == "confirmed"
    assert datetime.fromisoformat(alert["change_at"]) == START + timedelta(days=30)
    assert 0.91 < alert["ratio"] < 0.97
    assert json.loads(alert["versions_changed"]) == {"tf_version": ["2.20.0", "2.21.0"]}

    # Detecting again updates the same alert rather than raising a second one.
    code, again, log = detect(db)
    assert code == 1 and [a["id"] for a in again] == [alert["id"]] and "0 new" in log

    # Acknowledged: the change starts a new baseline, and the nightly job passes again.
    done = stepwatch("alerts", "ack", str(alert["id"]), "--note", "expected with TF 2.21", "--db", str(db))
    assert done.returncode == 0, done.stderr
    code, again, log = detect(db)
    assert (code, again) == (0, []), log
    listed = stepwatch("alerts", "list", "--status", "all", "--format", "json", "--db", str(db))
    assert [(a["status"], a["note"]) for a in json.loads(listed.stdout)] == [("acknowledged", "expected with TF 2.21")]

    # Two bad nights at the end are a suspected change: an alert, not yet a failure ...
    add_nights(results, range(40, 42), lambda i: 820.0, rng)
    ingest(results, db)
    code, again, log = detect(db)
    assert code == 0, log
    [suspected] = again
    assert suspected["status"] == "new" and suspected["ratio"] < 0.92

    # ... and when the nights after recover, it was a dip: the alert is withdrawn.
    add_nights(results, range(42, 48), lambda i: 940.0, rng)
    ingest(results, db)
    code, again, log = detect(db)
    assert (code, again) == (0, []), log
    listed = stepwatch("alerts", "list", "--status", "false positive", "--format", "json", "--db", str(db))
    [withdrawn] = json.loads(listed.stdout)
    assert withdrawn["id"] == suspected["id"] and "withdrawn" in withdrawn["note"]

    # The store is lost, as a cache eviction would lose it: rebuilt from the results and the saved alerts,
    # nothing is lost, and triage goes on where it was.
    saved = tmp_path / "history" / "alerts.parquet"
    done = stepwatch("alerts", "save", "--out", str(saved), "--db", str(db))
    assert done.returncode == 0 and "2 alert(s) saved" in done.stderr, done.stderr
    before = contents(db)
    shutil.rmtree(delta_dir(db), ignore_errors=True)
    db.unlink()
    done = stepwatch("rebuild", str(results), "--alerts", str(saved), "--db", str(db), timeout=120)
    assert done.returncode == 0 and "2 alert(s) restored" in done.stderr, done.stderr
    assert contents(db) == before
    code, again, log = detect(db)
    assert (code, again) == (0, []) and "0 new" in log, log
    refused = stepwatch("rebuild", str(results), "--alerts", str(saved), "--db", str(db))
    assert refused.returncode == 4 and "already exists" in refused.stderr


def contents(db: Path) -> dict[str, list[tuple]]:
    """Everything a store holds that is not when it was ingested: runs, samples, alerts, derived tables."""
    with StoreReader(db) as reader:
        con = reader.connection()
        tables = {"runs": " EXCLUDE (ingested_at)", "latest_runs": " EXCLUDE (ingested_at)", "samples": "",
                  "series": "", "alerts": "", "ingested_files": " EXCLUDE (ingested_at)"}  # fmt: skip
        return {
            table: sorted(con.execute(f"SELECT *{skip} FROM {table}").fetchall(), key=repr)
            for table, skip in tables.items()
        }


def test_alert_commands_reject_unknown_ids_and_a_missing_note(tmp_path: Path) -> None:
    results, db = tmp_path / "results", tmp_path / "store.duckdb"
    add_nights(results, range(3), lambda i: 1000.0, np.random.default_rng(0))
    ingest(results, db)
    done = stepwatch("alerts", "fixed", "999", "--db", str(db))
    assert done.returncode == 2
    assert done.stderr.strip() == "stepwatch: error: no alert with id 999 (see `stepwatch alerts list`)"
    done = stepwatch("alerts", "ack", "1", "--db", str(db))
    assert done.returncode == 2 and "--note" in done.stderr
    done = stepwatch("detect", "--db", str(tmp_path / "none.duckdb"))
    assert done.returncode == 2 and "run `stepwatch ingest` first" in done.stderr


def test_a_newly_confirmed_regression_is_posted_once_to_a_webhook_and_a_webhook_that_is_down_fails_nothing(
    tmp_path: Path,
) -> None:
    """A chat tool's incoming webhook on 127.0.0.1: the confirmed step of series A is posted once (Slack's JSON),
    series B (flat, an A/A) is not named, a second detect posts nothing new; a webhook that refuses the connection
    is one note and the verdict stands; an address that is not http(s) is one line and exit 2."""
    rng = np.random.default_rng(11)
    results, db = tmp_path / "results", tmp_path / "store.duckdb"
    add_nights(results, range(40), lambda i: 1000.0 if i < 30 else 940.0, rng)
    ingest(results, db)
    with chat_webhook() as (url, posted):
        done = stepwatch("detect", "--db", str(db), "--webhook", url, "--issue-on", "confirmed")
        assert done.returncode == 1 and "posted 1 confirmed regression(s) to the webhook" in done.stderr, done.stderr
        [message] = posted
        assert message["text"].startswith("stepwatch: 1 confirmed training-speed regression(s) in throughput")
        # The planted 6% drop, as the segments' medians measure it (-5.7% with these seeds).
        assert re.search(r"on CPU A: -[56]\.\d%", message["text"]) and "tf_version 2.20.0 -> 2.21.0" in message["text"]
        assert "CPU B" not in message["text"]
        again = stepwatch("detect", "--db", str(db), "--webhook", url, "--issue-on", "confirmed")
        assert again.returncode == 1 and len(posted) == 1  # still open, said once
    # A new step tonight, and the chat tool down: one note, the verdict stands.
    shutil.rmtree(results)
    add_nights(results, range(40, 45), lambda i: 800.0, rng)
    ingest(results, db)
    down = stepwatch("detect", "--db", str(db), "--webhook", url, "--issue-on", "confirmed")
    assert down.returncode == 1 and "note: the webhook did not take the regression:" in down.stderr, down.stderr
    wrong = stepwatch("detect", "--db", str(db), "--webhook", "file:///etc/passwd", "--issue-on", "confirmed")
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "not an http(s) address" in wrong.stderr
