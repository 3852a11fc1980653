"""The loss trajectories of trials, for the numerics verdict (``collector.analysis.numerics``): per series, the ok
trials of a comparison's side, or of its last two suite runs (the Overview's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from stepwatch.collector.config import SERIES_DIMENSIONS
from stepwatch.collector.store.queries import has_column
from stepwatch.collector.store.selection import ALIASES, Selection
from stepwatch.collector.store.tables import nest_children

NUMERICS_COLUMNS = ("seed", "window_losses", "quality_values", "deterministic", "warmup_steps", "window_steps",
                    "steps_per_execution", "extras")  # fmt: skip


def _trajectories(con: duckdb.DuckDBPyConnection, keys: Sequence[str], picked: str, params: list[Any]) -> list[tuple]:
    """The ok trials of ``picked`` (a query of runs, with its ``keys`` columns first), each as its keys and then
    ``NUMERICS_COLUMNS`` (those the store has: an older one may lack some), in the order they started."""
    names = [name for name in NUMERICS_COLUMNS if name == "window_losses" or has_column(con, name)]
    losses = nest_children("samples", "SELECT run_id FROM picked")
    columns = ", ".join([*keys, *(f'"{name}"' for name in names)])
    rows = con.sql(
        f"WITH picked AS ({picked}), losses AS ({losses}) "
        f"SELECT {columns} FROM picked LEFT JOIN losses USING (run_id) WHERE status = 'ok' ORDER BY started_at, run_id",
        params=params,
    ).fetchall()
    return [(row[: len(keys)], dict(zip(names, row[len(keys) :]))) for row in rows]


def side_trajectories(
    con: duckdb.DuckDBPyConnection, selection: Selection, differ: Sequence[str] = ()
) -> dict[Any, tuple[str, list[dict[str, Any]]]]:
    """Per series, its key and the ok trials among the selected runs with what their numerics are judged on
    (``collector.analysis.numerics``), in the order they started. Keyed by the series key, or, where the two sides
    of a comparison select the dimensions ``differ`` differently (``contrast``), by the other dimensions' values,
    which pair a series of one side with the other's."""
    where, params = selection.where()
    pairing = [f'"{ALIASES.get(d, d)}"' for d in SERIES_DIMENSIONS if d not in differ] if differ else ['"series_key"']
    found: dict[Any, tuple[str, list[dict[str, Any]]]] = {}
    for (*pair, key), trial in _trajectories(con, [*pairing, '"series_key"'], f"SELECT * FROM runs WHERE {where}",
                                             params):  # fmt: skip
        found.setdefault(tuple(pair), (key, []))[1].append(trial)
    return found


def last_two_runs(con: duckdb.DuckDBPyConnection, series_keys: Sequence[str]) -> dict[str, tuple[list, list]]:
    """Per series, the ok trials of its suite run before the latest and of its latest (``side_trajectories``'s
    columns): what the Overview's numerics verdict pairs. A series with one suite run is left out."""
    if not series_keys:
        return {}
    marks = ", ".join("?" for _ in series_keys)
    picked = f"""
        SELECT r.*, k.newest FROM runs r JOIN (
            SELECT series_key, suite_run_id, row_number() OVER (PARTITION BY series_key ORDER BY max(started_at) DESC)
                   AS newest
            FROM runs WHERE series_key IN ({marks}) GROUP BY series_key, suite_run_id
        ) k USING (series_key, suite_run_id) WHERE k.newest <= 2"""
    found: dict[str, tuple[list, list]] = {}
    for (key, newest), trial in _trajectories(con, ['"series_key"', '"newest"'], picked, list(series_keys)):
        found.setdefault(key, ([], []))[2 - newest].append(trial)
    return {key: sides for key, sides in found.items() if sides[0] and sides[1]}
