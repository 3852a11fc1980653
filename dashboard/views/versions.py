"""Versions: what an upgrade did, at a glance. Throughput, time to a target quality, the largest per-device batch
and the cost per run of the picked series across software versions (TensorFlow, Keras, the JAX or torch of their
backend, CUDA, the driver), one panel each (in tabs), with the spread of the trials per version as a box."""

import pandas as pd
import streamlit as st

from stepwatch.collector.metrics import DEFAULT_METRIC, METRICS
from stepwatch.collector.store.queries import VERSION_AXES, framework_axis, version_key
from stepwatch.dashboard import charts, data, state

PANELS = (DEFAULT_METRIC, "time_to_target_s", "max_per_device_batch", "cost_usd")

st.title("Versions")
catalog = data.load("catalog")
options, picked, theirs = state.series_picks(catalog)
extras = [m for m in METRICS if m not in PANELS]

# Along the version of the picked series' framework, unless the URL says another.
along = state.one("along", VERSION_AXES, framework_axis((theirs if len(theirs) else catalog)["keras_backend"].unique()))
extra = state.one("also", extras, "peak_memory_bytes")
state.notices()
box = state.filters()
picked = state.series_filters(box, options, picked)
along = box.selectbox("Versions of", VERSION_AXES, VERSION_AXES.index(along))
st.caption(state.said(*state.series_said(options, picked), ("Versions of", [along], VERSION_AXES)))
selection = state.series_selection(picked)


def versions_in(spread: pd.DataFrame) -> list[str]:
    """The versions a spread has, in version order."""
    return sorted(set(spread["version"].astype(str)), key=version_key)


counted = versions_in(data.load("spread", selection, DEFAULT_METRIC, along))
if not counted:
    st.info(f"No successful runs with a {along} for this selection.")
    st.stop()
st.caption(
    f"{len(counted)} values of {along}; each box is one series' successful trials at that version (median, "
    "quartiles, whiskers at the lowest and highest trial). Hover a box for its series, trials and suite runs."
)
# One panel at a time, a tab each; the last one's metric is picked inside it.
panel, tab = state.picked_tab("panel", [*(METRICS[name].label for name in PANELS), "Another metric"])
if panel == len(PANELS):
    extra = tab.selectbox("Metric", extras, extras.index(extra), format_func=lambda m: METRICS[m].label)
state.keep(
    **picked, along=along,
    also=extra,
)  # fmt: skip
name = (*PANELS, extra)[panel]
spread = data.load("spread", selection, name, along)
if spread.empty:
    hint = (
        " The largest batch is searched by `stepwatch run --find-max-batch` (on a CPU with `--max-batch-memory`)."
        if name == "max_per_device_batch"
        else ""
    )
    tab.info(f"Not measured in the runs of this selection.{hint}")
else:
    state.figure(data.drawn(charts.version_boxes, spread, METRICS[name], versions_in(spread), along), tab)
