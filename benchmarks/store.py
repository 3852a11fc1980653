"""Store benchmark on synthetic history: bulk ingest against DuckDB's own reader of the same files, one
nightly file into a store of 1M and of 10M rows (a delta, against the former copy-and-swap of the whole
file, run side by side), a compaction, and the dashboard's main queries at both sizes.

    .venv/bin/python benchmarks/store.py [--rows 1000000] [--scale 10] [--nights 5] [--repeat 20] [--workdir DIR]

Goals: bulk ingest of 1M rows under 5 s; one nightly file under 1 s at 1M and 10M rows, not growing with
the store; every dashboard query under 100 ms median at 10M rows. The 10M-row store is the 1M-row one with
its history repeated 10 times further back (run ids made unique), compacted and sorted as a store is.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

from stepwatch.collector.analysis import comparison
from stepwatch.collector.store import database, queries
from stepwatch.collector.store.ingest import ingest
from stepwatch.collector.store.selection import Selection
from stepwatch.collector.workflows.synthetic import generate

QUERY_GOAL_MS, NIGHTLY_GOAL_S, BULK_GOAL_S = 100.0, 1.0, 5.0


def timed(action, repeat: int) -> tuple[float, float, float]:  # noqa: ANN001
    """(first, median, max) milliseconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return times[0], statistics.median(times), max(times)


def duckdb_floor(files: list[Path]) -> float:
    """Seconds for DuckDB alone to load the files into a table: the floor under any bulk ingest of them."""
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    start = time.perf_counter()
    con.execute("CREATE TABLE t AS SELECT * FROM read_parquet(?)", [[str(f) for f in files]])
    seconds = time.perf_counter() - start
    con.close()
    return seconds


def copy_and_swap(db: Path, night: Path) -> float:
    """The former write, reproduced: copy the whole base, insert the night's rows into the copy, recompute the
    derived tables, checkpoint, fsync, rename. Returns seconds; the store itself is left as it was."""
    start = time.perf_counter()
    tmp = db.with_name(f".{db.name}.swap.tmp")
    shutil.copyfile(db, tmp)
    con = duckdb.connect(str(tmp))
    con.execute("BEGIN")
    con.execute(
        "INSERT INTO runs BY NAME SELECT * EXCLUDE (window_step_times_s, window_losses), ? AS source_uri, "
        "now() AS ingested_at FROM read_parquet(?) r WHERE NOT EXISTS (SELECT 1 FROM runs s WHERE s.run_id = r.run_id)",
        [str(night), str(night)],
    )
    for statement in database.DERIVED[:2]:  # the derived tables it kept (series, latest_runs)
        con.execute(statement)
    con.execute("COMMIT")
    con.execute("CHECKPOINT")
    con.close()
    fd = os.open(tmp, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    os.replace(tmp, tmp.with_name(".swapped.tmp"))  # the rename (over a scratch name: the store stays as it was)
    seconds = time.perf_counter() - start
    tmp.with_name(".swapped.tmp").unlink()
    return seconds


def nightly(db: Path, work: Path, nights: int, end, label: str) -> None:  # noqa: ANN001
    """Ingest ``nights`` new nightly files one at a time; print each, and copy-and-swap side by side."""
    times, swaps = [], []
    for night in range(nights):
        folder = work / f"night-{label}-{night}"
        shutil.rmtree(folder, ignore_errors=True)
        generate(120, folder, seed=1000 * len(label) + night, end=end + timedelta(days=night + 1))
        one = sorted(folder.glob("*.parquet"))[0]
        swaps.append(copy_and_swap(db, one))
        report = ingest([str(one)], db, synthetic=True)
        times.append(report.seconds)
        files = sorted(p.name for p in database.delta_dir(db).glob("*.duckdb"))
        print(
            f"  night {night + 1}: {report.rows_added} rows in {report.seconds:.2f} s "
            f"(copy-and-swap of the same file: {swaps[-1]:.2f} s); delta files now: {', '.join(files) or 'none'}"
        )
    verdict = "met" if max(times) < NIGHTLY_GOAL_S else "MISSED"
    print(
        f"one nightly file into the {label} store: median {statistics.median(times):.2f} s, max {max(times):.2f} s "
        f"(goal < {NIGHTLY_GOAL_S:.0f} s: {verdict}); copy-and-swap median {statistics.median(swaps):.2f} s, "
        f"{statistics.median(swaps) / statistics.median(times):.1f}x the time"
    )


def compaction(db: Path, label: str) -> None:
    with database.writer_lock(db):
        start = time.perf_counter()
        database.compact(db, database.snapshot(db))
    print(f"compaction of the {label} store into one base: {time.perf_counter() - start:.1f} s "
          f"(base {db.stat().st_size / 2**20:,.0f} MiB)")  # fmt: skip


def query_checks(db: Path, repeat: int, label: str) -> None:
    reader = database.StoreReader(db)
    con = reader.connection()
    rows = con.execute("SELECT count(*) FROM runs").fetchall()[0][0]
    key = con.execute("SELECT series_key FROM series ORDER BY trials DESC LIMIT 1").fetchall()[0][0]
    versions = [v for (v,) in con.execute("SELECT DISTINCT tf_version FROM runs ORDER BY 1").fetchall()]
    base, cand = (Selection.parse(f"tf_version={v}") for v in versions[-2:])
    ranged = [Selection(s.equals, since=datetime(1970, 1, 1, tzinfo=UTC)) for s in (base, cand)]  # every trial
    checks = {
        "latest per series": lambda: queries.latest_per_series(con),
        "one series' history": lambda: queries.series_history(con, key),
        f"compare tf {versions[-2]} vs {versions[-1]}": lambda: queries.compare_sides(con, base, cand),
        "  the same from every trial": lambda: queries.compare_sides(con, *ranged),
        "  the whole comparison (verdicts)": lambda: comparison.build(con, base, cand, ["examples_per_sec"], []).rows,
    }
    files = len(reader._snap.chain) + 1 if reader._snap else 0
    print(f"\ndashboard queries on the {label} store ({rows:,} rows, {files} file(s); {repeat} calls each, "
          f"goal < {QUERY_GOAL_MS:.0f} ms median):")  # fmt: skip
    print(f"  {'query':34} {'first ms':>9} {'median ms':>10} {'max ms':>8}  rows  goal")
    assert queries.summarized(base, cand) and not queries.summarized(*ranged)
    for name, action in checks.items():
        first, median, worst = timed(action, repeat)
        verdict = "met" if median < QUERY_GOAL_MS else "MISSED"
        print(f"  {name:34} {first:9.1f} {median:10.1f} {worst:8.1f}  {len(action()):4}  {verdict}")
    reader.close()


def scale_up(db: Path, big: Path, copies: int) -> None:
    """A store with ``copies`` times the history of ``db``: its runs repeated further back in time."""
    big.unlink(missing_ok=True)
    shutil.rmtree(database.delta_dir(big), ignore_errors=True)
    con = duckdb.connect(str(big))
    con.execute("SET preserve_insertion_order = false")
    con.execute("ATTACH ? AS src (READ_ONLY)", [str(db)])
    lo, hi = con.execute("SELECT min(started_at), max(started_at) FROM src.runs").fetchall()[0]
    span = (hi - lo).days + 1
    con.execute("CREATE TABLE store_meta AS SELECT * FROM src.store_meta")
    con.execute("CREATE TABLE ingested_files AS SELECT * FROM src.ingested_files")
    con.execute("CREATE TABLE alerts AS SELECT * FROM src.alerts")
    shift = "INTERVAL (k * ?) DAY"
    con.execute(
        "CREATE TABLE runs AS SELECT r.* REPLACE (CASE WHEN k = 0 THEN run_id ELSE run_id || '-' || k END AS run_id, "
        "CASE WHEN k = 0 THEN suite_run_id ELSE suite_run_id || '-' || k END AS suite_run_id, "
        f"started_at - {shift} AS started_at, finished_at - {shift} AS finished_at) "
        "FROM src.runs r, range(?) t(k) ORDER BY series_key, started_at, trial",
        [span, span, copies],
    )
    con.execute(
        "CREATE TABLE samples AS SELECT s.* REPLACE (CASE WHEN k = 0 THEN run_id ELSE run_id || '-' || k END "
        "AS run_id) FROM src.samples s, range(?) t(k)",
        [copies],
    )
    for statement in (*database.DERIVED, database.run_id_index()):
        con.execute(statement)
    con.execute("DELETE FROM store_meta WHERE key = 'merged_through'")
    con.execute("CHECKPOINT")
    con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--scale", type=int, default=10, help="the larger store has this many times the rows")
    parser.add_argument("--nights", type=int, default=5, help="nightly files ingested one by one into each store")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--workdir", type=Path, help="keep files and stores here (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="reuse the synthetic files already in --workdir")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="stepwatch-store-bench-"))
    files_dir, db, big = work / "files", work / "bench.duckdb", work / "bench-large.duckdb"
    for store in (db, big):
        store.unlink(missing_ok=True)
        shutil.rmtree(database.delta_dir(store), ignore_errors=True)
    if args.reuse and files_dir.exists():
        print(f"reusing the synthetic files in {files_dir}")
    else:
        shutil.rmtree(files_dir, ignore_errors=True)
        start = time.perf_counter()
        generate(args.rows, files_dir, seed=7)
        print(f"generated {args.rows:,} synthetic rows: {time.perf_counter() - start:.1f} s")
    files = sorted(files_dir.glob("*.parquet"))
    floor = duckdb_floor(files)
    report = ingest([str(files_dir)], db, synthetic=True)
    verdict = "met" if report.seconds < BULK_GOAL_S else "MISSED"
    print(
        f"bulk ingest: {report.rows_added:,} rows from {len(files):,} files in {report.seconds:.1f} s = "
        f"{report.rows_added / report.seconds:,.0f} rows/s (goal < {BULK_GOAL_S:.0f} s: {verdict}); DuckDB's own "
        f"read_parquet of the same files into a table: {floor:.1f} s ({report.seconds / floor:.2f}x of it); "
        f"store {db.stat().st_size / 2**20:,.0f} MiB"
    )
    again = ingest([str(files_dir)], db, synthetic=True)
    assert again.rows_added == 0
    print(f"re-ingest: {again.files_seen:,} unchanged files in {again.seconds:.2f} s")
    with database.StoreReader(db) as reader:
        end = reader.connection().execute("SELECT max(started_at) FROM runs").fetchall()[0][0]

    label = f"{report.rows_added / 1e6:.0f}M-row" if report.rows_added >= 1_000_000 else f"{report.rows_added:,}-row"
    nightly(db, work, args.nights, end, label)
    query_checks(db, args.repeat, label + " (with deltas)")
    compaction(db, label)

    start = time.perf_counter()
    scale_up(db, big, args.scale)
    with database.StoreReader(big) as reader:
        rows = reader.connection().execute("SELECT count(*) FROM runs").fetchall()[0][0]
    big_label = f"{rows / 1e6:.0f}M-row" if rows >= 1_000_000 else f"{rows:,}-row"
    print(
        f"\nbuilt the {big_label} store ({big.stat().st_size / 2**30:.1f} GiB) in {time.perf_counter() - start:.0f} s"
    )
    query_checks(big, args.repeat, big_label)
    nightly(big, work, args.nights, end + timedelta(days=args.nights), big_label)
    query_checks(big, args.repeat, big_label + " (with deltas)")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
