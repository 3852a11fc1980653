"""The dashboard's one read-only path to the store, and its cache.

The store is opened read-only through ``StoreReader``, which follows the file when an ingest replaces it.
Query results are cached per store version (the store's identity), so a new ingest shows up on the next
rerun and nothing is ever served from an older store. Every query goes through collector.store.queries (or
the comparison and alert modules built on it), with bound parameters.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import streamlit as st

from stepwatch.collector.analysis import alerts, comparison, latest, ops
from stepwatch.collector.output.text import shown_path
from stepwatch.collector.store import address, database, queries, records

QUERIES = {
    "catalog": queries.series_catalog,
    "latest": queries.latest_per_series,
    "history": queries.history_points,
    "spread": queries.version_spread,
    "speedups": queries.speedups,
    "costs": queries.costs,
    "cost_gaps": queries.cost_gaps,
    "suite_run_costs": queries.suite_run_costs,
    "recent_runs": queries.recent_runs,
    "run_detail": queries.run_detail,
    "alerts": records.list_alerts,
    "overview": latest.overview,
    "compare": comparison.build,
    "explain": ops.between,
    "versions": queries.side_versions,
    "trial_values": queries.trial_values,
    "bisect_steps": queries.bisect_steps,
    "headline": alerts.headline_metric,  # the metric a page shows first: throughput, or imported results' own
}


def store_path() -> Path:
    """``STEPWATCH_DB`` if set, else data/stepwatch.duckdb; a shared store's local copy (brought up to date when the
    server first needs it; after that, its reader follows the shared store)."""
    return _resolved(os.environ.get(database.DB_ENV) or str(database.DEFAULT_DB))


@st.cache_resource(show_spinner=False)
def _resolved(text: str) -> Path:
    return database.resolve(text)


def store_label() -> str:
    """The store as the sidebar shows it: a shared store's address, or the path, relative to the working directory
    when it is inside it."""
    if address.attached(store_path()):
        return address.shown(store_path())
    return shown_path(store_path())


@st.cache_resource(show_spinner=False)
def _reader(db: str) -> tuple[database.StoreReader, threading.Lock]:
    return database.StoreReader(Path(db)), threading.Lock()


def identity() -> tuple | None:
    """The live store's identity (changes with every write into it); None when there is no store."""
    reader, _ = _reader(str(store_path()))
    return reader.identity()


@st.cache_data(show_spinner=False, max_entries=256)
def _cached(db: str, version: tuple, name: str, args: tuple[Any, ...]) -> Any:
    reader, lock = _reader(db)
    with lock:
        con = reader.connection()
        cursor = con.cursor()  # one cursor per query: safe across the app's session threads
    try:
        return QUERIES[name](cursor, *args)
    finally:
        cursor.close()


def load(name: str, *args: Any) -> Any:
    """The result of query ``name`` on the current store version (cached until the store changes)."""
    version = identity()
    if version is None:
        raise database.StoreError(f"no store at {store_path()}")
    return _cached(str(store_path()), version, name, args)


@st.cache_resource(show_spinner=False, max_entries=64)
def _drawn(
    db: str, version: tuple, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], _build: Callable[..., Any]
) -> Any:
    return _build(*args, **kwargs)


def drawn(build: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``build(*args, **kwargs)`` once per store version and arguments (data frames among them, hashed by
    content): a page's figure, or what it is drawn from, built from cached queries. Kept as the object itself,
    not a copy, so it must only be read (``st.plotly_chart`` copies it): a figure costs the server 0.03-0.3 s to
    build, and the browser waits for it on every visit."""
    version = identity()
    if version is None:
        raise database.StoreError(f"no store at {store_path()}")
    name = f"{build.__code__.co_filename}:{build.__qualname__}"
    return _drawn(str(store_path()), version, name, args, kwargs, build)


def clear() -> None:
    """Forget every cached query result and figure (a cold start, for the dashboard benchmark)."""
    _cached.clear()
    _drawn.clear()


def has_runs() -> bool:
    """True once the store exists and holds at least one series."""
    if identity() is None:
        return False
    try:
        return len(load("catalog")) > 0
    except (duckdb.Error, database.StoreError):  # a file without stepwatch's tables
        return False
