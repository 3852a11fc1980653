"""Speedups: XLA on vs off per model and device, each precision mode against fp32, and each Keras backend
against TensorFlow."""

import streamlit as st

from collector.store.queries import version_key
from collector.store.selection import ALL, Selection
from dashboard import charts, data, state

st.title("Speedups")
catalog = data.load("catalog")
# Keras is the one version every backend's runs share (a JAX or torch run has no TensorFlow version).
versions = sorted(data.load("versions", ALL)["keras_version"], key=version_key)
accelerators = sorted(catalog["accelerator"].dropna().unique())
version = state.one("keras_version", versions, versions[-1] if versions else None)
picked = state.many("accelerator", accelerators, accelerators[:4])
state.notices()
col1, col2 = st.columns([1, 3])
version = col1.selectbox("Keras version", versions, versions.index(version) if version in versions else 0)
picked = col2.multiselect("Accelerator", accelerators, picked)
state.keep(keras_version=version, accelerator=picked)

frame = data.load("speedups", Selection.of(keras_version=version, accelerator=picked))
if frame.empty:
    st.info("No successful runs for this selection.")
    st.stop()
xla = frame[frame["xla"]]
st.plotly_chart(
    charts.speedup_bars(
        xla, "xla_speedup", "jit_compile on vs off (XLA; torch.compile on torch), same precision and batch"
    ),
    width="stretch",
)
st.plotly_chart(
    charts.speedup_bars(
        frame, "precision_speedup", "Precision modes vs the fastest fp32 point (jit_compile off / on)", pattern="xla"
    ),
    width="stretch",
)
others = frame[frame["keras_backend"] != "tensorflow"]
if others["backend_speedup"].notna().any():
    st.plotly_chart(
        charts.speedup_bars(
            others,
            "backend_speedup",
            "Keras backends vs TensorFlow (same model, precision, batch, device and jit_compile setting)",
            color="keras_backend",
            pattern="xla",
        ),
        width="stretch",
    )
else:
    st.caption("Backends vs TensorFlow: no JAX or torch run has a TensorFlow run of the same config here.")
st.caption("Medians of the successful trials at that Keras version; failed trials are left out.")
st.dataframe(frame, hide_index=True, width="stretch")
