"""Window statistics: total-over-total throughput, warm-up excluded, robust jitter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stepwatch.collector.trial.measure import (
    Mark,
    NonFiniteLoss,
    WindowClock,
    host_load,
    jitter,
    summarize,
    window_mean_from_running,
)


def clock_with(step_times: list[float], window: int = 2, compile_s: float = 5.0) -> WindowClock:
    """A clock whose windows took the given per-step times (first entry: the first step)."""
    clock = WindowClock(first_steps=1, window_steps=window, start=100.0)
    t, steps = 100.0 + compile_s, 1
    clock.marks.append(Mark(steps, t, 3.0))
    for i, per_step in enumerate(step_times):
        t += per_step * window
        steps += window
        clock.marks.append(Mark(steps, t, 2.0 - 0.1 * i))
    return clock


def test_throughput_is_total_examples_over_total_time_excluding_warmup() -> None:
    # two warm-up windows at 1 s/step, then measured windows at 0.1 and 0.3 s/step
    clock = clock_with([1.0, 1.0, 0.1, 0.3], window=2)
    stats = summarize(clock, warmup_steps=4, global_batch=8)
    assert stats.compile_s == pytest.approx(5.0)
    assert stats.warmup_s == pytest.approx(4.0)
    assert stats.measured_steps == 4
    assert stats.measured_s == pytest.approx(0.8)
    assert stats.examples_per_sec == pytest.approx(4 * 8 / 0.8)  # not the mean of per-window rates (53.3)
    assert stats.window_step_times_s == pytest.approx([0.1, 0.3])
    assert stats.first_loss == 3.0 and stats.loss_finite


def test_percentiles_stderr_and_jitter() -> None:
    per_step = [0.10, 0.11, 0.09, 0.10, 0.50]  # one outlier window
    stats = summarize(clock_with([1.0, 1.0, *per_step]), warmup_steps=4, global_batch=1)
    assert stats.step_time_p50_s == pytest.approx(0.10)
    assert stats.step_time_jitter_s == pytest.approx(1.4826 * 0.01)  # MAD ignores the outlier
    assert stats.step_time_stderr_s == pytest.approx(np.std(per_step, ddof=1) / math.sqrt(5))


def test_a_run_stopped_during_warmup_has_no_throughput() -> None:
    stats = summarize(clock_with([1.0]), warmup_steps=4, global_batch=8)
    assert stats.examples_per_sec is None and stats.measured_steps == 0
    assert stats.compile_s == pytest.approx(5.0)


def test_window_mean_from_two_running_means() -> None:
    losses = [4.0, 3.0, 2.5, 2.0, 1.0, 0.5]
    running = np.cumsum(losses) / np.arange(1, 7)
    assert window_mean_from_running(2, running[1], 6, running[5]) == pytest.approx(np.mean(losses[2:]))
    assert window_mean_from_running(0, 0.0, 1, running[0]) == 4.0


def test_clock_raises_on_nan_after_recording_the_window() -> None:
    clock = WindowClock(first_steps=1, window_steps=1)
    clock.begin()
    clock.close(1, lambda: 1.0)
    with pytest.raises(NonFiniteLoss, match="nan after 2 steps"):
        clock.close(2, lambda: float("nan"))
    assert len(clock.marks) == 2
    assert clock.due(3) and not clock.due(0)


def test_jitter_is_scaled_mad() -> None:
    assert jitter(np.array([1.0, 1.0, 1.0])) == 0.0
    assert jitter(np.array([1.0, 2.0, 3.0])) == pytest.approx(1.4826)


def test_host_load_is_per_measured_second_and_skips_the_warmup() -> None:
    clock = WindowClock(first_steps=1, window_steps=2, start=0.0)
    # (time, process cpu) at each mark: warm-up windows burn CPU, measured ones 1.5 cores
    for i, (t, cpu) in enumerate([(1, 1), (2, 5), (3, 9), (5, 12), (7, 15)]):
        clock.marks.append(Mark(1 + 2 * i, t, 1.0, cpu))
    assert host_load(clock, warmup_steps=4) == {"process_cpu_per_s": 1.5}
    clock.marks[-1] = Mark(9, 7, 1.0)  # the OS did not say: nothing is made up
    assert host_load(clock, warmup_steps=4) == {}
