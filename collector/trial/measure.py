"""Timing windows and the statistics of one trial. Pure Python and NumPy: no TensorFlow here."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

MAD_TO_SIGMA = 1.4826  # scales the median absolute deviation to a normal standard deviation


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or infinite."""


@dataclass(frozen=True)
class Mark:
    steps: int  # steps done when the window closed
    time: float  # time.perf_counter() after the loss of the window reached the host
    loss: float  # mean loss over the window's steps
    cpu: float = math.nan  # this process's CPU seconds (all threads, user + system) at the mark


@dataclass
class WindowClock:
    """Closes a timing window every ``window_steps`` steps, after the first execution.

    The loss is fetched to the host before the clock is read: the fetch waits for the device to
    finish the window, so asynchronous dispatch cannot leak time from one window into the next.
    """

    first_steps: int
    window_steps: int
    start: float = 0.0
    marks: list[Mark] = field(default_factory=list)
    watch: Any = None  # collector.trial.machine.Watch: read when the measured steps begin and end
    measured: tuple[int, int] = (-1, -1)  # steps done when they begin and end

    def begin(self) -> None:
        self.start = time.perf_counter()

    def watch_measured(self, watch: Any, warmup_steps: int, total_steps: int) -> None:
        """Read the machine (``watch.read()``) as the measured windows (``summarize``'s) begin and end."""
        self.watch = watch
        self.measured = (self.first_steps + warmup_steps // self.window_steps * self.window_steps, total_steps)

    def due(self, steps_done: int) -> bool:
        after_first = steps_done - self.first_steps
        return after_first >= 0 and after_first % self.window_steps == 0

    def close(self, steps_done: int, fetch_loss: Callable[[], float] | None) -> Mark:
        """End a window; ``fetch_loss`` None: the caller has waited for the device itself and has no loss (a
        script's), so none is checked."""
        loss = float(fetch_loss()) if fetch_loss is not None else math.nan
        mark = Mark(steps_done, time.perf_counter(), loss, time.process_time())
        if self.watch is not None and steps_done in self.measured:
            self.watch.read()
            if steps_done == self.measured[0]:  # the first measured window starts after the reading
                mark = replace(mark, time=time.perf_counter(), cpu=time.process_time())
        self.marks.append(mark)
        if fetch_loss is not None and not math.isfinite(loss):
            raise NonFiniteLoss(f"loss became {loss} after {steps_done} steps")
        return mark


def window_mean_from_running(prev_steps: int, prev_mean: float, steps: int, mean: float) -> float:
    """Mean loss of steps (prev_steps, steps] from two running means (what Keras' fit reports)."""
    return (steps * mean - prev_steps * prev_mean) / (steps - prev_steps)


def jitter(values: np.ndarray) -> float:
    """Robust spread: 1.4826 x median absolute deviation."""
    return float(MAD_TO_SIGMA * np.median(np.abs(values - np.median(values))))


@dataclass(frozen=True)
class TrialStats:
    compile_s: float | None
    warmup_s: float | None
    measured_steps: int
    measured_s: float | None
    examples_per_sec: float | None
    step_time_mean_s: float | None
    step_time_p10_s: float | None
    step_time_p50_s: float | None
    step_time_p90_s: float | None
    step_time_stderr_s: float | None
    step_time_jitter_s: float | None
    first_loss: float | None
    final_loss: float | None
    loss_finite: bool
    window_step_times_s: list[float]
    window_losses: list[float]


def summarize(clock: WindowClock, warmup_steps: int, global_batch: int) -> TrialStats:
    """Throughput as measured examples / measured seconds (total over total), and window statistics."""
    marks = clock.marks
    losses = [m.loss for m in marks]
    finite = all(math.isfinite(v) for v in losses)
    compile_s = marks[0].time - clock.start if marks else None
    warm_windows = warmup_steps // clock.window_steps
    if len(marks) <= warm_windows + 1:  # stopped before a measured window closed
        warmup_s = marks[-1].time - marks[0].time if len(marks) > 1 else None
        return TrialStats(
            compile_s,
            warmup_s,
            0,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            losses[0] if losses else None,
            losses[-1] if losses else None,
            finite,
            [],
            losses[1:],
        )
    measured = marks[warm_windows:]
    times = np.array([b.time - a.time for a, b in zip(measured, measured[1:])])
    steps = np.array([b.steps - a.steps for a, b in zip(measured, measured[1:])])
    per_step = times / steps
    measured_steps = int(steps.sum())
    measured_s = float(times.sum())
    n = len(per_step)
    return TrialStats(
        compile_s=compile_s,
        warmup_s=measured[0].time - marks[0].time,
        measured_steps=measured_steps,
        measured_s=measured_s,
        examples_per_sec=measured_steps * global_batch / measured_s,
        step_time_mean_s=measured_s / measured_steps,
        step_time_p10_s=float(np.percentile(per_step, 10)),
        step_time_p50_s=float(np.percentile(per_step, 50)),
        step_time_p90_s=float(np.percentile(per_step, 90)),
        step_time_stderr_s=float(np.std(per_step, ddof=1) / math.sqrt(n)) if n > 1 else None,
        step_time_jitter_s=jitter(per_step),
        first_loss=losses[0],
        final_loss=losses[-1],
        loss_finite=finite,
        window_step_times_s=[float(v) for v in per_step],
        window_losses=[m.loss for m in measured[1:]],
    )


def host_load(clock: WindowClock, warmup_steps: int) -> dict[str, float]:
    """The cores this process kept busy during the measured windows, per measured second (``process_cpu_per_s``;
    1.3 = one core and a third); what the rest of the machine did is the row's machine state
    (collector.trial.machine). Empty when no measured window closed or the OS does not say."""
    measured = clock.marks[warmup_steps // clock.window_steps :]
    if len(measured) < 2:
        return {}
    first, last = measured[0], measured[-1]
    load = (last.cpu - first.cpu) / (last.time - first.time)
    return {"process_cpu_per_s": round(load, 4)} if math.isfinite(load) else {}


def to_target(
    marks: list[tuple[int, float, float]], target: float | None, higher_is_better: bool = False
) -> dict[str, Any]:
    """Time to a target quality from ``marks`` (steps done, time.perf_counter(), quality), the first of them the end
    of the first step: the steps and seconds after it at which the quality first reached ``target``. Both are
    empty when it never did in the trial's steps (or there is no target); a model's quality is its windows' mean
    loss, so they resolve to a window."""
    found: dict[str, Any] = {"target": target, "steps_to_target": None, "time_to_target_s": None}
    if target is None or not marks:
        return found
    start = marks[0][1]
    for steps, at, value in marks:
        if math.isfinite(value) and (value >= target if higher_is_better else value <= target):
            return {**found, "steps_to_target": steps, "time_to_target_s": round(at - start, 6)}
    return found


def loss_target(clock: WindowClock, target: float | None) -> dict[str, Any]:
    """A model's time to its target training loss (``to_target``), from its windows."""
    return to_target([(m.steps, m.time, m.loss) for m in clock.marks], target)
