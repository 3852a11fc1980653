"""Run: one trial's environment, step-time distribution, loss curve, error and log tail."""

import pandas as pd
import streamlit as st

from stepwatch.collector.metrics import HEADLINE
from stepwatch.collector.output.runs import memory_help
from stepwatch.collector.store.selection import ALL
from stepwatch.dashboard import charts, data, live, state

st.title("Run")
live.show()
recent = data.load("recent_runs", ALL, 200)
options = list(recent["run_id"])
labels = {
    r.run_id: f"{r.started_at:%Y-%m-%d %H:%M} {r.model}/{r.preset} {r.keras_backend} {r.accelerator} {r.precision} "
    f"jit_compile {'on' if r.xla else 'off'} ({r.compiler if isinstance(r.compiler, str) and r.compiler else '?'}) "
    f"trial {r.trial + 1} [{r.status}]"  # a compiler not recorded is missing (NaN), not text
    for r in recent.itertuples()
}
wanted = state.text("run", options[0])
row, windows = data.load("run_detail", wanted)
if row is None:
    state.ignore("run", wanted)
    wanted = options[0]
    row, windows = data.load("run_detail", wanted)
state.notices()
if wanted not in labels:
    labels[wanted] = wanted
    options.insert(0, wanted)
# The picker behind a button: a select of 200 runs drawn on the first screen cost the page's load about 0.06 s.
picked = state.filters(label="Pick a run").selectbox("Run", options, options.index(wanted), format_func=labels.get)
st.caption(labels[picked])
if picked != wanted:
    row, windows = data.load("run_detail", picked)
state.keep(run=picked)

if row["status"] != "ok":
    st.error(f"{row['status']}: {row.get('error_type') or ''} {row.get('error_message') or ''}")
if row.get("throttled") or row.get("shared"):  # the machine's state while it measured (collector.trial.machine)
    st.warning(f"This trial's machine: {row.get('machine_note')}. Its figures may be the machine's, not its code's.")
TILE_HELP = {"peak_memory_bytes": memory_help}  # what a figure means, where it needs saying
for column, metric in zip(st.columns(len(HEADLINE)), HEADLINE):
    explain = TILE_HELP.get(metric.name)
    column.metric(metric.heading.capitalize(), metric.shown(row.get(metric.name), row.get("unit")),
                  help=explain(row) if explain else metric.label)  # fmt: skip
if windows[["step_time_s", "loss"]].notna().any(axis=None):
    state.figure(data.drawn(charts.run_windows, windows))
if row.get("log_tail"):
    with st.expander("Log tail", expanded=row["status"] != "ok"):
        st.code(row["log_tail"])
st.subheader("Environment and configuration")
fields = {k: v for k, v in row.items() if v is not None and k not in ("log_tail",)}
box = state.on_demand(f"Environment and config: {len(fields)} fields", "environment")
if box.open:
    box.dataframe(pd.DataFrame({"field": list(fields), "value": [str(v) for v in fields.values()]}), hide_index=True)
