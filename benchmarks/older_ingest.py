"""Ingest of files of an older schema against the same rows in today's schema, side by side in one run: 1,000
one-row files cut from the reference history (schema 3, as the collector wrote them then), and the same rows
brought to today's schema and written as the collector writes them now, each ingested by the whole command
(`stepwatch ingest DIR --db DB`, a fresh process and store each) in alternating rounds.

    .venv/bin/python benchmarks/older_ingest.py [--files 1000] [--rounds 3]

Goal: the older files within 2x of today's (every other file took the per-file way: about 7x).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stepwatch.collector.schema import conform, write_parquet

REPO = Path(__file__).resolve().parent.parent
HISTORY = REPO / "data" / "reference" / "cpu-tf-history"


def older_rows(count: int) -> pa.Table:
    """``count`` rows of the reference history as written (schema 3), run ids made unique."""
    tables = [pq.read_table(path) for path in sorted(HISTORY.glob("*.parquet"))]
    history = pa.concat_tables(tables)
    rows = pa.concat_tables([history] * (count // history.num_rows + 1)).slice(0, count)
    suffix = pa.array([f"-{i}" for i in range(count)])
    run_ids = pc.binary_join_element_wise(rows.column("run_id"), suffix, "")
    return rows.set_column(rows.column_names.index("run_id"), "run_id", run_ids)


def cut(table: pa.Table, folder: Path, write) -> None:  # noqa: ANN001
    folder.mkdir(parents=True)
    for i in range(table.num_rows):
        write(table.slice(i, 1), folder / f"row-{i:05d}.parquet")


def ingest_seconds(folder: Path, work: Path) -> float:
    db = work / f"store-{time.monotonic_ns()}.duckdb"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "stepwatch", "ingest", str(folder), "--db", str(db)],
                          capture_output=True, text=True)  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"ingest of {folder} failed: {done.stderr.strip()}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = older_rows(args.files)
        older, today = work / "schema-3", work / "today"
        cut(rows, older, lambda t, path: pq.write_table(t, path, compression="zstd"))
        cut(conform(rows), today, write_parquet)
        times: dict[str, list[float]] = {"schema 3": [], "today's schema": []}
        for _ in range(args.rounds):
            times["schema 3"].append(ingest_seconds(older, work))
            times["today's schema"].append(ingest_seconds(today, work))
    print(f"{args.files} one-row files, whole `stepwatch ingest` commands, {args.rounds} alternating rounds:")
    for name, values in times.items():
        print(f"  {name:15s} median {statistics.median(values):6.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    ratio = statistics.median(times["schema 3"]) / statistics.median(times["today's schema"])
    print(f"  older / today: {ratio:.2f}x (goal: within 2x)")


if __name__ == "__main__":
    main()
