"""The dashboard's server: Streamlit's own, with each page's address answered by Streamlit's page already told
where its server is.

Opened at a page's address (``/history``, a link in a report, a bookmark, a reload), Streamlit's page cannot tell
whether ``/history`` is the base path of its server or a page under it: it asks ``/history/_stcore/health``
first and, after that answers 404, waits 100 ms before it asks ``/``. Every page opened by its address paid
about 0.12 s for it, a third of what a whole one-chart page costs in a browser here (benchmarks/dashboard.py).
Streamlit's page reads its server's address from ``window.__streamlit.BACKEND_BASE_URL`` when a host sets it
(the setting for pages that embed it); the routes here serve Streamlit's index.html with it set, at the root and
at each page's address, under ``server.baseUrlPath``. Anything else is Streamlit's as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import BaseRoute, Route

from stepwatch.dashboard.pages import PAGES

INDEX = Path(st.__file__).parent / "static" / "index.html"
HEAD = "<head>"


def base_path() -> str:
    """``server.baseUrlPath`` as a path without slashes at either end ("" at the root)."""
    return (st.get_option("server.baseUrlPath") or "").strip("/")


def told_index(base: str) -> str | None:
    """Streamlit's index.html with the server's address set before its scripts run, or None where the page
    has no ``<head>`` to put it in (another Streamlit's page: then it is served as Streamlit serves it)."""
    html = INDEX.read_text(encoding="utf-8")
    if HEAD not in html:
        return None
    root = json.dumps(f"/{base}/" if base else "/")
    script = f"<script>window.__streamlit = {{BACKEND_BASE_URL: window.location.origin + {root}}};</script>"
    return html.replace(HEAD, f"{HEAD}\n    {script}", 1)


def routes() -> list[BaseRoute]:
    """The root's and each page's address, answered with the told index.html (none if it cannot be told)."""
    base = base_path()
    html = told_index(base)
    if html is None:
        return []

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(html, headers={"Cache-Control": "no-cache"})

    prefix = f"/{base}" if base else ""
    paths = [f"{prefix}/{page.address}".rstrip("/") or "/" for page in PAGES]  # an empty store's page is at the root
    return [Route(path, index, methods=["GET", "HEAD"]) for path in paths]
