"""Shown while the store is empty: the exact commands that collect data."""

import streamlit as st

from stepwatch.collector.runner import progress
from stepwatch.dashboard import data, live

st.title("stepwatch")
if progress.read() is not None:  # a suite runs beside the dashboard: its first row appears here when it is done
    live.show()
    st.caption(f"The store is {data.store_path()}; this page follows it and shows the Overview at the first row.")
    st.stop()
st.info(f"No results in {data.store_path()} yet.")
st.markdown("Collect the CPU smoke suite and load it into the store (a few minutes on 2 cores):")
st.code("make run", language="bash")
st.markdown("or, step by step:")
st.code(".venv/bin/stepwatch run --suite smoke\n.venv/bin/stepwatch ingest", language="bash")
st.markdown("Then reload this page. To explore without collecting, generate synthetic history:")
st.code(
    ".venv/bin/stepwatch synthesize --rows 100000\n"
    "STEPWATCH_DB=data/stepwatch-synthetic.duckdb streamlit run dashboard/app.py",
    language="bash",
)
