"""Overview: the latest nightly of every series, with passing trials, failures and open alerts."""

import streamlit as st

from collector.analysis import alerts, stats
from collector.analysis.report import series_label
from collector.metrics import DEFAULT_METRIC
from collector.store.selection import Selection
from dashboard import data, state

st.title("Overview")
catalog = data.load("catalog")
devices = sorted(catalog["device"].unique())
keras_backends = sorted(catalog["keras_backend"].unique())
accelerators = sorted(catalog["accelerator"].dropna().unique())
picked_devices = state.many("device", devices, devices)
picked_keras = state.many("keras_backend", keras_backends, keras_backends)
picked_accelerators = state.many("accelerator", accelerators, accelerators)
state.notices()
col1, col2, col3 = st.columns(3)
picked_devices = col1.multiselect("Device", devices, picked_devices)
picked_keras = col2.multiselect("Keras backend", keras_backends, picked_keras)
picked_accelerators = col3.multiselect("Accelerator", accelerators, picked_accelerators)
state.keep(
    device=picked_devices if picked_devices != devices else None,
    keras_backend=picked_keras if picked_keras != keras_backends else None,
    accelerator=picked_accelerators if picked_accelerators != accelerators else None,
)

selection = Selection.of(accelerator=picked_accelerators, device=picked_devices, keras_backend=picked_keras)
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

# Each series' trial-to-trial noise over its last trials, and whether its processes land on two speeds.
values = data.load("trial_values", tuple(latest["series_key"]), DEFAULT_METRIC, stats.NOISE_TRIALS)
noise = {key: stats.noise_of(v) for key, v in values.items()}
table = latest.assign(
    passing=latest["ok"].astype(str) + "/" + latest["trials"].astype(str),
    throughput=latest["units_per_sec"].round(1).astype(str) + " " + latest["unit"].fillna("") + "/s",
    open_alerts=latest["series_key"].map(open_by_series).fillna(0).astype(int) if len(open_alerts) else 0,
    noise=[stats.noise_text(noise.get(key)) for key in latest["series_key"]],
)
st.subheader("Latest suite run per series")
st.dataframe(
    table[
        ["model", "preset", "keras_backend", "device", "accelerator", "precision", "xla", "per_device_batch",
         "passing", "throughput", "noise", "failures", "open_alerts", "keras_version", "tf_version", "jax_version",
         "torch_version", "label", "started_at", "series_key"]
    ],
    hide_index=True,
    width="stretch",
)  # fmt: skip
bimodal = [key for key, n in noise.items() if n.bimodal]
if bimodal:
    rows = latest[latest["series_key"].isin(bimodal)].to_dict("records")
    st.warning(
        f"{len(bimodal)} series bimodal across processes (trials land on one of two speeds; see the noise column): "
        + "; ".join(series_label(r) for r in rows)
    )
if len(confirmed):
    st.subheader("Confirmed regressions")
    st.dataframe(
        confirmed[["id", "model", "accelerator", "metric", "change_at", "ratio", "versions_changed"]], hide_index=True
    )
