"""A shared store against the DuckDB file, on the same rows: bulk ingest (``stepwatch ingest``, the whole command as a
user runs it) and the dashboard's pages (the server's time, as ``benchmarks/dashboard.py`` measures it).

The shared store is the real thing on this machine: Iceberg tables through pyiceberg, their catalog in a PostgreSQL
started here (initdb, pg_ctl, 127.0.0.1), their files on moto's S3 (127.0.0.1). Each ingest is into a new store (a
new namespace, a new local copy), so both sides do the same work. Pages read the shared store through its local copy;
``STEPWATCH_SHARED_POLL_S=0`` makes every page ask the catalog whether it moved (the default asks every 5 s): the
worst case.

    .venv/bin/python benchmarks/shared_store.py [--rows 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import services  # noqa: E402

REFERENCE = REPO / "data" / "reference" / "cpu-tf-history"


def ingest_s(source: Path, db: str, env: dict[str, str], synthetic: bool) -> float:
    start = time.perf_counter()
    args = ["ingest", str(source), "--db", db, *(["--synthetic"] if synthetic else [])]
    done = subprocess.run([sys.executable, "-m", "stepwatch", *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"stepwatch {' '.join(args)}: {done.stderr[-1500:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="synthetic rows of the larger set")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shared-bench-"))
    synth = work / "synthetic"
    subprocess.run([sys.executable, "-m", "stepwatch", "synthesize", "--rows", str(args.rows), "--out", str(synth),
                    "--db", str(work / "throwaway.duckdb")], check=True, capture_output=True)  # fmt: skip
    sets = {"reference history": (REFERENCE, False), f"synthetic {args.rows:,} rows": (synth, True)}
    with services.postgres() as pg, services.s3() as endpoint:
        pg.create_database("bench")
        services.bucket(endpoint, "bench")
        base = f"iceberg+{pg.url('bench')}?warehouse=s3://bench/stepwatch"
        env = {**os.environ, **services.environment(endpoint), "STEPWATCH_SHARED_POLL_S": "0"}
        print(f"bulk ingest, seconds (median of {args.repeat}; the reference into a new store, the synthetic rows "
              "into a store holding one night)")  # fmt: skip
        print(f"{'rows':<26}{'DuckDB file':>14}{'shared store':>14}{'shared/file':>13}")
        stores: dict[str, str] = {}
        for name, (source, synthetic) in sets.items():
            local, shared, first = [], [], []
            for i in range(args.repeat):
                key = f"{len(stores)}x{i}"
                seed = work / f"seed-{key}"  # the store exists already, as a nightly's does: one night in it
                subprocess.run([sys.executable, "-m", "stepwatch", "synthesize", "--rows", "10", "--out", str(seed),
                                "--db", str(work / "throwaway.duckdb"), "--seed", str(100 + len(stores) * 10 + i)],
                               check=True, capture_output=True)  # fmt: skip
                file_db, address = str(work / f"file-{key}.duckdb"), f"{base}&namespace=n{key}"
                cache = {**env, "STEPWATCH_CACHE": str(work / f"cache-{key}")}
                if synthetic:
                    ingest_s(seed, file_db, env, True)
                    first.append(ingest_s(seed, address, cache, True))
                local.append(ingest_s(source, file_db, env, synthetic))
                shared.append(ingest_s(source, address, cache, synthetic))
                stores[name] = address
            a, b = statistics.median(local), statistics.median(shared)
            print(f"{name:<26}{a:>14.2f}{b:>14.2f}{b / a:>12.2f}x")
            if first:
                print(f"{'  (making the shared store: its first ingest, 10 rows)':<54}{statistics.median(first):>6.2f}")
        # Pages on the larger set: the same rows in a DuckDB file and in the shared store.
        name = list(sets)[-1]
        file_db = work / f"file-{len(sets) - 1}x0.duckdb"
        os.environ.update(services.environment(endpoint))
        os.environ.update(STEPWATCH_SHARED_POLL_S="0", STEPWATCH_CACHE=str(work / "pages-cache"))
        spec = importlib.util.spec_from_file_location("page_times", REPO / "benchmarks" / "dashboard.py")
        pages = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(pages)
        times = {"DuckDB file": pages.server_times(file_db, args.repeat),
                 "shared store": pages.server_times(stores[name], args.repeat)}  # fmt: skip
    print(f"\npages on the {name}, server seconds (median of {args.repeat}), cold / warm:")
    print(f"{'page':<12}{'DuckDB file':>20}{'shared store':>20}{'shared/file cold':>18}")
    for page in times["DuckDB file"]:
        (fc, fw), (sc, sw) = times["DuckDB file"][page], times["shared store"][page]
        f_cold, s_cold = statistics.median(fc), statistics.median(sc)
        cells = f"{f_cold:.3f} / {statistics.median(fw):.3f}", f"{s_cold:.3f} / {statistics.median(sw):.3f}"
        print(f"{page:<12}{cells[0]:>20}{cells[1]:>20}{s_cold / f_cold:>17.2f}x")


if __name__ == "__main__":
    main()
