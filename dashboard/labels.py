"""The words and colours the pages say things with: a verdict's colour and fill, a change in words, a verdict's
chips, a sparkline in text, and the names of series (by what varies among them); no figure here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from stepwatch.collector import outcomes
from stepwatch.collector.analysis import latest
from stepwatch.collector.output.text import interval, percent, series_label

VERDICT_COLORS = {
    "regression": "#d62728",
    "failed": "#8c1c13",
    "inconclusive": "#e6a700",
    "changed": "#1f77b4",  # a counter that moved, in no declared direction
    "improvement": "#2ca02c",
    "no change": "#7f7f7f",
    "missing": "#bbbbbb",
}


# Light fills of the verdict colours, for table cells (text stays readable on them).
VERDICT_FILLS = {
    "regression": "#fbd5d2",
    "failed": "#f2b8b3",
    "inconclusive": "#fcefc4",
    "changed": "#d6e6f5",
    "improvement": "#d4efd4",
}
NO_FILL = "#ffffff00"  # a verdict without a colour (no change, nothing earlier)


# A series' first run has nothing to be compared with: said so, rather than as the verdict's "missing".
CHANGE_WORDS = {outcomes.MISSING: "nothing earlier"}


def change_text(row: dict, against: str) -> str:
    """'-10.0% [-14.1%, -5.8%]' of an Overview row against ``against`` (previous, baseline), or the verdict where
    there is no ratio."""
    verdict = row[f"{against}_verdict"]
    if not isinstance(verdict, str):
        if against == "level" and isinstance(row.get("baseline_verdict"), str):  # a young history, or a change since
            return f"not yet: {latest.MIN_LEVEL_NIGHTS} nights before the last {latest.LEVEL_NIGHTS} needed"
        return ""
    if verdict in (outcomes.MISSING, outcomes.FAILED):
        return CHANGE_WORDS.get(verdict, verdict)
    return f"{percent(row[f'{against}_ratio'])} {interval(row[f'{against}_ci_low'], row[f'{against}_ci_high'])}"


def seen_text(row: dict) -> str:
    """What an Overview row's comparisons could see (the change each can tell from none): the level's over its
    nights, and the latest night's against the baseline."""
    parts = []
    for against, what in (("level", f"over {latest.LEVEL_NIGHTS} nights"), ("baseline", "a night")):
        seen = row.get(f"{against}_seen")
        if isinstance(row.get(f"{against}_verdict"), str) and seen is not None and seen == seen:
            # Past doubling, a figure says only that too few nights are known (it read "±7442.3% a night").
            parts.append(f"±{seen:.1%} {what}" if seen <= 1 else f"more than ±100% {what} (too few nights yet)")
    return ", ".join(parts)


def verdict_chips(
    shown: pd.DataFrame, cells: dict[str, str], verdicts: pd.DataFrame
) -> tuple[pd.DataFrame, dict[str, tuple[list[str], list[str]]]]:
    """``shown`` with each of ``cells``' columns as a label filled in the colour of the verdict in the named column
    of ``verdicts`` (same index): a change reads as what the analysis found, not as a bare percentage. Each cell
    becomes a one-label list, and each column's labels come with their colours (a multiselect column's options
    and colours): the browser colours them, where a pandas Styler cost the server 75 ms a visit at 376 rows."""
    frame = shown.copy()
    palettes = {}
    for column, source in cells.items():
        colours: dict[str, str] = {}
        for text, verdict in zip(frame[column], verdicts.loc[frame.index, source]):
            if isinstance(text, str) and text and text not in colours:
                colours[text] = VERDICT_FILLS.get(verdict, NO_FILL) if isinstance(verdict, str) else NO_FILL
        frame[column] = [[text] if isinstance(text, str) and text else [] for text in frame[column]]
        palettes[column] = (list(colours), list(colours.values()))
    return frame, palettes


SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


def spark_text(values: Sequence[float]) -> str:
    """A sparkline in text, one block a value from its own lowest to highest (a flat line sits mid-height). A
    table draws a text column for free; a chart column of 30 values a row cost the browser 0.1-0.2 s on a 376-row
    Overview (benchmarks/dashboard.py)."""
    if not len(values):
        return ""
    low, high = min(values), max(values)
    top = len(SPARK_BLOCKS) - 1
    if high <= low:
        return SPARK_BLOCKS[top // 2] * len(values)
    return "".join(SPARK_BLOCKS[round((v - low) / (high - low) * top)] for v in values)


def series_names(points: pd.DataFrame) -> pd.Series:
    """The readable name of each point's series (computed once per series, not per point)."""
    firsts = points.drop_duplicates("series_key").set_index("series_key")
    names = {key: series_label(row.to_dict()) for key, row in firsts.iterrows()}
    return points["series_key"].map(names)


def varying(frame: pd.DataFrame, dimensions: Sequence[str]) -> list[str]:
    """The dimensions whose value differs between the rows of ``frame``: what tells its series apart."""
    return [d for d in dimensions if d in frame and frame[d].astype(str).nunique() > 1]


def dimension_text(dimension: str, value: Any) -> str:
    """One dimension's value as a legend reads it: ``fp32``, ``xla off``, ``per_device_batch=8``."""
    if isinstance(value, bool | np.bool_):
        return f"{dimension} {'on' if value else 'off'}"
    return str(value) if dimension in NAMED_BY_VALUE else f"{dimension}={value}"


NAMED_BY_VALUE = ("model", "precision", "accelerator", "keras_backend")


def short_names(frame: pd.DataFrame, dimensions: Sequence[str]) -> pd.Series:
    """Each row's series named by ``dimensions`` only (those that vary: see ``varying``; at least one)."""
    return frame[list(dimensions)].apply(lambda row: ", ".join(dimension_text(d, row[d]) for d in dimensions), axis=1)


def normalise(points: pd.DataFrame, field: str, baseline: str) -> pd.DataFrame:
    """Divide each series by its median at ``field == baseline`` (series without that baseline are dropped)."""
    ref = points[points[field].astype(str) == baseline].groupby("series_key")["value"].median()
    out = points[points["series_key"].isin(ref.index)].copy()
    out["value"] = out["value"] / out["series_key"].map(ref)
    return out


def machine_text(flagged: int, unread: int) -> str:
    """A run's machine in a cell: how many of its ok trials ran throttled or shared, or did not read it."""
    parts = [f"{flagged} throttled/shared"] if flagged else []
    return ", ".join(parts + ([f"{unread} not read"] if unread else []))


def cost_text(runs: pd.DataFrame) -> str:
    """What the suite runs of ``runs`` (``queries.suite_run_costs``: a night's collect jobs, a check's sides) cost in
    one sentence: the sum, the runner time it pays for, the price and its source and date; trials without a price
    and why. Said plainly where nothing was priced."""
    trials, priced = int(runs["trials"].sum()), int(runs["priced"].sum())
    unpriced = "; ".join(dict.fromkeys(w for text in runs["unpriced"].dropna() for w in str(text).split("; ")))
    if not priced:
        return f"Cost unknown: none of its {trials} trial(s) has a price ({unpriced or 'no price recorded'})."
    seconds = float(runs["wall_s"].sum())
    keys = sorted({key for text in runs["price_key"].dropna() for key in str(text).split(", ")})
    first = runs.dropna(subset=["price_key"]).iloc[0]
    price = (  # one price: with its rate, source and date; several (runners of many kinds): their names
        f"{keys[0]} (${float(first['price_per_device_hour']):.4g} per hour; {first['price_source']}; "
        f"{first['price_date']})"
        if len(keys) == 1
        else ", ".join(keys)
    )
    text = (
        f"It cost ${float(runs['cost_usd'].sum()):,.4f}: {priced} trial(s), {seconds / 60:,.1f} min of runner time at "
        f"{price}. The jobs' own set-up is billed beside it"
    )
    return text + (f"; {trials - priced} trial(s) have no price ({unpriced})." if priced < trials else ".")
