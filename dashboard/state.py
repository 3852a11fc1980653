"""Filters live in the URL, so a copied link reproduces the view. Values read from the URL are checked
against what the store offers; anything unknown or malformed is dropped with a notice, never used."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st

from stepwatch.collector.config import FORMER_NAMES
from stepwatch.collector.store.selection import LINK_VALUE_MAX, NOT_RECORDED, Selection

FORMER_KEYS = {name: old for old, name in FORMER_NAMES.items()}  # links made before a field was renamed


def _raw(key: str) -> str | None:
    """The URL's value for ``key``, or under its former name (``backend`` for ``device``)."""
    raw = st.query_params.get(key)
    if raw is None and key in FORMER_KEYS:
        raw = st.query_params.get(FORMER_KEYS[key])
    return raw


def ignore(key: str, raw: str) -> None:
    """Note a URL value that was not used (shown by ``notices``)."""
    shown = raw if len(raw) <= 60 else raw[:57] + "..."
    st.session_state.setdefault("_ignored", []).append(f"{key}={shown!r}")


def one(key: str, options: Sequence[Any], default: Any) -> Any:
    """The URL's value for ``key`` if it is one of ``options`` (compared as text), else ``default``."""
    raw = _raw(key)
    if raw is None:
        return default
    for option in options:
        if str(option) == raw:
            return option
    ignore(key, raw)
    return default


def many(key: str, options: Sequence[Any], default: Sequence[Any]) -> list[Any]:
    """Comma-separated URL values for ``key`` that are among ``options``; unknown ones are dropped."""
    raw = _raw(key)
    if raw is None:
        return list(default)
    by_text = {str(o): o for o in options}
    picked = []
    for part in raw.split(","):
        if part in by_text:
            picked.append(by_text[part])
        elif part:
            ignore(key, part)
    return picked or list(default)


XLA = ["off", "on"]


def series_picks(catalog: pd.DataFrame) -> tuple[dict[str, list], dict[str, list], pd.DataFrame]:
    """The choices of the four series filters History and Versions share (model, accelerator, precision, XLA),
    what the link picks of each, else the default, and the catalog's series of the picked models and
    accelerators. By default: the first model and accelerator, XLA off and on, and the one precision of theirs
    that ran last. One precision puts lines of one scale on the axis, and makes a first screen of a few lines
    rather than every precision's (the browser draws a line in several ms: docs/reference.md, "Dashboard
    figures")."""
    options = {
        "model": choices(catalog["model"]),
        "accelerator": choices(catalog["accelerator"]),
        "precision": choices(catalog["precision"]),
        "xla": XLA + ([NOT_RECORDED] if catalog["xla"].isna().any() else []),
    }
    picked = {key: many(key, options[key], options[key][:1]) for key in ("model", "accelerator")}
    theirs = catalog[catalog["model"].isin(picked["model"]) & catalog["accelerator"].isin(picked["accelerator"])]
    last = list(theirs.sort_values("last_at", na_position="first")["precision"].iloc[-1:]) or options["precision"][:1]
    picked["precision"] = many("precision", options["precision"], last)
    picked["xla"] = many("xla", options["xla"], options["xla"])
    return options, picked, theirs


def choices(values: pd.Series) -> list:
    """A filter's options: the values a dimension has, sorted, and NOT_RECORDED where some series have none (an
    imported result whose tool did not record it)."""
    found = values.dropna()
    empty = found.astype(str) == ""
    return sorted(found[~empty].unique()) + ([NOT_RECORDED] if values.isna().any() or empty.any() else [])


def filters(where: Any = None, label: str = "Filters") -> Any:
    """A page's filters behind one button (a popover; say what they pick under it with ``said``, once they have
    run). A popover's widgets are drawn only once it is opened: four multiselects on a page's first screen cost
    its load about 0.07 s in chromium here, a closed popover next to nothing (docs/reference.md, "Dashboard
    figures")."""
    return (where or st).popover(label, icon=":material/filter_list:")


def said(*filters: tuple[str, Sequence[Any], Sequence[Any]]) -> str:
    """What each ``(label, picked, options)`` filter picks, in a line: its values, or "all N" or "N of M" where
    they are more than three."""
    parts = []
    for label, picked, options in filters:
        if len(options) > 3 and set(picked) >= set(options):
            text = f"all {len(options)}"
        elif len(picked) > 3:
            text = f"{len(picked)} of {len(options)}"
        else:
            text = ", ".join(str(v) for v in picked) or "none"
        parts.append(f"{label}: {text}")
    return " · ".join(parts)


SERIES_FILTERS = {"model": "Model", "accelerator": "Accelerator", "precision": "Precision", "xla": "XLA"}


def series_filters(box: Any, options: dict[str, list], picked: dict[str, list]) -> dict[str, list]:
    """The four series filters of ``series_picks`` in ``box`` (a page's ``filters``): what they pick now."""
    return {key: box.multiselect(label, options[key], picked[key]) for key, label in SERIES_FILTERS.items()}


def series_selection(picked: dict[str, list]) -> Selection:
    """The series the four filters pick (XLA's "off"/"on" as the store's booleans)."""
    return Selection.of(**{**picked, "xla": [v if v == NOT_RECORDED else v == "on" for v in picked["xla"]]})


def series_said(options: dict[str, list], picked: dict[str, list]) -> list[tuple[str, list, list]]:
    """The four series filters as ``said`` takes them."""
    return [(label, picked[key], options[key]) for key, label in SERIES_FILTERS.items()]


def text(key: str, default: str) -> str:
    """Free text from the URL (a selection); callers parse it with bound parameters only."""
    raw = _raw(key)
    if raw is None:
        return default
    if len(raw) > LINK_VALUE_MAX or any(ord(c) < 32 for c in raw):
        ignore(key, raw)
        return default
    return raw


def keep(**values: Any) -> None:
    """Write the current filters back into the URL (under current names: a former name is dropped), in one
    update and only where the URL changes: each write is a message the browser turns into a history entry."""
    wanted: dict[str, str] = {}
    dropped = []
    for key, value in values.items():
        if key in FORMER_KEYS and FORMER_KEYS[key] in st.query_params:
            dropped.append(FORMER_KEYS[key])
        if value is None or value == [] or value == "":
            if key in st.query_params:
                dropped.append(key)
        else:
            text = ",".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)
            if st.query_params.get(key) != text:
                wanted[key] = text
    for key in dropped:
        del st.query_params[key]
    if wanted:
        st.query_params.update(wanted)


def notices() -> None:
    """One notice for the URL values that were ignored on this run."""
    ignored = st.session_state.pop("_ignored", [])
    if ignored:
        st.info("Ignored from the link (not known to this store): " + ", ".join(ignored))


# What is below a page's first screen is drawn on demand: a table costs the browser 0.1-0.3 s to draw and a figure
# 0.06-0.1 s on every visit (benchmarks/dashboard.py), opened they cost one rerun of cached queries.
def on_demand(label: str, key: str, expanded: bool = False) -> Any:
    """An expander whose content runs (and is drawn) only while it is open: ``if box.open: with box: ...``."""
    return st.expander(label, expanded=expanded, key=key, on_change="rerun")


def picked_tab(key: str, labels: Sequence[str]) -> tuple[int, Any]:
    """Tabs of which only the picked one runs and is drawn: its index among ``labels`` and its container to draw
    in (the others stay empty). The pick is kept in the URL as ``key``."""
    tabs = st.tabs(list(labels), key=key, bind="query-params")
    return next(((i, tab) for i, tab in enumerate(tabs) if tab.open), (0, tabs[0]))


def figure(fig: Any, where: Any = None) -> None:
    """Draw ``fig``, a figure built plain (``charts.sent_plain``), in ``where`` (a container, or the page): without
    Streamlit's theme, which would make the browser draw it twice in full."""
    (where or st).plotly_chart(fig, theme=None, width="stretch")
