"""Overview: the latest nightly of every series, with passing trials, failures and open alerts."""

import streamlit as st

from collector.analysis import alerts
from collector.store.selection import Selection
from dashboard import data, state

st.title("Overview")
catalog = data.load("catalog")
backends = sorted(catalog["backend"].unique())
accelerators = sorted(catalog["accelerator"].dropna().unique())
picked_backends = state.many("backend", backends, backends)
picked_accelerators = state.many("accelerator", accelerators, accelerators)
state.notices()
col1, col2 = st.columns(2)
picked_backends = col1.multiselect("Backend", backends, picked_backends)
picked_accelerators = col2.multiselect("Accelerator", accelerators, picked_accelerators)
state.keep(
    backend=picked_backends if picked_backends != backends else None,
    accelerator=picked_accelerators if picked_accelerators != accelerators else None,
)

selection = Selection.of(accelerator=picked_accelerators, backend=picked_backends)
latest = data.load("latest", selection)
open_alerts = data.load("alerts", alerts.OPEN, None)
open_by_series = open_alerts.groupby("series_key").size() if len(open_alerts) else {}
confirmed = open_alerts[open_alerts["status"] == alerts.CONFIRMED] if len(open_alerts) else open_alerts

passing = int((latest["ok"] == latest["trials"]).sum())
a, b, c, d = st.columns(4)
a.metric("Series", len(latest))
b.metric("All trials passing", f"{passing}/{len(latest)}")
c.metric("Series with failures", int((latest["ok"] < latest["trials"]).sum()))
d.metric("Open alerts", len(open_alerts), help=f"{len(confirmed)} confirmed")

table = latest.assign(
    passing=latest["ok"].astype(str) + "/" + latest["trials"].astype(str),
    throughput=latest["units_per_sec"].round(1).astype(str) + " " + latest["unit"].fillna("") + "/s",
    open_alerts=latest["series_key"].map(open_by_series).fillna(0).astype(int) if len(open_alerts) else 0,
)
st.subheader("Latest suite run per series")
st.dataframe(
    table[
        ["model", "preset", "backend", "accelerator", "precision", "xla", "per_device_batch", "passing",
         "throughput", "failures", "open_alerts", "tf_version", "label", "started_at", "series_key"]
    ],
    hide_index=True,
    width="stretch",
)  # fmt: skip
if len(confirmed):
    st.subheader("Confirmed regressions")
    st.dataframe(
        confirmed[["id", "model", "accelerator", "metric", "change_at", "ratio", "versions_changed"]], hide_index=True
    )
