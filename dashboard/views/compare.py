"""Compare: two selections, a forest plot of ratios with CIs, the verdict table and a repro command per row; and
where both sides have profiled trials, the op diff of a pair of series (``stepwatch explain``) with its raw profiles."""

import json
import math

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from stepwatch.collector import metrics
from stepwatch.collector.analysis import calibration
from stepwatch.collector.analysis.thresholds import load_overrides
from stepwatch.collector.environments.packages import Change, describe
from stepwatch.collector.output import numerics as numerics_output
from stepwatch.collector.output.comparison import (
    between_lines,
    code_warnings,
    headline,
    inconclusive_lines,
    resolution_lead,
    row_cells,
    summary_text,
)
from stepwatch.collector.output.explain import header_line, pair_lines
from stepwatch.collector.output.sides import flagged, kernel_lines, machine_line
from stepwatch.collector.output.text import interval, percent, plain_rows, repro_command, series_label
from stepwatch.collector.store.profiled import OP_KEYS
from stepwatch.collector.store.queries import version_key
from stepwatch.collector.store.selection import ALL, Selection, SelectionError
from stepwatch.collector.trial.profiles import raw_profile
from stepwatch.dashboard import charts, data, state

st.title("Compare")
catalog = data.load("catalog")
versions = sorted(data.load("versions", ALL)["tf_version"], key=version_key)
runs = list(dict.fromkeys(data.load("recent_runs", ALL, 200)["suite_run_id"]))[::-1]
if len(versions) >= 2:
    default_a, default_b = f"tf_version={versions[-2]}", f"tf_version={versions[-1]}"
elif len(runs) >= 2:
    default_a, default_b = f"suite_run_id={runs[-2]}", f"suite_run_id={runs[-1]}"
else:
    default_a = default_b = ""


def bisect_steps() -> None:
    """The store's bisects (``stepwatch bisect``): the path one took, and a button to compare a step's sides."""
    steps = data.load("bisect_steps")
    if steps.empty:
        return
    ids = list(dict.fromkeys(steps["bisect_id"]))
    first = steps.groupby("bisect_id").first()
    names = {
        i: f"{first.at[i, 'good']} -> {first.at[i, 'bad']} ({first.at[i, 'created_at']:%Y-%m-%d %H:%M})" for i in ids
    }
    with st.expander(f"Bisects in this store: {len(ids)}", expanded=True):
        picked = st.selectbox("Bisect", ids, format_func=names.get)
        mine = steps[steps["bisect_id"] == picked]
        rows = [
            {
                "step": int(r["step"]),
                "outcome": r["outcome"] + (f" ({r['reason']})" if r["reason"] else ""),
                "change": percent(r["ratio"]),
                "95% CI": interval(r["ci_low"], r["ci_high"]),
                "measured": r["why"]
                if r["step"] == 0
                else f"{r['why']}: {describe(Change(*c) for c in json.loads(r['applied']))}",
                "verdict": r["verdict"] or "",
                "series": series_label(r) if r["series_key"] else "",
                "metric": r["metric"] or "",
            }
            for r in plain_rows(mine)
        ]
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
        measured = mine.dropna(subset=["candidate_suite_run_id"]).drop_duplicates("step")
        if measured.empty:
            return
        step = st.selectbox("Compare a step's two sides", list(measured["step"]), format_func=lambda n: f"step {n}")
        chosen = measured[measured["step"] == step].iloc[0]
        if st.button("Compare this step"):
            st.query_params["baseline"] = f"suite_run_id={chosen['baseline_suite_run_id']}"
            st.query_params["candidate"] = f"suite_run_id={chosen['candidate_suite_run_id']}"
            if chosen["metric"]:
                st.query_params["metric"] = chosen["metric"]
            st.rerun()


bisect_steps()
baseline_text = state.text("baseline", default_a)
candidate_text = state.text("candidate", default_b)
metric_names = list(metrics.METRICS)
picked_metrics = state.many("metric", metric_names, [metrics.DEFAULT_METRIC])
state.notices()

col1, col2 = st.columns(2)
baseline_text = col1.text_input(
    "Baseline", baseline_text, help="e.g. tf_version=2.20.0, label=baseline, since=2026-11-01"
)
candidate_text = col2.text_input(
    "Candidate", candidate_text, help="e.g. tf_version=2.21.0, project_commit=3f2a9c1..., suite_run_id=..."
)
picked_metrics = state.filters(label="Metrics").multiselect("Metrics", metric_names, picked_metrics)
st.caption(state.said(("Metrics", picked_metrics, metric_names)))
exclude_flagged = st.checkbox(
    "Leave out flagged trials", state.one("exclude", ["flagged"], "") == "flagged",
    help="Trials whose machine ran throttled or shared, or was not read (stepwatch compare --exclude-flagged)",
)  # fmt: skip
state.keep(baseline=baseline_text, candidate=candidate_text, metric=picked_metrics,
           exclude="flagged" if exclude_flagged else None)  # fmt: skip

try:
    baseline, candidate = Selection.parse(baseline_text), Selection.parse(candidate_text)
except SelectionError as error:
    st.error(str(error))
    st.stop()
if exclude_flagged:
    baseline, candidate = baseline.unflagged(), candidate.unflagged()
if not baseline_text or not candidate_text or not picked_metrics:
    st.info(
        "Give two selections (e.g. tf_version=2.20.0 and tf_version=2.21.0, or label=baseline and label=candidate) "
        "and at least one metric."
    )
    st.stop()

try:
    calibrated = calibration.find(None)  # this runner's calibration, as the CLI's compare reads it
except calibration.CalibrationError as error:
    st.warning(str(error))
    calibrated = None
between = calibrated.between() if calibrated else {}
asked = (baseline, candidate, picked_metrics, load_overrides(), between)
comparison = data.load("compare", *asked)
counts = {side: int(comparison.versions[side]["runs"][0]) for side in ("baseline", "candidate")}
for side, count in counts.items():
    if count == 0:
        st.warning(f"The {side} selection matches no runs.")
for line in [*kernel_lines(comparison), *numerics_output.lead_lines(comparison)]:  # a kernel, a training changed
    if line:
        st.warning(line)
for line in resolution_lead(comparison):
    st.warning(line)
for line in code_warnings(comparison):
    st.warning(line)
machine = machine_line(comparison)
if machine and flagged(comparison):
    st.warning(f"{machine}: a verdict drawn from these trials may be the machine's, not the software's.")
elif machine:
    st.caption(machine)
st.subheader(headline(comparison))
st.caption(" ".join(between_lines(between)).strip())
for metric in comparison.metrics:
    text = summary_text(comparison, metric)
    if text:
        st.markdown(f"**{metric.label}**: {text}")
trained = numerics_output.series_lines(comparison)
if trained:
    st.markdown(f"**{trained[0][0].upper()}{trained[0][1:]}** (trial i of each side from seed i)")
    if len(trained) > 1:
        st.text("\n".join(trained[1:]))


def verdicts(*asked: object) -> tuple[int, go.Figure | None, pd.DataFrame, str]:
    """The rows with a ratio, the forest plot of the worst of them, the verdict table and its CSV: built once
    per store version and comparison, not on every visit (about 20 ms of each at 1M rows)."""
    comparison = data.load("compare", *asked)
    drawn = sum(1 for r in comparison.rows if not math.isnan(r.result.ratio))
    rows = [
        {
            **{k: v for k, v in row_cells(r).items() if k not in ("n", "q")},
            "n baseline": r.result.baseline.n,
            "n candidate": r.result.candidate.n,
            "failed": r.failed_baseline + r.failed_candidate,
            "q": r.result.q_value,
            "repro": repro_command(r.series),
        }
        for r in comparison.ordered()
    ]
    table = pd.DataFrame(rows)
    return drawn, charts.forest(comparison) if drawn else None, table, table.to_csv(index=False)


drawn, forest, table, csv = data.drawn(verdicts, *asked)
if forest is not None:
    state.figure(forest)
else:
    st.caption("No series has successful trials on both sides: no ratio to draw (the table says what each side has).")
if drawn > charts.FOREST_ROWS:
    st.caption(
        f"The {charts.FOREST_ROWS} worst of {drawn} rows with a ratio (regressions first); the table has them all."
    )
box = state.on_demand(f"Verdict table: {len(table)} rows, with a repro command each", "verdict_table")
if box.open:
    box.dataframe(table, hide_index=True, width="stretch")
st.download_button("Download CSV", csv, "stepwatch-compare.csv", "text/csv")
# What would resolve each inconclusive row, on demand: one line a row (hundreds on a wide comparison's A/A), drawn
# as one element, as `stepwatch compare` prints them.
inconclusive = inconclusive_lines(comparison)
if inconclusive:
    why = state.on_demand(f"Inconclusive: {len(inconclusive)} rows, and what would resolve each", "inconclusive")
    if why.open:
        why.text("\n".join(inconclusive))
for side in ("baseline", "candidate"):
    only = comparison.only_on(side)
    if only:
        st.caption(f"Only in the {side}: " + "; ".join(series_label(r.series) for r in only))


def where_the_time_went() -> None:
    """The op diff of the pair of series picked (``stepwatch explain``), where both sides have profiled trials."""
    by = st.radio("Align ops by", OP_KEYS, horizontal=True, format_func=lambda k: k.replace("op_", "op "))
    pairs, unpaired = data.load("explain", baseline, candidate, by)
    if not pairs:
        one_side = [f"{series_label(s)} ({side})" for side, found in unpaired.items() for s in found]
        st.caption("No series has profiled trials on both sides" + (": " + "; ".join(one_side) if one_side else "")
                   + ". Run with --profile (run, upgrade-check, bisect) to see which ops moved.")  # fmt: skip
        return
    labels = [series_label(p.series) for p in pairs]
    picked = pairs[st.selectbox("Series", range(len(pairs)), format_func=labels.__getitem__)]
    st.text(header_line(picked))
    state.figure(charts.op_diff(picked))
    moved = picked.moved()
    st.caption(
        f"{len(picked.ops)} ops, {len(moved)} moved; the change that no op explains: "
        f"{picked.remainder_s * 1e3:+.3f} ms a step (time outside every op, or ops overlapping on parallel threads)."
    )
    with st.expander("Every op, as `stepwatch explain` prints it"):
        st.text("\n".join(pair_lines(picked, top=len(picked.ops))[1:]))
    for column, (side, uris) in zip(st.columns(2), picked.profiles.items()):
        for uri in uris[:1]:
            path, viewer = raw_profile(uri)
            column.markdown(f"**{side} profile** · {viewer}")
            if path is not None:
                column.download_button(f"Download {path.name} ({path.stat().st_size / 1e6:.1f} MB)", path.read_bytes(),
                                       path.name, key=f"raw-{side}")  # fmt: skip


st.subheader("Where the time went")
where_the_time_went()
