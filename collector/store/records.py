"""The store's records a person or a command adds beside the runs: alerts (with their lifecycle) and the
steps of each bisect. Their reads and writes, typed; a write takes the connection of ``database.update``
(one delta, published whole), a read a reader's connection.
"""

from __future__ import annotations

import json
import math
from dataclasses import astuple, dataclass, fields
from datetime import datetime

import duckdb
import pandas as pd
import pyarrow as pa

from stepwatch.collector.errors import UsageError

NEW, CONFIRMED, ACKNOWLEDGED, FALSE_POSITIVE, FIXED = "new", "confirmed", "acknowledged", "false positive", "fixed"
STATUSES = (NEW, CONFIRMED, ACKNOWLEDGED, FALSE_POSITIVE, FIXED)
OPEN = (NEW, CONFIRMED)
NEW_BASELINE = (ACKNOWLEDGED, FIXED)  # a change a person accepted starts a new baseline segment


class AlertError(UsageError):
    """An unknown alert id or status, in one line."""


@dataclass(frozen=True)
class AlertChange:
    """What a scan says of one change: an alert's measured columns."""

    change_at: datetime
    suite_run_id: str
    before_value: float
    after_value: float
    ratio: float
    ci_low: float | None
    ci_high: float | None
    versions_changed: dict

    def values(self) -> list:
        row = [None if isinstance(x, float) and math.isnan(x) else x for x in astuple(self)]
        row[-1] = json.dumps(self.versions_changed, default=str)
        return row


_CHANGE_COLUMNS = tuple(f.name for f in fields(AlertChange))


def baselines(con: duckdb.DuckDBPyConnection, metric: str) -> dict[str, datetime]:
    """Per series, the latest acknowledged or fixed change: where its current baseline segment starts."""
    rows = con.execute(
        "SELECT series_key, max(change_at) FROM alerts WHERE metric = ? AND status IN (?, ?) GROUP BY series_key",
        [metric, *NEW_BASELINE],
    ).fetchall()
    return dict(rows)


def alerts_of(con: duckdb.DuckDBPyConnection, metric: str) -> list[tuple[int, str, datetime, str]]:
    """(id, series_key, change_at, status) of every alert on ``metric``, oldest first."""
    return con.execute(
        "SELECT id, series_key, change_at, status FROM alerts WHERE metric = ? ORDER BY id", [metric]
    ).fetchall()


def add_alert(con: duckdb.DuckDBPyConnection, series_key: str, metric: str, status: str, change: AlertChange,
              now: datetime) -> None:  # fmt: skip
    columns = ", ".join(("created_at", "updated_at", "series_key", "metric", "status", *_CHANGE_COLUMNS))
    values = [now, now, series_key, metric, status, *change.values()]
    con.execute(f"INSERT INTO alerts ({columns}) VALUES ({', '.join('?' * len(values))})", values)


def revise_alert(con: duckdb.DuckDBPyConnection, alert_id: int, status: str, change: AlertChange,
                 now: datetime) -> None:  # fmt: skip
    """An alert's change as a later scan measured it, and its status."""
    assignments = ", ".join(f"{c} = ?" for c in ("updated_at", *_CHANGE_COLUMNS, "status"))
    con.execute(f"UPDATE alerts SET {assignments} WHERE id = ?", [now, *change.values(), status, alert_id])


def set_status(con: duckdb.DuckDBPyConnection, alert_id: int, status: str, note: str | None, now: datetime) -> str:
    """Move one alert to ``status`` (a note replaces the old one; None keeps it); returns the status it had."""
    if status not in STATUSES:
        raise AlertError(f"status {status!r} is not one of {', '.join(STATUSES)}")
    rows = con.execute("SELECT status FROM alerts WHERE id = ?", [alert_id]).fetchall()
    if not rows:
        raise AlertError(f"no alert with id {alert_id} (see `stepwatch alerts list`)")
    con.execute(
        "UPDATE alerts SET status = ?, updated_at = ?, note = coalesce(?, note) WHERE id = ?",
        [status, now, note, alert_id],
    )
    return rows[0][0]


def list_alerts(
    con: duckdb.DuckDBPyConnection, statuses: tuple[str, ...] = STATUSES, metric: str | None = None
) -> pd.DataFrame:
    """Alerts with their series' fields, newest change first."""
    marks = ", ".join("?" for _ in statuses)
    extra, params = ("AND a.metric = ?", [metric]) if metric else ("", [])
    return (
        con.sql(
            f"SELECT a.*, s.* EXCLUDE (series_key) FROM alerts a LEFT JOIN series s USING (series_key) "
            f"WHERE a.status IN ({marks}) {extra} ORDER BY a.change_at DESC, a.id",
            params=[*statuses, *params],
        )
        .to_arrow_table()
        .to_pandas()
    )


def all_alerts(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Every alert, every column, ids included (what ``alerts save`` keeps)."""
    return con.sql("SELECT * FROM alerts ORDER BY id").to_arrow_table()


def restore_alerts(con: duckdb.DuckDBPyConnection, saved: pa.Table) -> None:
    """Replace the store's alerts by a saved table of them (``all_alerts``)."""
    con.register("saved", saved)
    con.execute("DELETE FROM alerts")
    con.execute("INSERT INTO alerts BY NAME SELECT * FROM saved")
    con.unregister("saved")


@dataclass(frozen=True)
class BisectStep:
    """One row of ``bisect_steps``: a measured step and one target series (a skipped step has no series).
    ``applied`` is the step's changes as [[package, good version, bad version], ...]."""

    bisect_id: str
    step: int
    created_at: datetime
    good: str
    bad: str
    why: str
    applied: list[list[str]]
    outcome: str
    reason: str
    series_key: str | None = None
    metric: str | None = None
    verdict: str | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    baseline_suite_run_id: str | None = None
    candidate_suite_run_id: str | None = None


def add_bisect_steps(con: duckdb.DuckDBPyConnection, steps: list[BisectStep]) -> None:
    columns = [f.name for f in fields(BisectStep)]
    rows = [
        [json.dumps(v) if c == "applied" else None if isinstance(v, float) and math.isnan(v) else v
         for c, v in zip(columns, astuple(step))]
        for step in steps
    ]  # fmt: skip
    marks = ", ".join("?" for _ in columns)
    con.executemany(f"INSERT INTO bisect_steps ({', '.join(columns)}) VALUES ({marks})", rows)


def change_commits(con: duckdb.DuckDBPyConnection, series_key: str, suite_run_id: str) -> tuple[str | None, ...]:
    """The commits either side of a change: the one the series' last suite run before ``suite_run_id`` ran, and the
    one that suite run ran (None where a row names none)."""
    found = con.execute(
        """WITH nights AS (SELECT suite_run_id, min(started_at) AS night_at, any_value(project_commit) AS sha
                           FROM runs WHERE series_key = ? GROUP BY suite_run_id),
                changed AS (SELECT night_at, sha FROM nights WHERE suite_run_id = ?)
           SELECT (SELECT sha FROM nights WHERE night_at < (SELECT night_at FROM changed)
                   ORDER BY night_at DESC LIMIT 1) AS before_sha,
                  (SELECT sha FROM changed) AS after_sha""",
        [series_key, suite_run_id],
    ).fetchone()
    return tuple(found) if found else (None, None)
