"""Store benchmark: ingest rate, re-ingest of already-ingested files, one nightly file into a big store,
and the dashboard's main queries, on synthetic history (1,000,000 rows by default).

    .venv/bin/python benchmarks/store.py [--rows 1000000] [--repeat 20] [--workdir DIR]

Goal: every dashboard query under 100 ms at 1M rows.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from collector.store import database, queries
from collector.store.ingest import ingest
from collector.store.selection import Selection
from collector.store.synthetic import generate

GOAL_MS = 100.0


def timed(action, repeat: int) -> tuple[float, float, float]:  # noqa: ANN001
    """(first, median, max) milliseconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return times[0], statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--workdir", type=Path, help="keep files and store here (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="reuse the synthetic files already in --workdir")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="stepwatch-store-bench-"))
    files_dir, db = work / "files", work / "bench.duckdb"
    db.unlink(missing_ok=True)
    if args.reuse and files_dir.exists():
        print(f"reusing the synthetic files in {files_dir}")
    else:
        shutil.rmtree(files_dir, ignore_errors=True)
        start = time.perf_counter()
        files = generate(args.rows, files_dir, seed=7)
        print(f"generated {args.rows:,} synthetic rows in {len(files):,} files: {time.perf_counter() - start:.1f} s")

    report = ingest([str(files_dir)], db, synthetic=True)
    rate = report.rows_added / report.seconds
    print(
        f"ingest:      {report.rows_added:,} rows in {report.seconds:.1f} s = {rate:,.0f} rows/s "
        f"(store {db.stat().st_size / 2**20:,.0f} MiB)"
    )
    again = ingest([str(files_dir)], db, synthetic=True)
    assert again.rows_added == 0
    print(f"re-ingest:   {again.files_seen:,} unchanged files in {again.seconds:.2f} s")

    extra = work / "one-more-night"
    shutil.rmtree(extra, ignore_errors=True)
    generate(1000, extra, seed=8)
    one = sorted(extra.glob("*.parquet"))[0]
    nightly = ingest([str(one)], db, synthetic=True)
    copy_start = time.perf_counter()
    shutil.copyfile(db, work / "copy.duckdb")
    copy_s = time.perf_counter() - copy_start
    (work / "copy.duckdb").unlink()
    print(
        f"one nightly file ({nightly.rows_added} rows) into the {args.rows:,}-row store: {nightly.seconds:.2f} s "
        f"(of which copying the store for the atomic swap is about {copy_s:.2f} s)"
    )

    reader = database.StoreReader(db)
    con = reader.connection()
    key = con.execute("SELECT series_key FROM series ORDER BY trials DESC LIMIT 1").fetchall()[0][0]
    versions = [v for (v,) in con.execute("SELECT DISTINCT tf_version FROM runs ORDER BY 1").fetchall()]
    base, cand = (Selection.parse(f"tf_version={v}") for v in versions[-2:])
    checks = {
        "latest per series": lambda: queries.latest_per_series(con),
        "one series' history": lambda: queries.series_history(con, key),
        f"compare tf {versions[-2]} vs {versions[-1]}": lambda: queries.compare_sides(con, base, cand),
    }
    print(f"\ndashboard queries at {args.rows:,} rows ({args.repeat} calls each, goal < {GOAL_MS:.0f} ms):")
    print(f"  {'query':34} {'first ms':>9} {'median ms':>10} {'max ms':>8}  rows  goal")
    for name, action in checks.items():
        first, median, worst = timed(action, args.repeat)
        rows = len(action())
        verdict = "met" if median < GOAL_MS else "MISSED"
        print(f"  {name:34} {first:9.1f} {median:10.1f} {worst:8.1f}  {rows:4}  {verdict}")
    reader.close()
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
