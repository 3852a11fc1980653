"""The dashboard in a real browser: ``streamlit run dashboard/app.py`` on 127.0.0.1, Debian's chromium driven
by playwright, every page opened on the reference history (data/reference/, real trials) and on an empty
store, no error element, a screenshot of each page.

Screenshots go to the test's temporary folder, or to $STEPWATCH_SCREENSHOTS (docs/reference.md's come from
``STEPWATCH_SCREENSHOTS=docs .venv/bin/python -m pytest tests/test_dashboard_browser.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

from stepwatch.dashboard.browser_harness import CHROMIUM, LOADING, REPO, SCRIPT_DONE, serve, served
from stepwatch.dashboard.pages import PAGES, TITLES
from tests.conftest import stepwatch, write_suite

# (page, link query, screenshot name): every page (some opened from a link), and two again with memory picked
LINKS = {"versions": "?model=bert", "compare": "?metric=examples_per_sec,peak_rss_bytes"}
VISITS = (
    *((page.key, LINKS.get(page.key, ""), page.key) for page in PAGES),
    ("overview", "?metric=peak_rss_bytes", "overview-memory"),
    ("history", "?metric=peak_rss_bytes&model=bert,transformer&x=tf_version", "history-memory"),
)
NEEDS_CHROMIUM = pytest.mark.skipif(
    CHROMIUM is None, reason="needs chromium (Debian's; `make test` installs it as root) or Chrome"
)


def settled(page: Page, title: str) -> None:
    """The page's heading is drawn, its script has finished and every element is drawn: none still shows
    Streamlit's placeholder while its code loads (a widget's code can arrive after the script has finished).
    Conditions, never a fixed wait: under load a page takes seconds."""
    page.get_by_role("heading", name=title).first.wait_for(timeout=120_000)
    page.locator(SCRIPT_DONE).wait_for(timeout=120_000)
    page.wait_for_function(f"() => !document.querySelector('{LOADING}')", timeout=120_000)


def no_errors(page: Page, where: str) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, where
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0, where


def clipped(page: Page) -> list[str]:
    """The y-axis labels of the page's figures that start left of their figure (cut at its edge)."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap((plot) => {
            const left = plot.getBoundingClientRect().left;
            return [...plot.querySelectorAll('.ytick text')]
                .filter((label) => label.getBoundingClientRect().left < left - 1).map((label) => label.textContent);
        })"""
    )


@NEEDS_CHROMIUM
@pytest.mark.large
def test_every_page_opens_on_the_reference_history_without_errors(reference_store: Path, tmp_path: Path) -> None:
    shots = Path(os.environ.get("STEPWATCH_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with serve(reference_store) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for key, query, name in VISITS:
            path = {page.key: page.address for page in PAGES}[key]
            page.goto(f"{url}/{path}{query}")
            settled(page, TITLES[key])
            if path:
                page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
            no_errors(page, name)
            assert not clipped(page), (name, clipped(page)[:3])
            assert page.get_by_role("button", name="Deploy").count() == 0, name  # a tool, not a demo
            page.screenshot(path=str(shots / f"dashboard-{name}.png"), full_page=True)
        tab_title = page.title()
        browser.close()
    assert len(list(shots.glob("dashboard-*.png"))) >= len(VISITS)
    assert "stepwatch" in tab_title


@pytest.mark.large
@NEEDS_CHROMIUM
def test_an_empty_store_opens_on_the_getting_started_page(tmp_path: Path) -> None:
    with serve(tmp_path / "none.duckdb") as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for path in ("", "history", "versions"):
            page.goto(f"{url}/{path}")
            settled(page, "stepwatch")
            no_errors(page, path or "/")
            page.get_by_text("make run", exact=True).first.wait_for(timeout=120_000)
            assert page.get_by_text("make run", exact=True).count() == 1, path
        browser.close()


@pytest.mark.large
@NEEDS_CHROMIUM
def test_a_copied_link_opened_first_on_a_fresh_server_gets_the_app_navigation(reference_store: Path) -> None:
    with serve(reference_store) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        asked = []
        page.on("request", lambda request: asked.append(request.url))
        page.goto(f"{url}/history?precision=fp32")  # nothing has opened the app before this link
        page.get_by_role("heading", name="History").first.wait_for(timeout=120_000)
        page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
        nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
        caption = page.get_by_text("store: ").inner_text()
        linked = page.url
        entries = page.evaluate("history.length")  # the blank tab, the link, the page's filters written back once
        page.locator('[data-testid="stSidebarNav"] a', has_text="Cost").click()
        page.get_by_role("heading", name="Cost").first.wait_for(timeout=120_000)
        page.wait_for_url(f"{url}/cost**", timeout=120_000)
        browser.close()
    # The page knew where its server is (dashboard/server.py): it never took /history for the server's base path.
    assert not [u for u in asked if "/history/_stcore/" in u], asked
    assert [u for u in asked if u.endswith("/_stcore/health")] == [f"{url}/_stcore/health"]
    assert linked.startswith(f"{url}/history?precision=fp32&")
    assert entries == 3, "each filter written back to the URL was a step of the Back button"  # 9 when one by one
    assert [title for title in TITLES.values() if title in nav] == list(TITLES.values())
    assert "first run" not in nav and (REPO / caption.removeprefix("store: ")).resolve() == reference_store.resolve()


@pytest.mark.large
@NEEDS_CHROMIUM
def test_what_is_below_the_first_screen_is_drawn_when_opened(reference_store: Path) -> None:
    """Tables and options in on-demand expanders (``state.on_demand``) and a page's filters (``state.filters``)
    are not drawn until a click opens them; a tab picked by a link is the one drawn (``state.picked_tab``)."""
    with serve(reference_store) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        drawn = {}
        for path, label, element, added in (
            ("compare", "Verdict table", "stDataFrame", 1),
            ("history", "Chart:", "stSelectbox", 4),  # x axis, colour, facet, normalised (scale is a radio)
            ("run", "Environment and config", "stDataFrame", 1),
        ):
            page.goto(f"{url}/{path}")
            settled(page, TITLES[path])
            before = page.locator(f'[data-testid="{element}"]').count()
            page.locator('[data-testid="stExpander"] summary', has_text=label).first.click()
            # Until all of the expander's elements are drawn (they arrive one by one as its rerun goes on).
            page.wait_for_function(
                f"n => document.querySelectorAll('[data-testid=\"{element}\"]').length >= n",
                arg=before + added,
                timeout=120_000,
            )
            page.wait_for_timeout(500)  # and nothing more after them
            no_errors(page, path)
            drawn[path] = (before, page.locator(f'[data-testid="{element}"]').count())
        page.goto(f"{url}/versions?model=bert&panel=Another+metric&also=peak_rss_bytes")
        settled(page, "Versions")
        page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
        picked = page.get_by_role("tab", selected=True).inner_text()
        figures = page.locator('[data-testid="stPlotlyChart"]').count()
        # A page's filters are behind its Filters button (``state.filters``), drawn once it is opened.
        page.goto(f"{url}/history")
        settled(page, "History")
        page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
        filters = page.locator('[data-testid="stMultiSelect"]')
        hidden = filters.count()
        page.get_by_role("button", name="Filters").click()
        filters.nth(3).wait_for(timeout=120_000)
        shown = filters.count()
        filters.first.click()
        page.get_by_role("option", name="resnet50").click()  # a second model: its lines drawn, the picks said
        page.get_by_text("Model: bert, resnet50 · ").wait_for(timeout=120_000)
        # The chart is drawn anew by the rerun the pick starts: between the two, there is none (or one not yet drawn).
        page.wait_for_function("() => document.querySelector('.js-plotly-plot')?.data?.length === 4", timeout=120_000)
        no_errors(page, "history's filters")
        browser.close()
    assert drawn["compare"] == (0, 1) and drawn["run"] == (0, 1)
    assert drawn["history"][1] - drawn["history"][0] == 4
    assert picked == "Another metric" and figures == 1
    assert (hidden, shown) == (0, 4)


def text_on(page: Page, address: str, key: str, text: str) -> str:
    """Open ``address`` (the page ``key``), with no error on it, and the first element that says ``text``, whole."""
    page.goto(address)
    settled(page, TITLES[key])
    no_errors(page, key)
    found = page.get_by_text(text).first
    found.wait_for(timeout=120_000)
    return found.inner_text()


@pytest.mark.large
@NEEDS_CHROMIUM
def test_time_to_target_is_plotted_on_history_and_numerics_shown_on_the_overview(tmp_path: Path) -> None:
    """The committed teacher-student trials (data/reference/cpu-2026-11-27-numerics, two runs: 200 and 3,000 steps):
    History plots their time to target, and the Overview gives each series' numerics against its run before: the
    3,000-step run trains on far past the 200-step one, so it reaches a far lower loss (changed)."""
    db = tmp_path / "numerics.duckdb"
    trials = REPO / "data" / "reference" / "cpu-2026-11-27-numerics"
    done = stepwatch("ingest", str(trials / "precision-200"), str(trials / "precision-3000"), "--db", str(db))
    assert done.returncode == 0, done.stderr[-2000:]
    with serve(db) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/history?metric=time_to_target_s&model=teacher")
        settled(page, TITLES["history"])
        page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
        no_errors(page, "history")
        points = page.evaluate(
            "() => [...document.querySelectorAll('.js-plotly-plot')].flatMap((plot) => plot.data || [])"
            ".reduce((n, trace) => n + (trace.y || []).filter((y) => y !== null).length, 0)"
        )
        axis = page.locator(".js-plotly-plot .ytitle").first.text_content()
        warning = text_on(page, f"{url}/?model=teacher", "overview", "trains differently from the run before it")
        # Compare: mixed_bfloat16 against fp32 over both runs, its training's change first, its speed beside it.
        compare = f"{url}/compare?baseline=precision%3Dfp32&candidate=precision%3Dmixed_bfloat16"
        compared = text_on(page, compare, "compare", "but its training changed")
        browser.close()
    assert points >= 2 and "Time to target" in axis, (points, axis)
    assert warning.startswith("2 series' latest run") and "changed: best loss" in warning, warning
    assert "throughput" in compared and "best loss" in compared, compared


@pytest.mark.large
@NEEDS_CHROMIUM
def test_a_suite_run_beside_the_dashboard_shows_each_row_as_it_lands_without_a_reload(tmp_path: Path) -> None:
    """``stepwatch run --dashboard`` (what ``make run`` runs): the server answers while the first trial still runs
    (held open by a gate file), the page shows the suite's progress, and the trial's row appears on the Overview
    in the same page, without a reload; the Run page says when the suite is done."""
    gate = tmp_path / "gate"
    suite = write_suite(
        tmp_path / "live.toml",
        'name = "live"\n[defaults]\ndevice = "cpu"\nsteps = 20\nwarmup_steps = 20\nwindow_steps = 10\n'
        f'[[configs]]\nmodel = "tests/data/scripts/paced.py"\nscript_args = "0.01 {gate}"\n'
        '[[configs]]\nmodel = "tests/data/scripts/paced.py"\nscript_args = "0.02"\n',
    )

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "stepwatch", "run", "--suite", str(suite), "--out", str(tmp_path / "results"),
                "--db", str(tmp_path / "live.duckdb"), "--dashboard", "--dashboard-port", str(port)]  # fmt: skip

    with served(command, REPO, dict(os.environ)) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        settled(page, "stepwatch")
        page.get_by_text("Suite live: 0 of 2 trials done").wait_for(timeout=120_000)
        no_errors(page, "while the first trial runs")
        gate.touch()  # the first trial now steps and ends; its row is ingested and the page follows
        page.get_by_role("heading", name="Overview").first.wait_for(timeout=120_000)
        page.wait_for_function(
            """() => [...document.querySelectorAll('[data-testid="stMetric"]')]
                .some((m) => m.innerText.startsWith('Series') && m.innerText.trim().endsWith('2'))""",
            timeout=120_000,
        )  # both trials' series, still without a reload
        no_errors(page, "the Overview, filled in")
        page.locator('[data-testid="stSidebarNav"] a', has_text="Run").click()
        page.get_by_text("Suite live: all 2 trials done.").wait_for(timeout=120_000)
        reloads = page.evaluate("performance.getEntriesByType('navigation')[0].type")
        browser.close()
    assert reloads == "navigate"  # the one load of the page: everything after it came over its websocket
    assert [p.suffix for p in (tmp_path / "results").iterdir()] == [".parquet"]  # its progress file gone with it
