"""The store's records a person or a command adds beside the runs: alerts (with their lifecycle) and the
steps of each bisect. Their reads and writes, typed; a write takes the connection of ``database.update``
(one delta, published whole), a read a reader's connection.
"""

from __future__ import annotations

import json
import math
from dataclasses import astuple, dataclass, fields
from datetime import datetime
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from stepwatch.collector.errors import UsageError
from stepwatch.collector.schema import VERSION_COLUMNS
from stepwatch.collector.store import queries

NEW, CONFIRMED, ACKNOWLEDGED, FALSE_POSITIVE, FIXED = "new", "confirmed", "acknowledged", "false positive", "fixed"
STATUSES = (NEW, CONFIRMED, ACKNOWLEDGED, FALSE_POSITIVE, FIXED)
OPEN = (NEW, CONFIRMED)
NEW_BASELINE = (ACKNOWLEDGED, FIXED)  # a change a person accepted starts a new baseline segment


# What a verifying check made of an alert (``alerts verify``): its regression measured again, interleaved on one
# runner (REPRODUCED: the only state that opens an issue by default); not there (NOT_REPRODUCED); not decided
# within its budget (INCONCLUSIVE: the alert stays suspected); nothing recorded differs between the nights either side
# (MACHINE: the host's, a driver's or a neighbour's); or the check could not run (UNVERIFIABLE, with its reason).
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, MACHINE, UNVERIFIABLE = (
    "reproduced", "not reproduced", "inconclusive", "the machine's", "unverifiable",
)  # fmt: skip
VERIFIED_STATES = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, MACHINE, UNVERIFIABLE)


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


@dataclass(frozen=True)
class Verification:
    """What a verifying check recorded on an alert (tables.VERIFICATION_COLUMNS, less its time)."""

    verification: str
    verify_check: str | None = None
    verify_sides: str | None = None
    verify_ratio: float | None = None
    verify_ci_low: float | None = None
    verify_ci_high: float | None = None
    verify_aa: str | None = None
    verify_minutes: float | None = None
    verify_commit: str | None = None
    verify_note: str | None = None


def record_verification(con: duckdb.DuckDBPyConnection, alert_id: int, found: Verification, now: datetime) -> None:
    """An alert's verifying check, as it ended (a writable connection); its status is left as the history set it."""
    if found.verification not in VERIFIED_STATES:
        raise AlertError(f"verification {found.verification!r} is not one of {', '.join(VERIFIED_STATES)}")
    names = [f.name for f in fields(Verification)]
    values = [None if isinstance(v, float) and math.isnan(v) else v for v in astuple(found)]
    assignments = ", ".join(f"{name} = ?" for name in (*names, "verified_at", "updated_at"))
    con.execute(f"UPDATE alerts SET {assignments} WHERE id = ?", [*values, now, now, alert_id])


def reproduced_ids(con: duckdb.DuckDBPyConnection, metric: str) -> set[int]:
    """The alerts on ``metric`` whose verifying check reproduced their change."""
    rows = con.execute("SELECT id FROM alerts WHERE metric = ? AND verification = ?", [metric, REPRODUCED])
    return {row[0] for row in rows.fetchall()}


def alerts_by_id(con: duckdb.DuckDBPyConnection, ids: list[int] | None = None) -> list[dict]:
    """Alerts as dicts (every column): those ``ids`` (AlertError naming one that is not there), or the open ones
    no check has verified yet, the largest change first."""
    if ids:
        rows = con.sql(f"SELECT * FROM alerts WHERE id IN ({', '.join('?' * len(ids))})", params=ids)
    else:
        rows = con.sql(
            f"SELECT * FROM alerts WHERE status IN ({', '.join('?' * len(OPEN))}) AND verification IS NULL "
            "ORDER BY abs(ln(ratio)) DESC NULLS LAST, id",
            params=list(OPEN),
        )
    found = rows.to_arrow_table().to_pylist()
    missing = sorted(set(ids or ()) - {row["id"] for row in found})
    if missing:
        raise AlertError(f"no alert with id {missing[0]} (see `stepwatch alerts list --status all`)")
    return found


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
    """An alert's change as a later scan measured it, and its status. A change that moved to another night has other
    nights either side: what a check said of the old ones is cleared (unless it reproduced), to be verified again."""
    moved = con.execute(
        "SELECT suite_run_id IS DISTINCT FROM ? AND verification IS DISTINCT FROM ? FROM alerts WHERE id = ?",
        [change.suite_run_id, REPRODUCED, alert_id],
    ).fetchone()
    assignments = ", ".join(f"{c} = ?" for c in ("updated_at", *_CHANGE_COLUMNS, "status"))
    con.execute(f"UPDATE alerts SET {assignments} WHERE id = ?", [now, *change.values(), status, alert_id])
    if moved and moved[0]:
        cleared = ", ".join(f"{name} = NULL" for name in (*(f.name for f in fields(Verification)), "verified_at"))
        con.execute(f"UPDATE alerts SET {cleared} WHERE id = ?", [alert_id])


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


# What a verifying check reads of the nights either side of a change (analysis.verification.Night): the versions,
# the project and its commit, the whole package set, and what the rows say of the machine.
NIGHT_COLUMNS = tuple(dict.fromkeys((*VERSION_COLUMNS, "project_repository", "package_set", "host", "runner_label",
                                     "cpu_model", "accelerator", "label", "suite")))  # fmt: skip


def change_nights(
    con: duckdb.DuckDBPyConnection, series_key: str, suite_run_id: str, before: int = 1
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The series' ``before`` suite runs before ``suite_run_id`` (the nearest first) and that suite run itself, each
    as one mapping: every column of NIGHT_COLUMNS (several values of one night joined with ', '), its other load and
    steal averaged, and its suite_run_id. None for a change night that is not there."""
    present = [c for c in NIGHT_COLUMNS if queries.has_column(con, c)]
    shared = ", ".join(f"""string_agg(DISTINCT CAST("{c}" AS VARCHAR), ', ') AS "{c}" """ for c in present)
    loads = "".join(
        f', avg("{c}") AS "{c}"' for c in ("host_other_cpu", "host_steal_cpu") if queries.has_column(con, c)
    )
    rows = (
        con.sql(
            f"""WITH nights AS (SELECT suite_run_id, min(started_at) AS night_at, {shared}{loads}
                            FROM runs WHERE series_key = ? GROUP BY suite_run_id),
                changed AS (SELECT night_at FROM nights WHERE suite_run_id = ?)
           (SELECT * FROM nights WHERE night_at < (SELECT night_at FROM changed) ORDER BY night_at DESC LIMIT ?)
           UNION ALL (SELECT * FROM nights WHERE suite_run_id = ?)""",
            params=[series_key, suite_run_id, before, suite_run_id],
        )
        .to_arrow_table()
        .to_pylist()
    )
    after = next((r for r in rows if r["suite_run_id"] == suite_run_id), None)
    earlier = sorted((r for r in rows if r["suite_run_id"] != suite_run_id), key=lambda r: r["night_at"], reverse=True)
    return earlier, after


def one_row(con: duckdb.DuckDBPyConnection, series_key: str, suite_run_id: str) -> dict[str, Any] | None:
    """One row of a series' suite run (its config as that night ran it), or None."""
    rows = con.sql("SELECT * FROM runs WHERE series_key = ? AND suite_run_id = ? ORDER BY trial LIMIT 1",
                   params=[series_key, suite_run_id]).to_arrow_table().to_pylist()  # fmt: skip
    return rows[0] if rows else None
