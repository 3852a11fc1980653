"""Between-environment variation: its estimates, the intervals it widens (their coverage, simulated) and the
calibration file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from stepwatch.collector.analysis import calibration, stats

SIGMA, TRIALS = 0.05, 5  # trial-to-trial CV 5%, five trials per side: a quiet CPU runner


def simulate(tau: float, rng: np.random.Generator, envs: int = 3) -> np.ndarray:
    """Log values of TRIALS trials in each of ``envs`` environments of the same packages, each environment
    offset by a random N(0, tau) (the same program: no true change)."""
    offsets = rng.normal(0, tau, envs)
    return offsets[:, None] + rng.normal(0, SIGMA, (envs, TRIALS))


def coverage(tau: float, calibration_envs: int, with_aa: bool, reps: int = 2000, widen: bool = True) -> float:
    """How often the 95% interval of a baseline-vs-candidate comparison with no true change holds ratio 1, its
    between-environment variance estimated from a calibration of ``calibration_envs`` environments (on another
    day: other environments) and, ``with_aa``, the check's own A/A (a second baseline environment)."""
    rng = np.random.default_rng(int(tau * 1e4) + calibration_envs * 7 + with_aa)
    held = 0
    for _ in range(reps):
        base, cand, aa = (stats.Side.of_logs(g) for g in simulate(tau, rng))
        parts = []
        if calibration_envs:
            parts.append(stats.between_groups(list(simulate(tau, rng, calibration_envs))))
        if with_aa:
            parts.append(calibration.aa_between([(base, aa)]))
        between = stats.pool_between(parts) if widen else None
        r = stats.welch_ratio(base, cand, between=between)
        held += r.ci_low <= 1 <= r.ci_high
    return held / reps


@pytest.mark.parametrize("tau", [SIGMA, 2 * SIGMA])
@pytest.mark.parametrize(("calibration_envs", "with_aa"), [(6, False), (6, True)])
def test_widened_intervals_hold_their_coverage_when_environments_differ(
    tau: float, calibration_envs: int, with_aa: bool
) -> None:
    assert abs(coverage(tau, calibration_envs, with_aa) - 0.95) <= 0.02


def test_unwidened_intervals_lose_their_coverage_when_environments_differ() -> None:
    """Why the widening exists: with environment offsets twice the trial noise, the trials' own interval holds
    the truth about half of the time."""
    assert coverage(2 * SIGMA, 0, False, reps=1000, widen=False) < 0.7


def test_between_groups_finds_the_offset_variance_and_zero_without_one() -> None:
    rng = np.random.default_rng(3)
    big = [stats.between_groups(list(simulate(0.05, rng, envs=40))).var_log for _ in range(20)]
    assert 0.6 * 0.05**2 < np.mean(big) < 1.4 * 0.05**2
    none = stats.between_groups([np.full(5, 1.0) + rng.normal(0, 0.01, 5) * 0 for _ in range(4)])
    assert none is not None and none.var_log == 0.0


def test_calibration_counts_aa_false_alarms_and_widening_quiets_them(tmp_path: Path) -> None:
    """Environments offset by 4x the trial noise: their A/A pairs call changes with the trials' own intervals,
    and (far) fewer with the calibrated between-environment variance."""
    rng = np.random.default_rng(11)
    memory = {f"series-{i}": [np.exp(g + 20) for g in simulate(0.02, rng, envs=6)] for i in range(3)}
    for per in memory.values():  # a memory-like metric: trial noise 0.1%, environment offsets 2%
        for j, g in enumerate(per):
            per[j] = np.exp(np.log(g).mean() + rng.normal(0, 0.001, TRIALS))
    found = calibration.build("runner-1", "smoke", ["tensorflow==2.21.0"], TRIALS, {"peak_memory_bytes": memory})
    m = found.metrics["peak_memory_bytes"]
    assert m.comparisons == 15 * 3
    assert m.false_alarms > 10 and m.false_alarms_widened < m.false_alarms / 3
    assert m.detectable[5] > 0.02  # the offsets, not the trials, bound what this runner can see
    path = tmp_path / "runner-1.json"
    calibration.save(found, path)
    again = calibration.load(path)
    assert again.metrics["peak_memory_bytes"].between.var_log == pytest.approx(m.between.var_log)
    assert again.between()["peak_memory_bytes"].source.startswith("calibrate on runner-1 (6 environments")


def test_a_broken_calibration_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"runner": "x"}))
    with pytest.raises(calibration.CalibrationError, match="not a stepwatch calibration"):
        calibration.load(path)
    with pytest.raises(calibration.CalibrationError, match="cannot read"):
        calibration.load(tmp_path / "missing.json")
    assert calibration.find("none") is None


def test_the_detectable_effect_cannot_fall_below_the_environment_offsets() -> None:
    side = stats.Side(1000, 0.0, 0.0001)
    between = stats.Between(0.02**2, 10)
    assert stats.detectable_change(side, side) < 0.01
    assert stats.detectable_change(side, side, between=between) > 2 * 0.02
    assert stats.trials_to_detect(side, side, 0.03, between=between) == stats.MAX_TRIALS
    assert math.isfinite(stats.welch_ratio(side, side, between=between).ci_low)
