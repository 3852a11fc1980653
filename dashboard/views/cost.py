"""Cost: cost per run and per 1M examples by accelerator, with each price's source and date."""

import streamlit as st

from stepwatch.collector.store.selection import Selection
from stepwatch.dashboard import charts, data, state

st.title("Cost")
catalog = data.load("catalog")
models = sorted(catalog["model"].unique())
picked = state.many("model", models, models[:1])
state.notices()
picked = st.multiselect("Model", models, picked)
state.keep(model=picked)
frame = data.load("costs", Selection.of(model=picked))
if frame.empty:
    st.info("No priced successful runs for this selection.")
    st.stop()
st.plotly_chart(charts.cost_bars(frame), width="stretch")
st.caption(
    "Medians of successful trials. Prices are per device-hour from the price catalog (the bundled one, or the "
    "project's `prices` setting; or --price-per-hour)."
)
with st.expander(f"Table: {len(frame)} config points, with each price's source and date"):
    st.dataframe(
        frame[
            ["accelerator", "model", "preset", "precision", "xla", "per_device_batch", "cost_usd",
             "cost_per_1m_examples_usd", "examples_per_sec", "price_per_device_hour", "price_source", "price_date"]
        ],
        hide_index=True,
        width="stretch",
    )  # fmt: skip
