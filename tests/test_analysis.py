"""The statistics on synthetic series with planted effects: verdicts, BH, the geomean and change points."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats as scipy_stats

from stepwatch.collector.analysis import changepoints, latest, noise, stats
from stepwatch.collector.analysis.stats import Side
from stepwatch.collector.outcomes import IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION

SEEDS = range(100)


def trials(rng: np.random.Generator, n: int, noise: float, level: float = 1000.0) -> np.ndarray:
    return level * np.exp(noise * rng.standard_normal(n))


def verdict_of(baseline: np.ndarray, candidate: np.ndarray, threshold: float = 0.03, higher: bool = True) -> str:
    return stats.compare([(Side.of(baseline), Side.of(candidate))], [threshold], [higher])[0].verdict


def share(calls: list[str], wanted: str) -> float:
    return sum(call == wanted for call in calls) / len(calls)


def test_ten_percent_drop_at_two_percent_noise_with_five_trials_is_a_regression():
    calls = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        calls.append(verdict_of(trials(rng, 5, 0.02), trials(rng, 5, 0.02, level=900.0)))
    assert share(calls, REGRESSION) == 1.0


def test_the_same_drop_in_step_time_is_an_improvement_when_lower_is_better():
    rng = np.random.default_rng(0)
    assert verdict_of(trials(rng, 5, 0.02), trials(rng, 5, 0.02, level=900.0), higher=False) == IMPROVEMENT


def test_identical_distributions_give_no_change():
    calls = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        calls.append(verdict_of(trials(rng, 10, 0.01), trials(rng, 10, 0.01)))
    assert share(calls, NO_CHANGE) >= 0.99
    assert share(calls, REGRESSION) == 0


def test_three_trials_at_five_percent_noise_with_a_four_percent_change_are_inconclusive():
    calls = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        calls.append(verdict_of(trials(rng, 3, 0.05), trials(rng, 3, 0.05, level=960.0)))
    assert share(calls, INCONCLUSIVE) >= 0.9
    assert share(calls, NO_CHANGE) == 0


def test_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    covered = 0
    for seed in range(400):
        rng = np.random.default_rng(seed)
        result = stats.welch_ratio(Side.of(trials(rng, 5, 0.03)), Side.of(trials(rng, 7, 0.05, level=950.0)))
        covered += result.ci_low <= 0.95 <= result.ci_high
    assert 0.92 <= covered / 400 <= 0.98


def simulated_detectable_change(n: int, noise: float, power: float = stats.POWER) -> float:
    """The change that a Welch test at alpha 0.05 finds in ``power`` of simulated comparisons of ``n`` trials a
    side with log-normal noise, found by bisection on common random draws."""
    rng = np.random.default_rng(7)
    base, cand = noise * rng.standard_normal((2, 4000, n))
    se = np.sqrt(base.var(axis=1, ddof=1) / n + cand.var(axis=1, ddof=1) / n)

    def found(change: float) -> float:
        diff = cand.mean(axis=1) + math.log1p(change) - base.mean(axis=1)
        df = se**4 / ((base.var(axis=1, ddof=1) / n) ** 2 / (n - 1) + (cand.var(axis=1, ddof=1) / n) ** 2 / (n - 1))
        p = 2 * scipy_stats.t.sf(np.abs(diff) / se, df)
        return float((p < stats.ALPHA).mean())

    low, high = 0.0, 1.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if found(mid) < power else (low, mid)
    return high


@pytest.mark.parametrize(("n", "noise"), [(3, 0.05), (5, 0.05), (10, 0.02), (4, 0.10)])
def test_the_minimum_detectable_effect_matches_a_simulation_within_20_percent(n: int, noise: float):
    side = Side(n, 0.0, noise**2)
    formula = stats.detectable_change(side, side)
    assert formula == pytest.approx(simulated_detectable_change(n, noise), rel=0.2)
    # More trials: the change becomes detectable at the trials per side the function names, not one fewer.
    needed = stats.trials_to_detect(side, side, 0.03)
    at = Side(needed, 0.0, noise**2)
    assert stats.detectable_change(at, at) <= 0.03 * 1.001
    if needed > 2:
        fewer = Side(needed - 1, 0.0, noise**2)
        assert stats.detectable_change(fewer, fewer) > 0.03 or needed > 20  # exact below 20, a few % over above


def test_constant_sides_are_exact_and_one_trial_is_inconclusive():
    same = stats.welch_ratio(Side.of([2.0, 2.0, 2.0]), Side.of([2.0, 2.0]))
    assert (same.ratio, same.ci_low, same.ci_high, same.p_value) == (1.0, 1.0, 1.0, 1.0)
    grew = stats.compare([(Side.of([100.0] * 3), Side.of([102.0] * 3))], [0.01], [False])[0]
    assert grew.verdict == REGRESSION and grew.ratio == pytest.approx(1.02)
    assert verdict_of(np.array([1000.0]), np.array([900.0, 905.0])) == INCONCLUSIVE


def test_benjamini_hochberg_matches_the_textbook_example():
    # Benjamini & Hochberg (1995)-style worked example, checked by hand: q_i = min_{j>=i} p_j * m / j.
    p = [0.01, 0.04, 0.03, 0.005, math.nan]
    q = stats.benjamini_hochberg(p)
    assert q[:4] == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert math.isnan(q[4])


def test_bh_turns_a_lone_marginal_result_into_inconclusive_among_many_series():
    rng = np.random.default_rng(3)
    marginal = (Side.of([1000, 1010, 990, 1005, 995]), Side.of([960, 950, 975, 940, 970]))
    alone = stats.compare([marginal], [0.03], [True])[0]
    crowd = [(Side.of(trials(rng, 5, 0.02)), Side.of(trials(rng, 5, 0.02))) for _ in range(40)]
    among = stats.compare([marginal, *crowd], [0.03] * 41, [True] * 41)[0]
    assert alone.p_value < 0.05 and alone.verdict == REGRESSION
    assert among.q_value > alone.q_value and among.verdict == INCONCLUSIVE


def test_geomean_summary_is_over_series_on_both_sides():
    verdicts = stats.compare(
        [(Side.of([100, 101, 99]), Side.of([90, 91, 89])), (Side.of([10, 10.1, 9.9]), Side.of([11, 11.1, 10.9]))],
        [0.03, 0.03],
        [True, True],
    )
    summary = stats.geomean_summary(verdicts)
    assert summary.series == 2
    assert summary.geomean == pytest.approx(math.sqrt(0.9 * 1.1), rel=1e-3)
    assert summary.ci_low < summary.geomean < summary.ci_high


# --- change points ---------------------------------------------------------------------------------


def nightly(rng: np.random.Generator, nights: int, noise: float = 0.02, trials_per_night: int = 3) -> np.ndarray:
    return np.median(np.exp(noise * rng.standard_normal((nights, trials_per_night))), axis=1) * 1000


def test_a_five_percent_step_is_found_at_its_night():
    found = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        values = nightly(rng, 60)
        values[37:] *= 0.95
        versions = [{"tf_version": "2.20.0" if i < 37 else "2.21.0", "keras_version": "3.15.1"} for i in range(60)]
        detection = changepoints.detect_changes(values, 0.03, True, versions)
        found.append([(c.index, c.status, c.regression) for c in detection.changes])
        if [c.index for c in detection.changes] == [37]:
            assert detection.changes[0].versions_changed == {"tf_version": ("2.20.0", "2.21.0")}
    # Noise can make the night after the step look like the old level: exact in most series, near in all.
    assert sum(f == [(37, "confirmed", True)] for f in found) >= 17, found
    assert all(len(f) == 1 and abs(f[0][0] - 37) <= 2 and f[0][1:] == ("confirmed", True) for f in found), found


def test_pure_noise_with_outlier_nights_has_no_change():
    flagged, outliers = 0, 0
    for seed in range(50):
        rng = np.random.default_rng(seed)
        values = nightly(rng, 90)
        bad = rng.random(90) < 0.05
        bad[-3:] = False
        values[bad] *= rng.uniform(0.6, 0.9, bad.sum())
        detection = changepoints.detect_changes(values, 0.03, True)
        flagged += bool(detection.changes)
        outliers += set(np.flatnonzero(bad)) <= set(detection.outliers)
    assert flagged == 0
    assert outliers >= 45


def two_hosts(rng: np.random.Generator, nights: int, step_at: int | None) -> np.ndarray:
    """Nights on a fast or a slow host 10% apart (even odds), 2% trial noise, 3 trials a night; a 10% step down
    (the size of the gap) from ``step_at``."""
    host = np.where(rng.random((nights, 1)) < 0.5, 0.9, 1.0)
    trials = host * np.exp(0.02 * rng.standard_normal((nights, 3))) * 1000
    if step_at is not None:
        trials[step_at:] *= 0.9
    return trials


def test_a_step_the_size_of_the_gap_between_two_hosts_is_found_and_host_switching_is_not_a_change():
    """On two levels a median does not move with such a step (the nights only move from one level to the
    other); the mean-based proposer finds most, and the host switching alone raises no alarm."""
    found = alarms = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        trials = two_hosts(rng, 90, 50)
        detection = changepoints.detect_changes(np.median(trials, axis=1), 0.03, True, trials=trials)
        found += any(abs(c.index - 50) <= 2 and c.status == "confirmed" for c in detection.changes)
        quiet = two_hosts(rng, 90, None)
        alarms += bool(changepoints.detect_changes(np.median(quiet, axis=1), 0.03, True, trials=quiet).changes)
    assert found >= 32, found  # 38 of 40 here; the median-only detector found 15 and raised 3 alarms
    assert alarms <= 1, alarms


def test_a_one_night_dip_is_an_outlier_and_a_drop_in_the_last_nights_is_suspected():
    rng = np.random.default_rng(7)
    values = nightly(rng, 40)
    values[20] *= 0.8
    values[-2:] *= 0.85
    detection = changepoints.detect_changes(values, 0.03, True)
    assert 20 in detection.outliers
    assert [(c.index, c.status) for c in detection.changes] == [(38, "suspected")]
    assert detection.changes[0].ratio == pytest.approx(0.85, abs=0.03)


def test_the_design_effect_counts_trials_that_move_together_as_one():
    rng = np.random.default_rng(5)
    independent = [0.03 * rng.standard_normal(4) for _ in range(60)]
    together = [np.full(4, 0.03 * rng.standard_normal()) + 0.001 * rng.standard_normal(4) for _ in range(60)]
    assert changepoints.design_effect(independent) == pytest.approx(1.0, abs=0.5)
    assert changepoints.design_effect(together) == pytest.approx(4.0, abs=0.2)


def test_every_trial_confirms_a_recent_step_that_the_medians_cannot_yet_and_adds_no_false_alarm():
    """Exchangeable trials: with 4 nights after a 5% step, all 12 trials confirm it more often than the
    4 medians; trials of a night that move together (a host per night) give the same false-alarm count as
    the medians do, none."""
    by = {"trials": 0, "medians": 0}
    alarms = 0
    for seed in range(30):
        rng = np.random.default_rng(seed)
        trials = 1000 * np.exp(0.02 * rng.standard_normal((40, 3)))
        trials[36:] *= 0.95
        for name, given in (("trials", trials), ("medians", None)):
            found = changepoints.detect_changes(np.median(trials, axis=1), 0.03, True, trials=given).changes
            by[name] += any(c.status == "confirmed" and abs(c.index - 36) <= 1 for c in found)
        hosts = 1000 * np.exp(0.03 * rng.standard_normal((60, 1)) + 0.005 * rng.standard_normal((60, 3)))
        alarms += bool(changepoints.detect_changes(np.median(hosts, axis=1), 0.03, True, trials=hosts).changes)
    assert by["trials"] >= by["medians"] + 5, by
    assert alarms == 0


def test_l1_costs_are_sums_of_absolute_deviations_from_the_median():
    x = np.random.default_rng(0).standard_normal(30)
    cost = changepoints.l1_costs(x)
    for t, s in [(0, 30), (3, 5), (10, 21), (7, 30)]:
        assert cost[t, s] == pytest.approx(np.abs(x[t:s] - np.median(x[t:s])).sum())
    assert np.isinf(cost[4, 5])  # shorter than the minimum segment


def test_two_clusters_of_trials_are_bimodal_and_one_noisy_cluster_is_not():
    rng = np.random.default_rng(3)
    two = np.r_[625 * np.exp(0.01 * rng.standard_normal(6)), 1150 * np.exp(0.04 * rng.standard_normal(6))]
    found = noise.noise_of(rng.permutation(two))
    assert found.bimodal and found.modes == (pytest.approx(625, rel=0.02), pytest.approx(1150, rel=0.05))
    assert noise.noise_text(found).startswith("CV ") and "bimodal: 62" in noise.noise_text(found)
    # One cluster at 5% noise, or heavy-tailed noise, is called bimodal about 1% of the time, never much more.
    flagged = [noise.noise_of(1000 * np.exp(0.05 * rng.standard_normal(12))).bimodal for _ in range(500)]
    heavy = [noise.noise_of(1000 * np.exp(0.03 * rng.standard_t(3, 12))).bimodal for _ in range(500)]
    assert sum(flagged) / 500 <= 0.03 and sum(heavy) / 500 <= 0.03
    assert not noise.noise_of([1000.0] * 10).bimodal  # constant: no noise at all
    assert not noise.noise_of(two[:7]).bimodal  # too few trials to tell
    assert noise.noise_of(1000 * np.exp(0.04 * rng.standard_normal(30))).cv == pytest.approx(0.04, rel=0.35)


def test_the_overviews_columns_cover_the_nights_offsets_an_aa_stays_quiet_and_a_drop_is_still_seen() -> None:
    """Nightly history where each night moves the series by 3% (its offset) over 1% trial noise and nothing
    changes: the night-to-night column, judged by the two nights' trials alone, called a share of the series a
    regression; with the nights' offset in its interval, neither column does (benchmarks/overview_aa.py measures
    the rates). A 15% drop on the latest night is still called."""
    from benchmarks.overview_aa import points
    from stepwatch.collector.analysis import latest
    from stepwatch.collector.metrics import METRICS

    metric = METRICS["examples_per_sec"]
    frame = points(np.random.default_rng(0), 120, 15, 3, 0.03)
    former = latest.changes(frame, metric, {}, [], {}, night_to_night=False)
    now = latest.changes(frame, metric, {}, [], {})
    assert (former["previous_verdict"] == REGRESSION).mean() > 0.05  # what the former column did
    assert (now["previous_verdict"] == REGRESSION).mean() <= 0.025 and (
        now["baseline_verdict"] == REGRESSION
    ).mean() <= 0.025
    dropped = latest.changes(points(np.random.default_rng(0), 120, 15, 3, 0.03, latest=0.85), metric, {}, [], {})
    assert (dropped["baseline_verdict"] == REGRESSION).mean() >= 0.9


def nights_of(rng: np.random.Generator, nights: int, trials: int, night_sd: float, trial_sd: float) -> list:
    """Log values of ``nights`` nights of ``trials`` trials: each night moved by its own offset."""
    return [rng.normal(rng.normal(0.0, night_sd), trial_sd, trials) for _ in range(nights)]


def test_the_night_to_night_estimate_finds_a_known_variance_and_a_step_barely_moves_it() -> None:
    """Nights that move by 1% with trials of 1.7% (3 a night): the estimate is about right, and its degrees of
    freedom say how sure it is: the chi-square interval they give covers the true variance about 95% of the time
    (the trials' part is most of what the nights' spread shows, so they are far fewer than the nights')."""
    rng = np.random.default_rng(7)
    for night_sd, trial_sd in ((0.01, 0.017), (0.01, 0.005)):
        estimates = [stats.between_nights(nights_of(rng, 90, 3, night_sd, trial_sd)) for _ in range(300)]
        assert 0.85 < np.median([e.var_log / night_sd**2 for e in estimates]) < 1.2
        chi2 = scipy_stats.chi2.ppf
        covered = [e.var_log * e.df / chi2(0.975, e.df) <= night_sd**2 <= e.var_log * e.df / chi2(0.025, e.df)
                   for e in estimates if e.var_log > 0]  # fmt: skip
        assert np.mean(covered) >= 0.88, (trial_sd, np.mean(covered))
    stepped = [stats.between_nights([n + (0.1 if i < 45 else 0.0) for i, n in enumerate(nights_of(rng, 90, 3, 0.01,
               0.017))]) for _ in range(200)]  # fmt: skip
    assert 0.8 < np.median([e.var_log / 0.01**2 for e in stepped]) < 1.3  # one large difference among 89
    quiet = [stats.between_nights(nights_of(rng, 12, 3, 0.0, 0.017)) for _ in range(200)]
    zeros = [e for e in quiet if e.var_log == 0]
    assert len(zeros) > 60 and {e.df for e in zeros} == {1.0}  # no offsets: zero, which says nothing of its size
    assert stats.between_nights(nights_of(rng, 2, 3, 0.01, 0.017)) is None


def test_a_noisy_estimate_of_zero_is_pooled_with_the_runner_or_the_calibration_never_dropped() -> None:
    from stepwatch.collector.analysis import latest

    zero, few = stats.Between(0.0, 1.0), stats.Between(2e-4, 2.0)
    runner = [stats.Between(1e-4, 20.0), stats.Between(1.2e-4, 20.0)]
    keys = ["zero", "few", "a", "b", "alone"]
    own = [zero, few, *runner, zero]
    runners = {"zero": "r1", "few": "r1", "a": "r1", "b": "r1", "alone": "r2"}
    found = dict(zip(keys, latest.night_variances(keys, own, runners, prior=None)))
    assert found["a"] is not None and found["a"].var_log == 1e-4 and found["a"].source == "its own (20 df)"
    assert found["zero"].var_log > 0.8e-4 and found["zero"].source.startswith("pooled with its runner's 3 other series")
    assert found["few"].var_log > 1e-4 and found["few"].df > 40
    assert found["alone"] is None  # a zero on one degree of freedom, nothing to pool with: no estimate
    calibrated = stats.Between(0.5e-4, 9.0, "calibrate on r2")
    alone = latest.night_variances(["alone"], [zero], {"alone": "r2"}, prior=calibrated)[0]
    assert alone.var_log == pytest.approx(0.5e-4 * 9 / 10) and alone.source == "pooled with calibrate on r2 (10 df)"


def test_the_overview_says_no_change_where_the_history_can_tell_and_keeps_inconclusive_for_doubt() -> None:
    """Nights that move by 1% and trials by 1.7% (3 a night) against a 3% threshold: one night cannot tell a 3%
    change from its own offset, a week of nights can. Series that did not move read "no change"; a 10% drop on
    the latest night is a regression; a 6% step four nights ago, half in the week, is real doubt."""
    from benchmarks import overview_aa
    from stepwatch.collector.analysis import latest
    from stepwatch.collector.metrics import METRICS

    metric = METRICS["examples_per_sec"]

    def verdicts(drop: float, depth: int, series: int = 200) -> dict[str, float]:
        frame = overview_aa.points(np.random.default_rng(3), series, 60, 3, 0.01, trial_cv=0.017)
        hit = frame["back"] <= depth
        frame.loc[hit, "values"] = frame.loc[hit, "values"].map(lambda v: [x * drop for x in v])
        table = latest.changes(frame, metric, {}, [], {})
        rows = latest.statuses(table, metric, [])
        return {v: rows.count(v) / len(rows) for v in set(rows)}

    stable = verdicts(1.0, 0)
    assert stable.get(NO_CHANGE, 0) >= 0.88 and stable.get(REGRESSION, 0) <= 0.01
    assert verdicts(0.9, 1).get(REGRESSION, 0) >= 0.98
    doubt = verdicts(0.94, 4)
    assert doubt.get(INCONCLUSIVE, 0) + doubt.get(REGRESSION, 0) >= 0.95 and doubt.get(NO_CHANGE, 0) <= 0.05
    settled = verdicts(0.94, 7)  # the whole week is the new level: the level sees it
    assert settled.get(REGRESSION, 0) >= 0.9


def test_a_counters_step_is_a_change_but_a_regression_only_in_a_declared_direction() -> None:
    """Fusions 255 for 20 nights, then 322: a change point either way; a regression only where more is declared
    worse (higher_is_better False), never without a direction (None)."""
    values = np.array([255.0] * 20 + [322.0] * 20)
    undirected = changepoints.detect_changes(values, 0.0, None).changes
    declared = changepoints.detect_changes(values, 0.0, False).changes
    assert [(c.index, c.regression) for c in undirected] == [(20, False)]
    assert [(c.index, c.regression) for c in declared] == [(20, True)]


@pytest.mark.parametrize("slower", [0.11, 0.03])  # the two series of the case: 89% and 97% slower
def test_a_young_history_suspects_a_step_after_two_slow_nights_and_confirms_it_after_three(slower: float) -> None:
    """Two quiet nights, then a helper made 4x wider: before, both quiet nights were set aside as outliers (their
    neighbourhood was mostly the slow nights) and no change was left to find for five nights."""
    rng = np.random.default_rng(7)
    nights = [1000 * np.exp(0.02 * rng.standard_normal(3)) for _ in range(2)]
    nights += [1000 * slower * np.exp(0.02 * rng.standard_normal(3)) for _ in range(4)]
    seen = {}
    for slow in (1, 2, 3, 4):
        trials = nights[: 2 + slow]
        found = changepoints.detect_changes([np.median(t) for t in trials], 0.03, True, trials=trials)
        assert found.outliers == []
        seen[slow] = [(c.index, c.status, c.regression) for c in found.changes]
    assert seen == {1: [], 2: [(2, "suspected", True)], 3: [(2, "confirmed", True)], 4: [(2, "confirmed", True)]}


def test_at_every_young_length_a_slower_model_is_confirmed_and_quiet_nights_raise_nothing() -> None:
    """From 5 to 30 nights, a model 4x slower 3 nights before the end is confirmed at its night; quiet series of 3
    to 30 nights confirm nothing (benchmarks/detection.py --young measures the rates on every noise shape)."""
    rng = np.random.default_rng(3)
    for length in range(3, 31):
        for _ in range(5):
            trials = 1000 * np.exp(0.02 * rng.standard_normal((length, 3)))
            quiet = changepoints.detect_changes(np.median(trials, axis=1), 0.03, True, trials=trials)
            assert [c for c in quiet.changes if c.status == "confirmed"] == [], length
            if length >= 5:
                trials[length - 3 :] *= 0.25
                found = changepoints.detect_changes(np.median(trials, axis=1), 0.03, True, trials=trials)
                assert [(c.index, c.status) for c in found.changes] == [(length - 3, "confirmed")], length


def test_a_change_says_how_many_nights_its_verdict_rests_on() -> None:
    """detect's verdict of the latest nights says how many nights it needed: a step 6 nights back is confirmed on 6,
    one 2 nights back suspected on 2, with 1 more to confirm or withdraw it."""
    rng = np.random.default_rng(3)
    for back, status, text in (
        (6, "confirmed", "confirmed on 6 nights since it"),
        (2, "suspected", "suspected on 2 nights since it: 1 more night confirm or withdraw it"),
    ):
        nights = 100.0 * np.exp(rng.normal(0, 0.005, 40))
        nights[-back:] *= 0.8
        [change] = changepoints.detect_changes(nights, 0.03, True).changes
        assert (change.status, change.nights, change.nights_text()) == (status, back, text)


# Two series from replayed nightlies (trials per night, examples/s, oldest first): two noisy first nights, then a step.
FOUR_X_NARROWER = [[38425, 42084], [28505, 29612], [1024, 1056], [994, 1064], [1082, 1087]]  # 28% apart, then -97%
TWO_QUIET_LEVELS = [[222.4, 302.2], [894.9, 584.4], [63.0, 77.5], [81.8, 76.0], [82.1, 77.0]]  # 2.9x apart, then -89%


@pytest.mark.parametrize("series", [FOUR_X_NARROWER, TWO_QUIET_LEVELS], ids=["-97%", "-89%"])
def test_a_step_after_two_noisy_first_nights_is_confirmed_by_its_third_slow_night_and_stays(series: list) -> None:
    """Before, the first was suspected after 2 slow nights, then withdrawn at 3 to 6 and confirmed at 8; the second
    (its first nights read as two host levels) was never reported. Order tells them: every trial before the step
    lies above every trial since. Later nights at the new level (these nights' own trials, seeded noise) never
    withdraw it."""
    rng = np.random.default_rng(0)
    slow = np.array(series[2:], dtype=float)
    nights = [np.array(n, dtype=float) for n in series]
    nights += [slow[i % 3] * np.exp(0.02 * rng.standard_normal(2)) for i in range(25)]
    seen = {}
    for length in range(3, len(nights) + 1):
        trials = nights[:length]
        found = changepoints.detect_changes([float(np.median(t)) for t in trials], 0.03, True, trials=trials)
        seen[length] = [(c.index, c.status, c.regression) for c in found.changes]
    assert seen[3] == [] and all(seen[n] == [(2, "confirmed", True)] for n in range(5, 31)), seen
    [change] = changepoints.detect_changes([float(np.median(t)) for t in series], 0.03, True, trials=series).changes
    # The interval runs from the nearest night before (night 1) to the farthest, each against the new level.
    level = np.exp(np.log(slow).mean())
    assert change.ci_low == pytest.approx(level / np.exp(np.log(max(series[:2], key=np.mean)).mean()), rel=1e-6)
    assert change.ci_high == pytest.approx(level / np.exp(np.log(min(series[:2], key=np.mean)).mean()), rel=1e-6)
    assert change.p_value < changepoints.CONFIRM_ALPHA


def test_a_pool_alternates_between_its_levels_and_the_same_nights_in_order_are_a_step() -> None:
    """Nights on two hosts 10% apart: alternating, two levels; the same nights with every fast one first, a step
    (two_levels None), found and confirmed where the levels' stricter test would hold it back."""
    rng = np.random.default_rng(4)
    hosts = np.where(np.arange(40) % 4 < 2, 1.0, 0.9) * np.exp(0.01 * rng.standard_normal(40)) * 1000
    assert changepoints.two_levels(np.log(hosts)) == pytest.approx(math.log(1 / 0.9), abs=0.02)
    ordered = np.sort(hosts)[::-1]
    assert changepoints.two_levels(np.log(ordered)) is None
    # One night alone on the other level is no return to it: a cold first night, then a step, is still a step.
    assert changepoints.two_levels(np.log(np.r_[ordered[-1], ordered[1:]])) is None
    found = changepoints.detect_changes(ordered, 0.03, True).changes
    assert [(c.index, c.status) for c in found] == [(20, "confirmed")]


def test_an_ordered_step_needs_every_night_before_off_the_new_level() -> None:
    """The order test alone: nights before all above the new level by the threshold and 6 of its sigmas give a step
    with the range of the nights before as its interval; one night before at the new level, a gap within the
    threshold, or fewer than 3 nights since, give none."""
    since = [np.log([100.0, 101.0]), np.log([99.0, 100.5]), np.log([100.2, 99.6])]
    far = changepoints.ordered_step([np.log([300.0, 310.0]), np.log([150.0, 155.0])], since, math.log1p(0.03))
    assert far is not None and far.ci_low == pytest.approx(100 / 305, rel=0.02)
    assert far.ci_high == pytest.approx(100 / 152.5, rel=0.02) and far.p_value < 1e-4
    assert changepoints.ordered_step([np.log([300.0]), np.log([100.0, 101.0])], since, 0.03) is None
    assert changepoints.ordered_step([np.log([300.0]), np.log([102.0, 102.5])], since, math.log1p(0.03)) is None
    assert changepoints.ordered_step([np.log([300.0]), np.log([150.0])], since[:2], 0.03) is None


def test_quiet_young_histories_with_a_noisy_first_night_confirm_nothing() -> None:
    """One of the first two nights up to 3x off (up or down), the others quiet at 2%: nothing is confirmed at any
    length from 3 to 30 nights (benchmarks/detection.py --noisy-start measures every noise shape)."""
    rng = np.random.default_rng(8)
    for _ in range(12):
        trials = 1000 * np.exp(0.02 * rng.standard_normal((30, int(rng.integers(2, 4)))))
        trials[int(rng.integers(2))] *= np.exp(rng.uniform(-1, 1) * math.log(3))
        for length in range(3, 31):
            part = trials[:length]
            found = changepoints.detect_changes(np.median(part, axis=1), 0.03, True, trials=part).changes
            assert [c for c in found if c.status == "confirmed"] == [], (length, np.median(part, axis=1))


def test_a_step_in_a_series_history_is_stepped_not_bimodal_across_processes() -> None:
    """A series' last trials in time order, 15 before a 40x step and 15 after: two clusters, one after the other,
    are a step (no "bimodal across processes" warning, its levels written as a person reads them); the same values
    interleaved are bimodal."""
    from stepwatch.collector.output.comparison import bimodal_warning

    rng = np.random.default_rng(2)
    history = np.r_[40000 * np.exp(0.03 * rng.standard_normal(15)), 1000 * np.exp(0.03 * rng.standard_normal(15))]
    stepped = noise.noises_of({"s": history}, ordered=True)["s"]
    assert stepped.stepped and not stepped.bimodal and bimodal_warning("s", "examples_per_sec", stepped) is None
    assert noise.noise_text(stepped).endswith("stepped: 995.6 / 39,995")  # before, bimodal: 995.6 / 4e+04
    interleaved = noise.noises_of({"s": np.ravel(np.column_stack([history[:15], history[15:]]))}, ordered=True)["s"]
    assert interleaved.bimodal and not interleaved.stepped
    warning = bimodal_warning("s", "examples_per_sec", interleaved)
    assert warning and "e+0" not in warning and "near 995.6 and 39,995" in warning, warning
    assert noise.noise_of(history).bimodal  # order unknown: as before


# A team's first month (issue's examples: examples/s, trials a night, oldest first).
STEP_ON_NIGHT_4 = [[1028.5, 981.9], [1003.9, 995.4], [984.2, 984.7], [499.9, 503.3], [496.0, 500.4], [535.8, 532.4],
                   [537.0, 533.7], [503.7, 513.9], [504.7, 501.0], [505.4, 493.2], [497.5, 506.0], [504.8, 511.7],
                   [530.1, 518.5], [545.7, 538.8], [492.1, 510.4], [500.2, 486.6], [496.9, 496.2], [512.1, 494.1],
                   [498.1, 497.9], [527.0, 522.8]]  # fmt: skip
COLD_FIRST_NIGHT = [[797.4, 694.6], [1012.6, 983.1], [986.5, 993.6], [753.0, 794.5], [779.5, 883.9], [805.4, 791.6],
                    [793.3, 784.1], [775.1, 790.7], [811.7, 794.3], [823.3, 795.2], [800.6, 838.0],
                    [813.2, 788.0]]  # fmt: skip
QUIET_POOL = [[957.8, 917.3], [961.2, 981.0], [987.4, 979.3], [924.9, 930.2], [975.4, 959.1], [1046.3, 1077.3],
              [1042.0, 1072.1], [1050.0, 1020.9]]  # fmt: skip


# Two hosts 10% apart, each night on one, and -20% from night 4: three nights before it (one on the fast host, two
# on the slow one), the nights since it on both hosts (benchmarks/detection.py --nightly, two hosts, history 154).
TWO_HOSTS_STEP = [[1005.5, 1028.0], [879.1, 895.4], [916.2, 881.2], [715.5, 725.5], [718.4, 737.4], [703.0, 732.1],
                  [795.1, 793.8], [787.5, 798.6], [695.5, 736.4], [729.1, 703.7], [809.2, 780.1], [722.6, 734.4],
                  [796.9, 793.1], [733.6, 705.9], [705.9, 721.0], [821.2, 777.1], [810.9, 812.5], [809.5, 789.7],
                  [802.2, 782.3], [805.8, 812.3]]  # fmt: skip


# An A/A recorded on a 2-core cloud VM: a numpy training script, 2 trials a run, 16 runs a few seconds apart, read as
# 16 nights (examples/s). Nothing changed; the machine's speed wandered 2-5% from run to run, the first two high.
LONE_AA = [[356503, 353705], [357244, 353385], [338367, 338648], [343029, 334156], [335808, 335680], [355603, 355936],
           [343730, 340782], [343883, 342190], [333390, 340921], [338530, 334247], [328708, 333096], [338533, 333271],
           [339721, 337025], [336218, 340202], [342022, 349807], [334642, 342309]]  # fmt: skip


def lone_night(history: list) -> stats.Between | None:
    """The variance of a night's offset ``detect`` judges a series alone on its runner with (no calibration)."""
    logs = [np.log(n) for n in history]
    own, lone = stats.between_nights(logs), stats.between_nights(logs, stats.LONE_RUNNER)
    return latest.night_variances(["s"], [own], {"s": "r"}, None, [lone])[0]


def judged_night_by_night(
    history: list,
    lengths: range,
    night: stats.Between | Callable[[list], stats.Between | None] | None = None,
    carry: bool = True,
) -> dict[int, list[tuple[int, str, int | None]]]:
    """Per length, the changes (night, status, moved from) as the nightly judges them: each judgment given the nights
    of the alerts confirmed so far (``alerts.record`` keeps a confirmed alert, and moves it with its change), unless
    ``carry`` is false. ``night``: the variance of a night's offset, or how to compute it from the nights so far."""
    seen, held = {}, set()
    for length in lengths:
        trials = history[:length]
        offset = night(trials) if callable(night) else night
        found = changepoints.detect_changes([float(np.median(t)) for t in trials], 0.03, True, trials=trials,
                                            night=offset, confirmed=sorted(held) if carry else ()).changes  # fmt: skip
        held = (held - {c.moved_from for c in found}) | {c.index for c in found if c.status == "confirmed"}
        seen[length] = [(c.index, c.status, c.moved_from) for c in found]
    return seen


@pytest.mark.parametrize("carry", [True, False], ids=["nightly", "each-length-alone"])
def test_a_confirmed_step_keeps_its_night_as_later_nights_arrive(carry: bool) -> None:
    """A -50% step on night 4 (index 3) of a pool whose nights 6-7 ran 7% faster: before, the nights beside the step
    were set aside as outliers one after another (a window centred on them took its median from the other level),
    and the change walked to night 5 with 7 nights, 6 with 8, 7 with 9, 8 with 10-14, then 6. Now it stays on night 4
    at every length from 6 to 20, judged alone or with the nights confirmed the night before."""
    seen = judged_night_by_night(STEP_ON_NIGHT_4, range(4, 21), carry=carry)
    for length in range(6, 21):
        assert [(i, moved) for i, status, moved in seen[length] if status == "confirmed"] == [(3, None)], seen


def test_a_cold_first_night_does_not_hide_a_step() -> None:
    """A first night 25% slower (a compile cache filled for the first time), two nights at the level, then -20%
    for nine nights: before, nothing at any length from 6 to 12. The first night is set aside (the two nights after
    it agree), and the step on night 4 is confirmed by 9 nights and stays confirmed through 12."""
    seen = judged_night_by_night(COLD_FIRST_NIGHT, range(4, 13))
    assert all([(i, s) for i, s, _ in seen[length]] == [(3, "confirmed")] for length in range(9, 13)), seen
    [change] = changepoints.detect_changes([float(np.median(t)) for t in COLD_FIRST_NIGHT], 0.03, True,
                                           trials=COLD_FIRST_NIGHT).changes  # fmt: skip
    assert change.ratio == pytest.approx(0.8, abs=0.03) and change.regression


def test_a_quiet_pool_raises_no_alarm_where_its_runners_other_series_show_the_hosts_spread() -> None:
    """Five nights within 6%, then three on a host 9% faster. Alone, eight nights cannot tell a pool's host from a
    step (its own night-to-night spread rests on few nights): +9% is confirmed with 8 nights, as before. Judged with
    the variance of a night's offset its runner's other series measured (4%, on 40 degrees of freedom, pooled as
    ``latest.night_variances`` pools it), nothing is confirmed at any length from 4 to 8."""
    alone = judged_night_by_night(QUIET_POOL, range(4, 9))
    assert [(i, s) for i, s, _ in alone[8]] == [(5, "confirmed")], alone
    others = stats.Between(0.04**2, 40.0)
    own = [stats.between_nights([np.log(n) for n in QUIET_POOL]), others]
    [night, _] = latest.night_variances(["pool", "others"], own, {"pool": "r", "others": "r"}, None)
    assert night is not None and night.df > 30 and "pooled with its runner's 1 other series" in night.source
    pooled = judged_night_by_night(QUIET_POOL, range(4, 9), night)
    assert all(s != "confirmed" for length in range(4, 9) for _, s, _ in pooled[length]), pooled


def test_a_confirmed_step_on_two_hosts_stays_confirmed_while_nights_at_its_new_level_accrue() -> None:
    """A -20% step confirmed with 6 nights, judged with the night's offset its runner's other series measured (two
    hosts: 5.8%, on 72 degrees of freedom). Its segment before is three nights: tested on their own degrees of
    freedom, it fell past p = 0.05 at 20 nights as the new level's host mix moved, and the alert's change was
    withdrawn. A change confirmed before is held with the degrees of freedom of the variance it is judged with, so
    it stays confirmed on night 4 through 20; a new change is still raised on its segments' own (the same history
    judged without the nights it confirmed: withdrawn, as before)."""
    night = stats.Between(0.0034, 72.0, "its runner's 8 other series")
    seen = judged_night_by_night(TWO_HOSTS_STEP, range(4, 21), night)
    assert all([(i, s) for i, s, _ in seen[length]] == [(3, "confirmed")] for length in range(6, 21)), seen
    fresh = judged_night_by_night(TWO_HOSTS_STEP, range(20, 21), night, carry=False)
    assert all(s != "confirmed" for _, s, _ in fresh[20]), fresh


def own_night(history: list) -> stats.Between | None:
    """The variance of a night's offset from a series' own nights alone (what ``detect`` judged a lone series with)."""
    own = stats.between_nights([np.log(n) for n in history])
    return own if own is not None and own.var_log > 0 else None


def test_a_series_alone_on_its_runner_stays_quiet_on_a_real_aa_and_a_quiet_runners_step_still_confirms() -> None:
    """A series whose runner nothing else measured (no other series, no calibration) is judged, while its nights
    are few, with its own spread pooled with ``stats.LONE_RUNNER``. A real A/A on a cloud VM whose first two runs
    were 5% faster: judged on its own nights alone, -4.7% on night 3 was confirmed on the 5th night and its alert
    held to the 16th; with the prior nothing is confirmed at any length from 4 to 16. On a quiet runner (trials
    independent, nights that do not move) the prior is outweighed within a few nights: a -10% step after 6 nights
    is confirmed by its 3rd slow night, and at 30 nights the series is judged with its own spread alone."""
    bare = judged_night_by_night(LONE_AA, range(4, 17), own_night)
    assert [(i, s) for i, s, _ in bare[5]] == [(2, "confirmed")] and [(i, s) for i, s, _ in bare[16]] == [
        (2, "confirmed")
    ], bare
    assert all("a lone runner's prior" in lone_night(LONE_AA[:n]).source for n in range(4, 17))
    quiet = judged_night_by_night(LONE_AA, range(4, 17), lone_night)
    assert all(s != "confirmed" for length in quiet for _, s, _ in quiet[length]), quiet
    rng = np.random.default_rng(3)
    stepped = [1000 * np.exp(0.02 * rng.standard_normal(3)) * (0.9 if i >= 6 else 1.0) for i in range(30)]
    seen = judged_night_by_night(stepped, range(9, 31), lone_night)
    assert all([(i, s) for i, s, _ in seen[length]] == [(6, "confirmed")] for length in seen), seen
    long = lone_night(stepped)
    assert long is None or "prior" not in long.source  # 30 nights: its own spread rests on 10+ df


def test_a_confirmed_change_moves_only_on_decisive_evidence_and_says_from_where() -> None:
    """A change an earlier judgment confirmed on a night next to the real step keeps its night while its segments
    still hold (p < KEEP), and moves where the nights fit the other night better by more than a change is worth;
    the change says the night it moved from. A night confirmed where nothing happened no longer stands."""
    rng = np.random.default_rng(5)
    nights = [1000 * np.exp(0.01 * rng.standard_normal(2)) * (0.8 if i >= 10 else 1.0) for i in range(20)]
    values = [float(np.median(n)) for n in nights]
    [plain] = changepoints.detect_changes(values, 0.03, True, trials=nights).changes
    assert (plain.index, plain.moved_from) == (10, None)
    [held] = changepoints.detect_changes(values, 0.03, True, trials=nights, confirmed=[10]).changes
    assert (held.index, held.status, held.moved_from) == (10, "confirmed", None)
    [moved] = changepoints.detect_changes(values, 0.03, True, trials=nights, confirmed=[12]).changes
    assert (moved.index, moved.status, moved.moved_from) == (10, "confirmed", 12)
    quiet = [1000 * np.exp(0.01 * rng.standard_normal(2)) for _ in range(20)]
    gone = changepoints.detect_changes([float(np.median(n)) for n in quiet], 0.03, True, trials=quiet, confirmed=[10])
    assert gone.changes == []
