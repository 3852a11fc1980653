"""Speedups: XLA on vs off per model and device, each precision mode against fp32, and each Keras backend
against TensorFlow, each with its 95% interval and trial counts; one whose interval holds 1 is shown as such."""

import pandas as pd
import streamlit as st

from stepwatch.collector.analysis.speedups import with_intervals
from stepwatch.collector.store.queries import SPEEDUPS, version_key
from stepwatch.collector.store.selection import ALL, Selection
from stepwatch.dashboard import charts, data, state

st.title("Speedups")
catalog = data.load("catalog")
# Keras is the one version every backend's runs share (a JAX or torch run has no TensorFlow version).
versions = sorted(data.load("versions", ALL)["keras_version"], key=version_key)
accelerators = sorted(catalog["accelerator"].dropna().unique())
version = state.one("keras_version", versions, versions[-1] if versions else None)
picked = state.many("accelerator", accelerators, accelerators[:2])  # a row of two panels, each readable
state.notices()
box = state.filters()
version = box.selectbox("Keras version", versions, versions.index(version) if version in versions else 0)
picked = box.multiselect("Accelerator", accelerators, picked)
st.caption(state.said(("Keras", [version], versions), ("Accelerator", picked, accelerators)))
state.keep(keras_version=version, accelerator=picked)

# Plain PyTorch runs have no Keras version: they are shown whichever is picked.
frame = pd.concat(
    [
        data.load("speedups", Selection.of(**where, accelerator=picked))
        for where in ({"keras_version": version}, {"loop": "pytorch"})
    ],
    ignore_index=True,
)
if frame.empty:
    st.info("No successful runs for this selection.")
    st.stop()
frame = with_intervals(frame)
st.caption(
    "Each bar is the ratio of the geometric means of the two points' successful trials, with its 95% interval "
    "(Welch, on log throughput); a faint, hatched bar's interval holds 1: the trials do not show a speedup."
)


def bars(points: pd.DataFrame, kind: str, title: str, missing: str, **style: str) -> None:
    """The chart of one kind of speedup, or a line saying why there is none (never an empty chart)."""
    if points[f"{kind}_speedup"].notna().any():
        state.figure(data.drawn(charts.speedup_bars, points, kind, title, **style))
    else:
        st.caption(f"{title.split(' (')[0]}: {missing}")


def plain_pytorch() -> None:
    """Plain PyTorch against Keras on torch: rows of plain PyTorch have no Keras version, so any Keras version's
    fit trials of the same config are its reference here."""
    plain = with_intervals(data.load("speedups", Selection.of(keras_backend="torch", accelerator=picked)))
    bars(
        plain[plain["loop"] == "pytorch"],
        "plain",
        "Plain PyTorch vs Keras on torch (same model, precision, batch, device and compile setting; Keras: any "
        "version)",
        "no plain PyTorch run (--loop pytorch) has a Keras-on-torch run of the same config here.",
        pattern="xla",
    )


# One kind of speedup at a time, a tab each.
KINDS = {
    "jit_compile on vs off": lambda: bars(
        frame[frame["xla"]],
        "xla",
        "jit_compile on vs off (XLA; torch.compile on torch), same precision and batch",
        "no config in this selection ran both with and without it.",
    ),
    "Precision vs fp32": lambda: bars(
        frame,
        "precision",
        "Precision modes vs the fastest fp32 point (jit_compile off / on)",
        "no config in this selection ran another precision beside fp32."
        if (frame["precision"] != "fp32").any()
        else "only fp32 was run in this selection.",
        pattern="xla",
    ),
    "Keras backends vs TensorFlow": lambda: bars(
        frame[frame["keras_backend"] != "tensorflow"],
        "backend",
        "Keras backends vs TensorFlow (same model, precision, batch, device and jit_compile setting)",
        "no JAX or torch run has a TensorFlow run of the same config here.",
        color="keras_backend",
        pattern="xla",
    ),
    "Plain PyTorch vs Keras": plain_pytorch,
}
kind, tab = state.picked_tab("kind", list(KINDS))
with tab:
    list(KINDS.values())[kind]()
columns = [
    "model",
    "preset",
    "keras_backend",
    "accelerator",
    "precision",
    "xla",
    "per_device_batch",
    "examples_per_sec",
    "n",
    *(f"{k}_{part}" for k in SPEEDUPS for part in ("speedup", "ci_low", "ci_high", "n")),
]
box = state.on_demand(f"Table: {len(frame)} config points", "speedups_table")
if box.open:
    box.dataframe(frame[columns], hide_index=True, width="stretch")
