"""stepwatch dashboard: ``streamlit run dashboard/app.py`` (the store is $STEPWATCH_DB or data/stepwatch.duckdb).

This file is read twice. ``streamlit run`` imports it and finds ``app``, the server (``server.py``: Streamlit's
own, its pages opened by their address without a wasted round trip); the server then runs it as the app's
script for each visit, where it declares the navigation, each page its own file under views/. (Not pages/:
Streamlit takes a folder of that name for its older multipage mode and serves it to a link that opens a page
before this file has run, with the wrong navigation.)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import streamlit as st

if importlib.util.find_spec("stepwatch") is None:  # `streamlit run dashboard/app.py` in a checkout, not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ != "__main__":  # imported by `streamlit run`: the server
    from stepwatch.dashboard import server

    app = st.App(__file__, routes=server.routes())
else:  # run as the script of a visit: the navigation
    from stepwatch.dashboard import data, live
    from stepwatch.dashboard.pages import FIRST_RUN, PAGES

    st.set_page_config(page_title="stepwatch", page_icon=":material/timer:", layout="wide")
    if data.has_runs():
        pages = [st.Page(p.script, title=p.title, icon=p.icon, default=i == 0) for i, p in enumerate(PAGES)]
    else:
        pages = [st.Page(FIRST_RUN.script, title=FIRST_RUN.title, icon=FIRST_RUN.icon, default=True)]
    st.sidebar.caption(f"store: {data.store_label()}")
    live.follow()
    st.navigation(pages).run()
