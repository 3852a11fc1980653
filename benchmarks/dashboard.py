"""Server-side time of each dashboard page on a store, measured with Streamlit's AppTest (the app's own
script runs, queries and figure building included; no browser).

For each page: *cold* is the first render after the query cache is cleared (every query runs against
DuckDB), *warm* is a rerun with the cache filled (what a user sees when changing a widget back or
reloading). Imports are paid once before any timing.

    .venv/bin/python benchmarks/dashboard.py --db data/stepwatch-synthetic.duckdb [--repeat 5]
    (make the 1M-row store with: .venv/bin/stepwatch synthesize --rows 1000000)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
PAGES = ("overview", "history", "compare", "speedups", "cost", "run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="store to render (e.g. the 1M-row synthetic store)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ["STEPWATCH_DB"] = str(Path(args.db).resolve())

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from collector.store import database

    with database.StoreReader(Path(args.db)) as reader:
        con = reader.connection()
        rows, series = con.execute("SELECT count(*), count(DISTINCT series_key) FROM runs").fetchall()[0]
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()  # imports and the first connection
    print(f"store {args.db}: {rows:,} runs, {series} series; {args.repeat} repeats; seconds, median (max)\n")
    print(f"{'page':<10}{'cold':>18}{'warm':>18}")
    for page in PAGES:
        cold, warm = [], []
        for _ in range(args.repeat):
            st.cache_data.clear()
            start = time.perf_counter()
            at.switch_page(f"views/{page}.py").run()
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            at.run()
            warm.append(time.perf_counter() - start)
            if at.exception:
                raise SystemExit(f"{page}: {at.exception[0].value}")
        print(
            f"{page:<10}{statistics.median(cold):>11.3f} ({max(cold):.3f})"
            f"{statistics.median(warm):>11.3f} ({max(warm):.3f})"
        )
    print("\nGoal: every page under 1 s.")


if __name__ == "__main__":
    main()
