"""stepwatch dashboard: ``streamlit run dashboard/app.py`` (the store is $STEPWATCH_DB or data/stepwatch.duckdb).

This file only declares the navigation; each page is its own file under views/. (Not pages/: Streamlit
takes a folder of that name for its older multipage mode and serves it to a link that opens a page before
this file has run, with the wrong navigation.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `streamlit run` from a checkout without install

from dashboard import data  # noqa: E402

st.set_page_config(page_title="stepwatch", page_icon=":material/timer:", layout="wide")
HERE = Path(__file__).parent / "views"

if data.has_runs():
    pages = [
        st.Page(HERE / "overview.py", title="Overview", icon=":material/home:", default=True),
        st.Page(HERE / "history.py", title="History", icon=":material/show_chart:"),
        st.Page(HERE / "versions.py", title="Versions", icon=":material/upgrade:"),
        st.Page(HERE / "compare.py", title="Compare", icon=":material/compare_arrows:"),
        st.Page(HERE / "speedups.py", title="Speedups", icon=":material/speed:"),
        st.Page(HERE / "cost.py", title="Cost", icon=":material/payments:"),
        st.Page(HERE / "run.py", title="Run", icon=":material/search:"),
    ]
else:
    pages = [st.Page(HERE / "first_run.py", title="Get started", icon=":material/rocket_launch:", default=True)]
st.sidebar.caption(f"store: {data.store_label()}")
st.navigation(pages).run()
