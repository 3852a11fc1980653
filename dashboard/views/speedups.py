"""Speedups: XLA on vs off per model and device, and each precision mode against fp32."""

import streamlit as st

from collector.store.queries import version_key
from collector.store.selection import ALL, Selection
from dashboard import charts, data, state

st.title("Speedups")
catalog = data.load("catalog")
versions = sorted(data.load("versions", ALL)["tf_version"], key=version_key)
accelerators = sorted(catalog["accelerator"].dropna().unique())
version = state.one("tf_version", versions, versions[-1] if versions else None)
picked = state.many("accelerator", accelerators, accelerators[:4])
state.notices()
col1, col2 = st.columns([1, 3])
version = col1.selectbox("TensorFlow version", versions, versions.index(version) if version in versions else 0)
picked = col2.multiselect("Accelerator", accelerators, picked)
state.keep(tf_version=version, accelerator=picked)

frame = data.load("speedups", Selection.of(tf_version=version, accelerator=picked))
if frame.empty:
    st.info("No successful runs for this selection.")
    st.stop()
xla = frame[frame["xla"]]
st.plotly_chart(
    charts.speedup_bars(xla, "xla_speedup", "XLA on vs off (throughput ratio, same precision and batch)"),
    width="stretch",
)
st.plotly_chart(
    charts.speedup_bars(frame, "precision_speedup", "Precision modes vs the fastest fp32 point (XLA off / on)"),
    width="stretch",
)
st.caption("Medians of the successful trials at that TensorFlow version; failed trials are left out.")
st.dataframe(frame, hide_index=True, width="stretch")
