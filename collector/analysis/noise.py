"""Noise, a property of a series: its trial-to-trial spread over its last trials in the store (about its
coefficient of variation), and whether its trials fall into two separate clusters (processes that land on one of two
speeds: bimodal), which a comparison's interval alone would not show. Arrays in, a ``Noise`` out, as ``stats``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from stepwatch.collector.metrics import RECENT_TRIALS

NOISE_TRIALS = RECENT_TRIALS  # a series' noise is judged on its last 30 ok trials, which the store keeps
BIMODAL_MIN_TRIALS = 8  # fewer cannot tell two clusters from chance
BIMODAL_FALSE_RATE = 0.01  # how often one Gaussian cluster of the same size is called bimodal
MIN_CLUSTER_SHARE = 0.2


@dataclass(frozen=True)
class Noise:
    """A series' trial-to-trial noise: the standard deviation of log values (about the coefficient of variation)
    and, where its trials fall into two separate clusters (processes that land on one of two speeds), those."""

    n: int
    cv: float
    bimodal: bool
    modes: tuple[float, float] | None  # the two clusters' geometric means, lower first, when bimodal or stepped
    stepped: bool = False  # two clusters one after the other in time: a step in its history, not bimodal


def _best_split(logs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's (sorted) best split into two clusters (least within-cluster sum of squares, each cluster at
    least MIN_CLUSTER_SHARE of the trials) as (index of the first of the upper cluster, Ashman's D of it)."""
    n = logs.shape[1]
    low = max(2, math.ceil(MIN_CLUSTER_SHARE * n))
    ks = np.arange(low, n - low + 1)
    csum, csq = np.cumsum(logs, axis=1), np.cumsum(logs**2, axis=1)
    total, total_sq = csum[:, -1:], csq[:, -1:]
    left, left_sq = csum[:, ks - 1], csq[:, ks - 1]
    right, right_sq = total - left, total_sq - left_sq
    ss_left, ss_right = left_sq - left**2 / ks, right_sq - right**2 / (n - ks)
    best = np.argmin(ss_left + ss_right, axis=1)
    rows = np.arange(len(logs))
    k = ks[best]
    mean_a, mean_b = left[rows, best] / k, right[rows, best] / (n - k)
    var_a = np.maximum(ss_left[rows, best], 0) / (k - 1)
    var_b = np.maximum(ss_right[rows, best], 0) / (n - k - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = math.sqrt(2) * np.abs(mean_b - mean_a) / np.sqrt(var_a + var_b)
    return k, np.nan_to_num(d, nan=0.0, posinf=np.inf)


@cache
def bimodal_cutoff(n: int) -> float:
    """The Ashman's D of a best two-cluster split that one Gaussian cluster of ``n`` trials exceeds only
    BIMODAL_FALSE_RATE of the time (a seeded simulation: splitting a sample always finds some separation, and
    the fewer the trials, the more)."""
    draws = np.sort(np.random.default_rng(n).standard_normal((4000, n)), axis=1)
    return float(np.quantile(_best_split(draws)[1], 1 - BIMODAL_FALSE_RATE))


def level_returns(upper: np.ndarray, stay: int) -> int:
    """How often a sequence on two levels (``upper``: True on the upper one, in time order) moves from a stay on one
    level to a stay on the other, a stay being ``stay`` or more in a row: 1 for a step (all of one level, then all
    of the other), more for a pool that alternates. With ``stay`` 2, one alone on the other level is no return to
    it (a night: an outlier); processes that alternate trial by trial need ``stay`` 1."""
    edges = np.flatnonzero(np.diff(upper)) + 1
    stays = [bool(run[0]) for run in np.split(np.asarray(upper), edges) if len(run) >= stay]
    return sum(a != b for a, b in zip(stays, stays[1:]))


def noise_of(values: Sequence[float] | np.ndarray) -> Noise:
    """The noise of a series from its trials' values (positive; order does not matter)."""
    return noises_of({0: values})[0]


def noises_of(series: Mapping[Any, Sequence[float] | np.ndarray], ordered: bool = False) -> dict[Any, Noise]:
    """``noise_of`` of many series at once: the series with the same number of trials are split in one array
    operation (a comparison over every series judges hundreds). ``ordered``: each series' values are in time order
    (``queries.trial_values``), and two clusters one after the other (``level_returns`` at most 1) are a step in
    its history, ``stepped`` rather than bimodal: a model made 40x slower is no pair of speeds processes land on."""
    found: dict[Any, Noise] = {}
    by_size: dict[int, list[tuple[Any, np.ndarray]]] = {}
    for key, values in series.items():
        logs = np.sort(np.log(np.asarray(values, dtype=float)))
        n = len(logs)
        cv = float(logs.std(ddof=1)) if n > 1 else math.nan
        found[key] = Noise(n, cv, False, None)
        if n >= BIMODAL_MIN_TRIALS and cv:
            by_size.setdefault(n, []).append((key, logs))
    for n, group in by_size.items():
        logs = np.stack([g for _, g in group])
        splits, d = _best_split(logs)
        for (key, row), split, separation in zip(group, splits, d):
            if separation > bimodal_cutoff(n):
                modes = (math.exp(row[: int(split)].mean()), math.exp(row[int(split) :].mean()))
                upper = np.log(np.asarray(series[key], dtype=float)) > (row[int(split) - 1] + row[int(split)]) / 2
                stepped = ordered and level_returns(upper, stay=1) <= 1
                found[key] = Noise(n, found[key].cv, not stepped, modes, stepped)
    return found


def within_sides(sides: Sequence[Sequence[float]]) -> Noise | None:
    """The noise of one check's trials, each side on its own: the spread within the sides, pooled (a change between
    the sides is no noise), and bimodal where one side's own trials fall into two clusters. None without trials."""
    found = [noise_of(values) for values in sides if len(values)]
    if not found:
        return None
    df = sum(n.n - 1 for n in found)
    cv = math.sqrt(sum((n.n - 1) * n.cv**2 for n in found if n.n > 1) / df) if df else math.nan
    split = next((n for n in found if n.bimodal), None)
    return Noise(sum(n.n for n in found), cv, split is not None, split.modes if split else None)


def level_text(value: float) -> str:
    """A level as a person reads it: '1,040', '40,254', '63.2', '0.0123' (never '4e+04')."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def noise_text(noise: Noise | None) -> str:
    """'CV 4.2%' or 'CV 21.0%, bimodal: 625 / 1,180' for tables; '' when unknown."""
    if noise is None or math.isnan(noise.cv):
        return ""
    text = f"CV {noise.cv:.1%}"
    if noise.modes and (noise.bimodal or noise.stepped):
        low, high = (level_text(mode) for mode in noise.modes)
        text += f", {'stepped' if noise.stepped else 'bimodal'}: {low} / {high}"
    return text
