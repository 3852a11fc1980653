"""Cost: cost per run and per 1M examples by accelerator, with each price's source and date."""

import datetime

import pandas as pd
import streamlit as st

from stepwatch.collector.analysis.stats import plain
from stepwatch.collector.runner import catalog as catalog_prices
from stepwatch.collector.store.selection import Selection
from stepwatch.dashboard import charts, data, labels, state

st.title("Cost")
# What a night and a check cost: each suite run (a night's collect job, a side of a check), its trials' time at
# their price. GitHub's hosted runners are in the catalog, so a CPU night or a pull request's check has one.
runs = data.load("suite_run_costs", None)
if len(runs):
    latest_run = runs.iloc[:1]
    st.markdown(f"**The latest suite run** ({plain(latest_run['label'].iloc[0]) or 'no label'}, "
                f"{str(latest_run['started_at'].iloc[0])[:16]}): {labels.cost_text(latest_run)}")  # fmt: skip
    box = state.on_demand(f"What each of the last {len(runs)} suite runs (nights, checks) cost", "suite_run_costs")
    if box.open:
        box.dataframe(runs[["started_at", "label", "suite_run_id", "trials", "priced", "cost_usd", "wall_s",
                            "price_key", "unpriced"]], hide_index=True, width="stretch")  # fmt: skip
catalog = data.load("catalog")
models = sorted(catalog["model"].unique())
# A panel per config (model/preset), the first one by default: a first screen holds one panel, and each costs
# the browser about as much as a whole small figure to draw.
pairs = sorted(set(catalog[["model", "preset"]].itertuples(index=False, name=None)), key=str)
configs = {f"{model}/{preset}": (model, preset) for model, preset in pairs}  # a model can be a path: never split
names = list(configs)
linked = state.many("model", models, [])  # a link from before configs were picked: every config of its models
picked = state.many("config", names, [name for name, (model, _) in configs.items() if model in linked] or names[:1])
state.notices()
box = state.filters()
picked = box.multiselect("Config", names, picked)
st.caption(state.said(("Config", picked, names)))
state.keep(config=picked, model=None)
if not picked:
    st.info("Pick at least one config.")
    st.stop()
chosen = [Selection.of(model=model, preset=preset) for model, preset in (configs[name] for name in picked)]
frame = pd.concat([data.load("costs", one) for one in chosen], ignore_index=True)
gaps = pd.concat([data.load("cost_gaps", one) for one in chosen], ignore_index=True)
for why, trials in gaps.groupby("why", sort=False)["trials"].sum().items():
    st.warning(f"{trials} successful trial(s) have no cost: {why}")
if frame.empty:
    st.info("No priced successful runs for this selection.")
    st.stop()
measure, tab = state.picked_tab("measure", list(charts.COST_METRICS.values()))  # one measure at a time
state.figure(data.drawn(charts.cost_bars, frame, list(charts.COST_METRICS)[measure]), tab)
st.caption(
    "Medians of successful trials. Under each bar: the hardware, and [n], the price it was costed at, listed below "
    "with its source and whose it is (stepwatch's catalog; your catalog, the project's `prices` setting; your own "
    "price, its `own-price` setting; or --price-per-hour). A price says what it covers: a whole instance, an "
    "instance's price divided by its devices (its CPUs and memory included), or the device alone."
)


marks = charts.price_marks(frame)
today = datetime.date.today()
prices = frame.drop_duplicates("price_key").sort_values("price_key")
doubted = {p.price_key: catalog_prices.doubts(plain(p.price_date), plain(p.price_confidence), today)
           for p in prices.itertuples(index=False)}  # fmt: skip
doubted = {key: why for key, why in doubted.items() if why}
if doubted:
    st.warning(
        f"{len(doubted)} of these prices may not be what the hardware costs today: "
        + "; ".join(f"[{marks[key]}] {plain(key)}: {', '.join(why)}" for key, why in sorted(doubted.items()))
        + ". Give your own (the project's `own-price` setting, or --price-per-hour)."
    )
st.markdown(
    "\n".join(
        f"{marks[p.price_key]}. **{p.price_key}**, {plain(p.price_whose) or catalog_prices.CATALOG} "
        f"({plain(p.price_covers) or 'what it covers not recorded'}, {plain(p.price_date) or 'no date'}"
        f"{', confidence ' + plain(p.price_confidence) if plain(p.price_confidence) else ''}"
        f"{' ⚠️ ' + ', '.join(doubted[p.price_key]) if p.price_key in doubted else ''}): "
        f"{plain(p.price_source) or 'no source'}"
        for p in prices.itertuples(index=False)
    )
)
box = state.on_demand(f"Table: {len(frame)} config points, with each price's source and date", "cost_table")
if box.open:
    box.dataframe(
        frame[
            ["accelerator", "model", "preset", "precision", "xla", "per_device_batch", "cost_usd",
             "cost_per_1m_examples_usd", "examples_per_sec", "price_key", "price_per_device_hour", "price_covers",
             "price_source", "price_date", "price_whose", "price_confidence"]
        ],
        hide_index=True,
        width="stretch",
    )  # fmt: skip
