"""The DuckDB store with real processes: idempotent ingest, quarantine, kill -9, two writers, a live reader."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.schema import SCHEMA, SCHEMA_VERSION, series_key, to_table
from stepwatch.collector.store import database, engine, files, tables
from stepwatch.collector.store.database import StoreError, StoreReader
from stepwatch.collector.store.ingest import ingest
from stepwatch.collector.workflows.synthetic import generate
from tests.conftest import REPO, result_rows, stepwatch, write_results

FIXTURES = REPO / "tests" / "data"  # real files written by earlier versions of stepwatch


def count(db: Path, table: str = "runs") -> int:
    with StoreReader(db) as reader:
        return reader.connection().execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]


def test_double_ingest_adds_nothing_and_a_resumed_file_adds_only_its_new_rows(tmp_path: Path) -> None:
    results, db = tmp_path / "results", tmp_path / "s.duckdb"
    write_results(results / "a.parquet", result_rows(3, "run-a"))
    first = stepwatch("ingest", str(results), "--db", str(db))
    assert first.returncode == 0, first.stderr
    assert (count(db), count(db, "samples")) == (3, 9)
    again = stepwatch("ingest", str(results), "--db", str(db))
    assert again.returncode == 0
    assert "0 ingested (0 new rows" in again.stderr and "1 already in the store" in again.stderr
    assert (count(db), count(db, "samples")) == (3, 9)
    # The same bytes under another name are known by their digest and not even read; the same file grown
    # by one trial (as --resume does) adds only that trial.
    (results / "copy.parquet").write_bytes((results / "a.parquet").read_bytes())
    write_results(results / "a.parquet", result_rows(4, "run-a"))
    report = ingest([str(results)], db)
    assert (report.files_unchanged, report.rows_read, report.rows_added) == (1, 4, 1)
    assert (count(db), count(db, "samples")) == (4, 12)


def test_a_folder_whose_parquet_sits_deeper_is_named_and_ingested_only_with_recursive(tmp_path: Path) -> None:
    top, db = tmp_path / "reference", tmp_path / "store.duckdb"
    write_results(top / "history" / "a.parquet", result_rows(2))
    write_results(top / "profiles" / "b.parquet", result_rows(1, start=10))
    write_results(top / "history" / "quarantine" / "c.parquet", result_rows(1, start=20))  # never ingested
    named = stepwatch("ingest", str(top), "--db", str(db))
    assert named.returncode == 2 and not db.exists()
    [line] = named.stderr.splitlines()
    assert "holds no parquet of its own, but 2 file(s) in 2 folder(s) below it (history 1, profiles 1)" in line
    assert f"stepwatch ingest {top}/history" in line and "--recursive" in line
    done = stepwatch("ingest", str(top), "--recursive", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert "2 file(s): 2 ingested (3 new rows" in done.stderr and count(db) == 3
    # Not named (the default folder): a note, the ingest goes on, exit 0.
    work = tmp_path / "work"
    write_results(work / "data" / "results" / "nightly" / "d.parquet", result_rows(1, start=30))
    default = stepwatch("ingest", "--db", str(db), cwd=work)
    assert default.returncode == 0 and "note: data/results holds no parquet of its own" in default.stderr


def test_bad_files_are_quarantined_with_a_reason_and_the_good_ones_land(tmp_path: Path) -> None:
    results, db = tmp_path / "results", tmp_path / "s.duckdb"
    write_results(results / "good-1.parquet", result_rows(2, "good-1"))
    write_results(results / "good-2.parquet", result_rows(2, "good-2"))
    truncated = write_results(results / "truncated.parquet", result_rows(2, "t"))
    truncated.write_bytes(truncated.read_bytes()[:300])
    pd.DataFrame({"city": ["Oslo"], "temperature": [3.5]}).to_parquet(results / "other-tool.parquet")
    pq.write_table(to_table(result_rows(1, "m")).drop_columns(["config_key"]), results / "no-key.parquet")
    wrong = to_table(result_rows(1, "w"))
    wrong = wrong.set_column(wrong.schema.get_field_index("examples_per_sec"), "examples_per_sec", pa.array(["fast"]))
    pq.write_table(wrong, results / "wrong-type.parquet")

    result = stepwatch("ingest", str(results), "--db", str(db))

    assert result.returncode == 4
    assert count(db) == 4
    reasons = {p.name.removesuffix(".reason"): p.read_text() for p in (results / "quarantine").glob("*.reason")}
    assert set(reasons) == {"truncated.parquet", "other-tool.parquet", "no-key.parquet", "wrong-type.parquet"}
    assert "not a readable parquet file" in reasons["truncated.parquet"]
    assert "no schema_version column" in reasons["other-tool.parquet"]
    assert "required column(s) missing: config_key" in reasons["no-key.parquet"]
    assert "column examples_per_sec has type string, expected double" in reasons["wrong-type.parquet"]
    assert sorted(p.name for p in results.glob("*.parquet")) == ["good-1.parquet", "good-2.parquet"]
    quarantine_lines = [line for line in result.stderr.splitlines() if line.startswith("quarantined ")]
    assert len(quarantine_lines) == 4


def test_hostile_values_are_quarantined_with_their_reason_and_the_rest_lands(tmp_path: Path) -> None:
    results, db = tmp_path / "results", tmp_path / "s.duckdb"
    rows = result_rows(6, "h")
    rows[1]["examples_per_sec"] = float("nan")
    rows[2]["step_time_p50_s"] = 0.0
    rows[3]["wall_s"] = -4.0
    rows[4]["examples_per_sec"] = float("inf")
    rows[5].update(status="timeout", examples_per_sec=None)  # a failure without a throughput is a real row
    write_results(results / "mixed.parquet", rows)

    done = stepwatch("ingest", str(results), "--db", str(db))

    assert done.returncode == 4, done.stderr
    assert "quarantined" in done.stderr and "4 row(s) with values that cannot be a measurement" in done.stderr
    stored = StoreReader(db).connection().execute("SELECT run_id FROM runs ORDER BY 1").fetchall()
    assert [r[0] for r in stored] == ["h-0", "h-5"]
    kept = pq.read_table(results / "quarantine" / "mixed.rows.parquet")
    assert kept.column("run_id").to_pylist() == ["h-1", "h-2", "h-3", "h-4"]
    reasons = (results / "quarantine" / "mixed.rows.parquet.reason").read_text().splitlines()
    assert reasons == [
        "run h-1: examples_per_sec is nan",
        "run h-2: step_time_p50_s is 0.0",
        "run h-3: wall_s is -4.0",
        "run h-4: examples_per_sec is inf",
    ]
    assert (results / "mixed.parquet").exists()  # the file itself stays where it was


def test_a_run_id_stored_with_other_content_is_a_conflict_and_the_store_is_unchanged(tmp_path: Path) -> None:
    results, db = tmp_path / "results", tmp_path / "s.duckdb"
    write_results(results / "a.parquet", result_rows(3, "c"))
    assert stepwatch("ingest", str(results), "--db", str(db)).returncode == 0
    before = StoreReader(db).connection().execute("SELECT * FROM runs ORDER BY run_id").fetchall()

    forged = result_rows(3, "c")
    forged[1]["examples_per_sec"] = 9999.0  # the same run, another number
    write_results(results / "b.parquet", forged + result_rows(1, "new"))
    for _ in range(2):  # reported on every ingest until it is resolved, never dropped quietly
        done = stepwatch("ingest", str(results), "--db", str(db))
        assert done.returncode == 4, done.stderr
        assert "conflict: run_id c-1 is already in the store with a different examples_per_sec" in done.stderr
        after = StoreReader(db).connection().execute("SELECT * FROM runs ORDER BY run_id").fetchall()
        assert after == before

    # Two new files that disagree about one run: both refused.
    fresh = tmp_path / "fresh"
    write_results(fresh / "x.parquet", result_rows(1, "d"))
    write_results(fresh / "y.parquet", result_rows(1, "d", label="other"))
    report = ingest([str(fresh)], tmp_path / "t.duckdb")
    assert sorted(uri.rsplit("/", 1)[-1] for uri, _ in report.refused) == ["x.parquet", "y.parquet"]
    assert all("with a different label" in why for _, why in report.refused)
    assert report.rows_added == 0


def test_older_schema_is_migrated_and_unknown_columns_go_to_extras(tmp_path: Path) -> None:
    rows = result_rows(2, "old")
    # A version 1 file: no series_key, no Keras backend columns, the device under its former name.
    table = (
        to_table(rows)
        .drop_columns(["series_key", "keras_backend", "compiler"])
        .rename_columns(
            [
                "backend" if name == "device" else name
                for name in SCHEMA.names
                if name not in ("series_key", "keras_backend", "compiler")
            ]
        )
    )
    table = table.set_column(0, "schema_version", pa.array([1, 1], pa.int64()))
    table = table.append_column("gpu_temperature_c", pa.array([61.0, 64.5]))
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "v1.parquet")
    newer = to_table(result_rows(1, "new")).set_column(0, "schema_version", pa.array([99], pa.int64()))
    pq.write_table(newer, tmp_path / "in" / "v99.parquet")
    db = tmp_path / "s.duckdb"

    report = ingest([str(tmp_path / "in")], db)

    assert report.rows_added == 2
    assert [q[0].rsplit("/", 1)[-1] for q in report.quarantined] == ["v99.parquet"]
    assert "newer stepwatch (schema 99" in report.quarantined[0][1]
    con = StoreReader(db).connection()
    got = con.execute("SELECT series_key, schema_version, extras FROM runs ORDER BY trial").fetchall()
    con.close()
    assert {g[0] for g in got} == {series_key(rows[0]["config_key"], "Test CPU")}
    assert [g[1] for g in got] == [SCHEMA_VERSION] * 2
    assert [json.loads(g[2])["gpu_temperature_c"] for g in got] == [61.0, 64.5]


def test_results_written_before_keras_backends_keep_their_series(tmp_path: Path) -> None:
    """A real results file written by stepwatch before Keras backends (schema 2: ``backend`` column, no
    keras_backend) ingests as TensorFlow runs, with the series keys it was written with."""
    source = FIXTURES / "results-schema-v2.parquet"
    written = pq.read_table(source)
    assert written.schema.metadata[b"stepwatch_schema_version"] == b"2" and "backend" in written.column_names
    (tmp_path / "in").mkdir()
    shutil.copy(source, tmp_path / "in")
    db = tmp_path / "s.duckdb"

    report = ingest([str(tmp_path / "in")], db)

    assert report.rows_added == written.num_rows and not report.quarantined
    with StoreReader(db) as reader:
        con = reader.connection()
        got = con.execute(
            "SELECT run_id, series_key, config_key, device, keras_backend, compiler, xla_effective FROM runs"
        ).fetchall()
        series = con.execute("SELECT series_key, model, keras_backend, device FROM series ORDER BY model").fetchall()
    before = dict(zip(written.column("run_id").to_pylist(), written.column("series_key").to_pylist()))
    assert {run_id: key for run_id, key, *_ in got} == before
    assert {(d, k, c, x) for *_, d, k, c, x in got} == {("cpu", "tensorflow", "none", False)}
    # Today's code computes the same config key for the same config: new runs join the old series.
    for run_id, _, config_key, *_ in got:
        row = written.filter(pa.compute.equal(written.column("run_id"), run_id)).to_pylist()[0]
        assert BenchmarkConfig(model=row["model"], preset=row["preset"]).key == config_key
    assert [(m, k, d) for _, m, k, d in series] == [("bilstm", "tensorflow", "cpu"), ("resnet50", "tensorflow", "cpu")]


def test_a_store_written_before_keras_backends_is_upgraded_by_the_next_ingest(tmp_path: Path) -> None:
    """A real store of layout 1 (written before Keras backends): readers say how to upgrade it, the next ingest
    (even with nothing new) upgrades it in place, and every run keeps its series."""
    db = tmp_path / "old.duckdb"
    db.write_bytes(gzip.decompress((FIXTURES / "store-v1.duckdb.gz").read_bytes()))
    old = duckdb.connect(str(db), read_only=True)
    before = old.execute("SELECT run_id, series_key, backend FROM runs ORDER BY run_id").fetchall()
    rss = old.execute("SELECT run_id, peak_memory_bytes FROM runs ORDER BY run_id").fetchall()
    old.close()
    with pytest.raises(StoreError, match="run `stepwatch ingest` once to upgrade it"):
        StoreReader(db).connection()
    (tmp_path / "empty").mkdir()

    ingest([str(tmp_path / "empty")], db)

    with StoreReader(db) as reader:
        con = reader.connection()
        after = con.execute("SELECT run_id, series_key, device FROM runs ORDER BY run_id").fetchall()
        columns = {
            r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name='runs'").fetchall()
        }
        backends = con.execute("SELECT DISTINCT keras_backend FROM latest_runs").fetchall()
        memory = con.execute("SELECT run_id, peak_rss_bytes, peak_memory_bytes FROM runs ORDER BY run_id").fetchall()
    assert after == before and len(after) == 4
    # Their peak memory was ru_maxrss on a CPU: it is kept as peak RSS, and is not the (anonymous) peak memory.
    assert [(run, value, None) for run, value in rss] == memory
    assert "backend" not in columns and backends == [("tensorflow",)]
    # The results file those runs came from, rewritten (other bytes, so it is read) and ingested again into the
    # upgraded store: the same runs, no conflict.
    table = pq.read_table(FIXTURES / "results-schema-v2.parquet")
    pq.write_table(table, tmp_path / "empty" / "again.parquet", compression="gzip")
    again = ingest([str(tmp_path / "empty")], db)
    assert (again.rows_read, again.rows_added, again.refused, again.quarantined) == (4, 0, [], [])


SYNTHETIC_ROWS = 10_000


@pytest.fixture(scope="module")
def synthetic_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough synthetic history that an ingest takes a second or more on this machine."""
    folder = tmp_path_factory.mktemp("synthetic")
    generate(SYNTHETIC_ROWS, folder, seed=1)
    return folder


def _ingest_process(sources: list[Path], db: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "stepwatch", "ingest", *map(str, sources), "--db", str(db), "--synthetic"]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_kill_9_during_an_ingest_leaves_the_store_as_before(tmp_path: Path, synthetic_files: Path) -> None:
    db = tmp_path / "s.duckdb"
    first = sorted(synthetic_files.glob("*.parquet"))[:20]
    folder = tmp_path / "first"
    folder.mkdir()
    for path in first:
        (folder / path.name).write_bytes(path.read_bytes())
    assert ingest([str(folder)], db, synthetic=True).rows_added > 0
    before = count(db), count(db, "samples"), count(db, "ingested_files")

    proc = _ingest_process([synthetic_files], db)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("s.duckdb.d/.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGSTOP)  # frozen where it is, whatever the machine's speed: inside the write
    assert list(tmp_path.glob("s.duckdb.d/.*.tmp")), "the write was not caught in the act"
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    assert (count(db), count(db, "samples"), count(db, "ingested_files")) == before
    report = ingest([str(synthetic_files)], db, synthetic=True)  # and the next ingest completes the work
    assert not list(tmp_path.glob(".s.duckdb.*")) and not list(tmp_path.glob("s.duckdb.d/.*"))
    assert count(db) == SYNTHETIC_ROWS and report.rows_added == SYNTHETIC_ROWS - before[0]
    assert count(db, "samples") == 10 * SYNTHETIC_ROWS


# Reads the store in a loop (saying when it has read once) until the file named by its second argument appears,
# then once more: whatever the machine's speed, it reads before, during and after the writes.
READER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from stepwatch.collector.store.database import StoreReader
    reader, seen, errors, stop = StoreReader(Path(sys.argv[1])), [], 0, Path(sys.argv[2])
    last = False
    while not last:
        last = stop.exists()
        try:
            con = reader.connection()
            if con is not None:
                con.execute("SELECT count(*) FROM latest_runs").fetchall()
                seen.append(con.execute("SELECT count(*) FROM runs").fetchall()[0][0])
                if len(seen) == 1:
                    print("first read", flush=True)
        except Exception as error:
            errors += 1
            print(type(error).__name__, error, file=sys.stderr)
        time.sleep(0.02)  # a dashboard's reads, not a core spinning beside the ingests
    print(len(seen), errors, sorted(set(seen)))
    """
)


def _said(proc: subprocess.Popen, words: str) -> list[str]:
    """The lines ``proc`` writes to stderr, up to the first that holds ``words`` (all it wrote, if none did)."""
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if words in line:
            break
    return lines


def test_two_ingests_at_once_and_a_reader_that_never_fails(tmp_path: Path, synthetic_files: Path) -> None:
    """Two ingests that overlap, started while a write holds the store (so both wait for it, whatever the
    machine's speed), and a reader that queries all along: both land every row once, the reader never fails."""
    db, stop = tmp_path / "s.duckdb", tmp_path / "stop"
    parquet = sorted(synthetic_files.glob("*.parquet"))
    halves = tmp_path / "a", tmp_path / "b"
    for half, chunk in zip(halves, (parquet[: len(parquet) * 2 // 3], parquet[len(parquet) // 3 :])):  # they overlap
        half.mkdir()
        for path in chunk:
            (half / path.name).write_bytes(path.read_bytes())
    first = ingest([str(halves[0] / parquet[0].name)], db, synthetic=True).rows_added
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(db), str(stop)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout.readline() == "first read\n"
    with files.writer_lock(db):  # another write holds the store: both ingests must wait for it
        a, b = _ingest_process([halves[0]], db), _ingest_process([halves[1]], db)
        waited = [_said(p, "waiting for another ingest") for p in (a, b)]
    assert all("waiting for another ingest" in lines[-1] for lines in waited), waited
    outs = [p.communicate(timeout=300) for p in (a, b)]
    assert [a.returncode, b.returncode] == [0, 0], outs
    stop.touch()
    out, err = reader.communicate(timeout=120)
    queries, errors, seen = out.strip().split(" ", 2)
    assert (int(errors), err) == (0, "")
    counts = json.loads(seen)
    assert int(queries) >= 2 and counts[0] == first and max(counts) == SYNTHETIC_ROWS  # it saw the store change
    con = StoreReader(db).connection()
    assert con.execute("SELECT count(*), count(DISTINCT run_id) FROM runs").fetchall()[0] == (SYNTHETIC_ROWS,) * 2
    con.close()


def test_a_synthetic_file_is_refused_by_a_real_store(tmp_path: Path, synthetic_files: Path) -> None:
    db = tmp_path / "real.duckdb"
    write_results(tmp_path / "real" / "a.parquet", result_rows(2))
    ingest([str(tmp_path / "real")], db)
    one = sorted(synthetic_files.glob("*.parquet"))[0]
    result = stepwatch("ingest", str(one), "--db", str(db))
    assert result.returncode == 4
    assert "holds synthetic test data (ingest it with --synthetic)" in result.stderr
    assert count(db) == 2 and one.exists()
    with pytest.raises(database.StoreError, match="holds real results"):
        ingest([str(one)], db, synthetic=True)


def test_a_full_disk_during_an_ingest_leaves_the_store_as_before(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")  # ok-skip: this machine and CI run as root
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], check=True)
    try:
        db = mount / "s.duckdb"
        write_results(tmp_path / "r1" / "a.parquet", result_rows(5, "a"))
        ingest([str(tmp_path / "r1")], db)
        big = [{**row, "log_tail": os.urandom(1000).hex()} for row in result_rows(4000, "b")]
        write_results(tmp_path / "r2" / "b.parquet", big)
        result = stepwatch("ingest", str(tmp_path / "r2"), "--db", str(db))
        assert result.returncode == 4
        assert result.stderr.strip().count("\n") == 0 and "stepwatch: error: cannot write" in result.stderr
        assert count(db) == 5
        assert not list(mount.glob(".s*")) and not list(mount.glob("s.duckdb.d/.*"))
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_export_round_trips_through_parquet_and_selects_like_the_queries(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    hostile = "x'); DROP TABLE runs; --"
    rows = result_rows(3, "a") + result_rows(2, "b", tf_version="2.20.0", label="baseline")
    rows += result_rows(1, "c", label=hostile)
    write_results(tmp_path / "r" / "x.parquet", rows)
    ingest([str(tmp_path / "r")], db)
    out = tmp_path / "old.parquet"
    result = stepwatch(
        "export", "--db", str(db), "--where", "tf_version=2.20.0", "--format", "parquet", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    exported = pq.read_table(out)
    assert exported.schema.equals(SCHEMA, check_metadata=False)
    assert sorted(exported.column("run_id").to_pylist()) == ["b-0", "b-1"]
    assert exported.column("window_step_times_s").to_pylist() == [[0.01, 0.011, 0.012]] * 2
    other = tmp_path / "other.duckdb"
    assert ingest([str(out)], other).rows_added == 2  # an export is a valid results file
    csv = tmp_path / "all.csv"
    assert stepwatch("export", "--db", str(db), "--format", "csv", "--out", str(csv)).returncode == 0
    assert len(pd.read_csv(csv)) == 6
    # A value is bound, never formatted into SQL: the hostile text selects the one run labelled with it.
    done = stepwatch("export", "--db", str(db), "--where", f"label={hostile}", "--out", str(csv))
    assert done.returncode == 0, done.stderr
    assert pd.read_csv(csv)["run_id"].tolist() == ["c-0"]


def test_a_store_of_a_newer_layout_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    results, db = tmp_path / "results", tmp_path / "s.duckdb"
    write_results(results / "a.parquet", result_rows(2, "a"))
    ingest([str(results)], db)
    con = duckdb.connect(str(db))
    con.execute("UPDATE store_meta SET value = ? WHERE key = 'store_version'", [str(database.STORE_VERSION + 1)])
    con.close()
    before = db.read_bytes()
    write_results(results / "b.parquet", result_rows(2, "b"))
    done = stepwatch("ingest", str(results), "--db", str(db))
    assert done.returncode == 4
    assert done.stderr.strip().splitlines()[-1].startswith("stepwatch: error: the store was written by a newer")
    assert db.read_bytes() == before


def _derived_equal_full_recompute(db: Path) -> None:
    """The derived tables as the store keeps them equal what a full recompute over ``runs`` gives: ``series`` and
    ``latest_runs`` as they are, ``summaries`` pooled by group and ``recent_values`` as their newest trials
    (each write appends its part of those two)."""
    kept_as = {
        "summaries": tables.pooled(
            "summaries", "group_key", carry=", ".join(f'any_value("{k}") AS "{k}"' for k in tables.SUMMARY_KEYS)
        ),
        "recent_values": "SELECT * EXCLUDE (recent) FROM (SELECT *, row_number() OVER (PARTITION BY series_key, "
        f"metric ORDER BY {tables.RECENCY}) AS recent FROM recent_values) WHERE recent <= {tables.RECENT_TRIALS}",
    }
    with StoreReader(db) as reader:
        con = reader.connection()
        for table, statement in zip(tables.DERIVED_TABLES, database.DERIVED, strict=True):
            full = statement.replace(f"CREATE OR REPLACE TABLE {table} AS ", "")
            kept = con.sql(kept_as.get(table, f"SELECT * FROM {table}")).to_df()
            recomputed = con.sql(full).to_df()
            kept = kept[list(recomputed.columns)]
            order = {
                "latest_runs": ["series_key", "run_id"],
                "summaries": ["group_key"],
                "recent_values": ["series_key", "metric", "run_id"],
            }.get(table, ["series_key"])
            pd.testing.assert_frame_equal(
                kept.sort_values(order).reset_index(drop=True),
                recomputed.sort_values(order).reset_index(drop=True),
                check_exact=False,
                rtol=1e-9,
                atol=1e-12,
                check_dtype=False,
            )


@pytest.mark.large
def test_deltas_merges_and_compaction_keep_every_table_as_a_full_rebuild_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes go into delta files; the derived tables they update series by series equal a full recompute,
    through a merge of deltas and a compaction into the base, and in the rare case where an older suite run
    continued later becomes the latest."""
    monkeypatch.setattr(engine, "MAX_DELTAS", 3)
    monkeypatch.setattr(engine, "COMPACT_SHARE", 5.0)
    results, db = tmp_path / "results", tmp_path / "s.duckdb"
    day = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)

    def night(name: str, suite: str, at: datetime, count: int, start: int = 0, accelerator: str = "CPU A") -> None:
        rows = result_rows(count, suite, start, accelerator=accelerator)
        for row in rows:
            row["started_at"] = at + timedelta(minutes=row["trial"])
            row["finished_at"] = row["started_at"] + timedelta(seconds=30)
        write_results(results / f"{name}.parquet", rows)
        ingest([str(results)], db)
        _derived_equal_full_recompute(db)

    night("a", "s1", day, 40)
    night("a-other", "s1-b", day, 40, accelerator="CPU B")
    assert files.deltas(db) and count(db) == 80  # the first write is the base, the second a delta
    night("b", "s2", day + timedelta(days=1), 3)
    night("c", "s1", day + timedelta(days=2), 2, start=40)  # the first suite run, continued after s2: latest again
    with StoreReader(db) as reader:
        latest = reader.connection().execute("SELECT DISTINCT suite_run_id FROM latest_runs").fetchall()
    assert sorted(latest) == [("s1",), ("s1-b",)]
    assert count(db, "latest_runs") == 40 + 2 + 40
    night("d", "s3", day + timedelta(days=3), 3)  # a fifth write: more than 3 deltas, the newest are merged
    assert any(d.first < d.last for d in files.deltas(db))
    night("e", "s4", day + timedelta(days=4), 3)
    monkeypatch.setattr(engine, "COMPACT_SHARE", 0.01)
    night("f", "s5", day + timedelta(days=5), 3)  # the deltas outgrow their share: one base again
    assert files.deltas(db) == [] and count(db) == 80 + 3 + 2 + 3 + 3 + 3
    with StoreReader(db) as reader:
        con = reader.connection()
        assert con.execute("SELECT count(*), count(DISTINCT run_id) FROM samples").fetchall()[0][1] == count(db)
        assert con.execute("SELECT sum(suite_runs) FROM series").fetchall() == [(5 + 1,)]  # s1-s5 on A, s1-b on B


def test_a_batch_of_more_than_one_row_group_lands_whole(tmp_path: Path) -> None:
    """A batch larger than DuckDB's row group (122,880 rows) goes through the bulk path whole (inside a
    transaction, DuckDB 2.0.0 read such a staged table back empty)."""
    results, db = tmp_path / "results", tmp_path / "s.duckdb"
    results.mkdir()
    one = to_table(result_rows(1, "big"))
    table = one.take(pa.array([0] * 130_000))
    ids = pa.array([f"big-{i}" for i in range(130_000)])
    pq.write_table(table.set_column(table.schema.get_field_index("run_id"), "run_id", ids), results / "big.parquet")
    report = ingest([str(results)], db)
    assert (report.rows_read, report.rows_added) == (130_000, 130_000)
    assert count(db) == 130_000 and count(db, "latest_runs") == 130_000


def test_a_store_written_before_bisect_steps_reads_it_empty_and_gains_it_on_the_next_write(tmp_path: Path) -> None:
    results, db = tmp_path / "results", tmp_path / "s.duckdb"
    write_results(results / "a.parquet", result_rows(3, "run-a"))
    ingest([str(results)], db)
    for path in [db, *database.delta_dir(db).glob("*.duckdb")]:  # as an earlier stepwatch wrote them
        con = duckdb.connect(str(path))
        con.execute("DROP TABLE bisect_steps")
        con.close()
    with StoreReader(db) as reader:
        assert reader.connection().execute("SELECT count(*) FROM bisect_steps").fetchall() == [(0,)]
    with database.update(db) as con:
        con.execute("INSERT INTO bisect_steps (bisect_id, step, outcome) VALUES ('b', 0, 'reproduces')")
    with StoreReader(db) as reader:
        con = reader.connection()
        assert con.execute("SELECT bisect_id, step, outcome FROM bisect_steps").fetchall() == [("b", 0, "reproduces")]
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(3,)]
    write_results(results / "b.parquet", result_rows(30, "run-b"))
    ingest([str(results)], db)  # compacts: the base takes the newest file's bisect_steps
    with StoreReader(db) as reader:
        con = reader.connection()
        assert con.execute("SELECT bisect_id FROM bisect_steps").fetchall() == [("b",)]
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(33,)]


def test_query_reads_the_base_and_its_deltas_and_only_reads(tmp_path: Path) -> None:
    """`stepwatch query` sees the store a reader sees (base and deltas), as a table, CSV or parquet; anything but
    a read is refused in one line with exit 2, and the store is unchanged."""
    results, db = tmp_path / "results", tmp_path / "s.duckdb"
    write_results(results / "a.parquet", result_rows(100, "s1"))
    ingest([str(results)], db)
    write_results(results / "b.parquet", result_rows(5, "s2"))
    ingest([str(results)], db)  # a delta: the base file alone holds 100 runs
    assert files.deltas(db)
    with StoreReader(db) as reader:
        expected = reader.connection().execute("SELECT count(*) FROM runs").fetchall()[0][0]
    assert expected == 105 and duckdb.connect(str(db), read_only=True).sql("SELECT count(*) FROM runs").fetchall() == [
        (100,)
    ]
    done = stepwatch("query", "select count(*) as n from runs", "--db", str(db), "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ['"n"', "105"]
    table = stepwatch("query", "select suite_run_id, count(*) from runs group by 1 order by 1", "--db", str(db))
    assert table.returncode == 0 and "s1" in table.stdout and "s2" in table.stdout
    out = tmp_path / "q.parquet"
    saved = stepwatch("query", "select * from summaries", "--db", str(db), "--format", "parquet", "--out", str(out))
    assert saved.returncode == 0 and pq.read_table(out).column("trials").to_pylist() == [100, 5]  # one part per write
    for sql, why in (
        ("delete from runs", "DELETE is refused"),
        ("select 1; select 2", "expected one SQL statement"),
        ("select * from read_csv('/etc/passwd')", "disabled by configuration"),
        ("select * from nope", "nope"),
    ):
        refused = stepwatch("query", sql, "--db", str(db))
        assert refused.returncode == 2, (sql, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1 and why in refused.stderr, refused.stderr
    with StoreReader(db) as reader:
        assert reader.connection().execute("SELECT count(*) FROM runs").fetchall() == [(105,)]


def older_and_hostile_files(folder: Path) -> None:
    """Files of other schemas, as they come: an older stepwatch's (schemas 1, 2 and 3), another writer's, broken
    and hostile ones, each kind more than once where a group could hide a difference."""
    folder.mkdir(parents=True)
    history = pa.concat_tables([pq.read_table(p) for p in sorted((REPO / "data/reference/cpu-tf-history").glob("*"))])
    for i in range(12):  # schema 3, one row each, as the reference history was written
        pq.write_table(history.slice(i, 1), folder / f"v3-{i:02d}.parquet")
    nan = history.slice(12, 2)
    nan = nan.set_column(nan.column_names.index("examples_per_sec"), "examples_per_sec", pa.array([float("nan"), 9.0]))
    pq.write_table(nan, folder / "v3-hostile.parquet")  # one hostile row beside a good one
    pq.write_table(history.slice(14, 0), folder / "v3-empty.parquet")  # no rows: its metadata's version
    clash = history.slice(0, 1)  # the run id of v3-00 with another throughput: a conflict
    clash = clash.set_column(clash.column_names.index("examples_per_sec"), "examples_per_sec", pa.array([1.0]))
    pq.write_table(clash, folder / "v3-clash.parquet")
    synthetic = history.slice(15, 1)
    synthetic = synthetic.set_column(
        synthetic.column_names.index("source"), "source", pa.array(["synthetic-test-data"])
    )
    pq.write_table(synthetic, folder / "v3-synthetic.parquet")  # test data, refused by a real store
    shutil.copy(FIXTURES / "results-schema-v2.parquet", folder / "v2.parquet")
    v1 = to_table(result_rows(2, "old")).drop_columns(["series_key", "keras_backend", "compiler"])
    v1 = v1.rename_columns(["backend" if n == "device" else n for n in v1.column_names])
    v1 = v1.set_column(0, "schema_version", pa.array([1, 1], pa.int64())).append_column("gpu_c", pa.array([61.0, 64.5]))
    pq.write_table(v1, folder / "v1.parquet")
    foreign = to_table(result_rows(4, "foreign")).drop_columns(["extras"])  # another tool's writer: no metadata
    for i, version in enumerate((4, 5)):  # two files of one parquet schema, of two schema versions
        part = foreign.slice(2 * i, 2).replace_schema_metadata(None)
        pq.write_table(part.set_column(0, "schema_version", pa.array([version] * 2, pa.int64())),
                       folder / f"foreign-{version}.parquet")  # fmt: skip
    newer = to_table(result_rows(1, "new")).set_column(0, "schema_version", pa.array([99], pa.int64()))
    pq.write_table(newer, folder / "v99.parquet")
    wrong = to_table(result_rows(1, "w"))
    wrong = wrong.set_column(wrong.schema.get_field_index("examples_per_sec"), "examples_per_sec", pa.array(["fast"]))
    pq.write_table(wrong, folder / "wrong-type.parquet")
    pq.write_table(to_table(result_rows(1, "m")).drop_columns(["config_key"]), folder / "no-key.parquet")
    pd.DataFrame({"city": ["Oslo"], "temperature": [3.5]}).to_parquet(folder / "other-tool.parquet")
    (folder / "truncated.parquet").write_bytes((folder / "v1.parquet").read_bytes()[:300])


def test_files_of_other_schemas_land_in_bulk_exactly_as_the_per_file_way_decides(tmp_path: Path) -> None:
    """The same files ingested the bulk way (grouped by schema, DuckDB's reader, ``conform`` once a group) and
    the per-file way: the same rows land, the same files and rows are quarantined with the same reasons, the
    same are refused."""
    outcomes = []
    for way in ("bulk", "per-file"):
        folder = tmp_path / way / "results"
        older_and_hostile_files(folder)
        db = tmp_path / way / "store.duckdb"
        report = ingest([str(folder)], db, bulk=way == "bulk")
        with StoreReader(db) as reader:
            rows = (
                reader.connection()
                .sql(
                    "SELECT * EXCLUDE (ingested_at, source_uri), "
                    "regexp_extract(source_uri, '[^/]+$') AS file FROM runs ORDER BY run_id"
                )
                .to_arrow_table()
            )
        kept = sorted((folder / "quarantine").iterdir())
        quarantine = {p.name: repr(pq.read_table(p).to_pylist()) if p.name.endswith(".rows.parquet") else p.read_bytes()
                      for p in kept}  # fmt: skip
        name = lambda uri: uri.rsplit("/", 1)[-1]  # noqa: E731
        outcomes.append(
            {
                "counts": (report.files_ingested, report.rows_read, report.rows_added),
                "one by one": report.files_one_by_one,
                "quarantined": sorted((name(uri), why) for uri, why, _ in report.quarantined),
                "refused": sorted((name(uri), why.replace(str(tmp_path / way), "")) for uri, why in report.refused),
                "rows": rows.to_pylist(),
                "quarantine": quarantine,
            }
        )
    bulk, per_file = outcomes
    for key in bulk.keys() - {"one by one"}:
        assert bulk[key] == per_file[key], key
    # The bulk way read the older files in groups: one by one only the files without rows or with a fault, and
    # the two files of one schema but two schema versions (their group is not one version)
    assert per_file["one by one"] == 25 and bulk["one by one"] == 9
    # and what they decided: the broken files and the hostile row quarantined; the two files that hold one run
    # with two throughputs refused (each names the other), as is test data in a real store; the rest lands
    assert bulk["counts"][2] == len(bulk["rows"]) and len(bulk["rows"]) >= 20
    quarantined = {"v3-hostile.parquet", "v99.parquet", "wrong-type.parquet", "no-key.parquet", "other-tool.parquet",
                   "truncated.parquet"}  # fmt: skip
    assert {q[0] for q in bulk["quarantined"]} == quarantined
    assert {r[0] for r in bulk["refused"]} == {"v3-00.parquet", "v3-clash.parquet", "v3-synthetic.parquet"}
