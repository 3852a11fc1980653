"""Where did the nightly history change? Arrays in, change points out (no I/O, no store, no printing).

Per-night medians, outlier nights set aside (Hampel), PELT with an L1 cost and a noise-scaled penalty,
every change confirmed by a Welch test of the segments either side and a size of at least the threshold;
a change too recent to confirm is *suspected*.

Given every trial of each night, the confirming test uses them all: a night's trials are not independent
(a host, a container, a machine state shared by them all), so each segment's trial count is discounted by
the design effect 1 + (k - 1) x ICC, the intraclass correlation measured on the series itself (between-night
noise from successive nights, so a step does not count as noise). Where nights are exchangeable this gives
the test the degrees of freedom of all the trials (a change confirmed with fewer nights after it); where
trials of a night move together it falls back to what the nights alone say.

Nights that fall on two levels (a pool of fast and slow hosts, each night on one) defeat a median: a step the
size of the gap between the levels moves the nights from one level to the other and leaves the median where it
was, and the successive differences that the robust noise comes from jump between the levels. On such a series
(two clusters of nights, judged without the 5% most extreme) a night is an outlier only well beyond the gap,
an L2 (mean) segmentation proposes changes beside the L1 one, sizes are differences of means, and each change
is held to p < 0.0001 (two proposers, more candidates). Two levels are told from a step by order, not only by
spread: a pool alternates between its levels, while a history whose high nights all come before its low nights
(one run of each) has stepped, however far apart its first nights are.

A step on a young history whose first nights are noisy (two nights 3x apart, then a model 4x slower) leaves a
Welch test of the segments no degrees of freedom to confirm it with: the segment before is two nights that disagree.
Order tells it instead (``ordered_step``): every trial before the change lies on one side of every trial since,
by more than the threshold and by ``ORDER_SIGMAS`` standard deviations of the trials since. Each night before is
then judged alone against the new level (a t prediction test at the new level's own spread, the nearest night
deciding), so the first nights need not agree with each other, only all lie off the new level. As nights at the
new level accrue, the order and the gap only hold more firmly: a step confirmed this way stays confirmed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from stepwatch.collector.analysis.noise import level_returns, noise_of
from stepwatch.collector.analysis.stats import Between, Ratio, Side, is_worse, t_p_value, welch_ratio

MIN_SIZE = 2  # nights in a segment: one night alone is an outlier, never a level
HAMPEL_HALF = 3  # a night is judged against the median of the 3 nights either side
HAMPEL_K = 4.0  # ... and is an outlier when it is further than 4 robust sigmas (and the threshold) away
PENALTY = 3.0  # PELT penalty per change, in units of robust sigma x log(nights)
CONFIRM_NIGHTS = 3  # nights after a change before it can be confirmed
CONFIRM_ALPHA = 0.001
KEEP = 0.05  # a change an earlier judgment confirmed stays confirmed on its night while p < this (and its size holds)
MOVE_NIGHTS = 2  # a candidate this near a confirmed change is that change (and an alert's: alerts.MATCH_NIGHTS)
NOMINATE_BEFORE = 2  # nights of a level a last night's nomination is judged against (``nominated``)
# A nomination's trials lie beyond this share of the threshold: a check decides it, so the history may nominate on
# less than it confirms on (benchmarks/detection.py --verify: a -10% step on two hosts 10% apart, named by its 3rd slow
# night in 77% of histories at the whole threshold, 83% at half; quiet histories' checks cost a minute a night more).
NOMINATE_SHARE = 0.5
ORDER_SIGMAS = 4.0  # an ordered step's gap, in standard deviations of the trials since it (benchmarks/detection.py)


def robust_sigma(logs: np.ndarray) -> float:
    """Night-to-night noise from the median absolute deviation of successive differences: steps and
    outliers barely move it, unlike a standard deviation."""
    if len(logs) < 3:
        return math.nan
    diffs = np.diff(logs)
    return float(1.4826 * np.median(np.abs(diffs - np.median(diffs))) / math.sqrt(2))


def outlier_nights(logs: np.ndarray, threshold: float, sigma: float) -> np.ndarray:
    """Nights that leave their level and come back to it (a one- or two-night dip or spike that recovers): further
    than max(``HAMPEL_K`` robust sigmas, the threshold) from the median of the up to ``HAMPEL_HALF`` kept nights
    before them and from the median of the ``HAMPEL_HALF`` nights after them, on the same side of both, where those
    two agree with each other. Where they do not agree the night sits beside a step, on one of its levels: it is
    never set aside, so a step's first nights stay where they are (a window centred on a night beside a step takes
    its median from whichever level holds more of the window, and set aside a new level's first nights one after
    another as later nights arrived, moving the change a night each time). The last nights are never outliers:
    there is no later night yet to say they recovered. The first night, which has no night before it, is set aside
    when the ``MIN_SIZE`` nights after it agree with each other and it does not agree with them (a cold first
    night: a level is never a night alone, so no step is lost)."""
    n = len(logs)
    limit = max(HAMPEL_K * sigma, math.log1p(threshold))
    mask = np.zeros(n, dtype=bool)
    first = logs[1 : 1 + MIN_SIZE]
    mask[0] = n > 2 * HAMPEL_HALF and np.ptp(first) <= limit and abs(logs[0] - np.median(first)) > limit
    for night in range(1, n - HAMPEL_HALF):
        kept = logs[:night][~mask[:night]][-HAMPEL_HALF:]
        if not len(kept):
            continue
        before, after = float(np.median(kept)), float(np.median(logs[night + 1 : night + 1 + HAMPEL_HALF]))
        off_before, off_after = logs[night] - before, logs[night] - after
        mask[night] = (
            min(abs(off_before), abs(off_after)) > limit and off_before * off_after > 0 and abs(before - after) <= limit
        )
    return mask


def l1_costs(x: np.ndarray, min_size: int = MIN_SIZE) -> np.ndarray:
    """cost[t, s] = sum |x[t:s] - median(x[t:s])| for every segment of at least ``min_size`` (else inf).
    All segments of one length at once, as strided windows: O(n^3) work, but in n vectorised steps."""
    n = len(x)
    x = np.ascontiguousarray(x, dtype=float)
    cost = np.full((n + 1, n + 1), np.inf)
    for length in range(min_size, n + 1):
        count = n - length + 1
        windows = as_strided(x, shape=(count, length), strides=(x.strides[0], x.strides[0]), writeable=False)
        low, high = (length - 1) // 2, length // 2
        part = np.partition(windows, (low, high), axis=1)
        medians = (part[:, low] + part[:, high]) / 2
        starts = np.arange(count)
        cost[starts, starts + length] = np.abs(windows - medians[:, None]).sum(axis=1)
    return cost


def l2_costs(x: np.ndarray, min_size: int = MIN_SIZE) -> np.ndarray:
    """cost[t, s] = sum (x[t:s] - mean(x[t:s]))^2 for every segment of at least ``min_size`` (else inf)."""
    n = len(x)
    csum = np.concatenate([[0.0], np.cumsum(x)])
    csq = np.concatenate([[0.0], np.cumsum(np.asarray(x, dtype=float) ** 2)])
    t, s = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    length = (s - t).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = (csq[s] - csq[t]) - (csum[s] - csum[t]) ** 2 / length
    cost[length < min_size] = np.inf
    return np.maximum(cost, 0.0)


def pelt_l1(x: np.ndarray, penalty: float, min_size: int = MIN_SIZE) -> list[int]:
    """Exact penalised segmentation under an L1 cost (the optimum PELT finds, with jump=1): the indices
    where a new segment starts."""
    if len(x) < 2 * min_size:
        return []
    return _optimal_partition(l1_costs(x, min_size), penalty, min_size)


def pelt_l2(x: np.ndarray, penalty: float, min_size: int = MIN_SIZE) -> list[int]:
    """The same under an L2 (mean) cost: for nights that fall on two levels (hosts), where a median does not
    move with a step the size of the gap between the levels but a mean does."""
    if len(x) < 2 * min_size:
        return []
    return _optimal_partition(l2_costs(x, min_size), penalty, min_size)


def _optimal_partition(cost: np.ndarray, penalty: float, min_size: int) -> list[int]:
    n = cost.shape[0] - 1
    best = np.full(n + 1, np.inf)
    best[0] = -penalty
    previous = np.zeros(n + 1, dtype=int)
    for s in range(min_size, n + 1):
        totals = best[:s] + cost[:s, s] + penalty
        previous[s] = int(np.argmin(totals))
        best[s] = totals[previous[s]]
    starts, s = [], n
    while s > 0:
        s = previous[s]
        if s > 0:
            starts.append(s)
    return sorted(starts)


@dataclass(frozen=True)
class Change:
    index: int  # the first night of the new level (an index into the nights given)
    before: float  # median of the segment before
    after: float  # median of the segment after
    ratio: float  # after / before
    ci_low: float
    ci_high: float
    p_value: float
    status: str  # "confirmed" or "suspected"
    regression: bool
    versions_changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    nights: int = 0  # the nights of the new level it rests on (outliers set aside): a confirmation needs CONFIRM_NIGHTS
    moved_from: int | None = None  # the night an earlier judgment confirmed this change on, where it moved from

    def nights_text(self) -> str:
        """How many nights this verdict needed: 'confirmed on 4 nights since it', 'suspected on 1 night since it: 2
        more nights confirm or withdraw it'."""
        since = f"{self.nights} night{'s' if self.nights != 1 else ''} since it"
        if self.status == "confirmed":
            return f"confirmed on {since}"
        more = max(CONFIRM_NIGHTS - self.nights, 1)
        return f"suspected on {since}: {more} more night{'s' if more != 1 else ''} confirm or withdraw it"


@dataclass(frozen=True)
class Detection:
    changes: list[Change]
    outliers: list[int]  # nights set aside as one-off dips or spikes
    sigma: float  # robust night-to-night noise of log(value)


def two_levels(logs: np.ndarray) -> float | None:
    """The gap (in log units) between two clusters the nights fall into (Ashman's D of the best split, as
    ``noise_of``), or None; judged without the 5% most extreme nights at either end, which outlier nights would
    otherwise blur into a third group."""
    ordered = np.sort(logs)
    cut = int(0.05 * len(ordered))
    noise = noise_of(np.exp(ordered[cut : len(ordered) - cut]))
    if not (noise.bimodal and noise.modes):
        return None
    # By order: a pool of hosts alternates between its levels; one stay on each (all high nights first) is a step.
    # A stay is MIN_SIZE nights or more on one level: a night alone on the other level (a cold first night, an
    # outlier) is no return to it.
    upper = logs > math.log(math.sqrt(noise.modes[0] * noise.modes[1]))
    return math.log(noise.modes[1] / noise.modes[0]) if level_returns(upper, MIN_SIZE) > 1 else None


def versions_between(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The version fields that differ between the last night before a change and the first night after."""
    return {k: (before.get(k), after.get(k)) for k in after if before.get(k) != after.get(k)}


def within_between(nights: Sequence[np.ndarray]) -> tuple[float, float] | None:
    """The variance of a trial about its night's mean (pooled over the nights that have two trials or more) and that
    of a night's offset, from the robust spread of successive nights' mean logs (a step or an outlier night barely
    moves it); None where fewer than two nights have two trials, or fewer than three nights."""
    multi = [n for n in nights if len(n) >= 2]
    if len(multi) < 2 or len(nights) < 3:
        return None
    within = sum(float(n.var(ddof=1)) * (len(n) - 1) for n in multi) / sum(len(n) - 1 for n in multi)
    k = float(np.mean([len(n) for n in nights]))
    night_mean = robust_sigma(np.array([float(n.mean()) for n in nights])) ** 2  # between + within / k
    return within, max(0.0, night_mean - within / k)


def design_effect(nights: Sequence[np.ndarray], between_floor: float = 0.0) -> float:
    """How many trials count as one, per trial of a night: ``1 + (k - 1) x ICC``, with the variances of
    ``within_between``, the between-night one raised to ``between_floor`` (a night's offset the other series of its
    runner have shown, which a young history has not yet). 1.0 when the trials of a night are as independent as
    trials of different nights; ``k`` when they move together."""
    counts = np.array([len(n) for n in nights])
    parts = within_between(nights)
    if parts is None:
        return float(counts.mean()) if len(counts) else 1.0  # nothing to tell them apart: nights alone
    within, between = parts[0], max(parts[1], between_floor)
    icc = between / (between + within) if between + within > 0 else 0.0
    return 1.0 + (float(counts.mean()) - 1.0) * icc


def trial_side(
    nights: Sequence[np.ndarray], deff: float | None = None, var_floor: float = 0.0, floor_df: float | None = None
) -> Side:
    """A segment's trials (log values, per night) pooled, counted as ``trials / deff`` (never fewer than its
    nights); ``deff`` is the nights' own ``design_effect`` unless given. Their variance is at least ``var_floor``
    (a trial's own and a night's offset, where the nights of a segment have not yet spread as far), and where the
    floor is what it rests on, so are its degrees of freedom (``floor_df``): a segment of three nights judged with a
    night's offset that its runner's other series measured knows that variance better than its three nights do."""
    pooled = Side.of_logs(np.concatenate(nights))
    deff = design_effect(nights) if deff is None else deff
    n = max(pooled.n / deff, len(nights))
    if floor_df is not None and var_floor > pooled.var_log:
        return Side(n, pooled.mean_log, var_floor, max(floor_df, n - 1))
    return Side(n, pooled.mean_log, max(pooled.var_log, var_floor))


def one_trial_nights(values: np.ndarray) -> list[np.ndarray]:
    """Nights' values as nights of one trial each (the order tests on the medians alone)."""
    return [values[i : i + 1] for i in range(len(values))]


def _segment_test(
    before: np.ndarray,
    after: np.ndarray,
    trials: tuple[Sequence[np.ndarray], Sequence[np.ndarray]] | None = None,
    deff: float = 1.0,
    by_mean: bool = False,
    var_floor: float = 0.0,
    floor_df: float | None = None,
) -> Ratio:
    """Welch test of two segments: on their nights' values, or on every trial of those nights when given (counted as
    ``trials / deff``, their variance at least ``var_floor`` on ``floor_df`` degrees of freedom). The change is the
    segments' medians' ratio, or with ``by_mean`` their means' (nights on two levels)."""
    if trials is None:
        ratio = welch_ratio(Side.of_logs(before), Side.of_logs(after))
    else:
        sides = (trial_side(part, deff, var_floor, floor_df) for part in trials)
        ratio = welch_ratio(*sides)
    centre = np.mean if by_mean else np.median
    level = math.exp(float(centre(after)) - float(centre(before)))
    return Ratio(level, ratio.ci_low, ratio.ci_high, ratio.p_value)


def ordered_step(before: Sequence[np.ndarray], after: Sequence[np.ndarray], band: float) -> Ratio | None:
    """A step told by order (the module's note): every value before (each night's trials, in logs) on one side of
    every value since, at least ``band`` and ``ORDER_SIGMAS`` standard deviations of the values since apart, with
    ``CONFIRM_NIGHTS`` nights since. Its interval runs from the nearest night before to the farthest (the new level
    against each), its p-value is the nearest night's in a t prediction test at the new level; None: not ordered."""
    if len(after) < CONFIRM_NIGHTS or not len(before):
        return None
    prior, since = np.concatenate(before), np.concatenate(after)
    if len(since) < 3 or not len(prior):
        return None
    gap = max(float(prior.min() - since.max()), float(since.min() - prior.max()))
    spread = float(since.std(ddof=1))
    if gap <= 0 or gap < band or gap < ORDER_SIGMAS * spread:
        return None
    level = float(since.mean())
    offsets = sorted((level - float(night.mean()) for night in before), key=abs)  # the nearest night first
    scale = spread * math.sqrt(1 + 1 / len(since))
    p_value = t_p_value(offsets[0] / scale, len(since) - 1) if scale > 0 else 0.0
    ratio = math.exp(float(np.median([np.median(n) for n in after]) - np.median([np.median(n) for n in before])))
    return Ratio(ratio, math.exp(min(offsets)), math.exp(max(offsets)), p_value)


def ordered_starts(nights: Sequence[np.ndarray], band: float) -> list[int]:
    """The nights at which a whole young history steps by order (``ordered_step`` of everything before against
    everything since): candidates beside PELT's, whose noise-scaled penalty a noisy start inflates past the step."""
    if len(nights) < MIN_SIZE + CONFIRM_NIGHTS:
        return []
    low, high = np.array([n.min() for n in nights]), np.array([n.max() for n in nights])
    # Where every value before lies above (or below) every value since, by running extremes; only there the test.
    before_low, before_high = np.minimum.accumulate(low), np.maximum.accumulate(high)
    since_low, since_high = np.minimum.accumulate(low[::-1])[::-1], np.maximum.accumulate(high[::-1])[::-1]
    splits = range(MIN_SIZE, len(nights) - CONFIRM_NIGHTS + 1)
    apart = [s for s in splits if before_low[s - 1] > since_high[s] or since_low[s] > before_high[s - 1]]
    return [s for s in apart if ordered_step(nights[:s], nights[s:], band)]


def detect_changes(
    values: Sequence[float] | np.ndarray,
    threshold: float,
    higher_is_better: bool | None,  # None: a counter without a declared direction (no change is a regression)
    versions: Sequence[Mapping[str, Any]] | None = None,
    penalty: float = PENALTY,
    trials: Sequence[Sequence[float]] | None = None,
    night: Between | None = None,
    confirmed: Sequence[int] = (),
    nominate: bool = False,
) -> Detection:
    """Change points in one series of per-night values (oldest first). Each change is at least
    ``threshold`` in size and either confirmed (Welch p < 0.001 between the segments, at least
    ``CONFIRM_NIGHTS`` nights after it) or suspected (too recent to test, but beyond the threshold and
    3 sigmas of the night-to-night noise). With ``nominate`` (a verifying check decides, not the history), the
    last night alone is suspected too where every one of its trials lies beyond the threshold on one side of the
    level it follows (``nominated``). ``trials``, when given, holds every trial's value of each night
    (``values`` being their medians): the confirming test then uses them all (see the module's note).

    ``night``: the variance of a night's offset this series is judged with (``stats.night_offset``: its own
    estimate, pooled with what the other series of its runner say while its own rests on few nights), a floor
    under the between-night variance its own nights show. ``confirmed``: the nights (indices
    into ``values``) of the changes an earlier judgment confirmed: each keeps its night while it holds (``KEEP``)."""
    raw = np.asarray(values, dtype=float)
    valid = np.flatnonzero(np.isfinite(raw) & (raw > 0))
    if trials is not None:
        night_trials = [np.log(t[np.isfinite(t) & (t > 0)]) for t in (np.asarray(trials[i], float) for i in valid)]
        keep = np.array([len(t) > 0 for t in night_trials], dtype=bool)
        valid, night_trials = valid[keep], [t for t, k in zip(night_trials, keep) if k]
    logs_all = np.log(raw[valid])
    sigma = robust_sigma(logs_all)
    if math.isnan(sigma) or len(logs_all) < 2 * MIN_SIZE:  # too few nights for a level either side: a nomination
        last = nominated(logs_all, night_trials if trials is not None else None, [],
                         math.log1p(threshold) * NOMINATE_SHARE)
        if not nominate or last is None:
            return Detection([], [], sigma)
        at, level, ratio = last
        changed = versions_between(versions[int(valid[at - 1])], versions[int(valid[at])]) if versions else {}
        change = Change(int(valid[at]), level, level * ratio, ratio, math.nan, math.nan, math.nan, "suspected",
                        is_worse(ratio, higher_is_better), changed, len(logs_all) - at)  # fmt: skip
        return Detection([change], [], sigma)
    floor = max(sigma, 1e-4)  # a perfectly flat history still needs a positive penalty
    # Nights on two levels (a pool of fast and slow hosts): successive differences jump between the levels, so
    # their median spread says little, and a median does not move with a step the size of the gap.
    gap = two_levels(logs_all)
    levels = gap is not None
    # On two levels a night is an outlier only well beyond the gap: a night on the other level is not one.
    outliers = outlier_nights(logs_all, threshold, max(floor, 1.5 * gap / HAMPEL_K) if levels else floor)
    kept = valid[~outliers]
    logs = logs_all[~outliers]
    kept_trials = [t for t, out in zip(night_trials, outliers) if not out] if trials is not None else None
    # A night's offset the series' own nights have not yet shown (a young history on a pool of hosts) widens the
    # test of its segments: never narrows it.
    offset = night.var_log if night is not None and night.var_log > 0 else 0.0
    variances = within_between(kept_trials) if kept_trials is not None else None
    deff = design_effect(kept_trials, offset) if kept_trials is not None else 1.0
    var_floor = variances[0] + offset if variances is not None and offset else 0.0
    floor_df = None
    if var_floor and night is not None:  # a trial's variance and a night's offset: Satterthwaite's degrees of freedom
        within_df = float(sum(len(t) - 1 for t in kept_trials))
        floor_df = var_floor**2 / (variances[0] ** 2 / max(within_df, 1.0) + offset**2 / night.df)
    floor = max(floor, math.sqrt(offset))
    change_cost = penalty * floor * math.log(len(logs))
    costs = l1_costs(logs)
    starts = _optimal_partition(costs, change_cost, MIN_SIZE) if len(logs) >= 2 * MIN_SIZE else []
    if levels:
        spread = max(floor, float(np.std(np.diff(logs), ddof=1)) / math.sqrt(2))
        more = pelt_l2(logs, penalty * spread**2 * math.log(len(logs)))
        starts = sorted(set(starts) | set(more))
    band = math.log1p(threshold)
    # Steps told by order, on every night (an outlier among the first nights is still a night before the step).
    per_night = night_trials if trials is not None else one_trial_nights(logs_all)
    kept_before = np.cumsum(~outliers) - ~outliers  # kept nights before each night: where it starts among them
    ordered = {int(kept_before[s]) for s in ordered_starts(per_night, band)}  # an outlier there: the next kept night
    starts = sorted(set(starts) | {s for s in ordered if 0 < s < len(logs)})
    # The changes confirmed before keep their nights: a candidate beside one is that change, unless it fits the
    # nights better by more than a change is worth (then the change moves there); its own test, later.
    positions = np.searchsorted(valid, np.asarray(sorted(confirmed), dtype=int))
    known = {int(kept_before[p]): int(c) for p, c in zip(positions, sorted(confirmed)) if p < len(valid)}
    known = {k: c for k, c in known.items() if 0 < k < len(logs)}
    moved: dict[int, int] = {}  # a start -> the confirmed night (an index into values) it moved from
    beside: dict[int, list[int]] = {}  # a confirmed start -> the candidates it stands for
    for k in sorted(known):
        near = [c for c in starts if c != k and abs(c - k) <= MOVE_NIGHTS and c not in known]
        others = [c for c in starts if c not in near and c != k] + [o for o in known if o != k]
        lo = max([o for o in others if o < min([k, *near])], default=0)
        hi = min([o for o in others if o > max([k, *near])], default=len(logs))
        fit = {c: costs[lo, c] + costs[c, hi] for c in [k, *near] if lo < c < hi}
        best = min(fit, key=fit.get) if fit else k
        starts = [c for c in starts if c not in near and c != k]
        if best != k and fit[k] - fit[best] > change_cost:
            starts.append(best)
            moved[best] = known[k]
        else:
            starts.append(k)
            beside[k] = near
    starts = sorted(set(starts))
    # Drop the weakest unconfirmed change and re-test its neighbours, until every change stands. A change confirmed
    # before stands while its size holds and p < KEEP; where it no longer does, the candidates beside it are tried.
    while True:
        bounds = [0, *starts, len(logs)]
        tested = []
        for i, start in enumerate(starts):
            before, after = logs[bounds[i] : start], logs[start : bounds[i + 2]]
            parts = (
                None if kept_trials is None else (kept_trials[bounds[i] : start], kept_trials[start : bounds[i + 2]])
            )
            # A change confirmed before is held with the degrees of freedom of the night's offset it is judged with;
            # a new one with those of its own segments only (hysteresis: as strict to raise as before, and a
            # confirmed step's short segment before it no longer withdraws it while nights at its new level accrue).
            kept_df = floor_df if start in beside else None
            test = _segment_test(before, after, parts, deff, levels, var_floor, kept_df)
            size = abs(math.log(test.ratio))
            recent = len(logs) - start < CONFIRM_NIGHTS and start not in beside
            if recent:
                ok = size >= band and size >= 3 * floor
            else:
                alpha = KEEP if start in beside else CONFIRM_ALPHA / 10 if levels else CONFIRM_ALPHA
                ok = size >= band and test.p_value < alpha
                nights = parts or (one_trial_nights(before), one_trial_nights(after))
                by_order = None if ok else ordered_step(*nights, band)
                if by_order is not None:
                    ok, test, size = True, by_order, abs(math.log(by_order.ratio))
            tested.append((ok, size, test, recent))
        failing = [i for i, (ok, *_) in enumerate(tested) if not ok]
        if not failing:
            break
        weakest = min(failing, key=lambda i: tested[i][1])
        dropped = starts[weakest]
        starts = starts[:weakest] + starts[weakest + 1 :]
        for c in beside.pop(dropped, []):  # a confirmed change that no longer holds: the nights beside it, tried
            starts, moved[c] = sorted({*starts, c}), known[dropped]
    changes = []
    bounds = [0, *starts, len(logs)]
    for i, (start, (_, _, test, recent)) in enumerate(zip(starts, tested)):
        night_index = int(kept[start])
        changed = versions_between(versions[int(kept[start - 1])], versions[night_index]) if versions else {}
        changes.append(
            Change(
                index=night_index,
                before=math.exp(float(np.median(logs[bounds[i] : start]))),
                after=math.exp(float(np.median(logs[start : bounds[i + 2]]))),
                ratio=test.ratio,
                ci_low=test.ci_low,
                ci_high=test.ci_high,
                p_value=test.p_value,
                status="suspected" if recent else "confirmed",
                regression=is_worse(test.ratio, higher_is_better),
                versions_changed=changed,
                nights=len(logs) - start,
                moved_from=moved.get(start) if moved.get(start) != night_index else None,
            )
        )
    settled = [start for start, (_, _, _, recent) in zip(starts, tested) if not recent]  # a suspected one may be wrong
    last = nominated(logs, kept_trials, settled, band * NOMINATE_SHARE) if nominate else None
    if last is not None and int(kept[last[0]]) not in {c.index for c in changes}:
        at, level, ratio = last
        night_index = int(kept[at])
        changed = versions_between(versions[int(kept[at - 1])], versions[night_index]) if versions else {}
        changes.append(Change(night_index, level, level * ratio, ratio, math.nan, math.nan, math.nan, "suspected",
                              is_worse(ratio, higher_is_better), changed, len(logs) - at))  # fmt: skip
    return Detection(changes, [int(i) for i in valid[outliers]], sigma)


def nominated(
    logs: np.ndarray, trials: Sequence[np.ndarray] | None, starts: Sequence[int], band: float
) -> tuple[int, float, float] | None:
    """Whether the last nights step off the level they follow (the nights since the last change, at least
    ``NOMINATE_BEFORE`` of them): every trial of the last two nights, else of the last one, beyond ``band`` (the
    threshold, in logs) on one side of that level's median. A nomination, not a verdict: only a verifying check
    decides it. Returns (its first night among ``logs``, the level, the ratio)."""
    begin = starts[-1] if starts else 0
    for since in (2, 1):
        first = len(logs) - since
        if first - begin < NOMINATE_BEFORE:
            continue
        level = float(np.median(np.concatenate(trials[begin:first]) if trials is not None else logs[begin:first]))
        tonight = (np.concatenate(trials[first:]) if trials is not None else logs[first:]) - level
        if np.all(tonight < -band) or np.all(tonight > band):
            return first, math.exp(level), math.exp(float(np.median(tonight)))
    return None
