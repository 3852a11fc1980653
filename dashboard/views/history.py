"""History: any metric over nights or versions, per series; version upgrades and change points marked."""

import plotly.graph_objects as go
import streamlit as st

from stepwatch.collector.config import SERIES_DIMENSIONS
from stepwatch.collector.metrics import METRICS
from stepwatch.collector.store import records
from stepwatch.collector.store.queries import X_AXES, version_key
from stepwatch.collector.store.selection import Selection
from stepwatch.dashboard import charts, data, labels, state

st.title("History")
catalog = data.load("catalog")
series_options, picked, _ = state.series_picks(catalog)
metric_names = list(METRICS)

headline = data.load("headline")  # throughput, or for a store of imported results alone, their own metric
metric_name = state.one("metric", metric_names, headline)
x = state.one("x", X_AXES, "night")
color = state.one("color", SERIES_DIMENSIONS, "precision")
facet = state.one("facet", ["none", *SERIES_DIMENSIONS], "none")
scale = state.one("scale", ["linear", "log"], "linear")
state.notices()

box = state.filters()
metric_name = box.selectbox(
    "Metric", metric_names, metric_names.index(metric_name), format_func=lambda m: METRICS[m].label
)
picked = state.series_filters(box, series_options, picked)
st.caption(
    state.said(("Metric", [METRICS[metric_name].label], metric_names), *state.series_said(series_options, picked))
)
options = state.on_demand("Chart: x axis, colour, facet, scale, normalised", "chart_options")
if options.open:
    col2, col3, col4, col5 = options.columns(4)
    x = col2.selectbox("X axis", X_AXES, X_AXES.index(x))
    color = col3.selectbox("Series colour", SERIES_DIMENSIONS, SERIES_DIMENSIONS.index(color))
    facets = ["none", *SERIES_DIMENSIONS]
    facet = col4.selectbox("Facet", facets, facets.index(facet))
    scale = col5.radio("Scale", ["linear", "log"], ["linear", "log"].index(scale), horizontal=True)

selection = state.series_selection(picked)
metric = METRICS[metric_name]
points = data.load("history", selection, metric_name, False)  # medians only: no trial values
versions = sorted(points["tf_version"].dropna().unique(), key=version_key) if len(points) else []
baseline = state.one("baseline", ["(none)", *versions], "(none)")  # known only once the points are loaded
state.notices()
if options.open:
    baseline = options.selectbox(
        "Normalise to TensorFlow version", ["(none)", *versions], ["(none)", *versions].index(baseline)
    )
state.keep(
    **picked,
    metric=metric_name, x=x, color=color, facet=facet if facet != "none" else None, scale=scale,
    baseline=baseline if baseline != "(none)" else None,
)  # fmt: skip

failed = points[points["ok"] < points["trials"]]


def history_figure(
    selection: Selection, metric_name: str, x: str, color: str, facet: str, scale: str, baseline: str
) -> tuple[go.Figure | None, str]:
    """The figure and its caption (None and "" when nothing was measured), built once per store version."""
    metric = METRICS[metric_name]
    measured = data.load("history", selection, metric_name, False).dropna(subset=["value"])
    if measured.empty:
        return None, ""
    if baseline != "(none)":
        measured = labels.normalise(measured, "tf_version", baseline)
    drawn, every = charts.thin(measured) if x == "night" else (measured, 1)
    found = data.load("alerts", records.STATUSES, metric_name)
    changes = found[found["series_key"].isin(measured["series_key"])] if len(found) else found
    figure = charts.history(
        drawn, metric, x, color, None if facet == "none" else facet, scale == "log",
        baseline if baseline != "(none)" else None, changes,
    )  # fmt: skip
    thinned = f"; drawn as the median of every {every} consecutive suite runs" if every > 1 else ""
    ringed = int(((measured["flagged"] > 0) | (measured["unread"] > 0)).sum())
    caption = (
        f"{measured['series_key'].nunique()} series, {len(measured)} points (median of each suite run's ok trials"
        f"{thinned}); failed trials are left out of every point."
        + (f" Ringed: {ringed} points with trials whose machine ran throttled or shared, or was not read." if ringed
           else "")
    )  # fmt: skip
    return figure, caption


figure, caption = data.drawn(history_figure, selection, metric_name, x, color, facet, scale, baseline)
if figure is None:
    st.warning(f"No {metric.label.lower()} measured for this selection.")
else:
    state.figure(figure)
    st.caption(caption)
if len(failed):
    box = state.on_demand(f"Suite runs with failed trials ({len(failed)})", "failed_runs")
    if box.open:
        box.dataframe(
            failed[["night", "model", "accelerator", "precision", "xla", "ok", "trials", "suite_run_id"]],
            hide_index=True,
        )
