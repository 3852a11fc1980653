"""Overview: did anything get slower? Per series, its latest suite run against the run before it and against
its baseline, with the verdict of each (coloured), a sparkline of its recent nights, its trials passing and
its open alerts; series with open alerts and regressions first."""

import streamlit as st

from stepwatch.collector.analysis import latest
from stepwatch.collector.analysis.thresholds import load_overrides
from stepwatch.collector.metrics import METRICS
from stepwatch.collector.outcomes import CHANGED
from stepwatch.collector.output.runs import verified_text
from stepwatch.collector.output.text import series_label
from stepwatch.collector.store import records
from stepwatch.collector.store.selection import Selection
from stepwatch.dashboard import data, labels, state

st.title("Overview")
catalog = data.load("catalog")
devices = state.choices(catalog["device"])
keras_backends = state.choices(catalog["keras_backend"])
accelerators = state.choices(catalog["accelerator"])
metric_names = list(METRICS)
picked_devices = state.many("device", devices, devices)
picked_keras = state.many("keras_backend", keras_backends, keras_backends)
picked_accelerators = state.many("accelerator", accelerators, accelerators)
headline = data.load("headline")  # throughput, or for a store of imported results alone, their own metric
metric_name = state.one("metric", metric_names, headline)
regressed_only = state.one("regressed", ["yes", "no"], "no") == "yes"
state.notices()
box = state.filters()
metric_name = box.selectbox(
    "Metric", metric_names, metric_names.index(metric_name), format_func=lambda m: METRICS[m].label
)
picked_devices = box.multiselect("Device", devices, picked_devices)
picked_keras = box.multiselect("Keras backend", keras_backends, picked_keras)
picked_accelerators = box.multiselect("Accelerator", accelerators, picked_accelerators)
regressed_only = box.toggle("Regressed only", regressed_only)
st.caption(
    state.said(
        ("Metric", [METRICS[metric_name].label], metric_names), ("Device", picked_devices, devices),
        ("Keras backend", picked_keras, keras_backends), ("Accelerator", picked_accelerators, accelerators),
    )
    + (" · regressed only" if regressed_only else "")
)  # fmt: skip
state.keep(
    device=picked_devices if picked_devices != devices else None,
    keras_backend=picked_keras if picked_keras != keras_backends else None,
    accelerator=picked_accelerators if picked_accelerators != accelerators else None,
    metric=metric_name if metric_name != headline else None,
    regressed="yes" if regressed_only else None,
)
metric = METRICS[metric_name]

selection = Selection.of(accelerator=picked_accelerators, device=picked_devices, keras_backend=picked_keras)
overrides = load_overrides()
table = data.load("overview", selection, metric_name, overrides)
open_alerts = data.load("alerts", records.OPEN, None)
open_alerts["verified"] = [verified_text(a) for a in open_alerts.to_dict("records")] if len(open_alerts) else ""
worse_ones = latest.worse_alerts(open_alerts, overrides)  # a change in its metric's worse direction
confirmed = open_alerts[worse_ones & (open_alerts["status"] == records.CONFIRMED)]
changed = open_alerts[~worse_ones]
regressed = latest.regressed(table)

unit = metric.unit.replace("{unit}", "units")
a, b, c, d, e = st.columns(5)
a.metric("Series", len(table))
b.metric(
    "Regressed", int(regressed.sum()),
    help="a regression against the previous run or the baseline, or an open alert in its metric's worse direction",
)  # fmt: skip
c.metric("All trials passing", f"{int((table['ok'] == table['trials']).sum())}/{len(table)}")
d.metric("Series with failures", int((table["ok"] < table["trials"]).sum()))
e.metric(
    "Open alerts", len(open_alerts),
    help=f"{int(worse_ones.sum())} regressions ({len(confirmed)} confirmed), {len(changed)} changed: a counter that "
    "moved where no direction is declared better",
)  # fmt: skip


records = table.to_dict("records")
shown = table.assign(
    series=[series_label(r) for r in records],
    latest=[f"{v * metric.scale:.4g}" if v == v else "" for v in table["value"]],
    spark=[labels.spark_text(v) for v in table["spark"]],
    vs_previous=[labels.change_text(r, "previous") for r in records],
    vs_baseline=[labels.change_text(r, "baseline") for r in records],
    vs_level=[labels.change_text(r, "level") for r in records],
    sees=[labels.seen_text(r) for r in records],
    passing=table["ok"].astype(str) + "/" + table["trials"].astype(str),
    machine=[labels.machine_text(r["flagged"], r["unread"]) for r in records],
)
shown["verdict"] = shown["verdict"].replace(labels.CHANGE_WORDS)  # shown only: sorting and colours use the verdicts
if regressed_only:
    shown = shown[regressed]
st.subheader(f"Latest suite run per series: {metric.label.lower()}")
st.caption(
    f"Each change is the latest run's trials against the run before it and against the baseline (the trials of "
    f"up to {latest.BASELINE_NIGHTS} nights before it, none from before an acknowledged change), and the level of "
    f"the last {latest.LEVEL_NIGHTS} nights against the nights before them, as a ratio of geometric means with its "
    f"95% interval; the colour is the verdict against the metric's threshold ({metric.threshold:.0%}), after "
    'Benjamini-Hochberg across the series. One night moves by its own offset, so it can rarely say "no change" '
    "to a few percent; a week of nights can. The status is a change the latest night shows on its own, else the "
    'level\'s verdict, and "could see" says the change each could tell from none.'
)
columns = ["verdict", "series", "spark", "latest", "vs_previous", "vs_baseline", "vs_level", "sees", "passing",
           "machine", "numerics", "noise", "alerts", "changed_alerts", "failures", "night_variance", "tf_version",
           "keras_version",
           "label", "started_at", "series_key"]  # fmt: skip
chipped = {"verdict": "verdict", "vs_previous": "previous_verdict", "vs_baseline": "baseline_verdict",
           "vs_level": "level_verdict"}  # fmt: skip
cells, palettes = labels.verdict_chips(shown[columns], chipped, shown)


RATIO = "ratio and its 95% interval"


def chips(label: str, column: str, tip: str) -> object:
    """The column's cells as labels in their verdict's colour."""
    options, colours = palettes[column]
    return st.column_config.MultiselectColumn(label, help=tip, options=options, color=colours)


st.dataframe(
    cells,
    hide_index=True,
    width="stretch",
    height=min(38 + 35 * max(len(shown), 1), 720),
    column_config={
        "latest": st.column_config.TextColumn(f"latest ({unit})" if unit else "latest"),
        "vs_previous": chips("vs previous run", "vs_previous", RATIO),
        "vs_baseline": chips(f"vs baseline (≤{latest.BASELINE_NIGHTS} nights)", "vs_baseline", RATIO),
        "vs_level": chips(
            f"last {latest.LEVEL_NIGHTS} nights", "vs_level",
            f"the last {latest.LEVEL_NIGHTS} nights' level against up to {latest.LEVEL_BASE_NIGHTS} nights before "
            "them: night means against night means (empty: too few nights since the baseline began)",
        ),
        "sees": st.column_config.TextColumn(
            "could see", help="the change each comparison can tell from none: half its 95% interval"
        ),
        "night_variance": st.column_config.TextColumn(
            "night-to-night", help="where the variance of a night's offset in the latest night's intervals came from"
        ),
        "series": st.column_config.TextColumn("series", width="large"),
        "spark": st.column_config.TextColumn(
            f"last {latest.SPARK_NIGHTS} nights", help="each night's median, from its lowest to its highest"
        ),
        "noise": st.column_config.TextColumn("throughput noise"),
        "numerics": st.column_config.TextColumn(
            "numerics vs previous run", width="medium",
            help="the latest run's loss trajectories against the run before it, trial i of each from seed i: "
            "identical, within seed spread or changed (docs/reference.md, 'Numerics beside speed')",
        ),
        "alerts": st.column_config.NumberColumn("alerts", help="open alerts in their metric's worse direction"),
        "changed_alerts": st.column_config.NumberColumn(
            "changed", help="open alerts of a counter that moved where no direction is declared better"
        ),
        "machine": st.column_config.TextColumn(
            "machine", help="the latest run's ok trials that ran throttled or shared, or did not read the machine"
        ),
        "verdict": chips(
            "status", "verdict",
            "a change the latest night shows on its own, else the level's verdict (latest.row_verdict)",
        ),
    },
)  # fmt: skip
bimodal = shown[shown["bimodal"]]
if len(bimodal):
    st.warning(
        f"{len(bimodal)} series bimodal across processes (trials land on one of two speeds; see the noise column): "
        + "; ".join(bimodal["series"])
    )
retrained = shown[shown["numerics"].astype("string").fillna("").str.startswith(f"{CHANGED}:")]  # all empty: floats
if len(retrained):
    st.warning(
        f"{len(retrained)} series' latest run trains differently from the run before it (the numerics column): "
        + "; ".join(f"{row['series']}: {row['numerics']}" for row in retrained.to_dict("records"))
    )
flagged = shown[shown["machine"] != ""]
if len(flagged):
    st.warning(
        f"{len(flagged)} series' latest run has trials whose machine ran throttled or shared, or was not read: their "
        "verdicts may be the machine's, not the software's (the machine column)."
    )
alert_columns = ["id", "model", "accelerator", "metric", "change_at", "ratio", "versions_changed", "verified"]
if len(confirmed):
    st.subheader("Confirmed regressions")
    st.dataframe(confirmed[alert_columns], hide_index=True)
checked = open_alerts["verification"].notna() if "verification" in open_alerts else worse_ones & False
verified = open_alerts[worse_ones & checked] if len(open_alerts) else open_alerts
if len(verified):
    st.subheader("Verified on one runner")
    st.caption("What `stepwatch alerts verify` measured again, both sides interleaved on one runner with an A/A: "
               "only a reproduced regression opens the issue.")  # fmt: skip
    st.dataframe(verified[["status", *alert_columns]], hide_index=True)
if len(changed):
    st.subheader("Changed")
    st.caption("Open alerts of counters that moved where no direction is declared better (stepwatch alerts list).")
    st.dataframe(changed[["status", *alert_columns]], hide_index=True)
