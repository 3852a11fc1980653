"""Change points over nightly history, kept as alerts with a lifecycle.

``scan`` reads per-night medians from the store and runs the analysis on each series; ``record`` merges what
it found into the ``alerts`` table. An alert is *new* while its change is suspected (too recent to test),
*confirmed* once the nights after it confirm it, and a person moves it on: *acknowledged* (with a note),
*false positive* or *fixed*. An acknowledged or fixed change starts a new baseline segment: later scans of
that series look only at the nights from it on, so it is never raised again.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import datetime

import duckdb
import numpy as np
import pandas as pd

from stepwatch.collector.analysis import changepoints, latest, noise, stats
from stepwatch.collector.analysis.thresholds import Override, direction_for, threshold_for
from stepwatch.collector.metrics import DEFAULT_METRIC, IMPORTED_METRIC, Metric
from stepwatch.collector.schema import VERSION_COLUMNS
from stepwatch.collector.store import queries, records
from stepwatch.collector.store.records import CONFIRMED, FALSE_POSITIVE, NEW, OPEN, AlertChange
from stepwatch.collector.store.selection import Selection

MATCH_NIGHTS = changepoints.MOVE_NIGHTS  # a change found within this many nights of an alert's is the same change
DEFAULT_NIGHTS = 180  # nights of history looked at per series


@dataclass(frozen=True)
class Found:
    """One change in one series, with the nights it was judged on (to match it to an existing alert)."""

    series_key: str
    metric: str
    change: changepoints.Change
    change_at: datetime
    suite_run_id: str
    nights: list[datetime]
    moved_from: datetime | None = None  # the night a confirmed alert had, where the change moved from it


@dataclass(frozen=True)
class Scan:
    found: list[Found]
    nights: dict[str, list[datetime]]  # per series scanned: the nights the analysis saw
    outliers: int
    noise: dict[str, noise.Noise] = field(default_factory=dict)  # per series scanned, from its last trials
    fields: dict[str, dict] = field(default_factory=dict)  # per series scanned, its config fields


def scan(
    con: duckdb.DuckDBPyConnection,
    selection: Selection,
    metric: Metric,
    overrides: list[Override],
    nights_limit: int = DEFAULT_NIGHTS,
    nominate: bool = False,
) -> Scan:
    """Run change-point detection on the last ``nights_limit`` nights (since its baseline) of each series; with
    ``nominate`` (a verifying check decides), a last night that steps off its level is suspected too."""
    history = queries.history_points(con, selection, metric.name)
    starts = records.baselines(con, metric.name)
    fields = {row["series_key"]: row for row in queries.series_catalog(con).to_dict("records")}
    held: dict[str, list[datetime]] = {}  # per series, the nights its confirmed alerts were confirmed on
    for _, key, change_at, status in records.alerts_of(con, metric.name):
        if status == CONFIRMED:
            held.setdefault(key, []).append(change_at)
    found, seen, outliers = [], {}, 0
    series = []
    for key, nights in history.groupby("series_key", sort=False):
        if key in starts:
            nights = nights[nights["night"] >= pd.Timestamp(starts[key])]
        series.append((key, nights.tail(nights_limit)))
    # The variance of a night's offset, as the Overview judges a night with: each series' own, pooled with the other
    # series of its runner (or where it has none, the runner's calibration, else stats.LONE_RUNNER) while its own
    # rests on few nights (a young history cannot yet show its host's spread).
    trials = {key: [np.log(np.asarray(v if v is not None else [], dtype=float)) for v in nights["trial_values"]]
              for key, nights in series}  # fmt: skip
    keys = [key for key, _ in series]
    own = [stats.between_nights(trials[key]) for key in keys]
    lone = [stats.between_nights(trials[key], stats.LONE_RUNNER) for key in keys]
    runners = dict(zip(*(queries.latest_per_series(con, selection)[c] for c in ("series_key", "runner"))))
    offsets = dict(zip(keys, latest.night_variances(keys, own, runners, latest.runner_prior(metric), lone)))
    for key, nights in series:
        times = [t.to_pydatetime() for t in nights["night"]]
        seen[key] = times
        text = nights[list(VERSION_COLUMNS)].astype(object)
        versions = text.where(text.notna(), None).to_dict("records")
        threshold = threshold_for(metric, fields.get(key, {}), overrides)
        index = {t: i for i, t in enumerate(times)}
        detection = changepoints.detect_changes(
            nights["value"].to_numpy(dtype=float),
            threshold,
            direction_for(metric, fields.get(key, {}), overrides),
            versions,
            trials=[v if v is not None else [] for v in nights["trial_values"]],
            night=offsets[key],
            confirmed=[index[t] for t in held.get(key, []) if t in index],
            nominate=nominate,
        )
        outliers += len(detection.outliers)
        runs = nights["suite_run_id"].tolist()
        for change in detection.changes:
            moved = times[change.moved_from] if change.moved_from is not None else None
            found.append(Found(key, metric.name, change, times[change.index], runs[change.index], times, moved))
    values = queries.trial_values(con, list(seen), metric.name, noise.NOISE_TRIALS)
    noises = noise.noises_of(values, ordered=True)  # newest first: a step in its history is no bimodality
    return Scan(found, seen, outliers, noises, {key: fields.get(key, {}) for key in seen})


def headline_metric(con: duckdb.DuckDBPyConnection) -> str:
    """The metric a command judges when none is named: throughput, or where the store holds only imported results
    (another tool's, each in its own metric), their value."""
    found = con.execute("SELECT DISTINCT imported_from <> '' FROM series").fetchall()
    kinds = {bool(imported) for (imported,) in found}
    return IMPORTED_METRIC if kinds == {True} else DEFAULT_METRIC


def record(con: duckdb.DuckDBPyConnection, result: Scan, metric: str, now: datetime) -> dict[str, int]:
    """Merge a scan into the store's alerts (a writable connection): new changes become alerts, a suspected one
    the nights have confirmed becomes confirmed, and a suspected one no longer seen is withdrawn as a false
    positive. Statuses a person set are kept. Returns counts of what happened."""
    counts = {"created": 0, "confirmed": 0, "updated": 0, "withdrawn": 0, "moved": 0}
    by_series: dict[str, list[tuple[int, datetime, str]]] = {}
    for alert_id, key, change_at, status in records.alerts_of(con, metric):
        by_series.setdefault(key, []).append((alert_id, change_at, status))
    matched: set[int] = set()
    reproduced = records.reproduced_ids(con, metric)  # a check measured it again: later nights do not withdraw it
    for item in result.found:
        change = item.change
        status = CONFIRMED if change.status == "confirmed" else NEW
        measured = AlertChange(item.change_at, item.suite_run_id, change.before, change.after, change.ratio,
                               change.ci_low, change.ci_high, change.versions_changed)  # fmt: skip
        twin = _match(item, by_series.get(item.series_key, []), matched)
        if item.moved_from is not None:  # the confirmed alert it moved from, wherever the change went
            twin = next((a for a in by_series.get(item.series_key, []) if a[1] == item.moved_from), twin)
        if twin is None:
            records.add_alert(con, item.series_key, metric, status, measured, now)
            counts["created"] += 1
            continue
        alert_id, _, old_status = twin
        matched.add(alert_id)
        new_status = status if old_status in OPEN else old_status
        records.revise_alert(con, alert_id, new_status, measured, now)
        if item.moved_from is not None and item.moved_from != item.change_at:
            versions = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in change.versions_changed.items()) or "none"
            note = (f"moved from night {item.moved_from:%Y-%m-%d %H:%M} to night {item.change_at:%Y-%m-%d %H:%M}: "
                    f"the nights since fit it better there (versions changed there: {versions})")  # fmt: skip
            records.set_status(con, alert_id, new_status, note, now)
            counts["moved"] += 1
        counts["confirmed" if (old_status, new_status) == (NEW, CONFIRMED) else "updated"] += 1
    for key, nights in result.nights.items():
        for alert_id, change_at, status in by_series.get(key, []):
            if (status == NEW and alert_id not in matched and alert_id not in reproduced and nights
                    and nights[0] <= change_at <= nights[-1]):  # fmt: skip
                note = "withdrawn: later nights did not show this change (an outlier)"
                records.set_status(con, alert_id, FALSE_POSITIVE, note, now)
                counts["withdrawn"] += 1
    return counts


def _match(item: Found, alerts: list[tuple[int, datetime, str]], taken: set[int]) -> tuple[int, datetime, str] | None:
    """The alert of this series whose change is within MATCH_NIGHTS nights of this one, if any."""
    here = bisect.bisect_left(item.nights, item.change_at)
    for alert in alerts:
        if alert[0] in taken:
            continue
        there = bisect.bisect_left(item.nights, alert[1])
        if abs(here - there) <= MATCH_NIGHTS:
            return alert
    return None
