"""Time of each dashboard page on a store, as a user sees it in a browser and as the server spends it.

*Browser* (chromium through playwright, against ``python -m stepwatch.dashboard`` on 127.0.0.1): from the
start of the navigation to the page settled, its title shown, the script done, no element still waiting for its
code (Streamlit loads a widget's on first use) and every figure and table of the page's first screen drawn
(what is in a closed expander or another tab is drawn when opened). *Cold* is a
first visit: a server just started (no query cached, the page's modules not yet imported by a script run) and a
browser with an empty cache. *Warm* is a page opened again in a browser whose cache holds the assets, on a server
whose queries are cached: the floor and every page are visited in turn, round after round (each round in another
order, each page opened twice and timed the second time, after itself, as a reload is), in one browser, so that
what drifts on the machine during a run weighs on the floor as on the pages.
Each page's warm loads are also put against the floor's as ``stepwatch compare`` puts a change (ratio of
geometric means, Welch 95% interval): within the goal, over it, or an interval that holds it.
*In-app click* is the page reached from the Overview by its link in the sidebar (no page load: what moving between
pages costs), from the click to the page settled.

*Server* (Streamlit's AppTest, no browser): the app's own script, queries and figure building included; cold
after the query and figure caches are cleared, warm with them filled. Imports are paid once before any timing.

    .venv/bin/python benchmarks/dashboard.py --db data/stepwatch-synthetic.duckdb [--repeat 3]
    (make the 1M-row store with: .venv/bin/stepwatch synthesize --rows 1000000)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stepwatch.collector.analysis.stats import Side, welch_ratio  # noqa: E402
from stepwatch.dashboard.browser_harness import CHROMIUM, LOADING, serve  # noqa: E402
from stepwatch.dashboard.pages import PAGES as DECLARED  # noqa: E402
from stepwatch.dashboard.pages import TITLES as PAGE_TITLES  # noqa: E402

APP = REPO / "dashboard" / "app.py"
PAGES = tuple(PAGE_TITLES)
TITLES = {**PAGE_TITLES, "floor": "Floor"}
# The floor: what Streamlit and Plotly alone cost here, a page with a title and one three-point figure.
FLOOR = """import plotly.graph_objects as go
import streamlit as st

st.title("Floor")
st.plotly_chart(go.Figure(go.Scatter(x=[1, 2, 3], y=[1, 3, 2])))
"""
GOAL = 1.5  # every page's warm load within this many times the floor's
WARM_VISITS = 3  # warm rounds and in-app clicks per --repeat (Chromium caches compiled code from a second run on)
SETTLED = """([title, charts, tables, loading]) => {
    if (document.querySelector('[data-testid="stStatusWidget"]')) return false;
    if (document.querySelector(loading)) return false;  // an element's code still loading
    if (![...document.querySelectorAll('h1')].some((h) => h.innerText.trim() === title)) return false;
    const plots = document.querySelectorAll('[data-testid="stPlotlyChart"]');
    if (plots.length < charts || [...plots].some((p) => !p.querySelector('.js-plotly-plot .main-svg'))) return false;
    return document.querySelectorAll('[data-testid="stDataFrame"] canvas').length >= tables;
}"""


ADDRESSES = {page.key: page.address for page in DECLARED}


def path_of(page: str) -> str:
    return ADDRESSES.get(page, "")  # the floor is its own app's root


def settle(page, name: str, expected: tuple[int, int]) -> float:
    """Seconds from the navigation's start until ``name``'s page has settled with ``expected`` figures/tables."""
    page.wait_for_function(SETTLED, arg=[TITLES[name], *expected, LOADING], polling="raf", timeout=120_000)
    return page.evaluate("performance.now()") / 1000


def browser_times(db: Path, repeat: int) -> tuple[dict[str, tuple[list[float], list[float], list[float]]], dict]:
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        # What each page draws once settled (counted on a visit that is not timed).
        expected = {}
        with serve(db) as url:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            tab = context.new_page()
            for name in PAGES:
                tab.goto(f"{url}/{path_of(name)}")
                tab.get_by_role("heading", name=TITLES[name]).first.wait_for(timeout=120_000)
                tab.wait_for_function(
                    "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000
                )
                tab.wait_for_timeout(2000)
                expected[name] = (
                    tab.locator('[data-testid="stPlotlyChart"]').count(),
                    tab.locator('[data-testid="stDataFrame"] canvas').count(),
                )
            context.close()
        floor = Path(tempfile.mkdtemp()) / "floor.py"
        floor.write_text(FLOOR)
        expected["floor"] = (1, 0)
        for name in (*PAGES, "floor"):
            cold, clicked = [], []
            for _ in range(repeat):
                with serve(db, floor if name == "floor" else None) as url:
                    context = browser.new_context(viewport={"width": 1400, "height": 1000})
                    tab = context.new_page()
                    tab.goto(f"{url}/{path_of(name)}", wait_until="commit")
                    cold.append(settle(tab, name, expected[name]))
                    if name not in ("overview", "floor"):  # from the Overview, a click on the page's link
                        for _ in range(WARM_VISITS):
                            tab.goto(url, wait_until="commit")
                            settle(tab, "overview", expected["overview"])
                            start = tab.evaluate("performance.now()") / 1000
                            tab.locator('[data-testid="stSidebarNav"] a', has_text=TITLES[name]).click()
                            clicked.append(settle(tab, name, expected[name]) - start)
                    context.close()
            out[name] = (cold, [], clicked)
            print(f"  browser {name}: cold {statistics.median(cold):.3f} s")
        with serve(db) as url, serve(db, floor) as floor_url:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            tab = context.new_page()
            names = [*PAGES, "floor"]
            for turn in range(1 + repeat * WARM_VISITS):  # the first round fills the caches, untimed
                for name in names[turn % len(names) :] + names[: turn % len(names)]:
                    address = f"{floor_url if name == 'floor' else url}/{path_of(name)}"
                    for _ in range(2):  # opened twice, timed the second time: after itself, as a reload is
                        tab.goto(address, wait_until="commit")
                        seconds = settle(tab, name, expected[name])
                    if turn:
                        out[name][1].append(seconds)
            context.close()
        for name in names:
            print(f"  browser {name}: warm {statistics.median(out[name][1]):.3f} s")
        browser.close()
    return out, expected


def against_floor(floor: list[float], warm: list[float]) -> str:
    """A page's warm loads against the floor's as ``stepwatch compare`` puts a change: the ratio of geometric
    means with its 95% interval (Welch, on logs), and whether the interval is within the goal, over it, or
    holds it (the rounds cannot tell)."""
    r = welch_ratio(Side.of(floor), Side.of(warm))
    word = "within" if r.ci_high <= GOAL else "over" if r.ci_low > GOAL else "holds"
    return f"{r.ratio:.2f}x [{r.ci_low:.2f}, {r.ci_high:.2f}]: {word} {GOAL}x"


def server_times(db: Path, repeat: int) -> dict[str, tuple[list[float], list[float]]]:
    os.environ["STEPWATCH_DB"] = str(db)
    from streamlit.testing.v1 import AppTest

    from stepwatch.dashboard import data

    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()  # imports and the first connection
    out = {}
    for name in PAGES:
        cold, warm = [], []
        for _ in range(repeat):
            data.clear()
            start = time.perf_counter()
            at.switch_page(f"views/{name}.py").run()
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            at.run()
            warm.append(time.perf_counter() - start)
            if at.exception:
                raise SystemExit(f"{name}: {at.exception[0].value}")
        out[name] = (cold, warm)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="store to render (e.g. the 1M-row synthetic store)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-browser", action="store_true", help="server-side times only")
    args = parser.parse_args()
    db = Path(args.db).resolve()

    from stepwatch.collector.store import database

    with database.StoreReader(db) as reader:
        con = reader.connection()
        rows, series = con.execute("SELECT count(*), count(DISTINCT series_key) FROM runs").fetchall()[0]
    print(f"store {db}: {rows:,} runs, {series} series; median of {args.repeat} (max), seconds")
    browser, expected = ({}, {}) if args.no_browser or CHROMIUM is None else browser_times(db, args.repeat)
    server = server_times(db, args.repeat)

    def cell(values: list[float] | None) -> str:
        return f"{statistics.median(values):.3f} ({max(values):.3f})" if values else "-"

    print(
        f"\n{'page':<10}{'browser cold':>16}{'browser warm':>16}{'in-app click':>16}{'server cold':>16}"
        f"{'server warm':>16}{'warm/floor':>12}  drawn"
    )
    floor = statistics.median(browser["floor"][1]) if "floor" in browser else None

    def ratio(warm: list[float] | None) -> str:
        return f"{statistics.median(warm) / floor:.2f}x" if warm and floor else "-"

    for name in (*PAGES, "floor"):
        b, s = browser.get(name, (None, None, None)), server.get(name, (None, None))
        charts, tables = expected.get(name, ("?", "?"))
        print(
            f"{name:<10}{cell(b[0]):>16}{cell(b[1]):>16}{cell(b[2]):>16}{cell(s[0]):>16}{cell(s[1]):>16}"
            f"{ratio(b[1]):>12}  {charts} figures, {tables} tables"
        )
    if "floor" in browser:
        print(f"\nwarm against the floor (geometric means of {len(browser['floor'][1])} rounds, 95% interval):")
        for name in PAGES:
            print(f"  {name:<10}{against_floor(browser['floor'][1], browser[name][1])}")
    print(
        "\nfloor: Streamlit and Plotly alone, a page with a title and one three-point figure (no store).\n"
        f"Goals at 1M rows: in the browser every page within {GOAL}x of the floor warm (warm/floor, of the medians), "
        "and under 2 s cold."
    )


if __name__ == "__main__":
    main()
