"""Speedups with their uncertainty: each config point against its reference (XLA off, the fastest fp32 point,
the TensorFlow backend; ``queries.speedups`` pairs them), as the ratio of geometric means of the two points'
ok trials with its 95% Welch interval, the same statistics a comparison uses. A ratio whose interval holds 1
is not shown to be a speedup (or a slowdown) at all."""

from __future__ import annotations

import pandas as pd

from stepwatch.collector.analysis import stats
from stepwatch.collector.store.queries import SPEEDUPS


def with_intervals(points: pd.DataFrame) -> pd.DataFrame:
    """``points`` with, per kind of speedup, ``{kind}_speedup`` (NaN without a reference point), its interval
    ``{kind}_ci_low``/``{kind}_ci_high`` (NaN below two trials a side), ``{kind}_n`` ("trials / reference
    trials") and ``{kind}_clear`` (the interval excludes 1)."""
    out = points.copy()
    for kind in SPEEDUPS:
        ratios = [
            stats.welch_ratio(stats.Side.of_summary(rn, rm, rv), stats.Side.of_summary(n, m, v))
            for n, m, v, rn, rm, rv in zip(
                points["n"], points["mean_log"], points["var_log"],
                points[f"{kind}_n"], points[f"{kind}_mean_log"], points[f"{kind}_var_log"],
            )
        ]  # fmt: skip
        out[f"{kind}_speedup"] = [r.ratio for r in ratios]
        out[f"{kind}_ci_low"] = [r.ci_low for r in ratios]
        out[f"{kind}_ci_high"] = [r.ci_high for r in ratios]
        out[f"{kind}_n"] = [
            f"{int(n)} / {int(rn)}" if not pd.isna(rn) else "" for n, rn in zip(points["n"], points[f"{kind}_n"])
        ]
        out[f"{kind}_clear"] = [r.ci_low > 1 or r.ci_high < 1 for r in ratios]  # NaN compares False: not clear
    return out
