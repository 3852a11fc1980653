"""Plotly figures for the pages: data frames in, figures out."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from stepwatch.collector.analysis.comparison import Comparison
from stepwatch.collector.analysis.ops import Explained
from stepwatch.collector.config import SERIES_DIMENSIONS
from stepwatch.collector.metrics import Metric
from stepwatch.collector.output.runs import verified_text
from stepwatch.collector.output.text import interval, percent, series_label
from stepwatch.dashboard.labels import VERDICT_COLORS, series_names, short_names, varying

# A figure as the browser is sent it. Streamlit draws every figure twice on a page's load: once, and again from a
# copy it re-themes once mounted. Plotly redraws that copy in full when its template is new (Streamlit's theme
# always makes one) or any data array is packed binary (always taken as changed): 43-78 ms a figure here, against
# 15-33 for the same figures plain. So figures go without Streamlit's theme (``theme=None``) and without a template,
# styled in their own layout, with plain lists and a ``datarevision`` of their data, which tells Plotly that a
# copy with the same revision holds the same data. Every figure a page draws is built plain (``sent_plain``), so
# a figure cached by ``data.drawn`` is cached plain.
FONT = '"Source Sans", sans-serif'  # Streamlit's own
MUTED = "rgba(128, 128, 128, 0.25)"  # grid and zero lines, read on a light or a dark page
PACKED = {"f8": "<f8", "f4": "<f4", "i1": "i1", "u1": "u1", "i2": "<i2", "u2": "<u2", "i4": "<i4", "u4": "<u4"}


def _unpacked(value: Any) -> Any:
    """``value`` with every packed array (plotly's {dtype, bdata[, shape]}) as plain (nested) lists."""
    if isinstance(value, dict):
        if "bdata" in value and value.get("dtype") in PACKED:
            array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=PACKED[value["dtype"]])
            if "shape" in value:
                array = array.reshape([int(n) for n in str(value["shape"]).split(",")])
            return array.tolist()
        return {key: _unpacked(v) for key, v in value.items()}
    if isinstance(value, list):
        return [_unpacked(v) for v in value]
    return value


def plain(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` drawn once in full by the browser (see above), styled as Streamlit's theme would."""
    spec = _unpacked(json.loads(fig.to_json(validate=False)))  # plotly's own encoding: dates as ISO text
    layout = spec.setdefault("layout", {})
    layout.pop("template", None)
    revision = hashlib.blake2b(json.dumps(spec["data"], sort_keys=True).encode(), digest_size=8).hexdigest()
    layout.update(
        datarevision=revision,
        font={"family": FONT, "color": "#808495", **layout.get("font", {})},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        colorway=px.colors.qualitative.Plotly,
        hoverlabel={"font": {"family": FONT}, **layout.get("hoverlabel", {})},
    )
    out = go.Figure(spec, skip_invalid=False)
    out.layout.template = None
    out.update_xaxes(gridcolor=MUTED, zerolinecolor=MUTED, linecolor=MUTED)
    out.update_yaxes(gridcolor=MUTED, zerolinecolor=MUTED, linecolor=MUTED)
    return out


def sent_plain(build: Callable[..., go.Figure]) -> Callable[..., go.Figure]:
    """``build``, its figure made ``plain``: the figure builders a page draws (with ``state.figure``)."""

    @functools.wraps(build)
    def built(*args: Any, **kwargs: Any) -> go.Figure:
        return plain(build(*args, **kwargs))

    return built


MAX_LINE_POINTS = 300  # points a history line sends the browser at most (about what a plot's width shows)
MARKED_POINTS = 60  # a longer line is drawn without a marker per point (a path each, in the browser)


def epoch_ms(times: pd.Series) -> pd.Series:
    """Times as milliseconds since 1970 (UTC), which a date axis reads: a number of 16 characters a point where
    the date's text was 26, and no text for the browser to parse into a date."""
    stamps = pd.to_datetime(times, utc=True)
    return (stamps - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(milliseconds=1)


def thin(points: pd.DataFrame, limit: int = MAX_LINE_POINTS) -> tuple[pd.DataFrame, int]:
    """Per series, at most ``limit`` points over nights: beyond that, each run of ``k`` consecutive suite runs
    becomes one point at its first night with their median value (trial counts summed, versions of the last).
    Returns the points and ``k`` (1: nothing thinned)."""
    longest = int(points.groupby("series_key").size().max()) if len(points) else 0
    if longest <= limit:
        return points, 1
    k = -(-longest // limit)
    frame = points.sort_values(["series_key", "night"]).copy()
    frame["_bucket"] = frame.groupby("series_key").cumcount() // k
    firsts = {c: "first" for c in frame.columns if c not in ("series_key", "_bucket")}
    sums = {c: "sum" for c in ("ok", "trials", "flagged", "unread") if c in frame.columns}
    agg = {**firsts, "night": "first", "value": "median", **sums, "tf_version": "last"}
    return frame.groupby(["series_key", "_bucket"], sort=False).agg(agg).reset_index().drop(columns="_bucket"), k


@sent_plain
def history(
    points: pd.DataFrame,
    metric: Metric,
    x: str,
    color: str,
    facet: str | None,
    log: bool,
    normalised_to: str | None,
    changes: pd.DataFrame,
) -> go.Figure:
    """One line per series over nights or versions, coloured by a dimension and optionally faceted by
    another; version upgrades as dotted lines and change points as red crosses (over nights, unfaceted).
    Traces are built directly, which is several times faster than plotly express; the points are one per
    series and suite run (``queries.history_points``), at most a few hundred a line."""
    frame = points.sort_values("night").copy()
    frame["series"] = series_names(frame)
    scale = 1.0 if normalised_to else metric.scale
    units = frame["unit"].dropna().unique() if "unit" in frame else []  # the series' own (an imported result's)
    unit = "x baseline" if normalised_to else metric.unit.replace("{unit}", units[0] if len(units) == 1 else "units")
    fig, panels, columns = _panels(frame, facet, wrap=3)
    rows = -(-len(panels) // columns)
    # Every line named by what tells it apart (the dimensions that vary, the facet's aside), coloured by
    # ``color`` (or, when that does not vary here, by the first dimension that does), dashed by the next
    # varying dimension and marked by the one after: no two lines look alike.
    varies = [d for d in varying(frame, SERIES_DIMENSIONS) if d != facet]
    color = color if color in varies or not varies else varies[0]
    others = [d for d in varies if d != color]
    palette = px.colors.qualitative.Plotly
    colours = {v: palette[i % len(palette)] for i, v in enumerate(sorted(frame[color].astype(str).unique()))}
    firsts = frame.drop_duplicates("series_key").set_index("series_key", drop=False)
    names = short_names(firsts, [color, *others]) if varies else firsts["series"]
    dashes = _styles(frame, others[0] if others else None, DASHES)
    symbols = _styles(frame, others[1] if len(others) > 1 else None, SYMBOLS)
    traces, at_rows, at_cols = [], [], []
    for key, one in frame.groupby("series_key", sort=False):
        group = one[color].astype(str).iloc[0]  # as the colours were keyed (an empty dimension is one value too)
        panel = panels.index(one[facet].astype(str).iloc[0]) if facet else 0
        first = one.iloc[0]
        traces.append(
            go.Scatter(
                x=epoch_ms(one[x]) if x == "night" else one[x],
                y=one["value"] * scale,
                mode="lines+markers" if len(one) <= MARKED_POINTS else "lines",
                name=names[key],
                legendgroup=names[key],
                showlegend=panel == 0 or not facet,
                line={"color": colours[group], "width": 1.5, "dash": dashes.get(_value(first, others, 0), "solid")},
                marker={"size": 5, "symbol": symbols.get(_value(first, others, 1), "circle")},
                customdata=one[["ok", "trials"]].to_numpy(dtype=np.uint32),  # counts, sent as "9", not "9.0"
                text=one["tf_version"].tolist(),
                hovertemplate=f"{one['series'].iloc[0]}<br>TF %{{text}}, %{{customdata[0]}}/%{{customdata[1]}} ok"
                "<br>%{x}: %{y:.4g}<extra></extra>",
            )
        )
        at_rows.append(panel // columns + 1)
        at_cols.append(panel % columns + 1)
    fig.add_traces(traces, rows=at_rows, cols=at_cols)
    _mark_flagged(fig, frame, x, scale, facet, panels, columns)
    if x == "night" and not facet:
        upgrades = frame.drop_duplicates("tf_version").iloc[1:]
        fig.update_layout(
            shapes=[
                {
                    "type": "line",
                    "x0": t,
                    "x1": t,
                    "yref": "paper",
                    "y0": 0,
                    "y1": 1,
                    "line": {"dash": "dot", "color": "#999"},
                }
                for t in upgrades["night"]
            ],
            annotations=[
                {"x": t, "y": 1, "yref": "paper", "text": f"TF {v}", "showarrow": False}
                for t, v in zip(upgrades["night"], upgrades["tf_version"])
            ],
        )
        if len(changes):
            fig.add_trace(
                go.Scatter(
                    x=changes["change_at"],
                    y=[1.0] * len(changes) if normalised_to else changes["after_value"] * scale,
                    mode="markers",
                    marker={"symbol": "x", "size": 13, "color": "#d62728"},
                    name=CHANGE_POINT,
                    # its status, and what a verifying check made of it (stepwatch alerts verify)
                    text=[f"{row['status']}, verified: {verified_text(row)}" if row.get("verification")
                          else row["status"] for row in changes.to_dict("records")],  # fmt: skip
                )
            )
    if x == "night":
        fig.update_xaxes(type="date")
    fig.update_yaxes(type="log" if log else "linear", title_text=f"{metric.label} ({unit})", row=1, col=1)
    fig.update_layout(height=max(520, 320 * rows), legend_title_text=", ".join(varies), margin={"t": 40})
    return fig


def _mark_flagged(
    fig: go.Figure, frame: pd.DataFrame, x: str, scale: float, facet: str | None, panels: list[str], columns: int
) -> None:
    """A ring around each point whose trials include some that ran throttled or shared, or whose machine was not
    read (collector.trial.machine): its value may be the machine's."""
    if "flagged" not in frame.columns:
        return
    frame = frame.assign(_panel=[panels.index(str(v)) for v in frame[facet]] if facet else 0)
    marked = frame[(frame["flagged"] > 0) | (frame["unread"] > 0)]
    for panel, one in marked.groupby("_panel", sort=True):
        fig.add_trace(
            go.Scatter(
                x=epoch_ms(one[x]) if x == "night" else one[x],
                y=one["value"] * scale,
                mode="markers",
                marker={"symbol": "circle-open", "size": 12, "color": "#ff7f0e", "line": {"width": 2}},
                name=MACHINE_FLAGGED,
                legendgroup="machine flagged",
                showlegend=panel == 0,
                customdata=one[["flagged", "unread", "ok"]].to_numpy(dtype=np.uint32),
                hovertemplate="%{customdata[0]} of %{customdata[2]} trials throttled or shared, %{customdata[1]} "
                "not read<extra></extra>",
            ),
            row=panel // columns + 1,
            col=panel % columns + 1,
        )


# The marks a History figure draws over its series' lines.
CHANGE_POINT, MACHINE_FLAGGED = "change point", "machine flagged or not read"
MARKS = (CHANGE_POINT, MACHINE_FLAGGED)

DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "hexagon")


def _styles(frame: pd.DataFrame, dimension: str | None, styles: Sequence[str]) -> dict[str, str]:
    """A line style per value of ``dimension`` (cycled), keyed by the value's text."""
    if dimension is None:
        return {}
    return {v: styles[i % len(styles)] for i, v in enumerate(sorted(frame[dimension].astype(str).unique()))}


def _value(row: pd.Series, dimensions: Sequence[str], index: int) -> str | None:
    return str(row[dimensions[index]]) if len(dimensions) > index else None


FOREST_ROWS = 40  # rows a forest plot draws at most (a taller figure is scrolled, not read)


LABEL_CHAR_PX = 6.2  # the mean width of a character of an axis label (Plotly's 12 px, Streamlit's font), in px
LABEL_MARGIN_MAX = 520  # px: a longer name is cut at its start rather than squeeze the plot


@sent_plain
def forest(comparison: Comparison, limit: int = FOREST_ROWS) -> go.Figure:
    """Ratios with their 95% CIs per series, coloured by verdict, with the ± threshold band: the ``limit``
    worst rows (regressions first, then failures, inconclusive, improvements, no change; the table has all)."""
    rows = [r for r in comparison.ordered() if not math.isnan(r.result.ratio)][:limit]
    several = len({r.metric.name for r in rows}) > 1
    labels = [series_label(r.series) + (f" · {r.metric.name}" if several else "") for r in rows]
    fig = go.Figure()
    for verdict, color in VERDICT_COLORS.items():
        picked = [(label, r) for label, r in zip(labels, rows) if r.verdict == verdict]
        if not picked:
            continue
        ratios = [(r.result.ratio - 1) * 100 for _, r in picked]
        low = [(r.result.ratio - r.result.ci_low) * 100 if not math.isnan(r.result.ci_low) else 0 for _, r in picked]
        high = [(r.result.ci_high - r.result.ratio) * 100 if not math.isnan(r.result.ci_high) else 0 for _, r in picked]
        fig.add_trace(
            go.Scatter(
                x=ratios,
                y=[label for label, _ in picked],
                mode="markers",
                marker={"color": color, "size": 9},
                error_x={"type": "data", "array": high, "arrayminus": low},
                name=verdict,
            )
        )
    if rows:
        band = rows[0].result.threshold * 100
        fig.add_vrect(x0=-band, x1=band, fillcolor="#eee", opacity=0.5, line_width=0)
    fig.add_vline(x=0, line_color="#444")
    # The worst row on top, where the first screen shows it (a category axis starts at the bottom), and every
    # series' name whole, not cut at the plot's left edge: a margin for the longest name, given rather than
    # found by Plotly (its automargin draws the figure a second time); the legend above, leaving the plot its width.
    fig.update_layout(
        xaxis_title="change, candidate vs baseline (%)", height=max(300, 28 * len(rows) + 120),
        margin={"t": 30, "l": min(LABEL_MARGIN_MAX, 20 + LABEL_CHAR_PX * max(map(len, labels), default=0))},
        yaxis={"categoryorder": "array", "categoryarray": labels, "autorange": "reversed"},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0},
    )  # fmt: skip
    return fig


def _panels(
    frame: pd.DataFrame, facet: str | None, wrap: int = 2, shared_yaxes: bool = False
) -> tuple[go.Figure, list[str], int]:
    """A figure of one panel per value of ``facet`` (or one panel), ``wrap`` a row, titled ``facet=value``;
    with its panel names and columns."""
    panels = sorted(frame[facet].astype(str).unique()) if facet else [""]
    columns = min(wrap, len(panels))
    rows = -(-len(panels) // columns)
    titles = [f"{facet}={p}" for p in panels] if facet else None
    return make_subplots(rows=rows, cols=columns, subplot_titles=titles, shared_yaxes=shared_yaxes), panels, columns


def _configs(frame: pd.DataFrame, by: str) -> pd.Series:
    """Each row's config as the x axis reads it: model/preset, with the backend when several are shown, and the
    loop when several are (plain PyTorch beside Keras' fit on torch)."""
    config = frame["model"] + "/" + frame["preset"]
    if frame["keras_backend"].nunique() > 1 and by != "keras_backend":
        config += " " + frame["keras_backend"]
    if frame["loop"].nunique() > 1:
        config += " " + frame["loop"]
    return config


XLA_WORDS = {True: "jit_compile on", False: "jit_compile off"}


@sent_plain
def speedup_bars(
    frame: pd.DataFrame, kind: str, title: str, color: str = "precision", pattern: str | None = None
) -> go.Figure:
    """One bar per config point: its ``kind`` speedup (``analysis.speedups.with_intervals``) with the 95%
    interval as an error bar and n in the hover; a bar whose interval holds 1 is drawn faint and hatched, and
    said so in the hover. One panel per accelerator when there are several."""
    data = frame.dropna(subset=[f"{kind}_speedup"]).copy()
    data["config"] = _configs(data, color)
    data["xla"] = data["xla"].map(XLA_WORDS)
    facet = "accelerator" if data["accelerator"].nunique() > 1 else None
    fig, panels, columns = _panels(data, facet, shared_yaxes=True)
    palette = px.colors.qualitative.Plotly
    colours = {v: palette[i % len(palette)] for i, v in enumerate(sorted(data[color].astype(str).unique()))}
    shown: set[str] = set()
    by = [color, pattern] if pattern else [color]
    for (panel_name, *group), part in data.groupby([facet or "model", *by], sort=True):
        name = ", ".join(str(g) for g in group)
        ratio, low, high = part[f"{kind}_speedup"], part[f"{kind}_ci_low"], part[f"{kind}_ci_high"]
        clear = part[f"{kind}_clear"].tolist()
        verdict = ["interval excludes 1" if c else "interval holds 1: not a clear speedup" for c in clear]
        panel = panels.index(str(panel_name)) if facet else 0
        fig.add_trace(
            go.Bar(
                x=part["config"],
                y=ratio,
                name=name,
                legendgroup=name,
                showlegend=name not in shown,
                error_y={"type": "data", "array": (high - ratio).fillna(0), "arrayminus": (ratio - low).fillna(0)},
                marker={
                    "color": colours[str(group[0])],
                    "opacity": [1.0 if c else 0.4 for c in clear],
                    "pattern": {"shape": ["" if c else "/" for c in clear]},
                },
                customdata=list(zip(low, high, part[f"{kind}_n"], verdict, part["per_device_batch"])),
                hovertemplate=f"{name} %{{x}}<br>%{{y:.3f}}x [%{{customdata[0]:.3f}}, %{{customdata[1]:.3f}}]"
                "<br>trials %{customdata[2]}, batch %{customdata[4]}<br>%{customdata[3]}<extra></extra>",
            ),
            row=panel // columns + 1,
            col=panel % columns + 1,
        )
        shown.add(name)
    fig.add_hline(y=1, line_dash="dot")
    fig.update_layout(barmode="group", height=460, margin={"t": 60}, title=title, legend_title_text=", ".join(by))
    fig.update_yaxes(title_text="speedup (x)", col=1)
    return fig


COST_METRICS = {"cost_usd": "cost per run (USD)", "cost_per_1m_examples_usd": "USD per 1M examples"}


def price_marks(frame: pd.DataFrame) -> dict[str, int]:
    """A number per price in the costs (``queries.costs``), in order of key: what each bar carries under it, and
    the Cost page's list of sources."""
    return {key: i for i, key in enumerate(sorted(frame["price_key"].dropna().unique()), start=1)}


@sent_plain
def cost_bars(frame: pd.DataFrame, column: str) -> go.Figure:
    """One of ``COST_METRICS`` (cost per run or per 1M examples), a panel per model: the alternatives of a config
    (XLA on/off, precision, batch, ...) side by side as grouped bars, never stacked (costs of alternatives do not add);
    colour by precision, hatched when jit_compile is on. Each bar names its price under it (its mark in
    ``price_marks``); the hover names the price, what it covers, its source and date."""
    data = frame.copy()
    data["config"] = data["model"] + "/" + data["preset"]
    # Every bar names its price under it: the hardware and the price's mark in the list below the chart.
    marks = price_marks(data)
    data["priced"] = data["accelerator"].fillna("?") + data["price_key"].map(lambda key: f" [{marks[key]}]")
    models = sorted(data["config"].unique())
    alternatives = [d for d in varying(data, SERIES_DIMENSIONS) if d not in ("model", "preset", "accelerator")]
    if "precision" not in alternatives:
        alternatives.insert(0, "precision")
    data["alternative"] = short_names(data, alternatives)
    fig = make_subplots(
        rows=len(models), cols=1, subplot_titles=[f"{m}: {COST_METRICS[column]}" for m in models],
        vertical_spacing=0.4 / len(models) if len(models) > 1 else 0.1,  # room for the slanted names
    )  # fmt: skip
    palette = px.colors.qualitative.Plotly
    colours = {v: palette[i % len(palette)] for i, v in enumerate(sorted(data["precision"].unique()))}
    shown: set[str] = set()
    for row, model in enumerate(models, start=1):
        for name, part in data[data["config"] == model].groupby("alternative", sort=True):
            xla_on = bool(part["xla"].iloc[0])
            fig.add_trace(
                go.Bar(
                    x=part["priced"],
                    y=part[column],
                    name=name,
                    legendgroup=name,
                    offsetgroup=name,
                    showlegend=name not in shown,
                    marker={"color": colours[part["precision"].iloc[0]],
                            "pattern": {"shape": "/" if xla_on else ""}},
                    customdata=part[["price_per_device_hour", "price_source", "price_date", "trials",
                                     "examples_per_sec", "price_covers"]].astype(str).to_numpy(),
                    hovertemplate=f"{model} {name}<br>%{{x}}: %{{y:.4g}} USD<br>"
                    "%{customdata[4]} examples/s (median of %{customdata[3]} trials)<br>"
                    "price %{customdata[0]} USD per device-hour (%{customdata[5]}), %{customdata[1]} "
                    "(%{customdata[2]})"
                    "<extra></extra>",
                ),
                row=row,
                col=1,
            )  # fmt: skip
            shown.add(name)
    fig.update_layout(barmode="group", height=max(400, 380 * len(models)), margin={"t": 40},
                      legend={"title_text": ", ".join(alternatives), "orientation": "h", "yanchor": "top",
                              "y": -0.25 / len(models)})  # fmt: skip
    return fig


@sent_plain
def version_boxes(spread: pd.DataFrame, metric: Metric, versions: Sequence[str], along: str) -> go.Figure:
    """A box per series and version (``queries.version_spread``: min, quartiles and max of its ok trials,
    drawn from those numbers), versions in order along x, one colour per series; each box's hover names the
    series whole, its trials and suite runs."""
    data = spread.copy()
    data["series"] = series_names(data)
    varies = varying(data, SERIES_DIMENSIONS)
    data["name"] = short_names(data, varies) if varies else data["series"]
    scale = metric.scale
    palette = px.colors.qualitative.Plotly
    fig = go.Figure()
    for i, (name, part) in enumerate(data.groupby("name", sort=True)):
        fig.add_trace(
            go.Box(
                x=part["version"],
                q1=part["q1"] * scale,
                median=part["median"] * scale,
                q3=part["q3"] * scale,
                lowerfence=part["low"] * scale,
                upperfence=part["high"] * scale,
                name=name,
                marker={"color": palette[i % len(palette)]},
                customdata=part[["series", "n", "suite_runs"]].astype(str).to_numpy(),
                hovertemplate="%{customdata[0]}<br>%{x}: median %{median:.4g}, quartiles %{q1:.4g} to %{q3:.4g}, "
                "range %{lowerfence:.4g} to %{upperfence:.4g}<br>%{customdata[1]} trials in %{customdata[2]} "
                "suite runs<extra></extra>",
            )
        )
        if metric.name == "max_per_device_batch":  # beside the largest batch, the batch the series' trials ran
            fig.add_trace(
                go.Scatter(
                    x=part["version"], y=part["per_device_batch"], mode="markers", name=f"{name}: its trials' batch",
                    marker={"color": palette[i % len(palette)], "symbol": "line-ew-open", "size": 28,
                            "line": {"width": 2}},
                    hovertemplate="%{x}: its trials ran at per-device batch %{y}<extra></extra>",
                )
            )  # fmt: skip
    unit = metric.unit.replace("{unit}", "units")
    fig.update_layout(
        boxmode="group", height=380, margin={"t": 40}, title=metric.label,
        xaxis={"type": "category", "categoryorder": "array", "categoryarray": list(versions), "title": along},
        yaxis_title=f"{metric.label} ({unit})" if unit else metric.label,
    )  # fmt: skip
    return fig


@sent_plain
def run_windows(windows: pd.DataFrame) -> go.Figure:
    """A trial's windows in one figure: the distribution of its step times (ms) and its loss by window, side by
    side, each panel only where the trial recorded it (one figure, not two: each figure costs a page load its own
    setup in the browser)."""
    steps, losses = windows.dropna(subset=["step_time_s"]), windows.dropna(subset=["loss"])
    panels = []  # (title, x axis, y axis, trace)
    if len(steps):
        histogram = go.Histogram(x=steps["step_time_s"] * 1000, nbinsx=30)
        panels.append(("step time per window (ms)", "ms", "windows", histogram))
    if len(losses):
        curve = go.Scatter(x=losses["window_index"], y=losses["loss"], mode="lines+markers")
        panels.append(("loss by window", "window", "loss", curve))
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[title for title, *_ in panels])
    for column, (_, x_title, y_title, trace) in enumerate(panels, start=1):
        fig.add_trace(trace, row=1, col=column)
        fig.update_xaxes(title_text=x_title, row=1, col=column)
        fig.update_yaxes(title_text=y_title, row=1, col=column)
    fig.update_layout(height=320, margin={"t": 40}, showlegend=False)
    return fig


OP_ROWS = 15  # ops an op diff draws


@sent_plain
def op_diff(pair: Explained, limit: int = OP_ROWS) -> go.Figure:
    """A pair's op diff: the change of each op's time per step (ms), the ``limit`` largest first, coloured by
    whether it moved (slower, faster) or not, with its share of the step's change and its ratio on hover."""
    shown = pair.ops[:limit][::-1]  # plotly draws the first bar at the bottom
    colors = [
        VERDICT_COLORS["regression" if op.delta_s > 0 else "improvement"] if op.moved or op.appeared
        else VERDICT_COLORS["no change"]
        for op in shown
    ]  # fmt: skip
    hover = [
        f"{op.op} ({op.where})<br>{op.baseline_s * 1e3:.3f} -> {op.candidate_s * 1e3:.3f} ms a step<br>"
        + (f"{op.only} only" if op.only else f"{percent(op.ratio.ratio)} {interval(op.ratio.ci_low, op.ratio.ci_high)}")
        + (f"<br>share of the change {op.share * 100:+.0f}%" if not math.isnan(op.share) else "")
        for op in shown
    ]
    fig = go.Figure(
        go.Bar(
            x=[op.delta_s * 1e3 for op in shown],
            y=[f"{op.op} ({op.where})" for op in shown],
            orientation="h",
            marker={"color": colors},
            hovertext=hover,
            hoverinfo="text",
        )
    )
    fig.add_vline(x=0, line_color="#444")
    fig.update_layout(
        xaxis_title="change of the op's time per step, candidate vs baseline (ms)",
        height=max(300, 26 * len(shown) + 120),
        margin={"t": 30},
        showlegend=False,
    )
    return fig
