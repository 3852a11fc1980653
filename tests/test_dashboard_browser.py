"""The dashboard in a real browser: ``streamlit run dashboard/app.py`` on 127.0.0.1, Debian's chromium driven
by playwright, every page opened, no error element, a screenshot of each.

Screenshots go to the test's temporary folder, or to $STEPWATCH_SCREENSHOTS (the README's come from
``STEPWATCH_SCREENSHOTS=docs .venv/bin/python -m pytest tests/test_dashboard_browser.py``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from collector.store.database import StoreReader
from tests.conftest import REPO

PAGES = ("", "history", "compare", "speedups", "cost", "run")
TITLES = {"": "Overview", "history": "History", "compare": "Compare", "speedups": "Speedups", "cost": "Cost",
          "run": "Run"}  # fmt: skip
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve(db: Path) -> Iterator[str]:
    """``streamlit run dashboard/app.py`` on a free port of 127.0.0.1, on the store ``db``; yields its URL."""
    port = free_port()
    command = [
        sys.executable, "-m", "streamlit", "run", str(REPO / "dashboard" / "app.py"), "--server.headless=true",
        "--server.address=127.0.0.1", f"--server.port={port}", "--browser.gatherUsageStats=false",
    ]  # fmt: skip
    proc = subprocess.Popen(
        command, env={**os.environ, "STEPWATCH_DB": str(db)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.read() == b"ok":
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit did not start: {proc.stdout.read().decode()[-2000:]}") from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def server(smoke_store: Path) -> Iterator[str]:
    with serve(smoke_store) as url:
        yield url


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (Debian's; `make test` installs it as root) or Chrome")
def test_every_page_opens_in_a_browser_without_errors(server: str, smoke_store: Path, tmp_path: Path) -> None:
    shots = Path(os.environ.get("STEPWATCH_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    con = StoreReader(smoke_store).connection()
    ok_run = con.execute("SELECT run_id FROM runs WHERE status = 'ok' ORDER BY started_at DESC LIMIT 1").fetchall()[0][
        0
    ]
    con.close()
    queries = {"run": f"?run={ok_run}", "compare": "?baseline=label%3Dbaseline&candidate=label%3Dcandidate"}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for path in PAGES:
            page.goto(f"{server}/{path}{queries.get(path, '')}")
            page.get_by_role("heading", name=TITLES[path]).first.wait_for(timeout=60_000)
            page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
            if path in ("history", "compare", "speedups", "cost", "run"):
                page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
            page.wait_for_timeout(500)
            assert page.locator('[data-testid="stException"]').count() == 0, path
            assert page.locator('[data-testid="stAlertContentError"]').count() == 0, path
            page.screenshot(path=str(shots / f"dashboard-{path or 'overview'}.png"), full_page=True)
        browser.close()
    assert len(list(shots.glob("dashboard-*.png"))) == len(PAGES)


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (Debian's; `make test` installs it as root) or Chrome")
def test_a_copied_link_opened_first_on_a_fresh_server_gets_the_app_navigation(smoke_store: Path) -> None:
    with serve(smoke_store) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/history?precision=fp32")  # nothing has opened the app before this link
        page.get_by_role("heading", name="History").first.wait_for(timeout=60_000)
        page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
        nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
        caption = page.get_by_text(f"store: {smoke_store}").count()
        browser.close()
    assert [name for name in TITLES.values() if name in nav] == list(TITLES.values())
    assert "first run" not in nav and caption == 1
