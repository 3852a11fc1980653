"""Baseline vs candidate statistics: arrays in, verdicts out. No I/O, no store, no printing, so the CLI,
the dashboard and the tests call the same functions on the same numbers.

**Did the candidate change this series?** (``compare``). Throughput and step times are multiplicative, so
sides are compared on log values: the ratio of geometric means with a 95% Welch interval, a Welch p-value,
Benjamini-Hochberg across the whole matrix, and a verdict against the smallest change that matters.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from stepwatch.collector.outcomes import CHANGED, IMPROVEMENT, INCONCLUSIVE, MISSING, NO_CHANGE, REGRESSION

ALPHA = 0.05
CONFIDENCE = 0.95
POWER = 0.8  # the minimum detectable effect is the change a comparison finds 80% of the time
MAX_TRIALS = 10_000


def _special() -> Any:
    """scipy.special, imported on first use: half a second of every command's start-up on 2 cores, and most
    commands (run, ingest, export, query) never test anything."""
    from scipy import special

    return special


@lru_cache(maxsize=8192)  # the trials-to-detect search asks for the same (q, df) for every series
def t_quantile(q: float, df: float) -> float:
    """Student's t quantile (scipy.special's, which imports in a fraction of scipy.stats' time)."""
    return float(_special().stdtrit(df, q))


def t_p_value(statistic: float, df: float) -> float:
    """The two-sided p-value of Student's t statistic at ``df`` degrees of freedom."""
    return float(2 * _special().stdtr(df, -abs(statistic)))


def plain(value: Any) -> Any:
    """pandas scalars (NaN, numpy ints) as plain Python values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


@dataclass(frozen=True)
class Side:
    """What the comparison needs of one side's trials: count, mean and sample variance of log(value)."""

    n: int
    mean_log: float
    var_log: float
    df: float | None = None  # of var_log, where it is not n - 1 (a variance that rests on other trials too)

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> Side:
        return cls.of_logs(np.log(np.asarray(values, dtype=float)))

    @classmethod
    def of_summary(cls, n: object, mean_log: object, var_log: object) -> Side:
        """From a query's count, mean and variance of log values, any of them missing (None or NaN) where the
        side has no trials or one."""

        def number(x: object) -> float:
            return math.nan if x is None or x != x else float(x)

        return cls(0 if n is None or n != n else int(n), number(mean_log), number(var_log))

    @classmethod
    def of_logs(cls, logs: np.ndarray) -> Side:
        var = float(logs.var(ddof=1)) if len(logs) > 1 else math.nan
        return cls(len(logs), float(logs.mean()) if len(logs) else math.nan, var)


@dataclass(frozen=True)
class Ratio:
    """candidate / baseline geometric means, its confidence interval and the two-sided Welch p-value."""

    ratio: float
    ci_low: float
    ci_high: float
    p_value: float


@dataclass(frozen=True)
class Between:
    """How much a series' mean (of log values) moves from one environment to another of the same packages: the
    variance of an environment's offset, which trials inside one environment cannot show, with its degrees of
    freedom. Every comparison of two separately built environments carries two such offsets, so its interval
    adds twice this variance to the trials' own (Welch-Satterthwaite over the parts)."""

    var_log: float
    df: float
    source: str = ""

    @property
    def cv(self) -> float:
        """The offset's standard deviation (about its relative size: 0.01 = 1%)."""
        return math.sqrt(self.var_log)


def between_groups(groups: Sequence[np.ndarray]) -> Between | None:
    """The between-environment variance from trials (log values) in k environments of the same packages: the
    one-way random-effects estimate (mean square between minus mean square within, over the trials per
    environment), with Satterthwaite's degrees of freedom; None with fewer than two environments of 2+ trials."""
    groups = [np.asarray(g, dtype=float) for g in groups if len(g) >= 2]
    k = len(groups)
    if k < 2:
        return None
    sizes = np.array([len(g) for g in groups], dtype=float)
    n_total = sizes.sum()
    n0 = (n_total - (sizes**2).sum() / n_total) / (k - 1)  # the trials per environment (unbalanced: Searle's n0)
    grand = np.concatenate(groups).mean()
    msb = float((sizes * (np.array([g.mean() for g in groups]) - grand) ** 2).sum() / (k - 1))
    df_within = float((sizes - 1).sum())
    msw = float(sum(((g - g.mean()) ** 2).sum() for g in groups) / df_within)
    var = max(0.0, (msb - msw) / n0)
    if var == 0:
        return Between(0.0, float(k - 1))
    a, b = msb / n0, msw / n0
    return Between(var, max(1.0, var**2 / (a**2 / (k - 1) + b**2 / df_within)))


def is_worse(ratio: float, higher_is_better: bool | None) -> bool:
    """Whether candidate/baseline = ``ratio`` went the bad way (never, for a counter without a declared direction)."""
    return higher_is_better is not None and (ratio < 1 if higher_is_better else ratio > 1)


def night_moments(nights: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per night with values: how many, their mean and their sample variance (NaN for one), in one pass over all
    of them (a few values a night: numpy's per-array calls cost more than the arithmetic)."""
    kept = [np.asarray(n, dtype=float) for n in nights if len(n)]
    if not kept:
        empty = np.zeros(0)
        return empty, empty, empty
    counts = np.array([len(n) for n in kept], dtype=float)
    flat = np.concatenate(kept)
    starts = np.concatenate(([0], np.cumsum(counts[:-1]).astype(int)))
    means = np.add.reduceat(flat, starts) / counts
    squares = np.add.reduceat((flat - np.repeat(means, counts.astype(int))) ** 2, starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        variances = np.where(counts > 1, squares / (counts - 1), np.nan)
    return counts, means, variances


TRIM = 0.1  # between_nights leaves out this share of the largest differences between successive nights (1 at least)
TRIMMED_NORMAL = 0.623  # the mean of x^2 for a standard normal x below its 90th percentile of x^2


# What a night's offset is taken to be on a runner that nothing has measured (a series alone on its runner, no
# calibration), while its own nights are few: 2% (a shared 2-core runner's nights wander about that far), worth 6
# nights (2 degrees of freedom). ``benchmarks/detection.py --nightly`` and ``--young`` measure what it costs and buys.
LONE_RUNNER = Between(0.02**2, 2.0, "a lone runner's prior (2% a night, 2 df)")


def between_nights(nights: Sequence[np.ndarray], prior: Between | None = None) -> Between | None:
    """The variance of a night's offset from consecutive nights' trials (log values, in night order): from the
    mean square of the differences between one night's mean and the next, the largest ``TRIM`` of them (one at
    least) left out, so that a step in the history counts as one large difference, not as spread, less the trials'
    own part. A median of the differences (before) understated the spread of nights on two hosts, half of whose
    differences are near zero. Its degrees of freedom are those of a difference of two estimates (Satterthwaite):
    the spread's, about half of the differences', shrunk by how much of it the trials' part is; where the trials'
    part is most of the spread, few. An estimate at or below zero is zero on one degree of freedom: it says nothing
    of the offset's size. None with fewer than three nights of 2+ trials.

    ``prior`` (a night's offset no other series has measured, ``LONE_RUNNER``): while the spread rests on fewer than
    ``ENOUGH_DF`` degrees of freedom, it is pooled with the spread the prior implies (the prior's offset plus this
    series' trials' part), weighted by degrees of freedom. Pooled on the spread, not on the offset: where nights do
    not move, the spread's own degrees of freedom say so and outweigh the prior within a few nights, which a zero
    offset (one degree of freedom) never could."""
    counts, means, variances = night_moments([g for g in nights if len(g) >= 2])
    if len(counts) < 3:
        return None
    within = float(np.mean(variances / counts))
    squares = np.sort(np.diff(means) ** 2)
    kept = squares[: len(squares) - max(1, int(TRIM * len(squares)))]
    spread = float(kept.mean()) / (2 * TRIMMED_NORMAL)
    df_spread, df_within = (len(counts) - 2) / 2, float((counts - 1).sum())
    source = "nights' offsets"
    if prior is not None and df_spread < ENOUGH_DF:
        spread = (prior.df * (prior.var_log + within) + df_spread * spread) / (prior.df + df_spread)
        df_spread += prior.df
        source = f"nights' offsets, pooled with {prior.source}"
    offset = spread - within
    if offset <= 0:
        return Between(0.0, 1.0, source)
    df = offset**2 / (spread**2 / max(df_spread, 1.0) + within**2 / df_within)
    return Between(offset, max(1.0, df), source)


ENOUGH_DF = 10  # a series' own night-to-night estimate stands alone from this many degrees of freedom


def night_offset(own: Between | None, floor: Between | None, what: str = "") -> Between | None:
    """The variance of a night's offset a series is judged with: ``own`` (``between_nights`` of its nights) where
    it rests on ``ENOUGH_DF`` degrees of freedom and is above zero, else pooled (weighted by degrees of freedom) with
    ``floor`` (what the other series of its runner say, or its runner's calibration: ``what`` names it), so that a
    young or noisy estimate of zero cannot switch the widening off; None where neither says anything."""
    if own is not None and own.df >= ENOUGH_DF and own.var_log > 0:
        return dataclasses.replace(own, source=f"its own ({own.df:.0f} df)")
    if floor is None:
        return own if own is not None and own.var_log > 0 else None
    both = pool_between([own, floor])
    what = what or floor.source or "the runner's calibration"
    return dataclasses.replace(both, source=f"pooled with {what} ({both.df:.0f} df)")


def between_pair(a: Side, b: Side) -> Between | None:
    """The between-environment variance from one A/A pair (the same packages in two environments): half of what
    the difference of their means exceeds its own standard error by, with one degree of freedom."""
    if a.n < 2 or b.n < 2 or math.isnan(a.var_log) or math.isnan(b.var_log):
        return None
    diff2 = (b.mean_log - a.mean_log) ** 2
    return Between(max(0.0, (diff2 - a.var_log / a.n - b.var_log / b.n) / 2), 1.0)


def pool_between(parts: Sequence[Between | None], source: str = "") -> Between | None:
    """Several estimates of one between-environment variance, weighted by their degrees of freedom."""
    found = [p for p in parts if p is not None]
    if not found:
        return None
    df = sum(p.df for p in found)
    return Between(
        sum(p.var_log * p.df for p in found) / df, df, source or "; ".join(p.source for p in found if p.source)
    )


def _with_between(se: float, df: float, between: Between | None, offsets: float = 2) -> tuple[float, float]:
    """The standard error and degrees of freedom of a difference of means that also carries ``offsets``
    environment offsets (two for two environments; 1/m + 1/n for the means of m and n nights)."""
    if between is None or between.var_log <= 0:
        return se, df
    extra = offsets * between.var_log
    total = se**2 + extra
    within = se**4 / df if se and math.isfinite(df) else 0.0
    return math.sqrt(total), total**2 / (within + extra**2 / between.df)


def welch_ratio(
    baseline: Side, candidate: Side, confidence: float = CONFIDENCE, between: Between | None = None
) -> Ratio:
    """Ratio of geometric means with a Welch t interval on the difference of mean logs (widened by the
    between-environment variance when given)."""
    if baseline.n < 2 or candidate.n < 2:
        ratio = math.exp(candidate.mean_log - baseline.mean_log) if baseline.n and candidate.n else math.nan
        return Ratio(ratio, math.nan, math.nan, math.nan)
    diff = candidate.mean_log - baseline.mean_log
    se, df = _with_between(*_welch_se_df(baseline, candidate), between)
    if se == 0:  # both sides constant (e.g. memory): the difference is exact
        return Ratio(math.exp(diff), math.exp(diff), math.exp(diff), 1.0 if diff == 0 else 0.0)
    half = t_quantile(0.5 + confidence / 2, df) * se
    p = t_p_value(diff / se, df)
    return Ratio(math.exp(diff), math.exp(diff - half), math.exp(diff + half), p)


def ratio_between(
    earlier: tuple[Side, Side] | None,
    later: tuple[Side, Side],
    confidence: float = CONFIDENCE,
    between: Between | None = None,
) -> Ratio:
    """How much more ``later``'s (baseline, candidate) ratio is than ``earlier``'s: the ratio of the two ratios,
    with a Welch-Satterthwaite interval over the four sides (each measured on its own trials). ``earlier``
    None: nothing applied (a ratio of exactly 1), so this is ``later``'s own ratio."""
    if earlier is None:
        return welch_ratio(*later, confidence, between)
    sides = (*earlier, *later)
    if any(s.n < 2 for s in sides):
        return Ratio(math.nan, math.nan, math.nan, math.nan)
    diff = (later[1].mean_log - later[0].mean_log) - (earlier[1].mean_log - earlier[0].mean_log)
    terms = [(s.var_log / s.n, s.n) for s in sides]
    total = sum(q for q, _ in terms)
    # the shared good side cancels; the two measured environments each carry an offset
    extra = 2 * between.var_log if between is not None else 0.0
    if total + extra == 0:
        return Ratio(math.exp(diff), math.exp(diff), math.exp(diff), 1.0 if diff == 0 else 0.0)
    parts = sum(q**2 / (n - 1) for q, n in terms if q) + (extra**2 / between.df if extra else 0.0)
    df = (total + extra) ** 2 / parts
    se = math.sqrt(total + extra)
    half = t_quantile(0.5 + confidence / 2, df) * se
    p = t_p_value(diff / se, df)
    return Ratio(math.exp(diff), math.exp(diff - half), math.exp(diff + half), p)


def _welch_se_df(baseline: Side, candidate: Side) -> tuple[float, float]:
    qa, qb = baseline.var_log / baseline.n, candidate.var_log / candidate.n
    if qa + qb == 0:
        return 0.0, math.inf
    da, db = (s.n - 1 if s.df is None else s.df for s in (baseline, candidate))
    df = (qa + qb) ** 2 / ((qa**2 / da if qa else 0.0) + (qb**2 / db if qb else 0.0))
    return math.sqrt(qa + qb), df


def _z(se: float, df: float, alpha: float, power: float) -> float:
    """How many standard errors a change must be for a two-sided Welch test at ``alpha`` to find it with
    probability ``power`` (the usual t approximation of the noncentral t)."""
    return (t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * se


def detectable_change(
    baseline: Side, candidate: Side, alpha: float = ALPHA, power: float = POWER, between: Between | None = None
) -> float:
    """The minimum detectable effect: the smallest relative change (0.09 = 9%) that a comparison with these
    trial counts and this observed noise finds with probability ``power`` at ``alpha``; NaN with fewer than two
    trials a side. (Per series: the Benjamini-Hochberg correction across a table makes it somewhat larger.)"""
    if baseline.n < 2 or candidate.n < 2 or math.isnan(baseline.var_log) or math.isnan(candidate.var_log):
        return math.nan
    se, df = _with_between(*_welch_se_df(baseline, candidate), between)
    return math.expm1(_z(se, df, alpha, power)) if se else 0.0


def trials_to_detect(
    baseline: Side,
    candidate: Side,
    change: float,
    alpha: float = ALPHA,
    power: float = POWER,
    between: Between | None = None,
) -> int | None:
    """Trials per side (the same on both) for ``change`` to be detectable with the noise observed on the two
    sides (their mean variance); None when the noise is unknown, ``MAX_TRIALS`` when out of reach (also when
    the between-environment variation alone exceeds it: more trials in the same two environments cannot help)."""
    variances = [s.var_log for s in (baseline, candidate) if s.n >= 2 and not math.isnan(s.var_log)]
    if not variances:
        return None
    var = sum(variances) / len(variances)
    band = math.log1p(change)
    if var == 0 and (between is None or between.var_log == 0):
        return 2
    n = 2
    while n < MAX_TRIALS and _z(*_with_between(math.sqrt(2 * var / n), 2 * n - 2, between), alpha, power) > band:
        n = max(n + 1, int(n * 1.05))  # exact near small n, a few percent too many at most far out
    return min(n, MAX_TRIALS)


def benjamini_hochberg(p_values: Sequence[float]) -> np.ndarray:
    """BH-adjusted p-values (q-values); NaN stays NaN and is not counted as a test."""
    p = np.asarray(p_values, dtype=float)
    q = np.full(p.shape, math.nan)
    tested = np.flatnonzero(~np.isnan(p))
    if len(tested) == 0:
        return q
    order = tested[np.argsort(p[tested])]
    ranked = p[order] * len(tested) / np.arange(1, len(tested) + 1)
    q[order] = np.minimum(np.minimum.accumulate(ranked[::-1])[::-1], 1.0)
    return q


def verdict(result: Ratio, q_value: float, threshold: float, higher_is_better: bool, alpha: float = ALPHA) -> str:
    """regression / improvement: significant after BH and the estimate is beyond the threshold;
    no change: the whole interval lies within +-threshold; inconclusive: anything else (too few trials
    or too much noise to tell a change of ``threshold`` from none)."""
    if math.isnan(result.ratio):
        return MISSING
    if math.isnan(result.ci_low):
        return INCONCLUSIVE
    band = math.log1p(threshold)
    size = math.log(result.ratio)
    if q_value < alpha and abs(size) >= band:
        worse = size < 0 if higher_is_better else size > 0
        return REGRESSION if worse else IMPROVEMENT
    if -band <= math.log(result.ci_low) and math.log(result.ci_high) <= band:  # (a zero band: an exact tie)
        return NO_CHANGE
    return INCONCLUSIVE


@dataclass(frozen=True)
class Span:
    """A deterministic metric's values on one side (``collector.metrics``): how many trials gave one, and the
    least and greatest (equal when the counter repeated, as it should)."""

    n: int
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Span:
        return cls(len(values), min(values), max(values)) if len(values) else cls(0, math.nan, math.nan)

    @property
    def constant(self) -> bool:
        return self.n > 0 and self.low == self.high


def _exact_ratio(candidate: float, baseline: float) -> float:
    """candidate / baseline of two counts, with 0 / 0 = 1 (nothing either side) and c / 0 = inf."""
    if baseline == 0:
        return 1.0 if candidate == 0 else math.inf
    return candidate / baseline


def exact(baseline: Span, candidate: Span, threshold: float, higher_is_better: bool | None) -> Verdict:
    """A deterministic metric compared exactly, not by a test: the ratio's interval is the range of what the two
    sides' values allow (a single point when each side repeated its value). changed: the whole range is a change of
    at least ``threshold`` (any change, at 0); it is a regression or an improvement only where a direction is
    declared (``higher_is_better`` not None). no change: within the threshold; inconclusive: a side's values
    varied enough to straddle both. No p-value: nothing is sampled."""

    def side(span: Span) -> Side:  # what the summaries and reports read of a side: its count, no variance
        return Side(span.n, math.log(span.high) if span.n and span.high > 0 else math.nan, 0.0)

    if not baseline.n or not candidate.n:
        ratio = low = high = math.nan
        call = MISSING
    else:
        low, high = _exact_ratio(candidate.low, baseline.high), _exact_ratio(candidate.high, baseline.low)
        ratio = _exact_ratio((candidate.low + candidate.high) / 2, (baseline.low + baseline.high) / 2)
        up, down = 1 + threshold, 1 / (1 + threshold)
        if low > 1 and low >= up:
            call = CHANGED if higher_is_better is None else IMPROVEMENT if higher_is_better else REGRESSION
        elif high < 1 and high <= down:
            call = CHANGED if higher_is_better is None else REGRESSION if higher_is_better else IMPROVEMENT
        elif down <= low and high <= up:
            call = NO_CHANGE
        else:
            call = INCONCLUSIVE
    return Verdict(
        side(baseline), side(candidate), threshold, higher_is_better, ratio, low, high, math.nan, math.nan, call,
        0.0, None, spans=(baseline, candidate),
    )  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    baseline: Side
    candidate: Side
    threshold: float
    higher_is_better: bool | None  # None: a counter without a declared direction
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    q_value: float
    verdict: str
    detectable: float  # the minimum detectable effect at these n and this noise (see detectable_change)
    trials_needed: int | None  # trials per side for the threshold to be detectable
    between: Between | None = None  # the between-environment variance the interval also covers
    spans: tuple[Span, Span] | None = None  # a deterministic metric's values per side (``exact``), else None


def judge(
    pairs: Sequence[tuple[Side, Side]],
    thresholds: Sequence[float],
    higher_is_better: Sequence[bool],
    between: Sequence[Between | None] | None = None,
    alpha: float = ALPHA,
) -> list[tuple[Ratio, float, str]]:
    """Per (baseline, candidate) pair its ratio, its q-value (Benjamini-Hochberg across all the pairs) and its
    verdict: what ``compare`` gives, without what each comparison could have seen (cheaper, for a glance).
    ``between``: per pair, the between-environment variance its interval also covers; ``alpha``: the level of the
    tests, and one minus its intervals' confidence (a sequential check's look spends less than 0.05)."""
    between = list(between) if between is not None else [None] * len(pairs)
    ratios = [welch_ratio(a, b, 1 - alpha, e) for (a, b), e in zip(pairs, between)]
    q_values = benjamini_hochberg([r.p_value for r in ratios])
    return [
        (r, float(q), verdict(r, float(q), threshold, higher, alpha))
        for r, q, threshold, higher in zip(ratios, q_values, thresholds, higher_is_better)
    ]


def compare(
    pairs: Sequence[tuple[Side, Side]],
    thresholds: Sequence[float],
    higher_is_better: Sequence[bool],
    between: Sequence[Between | None] | None = None,
    alpha: float = ALPHA,
) -> list[Verdict]:
    """One verdict per (baseline, candidate) pair, with Benjamini-Hochberg across all of them, and what each
    could have seen (its minimum detectable effect, the trials that would resolve its threshold). ``between``:
    per pair, the between-environment variance its interval, its detectable effect and its trials also cover;
    ``alpha``: the level of every test, interval and detectable effect (``judge``)."""
    between = list(between) if between is not None else [None] * len(pairs)
    out = []
    judged = judge(pairs, thresholds, higher_is_better, between, alpha)
    for (a, b), (r, q, call), threshold, higher, env in zip(pairs, judged, thresholds, higher_is_better, between):
        mde = detectable_change(a, b, alpha, between=env)
        needed = trials_to_detect(a, b, threshold, alpha, between=env)
        out.append(Verdict(a, b, threshold, higher, r.ratio, r.ci_low, r.ci_high, r.p_value, q, call, mde, needed, env))
    return out


@dataclass(frozen=True)
class Summary:
    """Geometric mean of the ratios over the series present on both sides, with the interval that the
    measurement noise of those series allows (not a claim about series that were not run)."""

    series: int
    geomean: float
    ci_low: float
    ci_high: float


def geomean_summary(verdicts: Sequence[Verdict], confidence: float = CONFIDENCE) -> Summary:
    both = [v for v in verdicts if v.baseline.n and v.candidate.n and math.isfinite(v.ratio) and v.ratio > 0]
    if not both:
        return Summary(0, math.nan, math.nan, math.nan)
    logs = np.log([v.ratio for v in both])
    mean = float(logs.mean())
    terms = [(side.var_log / side.n, side.n) for v in both for side in (v.baseline, v.candidate)]
    if any(math.isnan(q) for q, _ in terms):
        return Summary(len(both), math.exp(mean), math.nan, math.nan)
    total = sum(q for q, _ in terms) / len(both) ** 2
    if total == 0:
        return Summary(len(both), math.exp(mean), math.exp(mean), math.exp(mean))
    # Welch-Satterthwaite over every side of every series
    df = total**2 / sum(q**2 / (n - 1) / len(both) ** 4 for q, n in terms if q)
    # The two environments' offsets are shared by every series: they do not average out over series.
    se, df = _with_between(math.sqrt(total), df, max_between([v.between for v in both]))
    half = t_quantile(0.5 + confidence / 2, df) * se
    return Summary(len(both), math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def max_between(parts: Sequence[Between | None]) -> Between | None:
    """The largest of several between-environment variances (None when there are none)."""
    found = [p for p in parts if p is not None]
    return max(found, key=lambda p: p.var_log) if found else None
