"""A comparison of two selections: the store's two sides through the statistics, per series and metric, with
a verdict per row and the exit code it gives. The CLI, the upgrade check and the dashboard build it the same
way; ``collector.output.comparison`` shows it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pandas as pd

from stepwatch.collector.analysis import noise, numerics, stats
from stepwatch.collector.analysis.stats import plain
from stepwatch.collector.analysis.thresholds import Override, direction_for, threshold_for
from stepwatch.collector.metrics import FOLLOWING, Metric, get_metric
from stepwatch.collector.outcomes import FAILED, VERDICT_ORDER
from stepwatch.collector.schema import KERNELS
from stepwatch.collector.store import queries, trajectories
from stepwatch.collector.store.selection import Selection


@dataclass(frozen=True)
class Row:
    series: dict[str, Any]  # series_key, config fields, accelerator, unit, suite
    metric: Metric
    failed_baseline: int
    failed_candidate: int
    result: stats.Verdict
    noise: noise.Noise | None = None  # the series' trial-to-trial noise: its history's, or a check's own sides'

    @property
    def verdict(self) -> str:
        r = self.result
        if (r.baseline.n == 0 and self.failed_baseline) or (r.candidate.n == 0 and self.failed_candidate):
            return FAILED
        return r.verdict


@dataclass
class Comparison:
    baseline: Selection
    candidate: Selection
    metrics: list[Metric]
    rows: list[Row]
    summaries: dict[str, stats.Summary]
    versions: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    aa: Comparison | None = None  # an upgrade check's A/A: the baseline against a second environment of it
    model_code: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # side -> user model -> hashes
    machine: dict[str, dict[str, int]] = field(default_factory=dict)  # side -> its trials flagged (queries)
    # schema.KERNELS' kind (attention, experts) -> side -> the kernel that ran -> its ok trials
    kernels: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    own_noise: bool = False  # each row's noise is its sides' own (a check), not its series' history's
    alpha: float = stats.ALPHA  # the level of its tests; its intervals are 1 - alpha (a sequential check's look)
    looks: dict[str, Any] | None = None  # a sequential check's looks (``sequential.Sequential.payload``)
    numerics: dict[str, numerics.Numerics] = field(default_factory=dict)  # series_key -> its numerics verdict

    def series_of(self, key: str) -> dict[str, Any]:
        return next(row.series for row in self.rows if row.series["series_key"] == key)

    def code_changes(self) -> list[tuple[str, list[str], list[str]]]:
        """User models whose source differs between the sides, or within one: (model, baseline's hashes,
        candidate's). Their change is not only the software's."""
        sides = self.model_code.get("baseline", {}), self.model_code.get("candidate", {})
        models = sorted(set(sides[0]) & set(sides[1]))
        return [(m, sides[0][m], sides[1][m]) for m in models if len({*sides[0][m], *sides[1][m]}) > 1]

    def kernel_differs(self, kind: str) -> bool:
        """Whether the sides ran different kernels of ``kind`` (``schema.KERNELS``: a fused attention kernel on one,
        the math on the other; grouped experts on one, a loop over them on the other): their change is then partly
        the kernel's, whatever else changed."""
        sides = [set(self.kernels.get(kind, {}).get(side, {})) for side in ("baseline", "candidate")]
        return all(sides) and sides[0] != sides[1]

    def by_verdict(self, verdict: str) -> list[Row]:
        return [row for row in self.rows if row.verdict == verdict]

    def only_on(self, side: str) -> list[Row]:
        """Series run on one side only (a side whose trials all failed is a failure, not an absence)."""
        other = "candidate" if side == "baseline" else "baseline"
        return [
            r
            for r in self.rows
            if r.metric == self.metrics[0]
            and getattr(r.result, side).n
            and not getattr(r.result, other).n
            and not getattr(r, f"failed_{other}")
        ]

    def ordered(self) -> list[Row]:
        """Rows worst first: regressions, failures, inconclusive, improvements, no change, missing."""
        order = {v: i for i, v in enumerate(VERDICT_ORDER)}
        return sorted(self.rows, key=lambda r: order[r.verdict])


def build(
    con: duckdb.DuckDBPyConnection,
    baseline: Selection,
    candidate: Selection,
    metric_names: list[str],
    overrides: list[Override],
    between: Mapping[str, stats.Between] | None = None,
    own_noise: bool = False,
    alpha: float = stats.ALPHA,
) -> Comparison:
    """Every series on either side, for every metric, with BH across the whole series x metric matrix.
    ``between``: per metric, the between-environment variance its intervals also cover (a calibration's, an
    A/A's), for sides measured in different environments. ``own_noise``: each row's noise is its two sides' own
    spread (a check: its store holds its other sides and earlier checks), not the series' history's. ``alpha``: the
    level of the tests and one minus the intervals' confidence (``collector.analysis.sequential``: a look's share)."""
    metrics = [get_metric(name) for name in metric_names]
    metrics += [m for m in FOLLOWING if m not in metrics]  # where the rows have them (routing balance)
    tables: list[tuple[Metric, pd.DataFrame]] = [
        (m, queries.compare_sides(con, baseline, candidate, m.name)) for m in metrics
    ]
    cells, pairs, thresholds, directions, offsets, spans = [], [], [], [], [], []
    for metric, table in tables:
        for record in table.to_dict("records"):
            series = {k: plain(record[k]) for k in ("series_key", *queries.SERIES_COLUMNS)}
            span = (_span(record, "baseline"), _span(record, "candidate")) if metric.deterministic else None
            if span and not (span[0].n or span[1].n or record["failed_baseline"] or record["failed_candidate"]):
                continue  # a counter this series' backend does not read (flops on TensorFlow): not a missing value
            if metric.name not in metric_names and not (record["n_baseline"] or record["n_candidate"]):
                continue  # a following metric this series does not have (a dense model beside one with experts)
            cells.append((metric, series, int(record["failed_baseline"]), int(record["failed_candidate"])))
            pairs.append((_side(record, "baseline"), _side(record, "candidate")))
            thresholds.append(threshold_for(metric, series, overrides))
            directions.append(direction_for(metric, series, overrides))
            offsets.append((between or {}).get(metric.name))
            spans.append(span)
    metrics = [m for m in metrics if m.name in metric_names or any(cell[0] == m for cell in cells)]
    # Timed metrics through the tests (Benjamini-Hochberg across all of them); counters exactly.
    tested = [i for i, span in enumerate(spans) if span is None]
    columns = (pairs, thresholds, directions, offsets)
    compared = iter(stats.compare(*([values[i] for i in tested] for values in columns), alpha=alpha))
    results = [
        next(compared) if span is None else stats.exact(*span, threshold, higher)
        for span, threshold, higher in zip(spans, thresholds, directions)
    ]
    keys = sorted({series["series_key"] for _, series, _, _ in cells})
    noises = {  # a counter has none: values that differ across its history are versions, not noise
        m.name: (_sides_noise(con, baseline, candidate, m.name) if own_noise else
                 noise.noises_of(queries.trial_values(con, keys, m.name, noise.NOISE_TRIALS), ordered=True))
        if not m.deterministic
        else {}
        for m in metrics
    }  # fmt: skip
    rows = [
        Row(series, metric, fb, fc, result, noises[metric.name].get(series["series_key"]))
        for (metric, series, fb, fc), result in zip(cells, results)
    ]
    summaries = {m.name: stats.geomean_summary([r.result for r in rows if r.metric == m], 1 - alpha) for m in metrics}
    versions = {"baseline": queries.side_versions(con, baseline), "candidate": queries.side_versions(con, candidate)}
    code = {"baseline": queries.model_code(con, baseline), "candidate": queries.model_code(con, candidate)}
    machine = {"baseline": queries.machine_state(con, baseline), "candidate": queries.machine_state(con, candidate)}
    kernels = {kind: {"baseline": queries.kernels_ran(con, baseline, kind),
                      "candidate": queries.kernels_ran(con, candidate, kind)} for kind in KERNELS}  # fmt: skip
    return Comparison(
        baseline,
        candidate,
        metrics,
        rows,
        summaries,
        versions,
        model_code=code,
        machine=machine,
        kernels=kernels,
        own_noise=own_noise,
        alpha=alpha,
        numerics=numerics_of(con, baseline, candidate, alpha, rows),
    )


def numerics_of(
    con: duckdb.DuckDBPyConnection, baseline: Selection, candidate: Selection, alpha: float, rows: list[Row]
) -> dict[str, numerics.Numerics]:
    """Per series on both sides with a loss trajectory (the candidate's key, as the rows show it, where the sides
    differ in a dimension), its numerics verdict (``collector.analysis.numerics``)."""
    differ = queries.contrast(baseline, candidate)
    sides = [trajectories.side_trajectories(con, side, differ) for side in (baseline, candidate)]
    found = {
        sides[1][pair][0]: numerics.judge(
            numerics.trials_of(sides[0][pair][1]), numerics.trials_of(sides[1][pair][1]), alpha
        )
        for pair in sides[0].keys() & sides[1].keys()
    }
    shown = {row.series["series_key"] for row in rows}  # a series the table has (the candidate's, in a contrast)
    return {key: verdict for key, verdict in sorted(found.items()) if verdict is not None and key in shown}


def _sides_noise(
    con: duckdb.DuckDBPyConnection, baseline: Selection, candidate: Selection, metric: str
) -> dict[str, noise.Noise]:
    """Per series, the noise within each side of these two selections, pooled (``noise.within_sides``)."""
    sides = queries.side_values(con, baseline, metric), queries.side_values(con, candidate, metric)
    keys = sides[0].keys() | sides[1].keys()
    found = {key: noise.within_sides([side.get(key, []) for side in sides]) for key in keys}
    return {key: value for key, value in found.items() if value is not None}


def _span(record: dict[str, Any], side: str) -> stats.Span:
    n = plain(record[f"k_{side}"]) or 0
    return stats.Span(int(n), plain(record[f"lo_{side}"]), plain(record[f"hi_{side}"])) if n else stats.Span.of([])


def _side(record: dict[str, Any], side: str) -> stats.Side:
    return stats.Side.of_summary(record[f"n_{side}"], record[f"mean_log_{side}"], record[f"var_log_{side}"])
