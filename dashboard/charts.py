"""Plotly figures for the pages: data frames in, figures out."""

from __future__ import annotations

import math

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from pandas.io.formats.style import Styler
from plotly.subplots import make_subplots

from collector.analysis.comparison import Comparison
from collector.analysis.report import series_label
from collector.metrics import Metric

VERDICT_COLORS = {
    "regression": "#d62728",
    "failed": "#8c1c13",
    "inconclusive": "#e6a700",
    "improvement": "#2ca02c",
    "no change": "#7f7f7f",
    "missing": "#bbbbbb",
}


# Light fills of the verdict colours, for table cells (text stays readable on them).
VERDICT_FILLS = {
    "regression": "#fbd5d2",
    "failed": "#f2b8b3",
    "inconclusive": "#fcefc4",
    "improvement": "#d4efd4",
}


def verdict_styles(shown: pd.DataFrame, cells: dict[str, str], verdicts: pd.DataFrame) -> Styler:
    """``shown`` with each of ``cells``' columns filled in the colour of the verdict in the named column of
    ``verdicts`` (same index): a change reads as what the analysis found, not as a bare percentage."""

    def paint(frame: pd.DataFrame) -> pd.DataFrame:
        styles = pd.DataFrame("", index=frame.index, columns=frame.columns)
        for column, source in cells.items():
            fills = verdicts.loc[frame.index, source].map(VERDICT_FILLS)
            styles[column] = [f"background-color: {f}" if isinstance(f, str) else "" for f in fills]
        return styles

    return shown.style.apply(paint, axis=None)


def series_names(points: pd.DataFrame) -> pd.Series:
    """The readable name of each point's series (computed once per series, not per point)."""
    firsts = points.drop_duplicates("series_key").set_index("series_key")
    names = {key: series_label(row.to_dict()) for key, row in firsts.iterrows()}
    return points["series_key"].map(names)


def normalise(points: pd.DataFrame, field: str, baseline: str) -> pd.DataFrame:
    """Divide each series by its median at ``field == baseline`` (series without that baseline are dropped)."""
    ref = points[points[field].astype(str) == baseline].groupby("series_key")["value"].median()
    out = points[points["series_key"].isin(ref.index)].copy()
    out["value"] = out["value"] / out["series_key"].map(ref)
    return out


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
    Traces are built directly (WebGL), which at tens of thousands of points is several times faster
    than plotly express."""
    frame = points.sort_values("night").copy()
    frame["series"] = series_names(frame)
    scale = 1.0 if normalised_to else metric.scale
    unit = "x baseline" if normalised_to else metric.unit.replace("{unit}", "units")
    panels = sorted(frame[facet].astype(str).unique()) if facet else [""]
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=[f"{facet}={p}" for p in panels] if facet else None)
    palette = px.colors.qualitative.Plotly
    colours = {v: palette[i % len(palette)] for i, v in enumerate(sorted(frame[color].astype(str).unique()))}
    shown: set[str] = set()
    traces, at_rows, at_cols = [], [], []
    for _, one in frame.groupby("series_key", sort=False):
        group = str(one[color].iloc[0])
        panel = panels.index(str(one[facet].iloc[0])) if facet else 0
        traces.append(
            go.Scattergl(
                x=one[x],
                y=one["value"] * scale,
                mode="lines+markers",
                name=group,
                legendgroup=group,
                showlegend=group not in shown,
                line={"color": colours[group], "width": 1.5},
                marker={"size": 4},
                customdata=one[["ok", "trials"]].to_numpy(dtype=float),
                text=one["tf_version"].tolist(),
                hovertemplate=f"{one['series'].iloc[0]}<br>TF %{{text}}, %{{customdata[0]}}/%{{customdata[1]}} ok"
                "<br>%{x}: %{y:.4g}<extra></extra>",
            )
        )
        at_rows.append(panel // columns + 1)
        at_cols.append(panel % columns + 1)
        shown.add(group)
    fig.add_traces(traces, rows=at_rows, cols=at_cols)
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
                    name="change point",
                    text=changes["status"],
                )
            )
    fig.update_yaxes(type="log" if log else "linear", title_text=f"{metric.label} ({unit})", row=1, col=1)
    fig.update_layout(height=max(520, 320 * rows), legend_title_text=color, margin={"t": 40})
    return fig


def forest(comparison: Comparison) -> go.Figure:
    """Ratios with their 95% CIs per series, coloured by verdict, with the ± threshold band."""
    rows = [r for r in comparison.ordered() if not math.isnan(r.result.ratio)]
    labels = [f"{series_label(r.series)} · {r.metric.name}" for r in rows]
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
    fig.update_layout(
        xaxis_title="change, candidate vs baseline (%)", height=max(300, 28 * len(rows) + 120), margin={"t": 30}
    )
    return fig


def _panels(frame: pd.DataFrame, facet: str | None, wrap: int = 2) -> tuple[go.Figure, list[str], int]:
    """A figure of one panel per value of ``facet`` (or one panel), its panel names and columns."""
    panels = sorted(frame[facet].astype(str).unique()) if facet else [""]
    columns = min(wrap, len(panels))
    rows = -(-len(panels) // columns)
    titles = [str(p) for p in panels] if facet else None
    return make_subplots(rows=rows, cols=columns, subplot_titles=titles, shared_yaxes=True), panels, columns


def _configs(frame: pd.DataFrame, by: str) -> pd.Series:
    """Each row's config as the x axis reads it: model/preset, with the backend when several are shown."""
    config = frame["model"] + "/" + frame["preset"]
    if frame["keras_backend"].nunique() > 1 and by != "keras_backend":
        config += " " + frame["keras_backend"]
    return config


XLA_WORDS = {True: "jit_compile on", False: "jit_compile off"}


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
    fig, panels, columns = _panels(data, facet)
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


def cost_bars(frame: pd.DataFrame) -> go.Figure:
    data = frame.copy()
    data["config"] = data["model"] + "/" + data["preset"] + " " + data["precision"]
    fig = px.bar(
        data,
        x="accelerator",
        y="cost_per_1m_examples_usd",
        color="config",
        barmode="group",
        hover_data=["cost_usd", "price_per_device_hour", "price_source", "price_date"],
        labels={"cost_per_1m_examples_usd": "USD per 1M examples"},
    )
    fig.update_layout(height=460, margin={"t": 30})
    return fig


def step_times(windows: pd.DataFrame) -> go.Figure:
    fig = px.histogram(windows.assign(ms=windows["step_time_s"] * 1000), x="ms", nbins=30)
    fig.update_layout(xaxis_title="step time per window (ms)", height=320, margin={"t": 30})
    return fig


def loss_curve(windows: pd.DataFrame) -> go.Figure:
    fig = px.line(windows, x="window_index", y="loss", markers=True)
    fig.update_layout(xaxis_title="window", height=320, margin={"t": 30})
    return fig
