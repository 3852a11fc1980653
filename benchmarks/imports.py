"""A history of 100,000 imported results against 100,000 of stepwatch's own rows, side by side in one run:
100 nights of Google Benchmark JSON (100 benchmarks of 5 repetitions, each of real and CPU time: the shape of a
real file of its Python package) imported by the whole command (`stepwatch ingest DIR --db DB`: read, converted
to result rows, ingested), and 100,000 synthetic rows of stepwatch's own (`collector.workflows.synthetic`, the
load tests' history) ingested the same way, each into a fresh store in its own process, in alternating rounds;
then the import again (nothing new).

    .venv/bin/python benchmarks/imports.py [--nights 100] [--benchmarks 100] [--repetitions 5] [--rounds 2]

Goal: the import lands at the speed stepwatch's own rows do (within 1.5x, conversion included).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stepwatch.collector.workflows import synthetic


def gbench_nights(folder: Path, nights: int, benchmarks: int, repetitions: int) -> int:
    folder.mkdir(parents=True)
    noise = random.Random(0)
    for n in range(nights):
        date = datetime(2026, 8, 1, 2, tzinfo=UTC) + timedelta(days=n)
        rows = [{"name": f"BM_case{b}/repeats:{repetitions}", "family_index": b, "per_family_instance_index": 0,
                 "run_name": f"BM_case{b}/repeats:{repetitions}", "run_type": "iteration", "repetitions": repetitions,
                 "repetition_index": r, "threads": 1, "iterations": 1000, "real_time": 1000.0 * noise.gauss(1, 0.02),
                 "cpu_time": 990.0, "time_unit": "ns"}
                for b in range(benchmarks) for r in range(repetitions)]  # fmt: skip
        context = {"date": date.isoformat(), "host_name": "bench", "num_cpus": 2, "library_version": "1.9.5"}
        (folder / f"night{n:03d}.json").write_text(json.dumps({"context": context, "benchmarks": rows}))
    return nights * benchmarks * repetitions * 2  # real_time and cpu_time: two series each


def timed(*args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "stepwatch", *args], capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stdout + done.stderr)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nights", type=int, default=100)
    parser.add_argument("--benchmarks", type=int, default=100)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = gbench_nights(root / "gbench", args.nights, args.benchmarks, args.repetitions)
        own = synthetic.generate(rows, root / "own")
        times: dict[str, list[float]] = {"imported": [], "own": [], "imported again": []}
        for round_ in range(args.rounds):
            for kind in ("imported", "own") if round_ % 2 == 0 else ("own", "imported"):
                store = root / f"{kind}-{round_}"
                shutil.rmtree(store, ignore_errors=True)
                store.mkdir()
                if kind == "imported":
                    convert = ["--imported-to", str(store / "imported")]
                    times[kind].append(timed("ingest", str(root / "gbench"), "--db", str(store / "s.duckdb"), *convert))
                    again = ("ingest", str(root / "gbench"), "--db", str(store / "s.duckdb"), *convert)
                    times["imported again"].append(timed(*again))
                else:
                    own_store = str(store / "s.duckdb")
                    times[kind].append(timed("ingest", str(root / "own"), "--db", own_store, "--synthetic"))
        print(f"{rows:,} imported results ({args.nights} Google Benchmark files) against at least as many own rows "
              f"({len(own)} parquet files), {args.rounds} rounds, median seconds:")  # fmt: skip
        medians = {kind: statistics.median(found) for kind, found in times.items()}
        for kind, seconds in medians.items():
            print(f"  {kind:15s} {seconds:7.2f} s  ({rows / seconds:,.0f} rows/s)")
        print(f"  imported / own: {medians['imported'] / medians['own']:.2f}x")


if __name__ == "__main__":
    main()
