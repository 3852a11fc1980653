"""How a training script of the user's marks its steps: ``stepwatch.steps``, ``stepwatch.step`` and
``stepwatch.keras_callback``; and reports its quality and reads its seed: ``stepwatch.quality``,
``stepwatch.seed``. Run on its own, a script gets back what it gave (its loader, a callback that does nothing): it
stays the team's training script. Run as a stepwatch trial (``stepwatch run --script``), the trial
process has started a ``Session`` before running the script: each marked step is counted, the trial's timing
windows close on a device sync of whatever framework the script loaded, and once the warm-up and measured steps
are done the script is stopped where it stands (``StepsDone``), fixed-step like every trial.

Imports no framework: what needs one is looked up in ``sys.modules`` (what the script itself imported).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from stepwatch.collector.trial.measure import WindowClock, to_target

T = TypeVar("T")


class StepsDone(BaseException):  # noqa: N818 - an end, not an error: a script's `except Exception` lets it pass
    """The trial's steps are done: raised out of the script's loop, so the script stops there (its ``finally``
    blocks and context managers still run). A BaseException, like KeyboardInterrupt, so that no ``except
    Exception`` of the script's swallows it."""


class StepsMisuse(RuntimeError):
    """A script marks its steps in a way that would count them wrong (two markers at once, a bad count)."""


def sync_devices() -> None:
    """Wait until every device has finished the work queued so far, for each framework the script has loaded:
    CUDA streams (torch), TensorFlow's devices, and JAX's arrays still being computed (JAX dispatches
    asynchronously, on a CPU too). A framework that is not loaded costs nothing."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    jax = sys.modules.get("jax")
    if jax is not None and jax_started():
        jax.block_until_ready(jax.live_arrays())
    tf = sys.modules.get("tensorflow")
    sync = getattr(getattr(getattr(tf, "test", None), "experimental", None), "sync_devices", None)
    if sync is not None:
        sync()


def jax_started() -> bool:
    """Whether JAX has started a backend: JAX loaded by another framework (TensorFlow imports it when installed)
    but never used has nothing to wait for, and asking it would start one."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


@dataclass
class Session:
    """One trial's count of a script's steps: its clock, how many steps to run, and what each step holds."""

    clock: WindowClock
    total_steps: int
    on_done: Callable[[], None] = lambda: None  # called once the last window has closed, before StepsDone
    sync: Callable[[], None] = sync_devices
    done: int = 0
    examples_per_step: int | None = None
    marker: str | None = None  # the marker that is counting now (steps / step / keras_callback)
    finished_in: str | None = None  # the thread that marked the last step ("MainThread" where the script's main did)
    qualities: list[tuple[int, float, float]] = field(default_factory=list)  # (steps done, perf_counter, value)
    quality_name: str | None = None
    target: float | None = None
    higher_is_better: bool = False

    def claim(self, marker: str) -> None:
        """``marker`` counts from now on; two markers at once would count each step twice."""
        if self.marker == "steps" and marker == "steps":
            raise StepsMisuse(
                "stepwatch.steps inside another stepwatch.steps loop: mark each step once (wrap one loop, the one "
                "whose items are the training steps)"
            )
        if self.marker is not None and self.marker != marker:
            raise StepsMisuse(
                f"stepwatch.{marker} used while stepwatch.{self.marker} is counting the steps: mark each step once "
                "(one stepwatch.steps loop, or stepwatch.step, or the Keras callback)"
            )
        self.marker = marker

    def examples(self, count: Any) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise StepsMisuse(f"examples per step must be a positive integer, got {count!r}")
        if self.examples_per_step not in (None, count):
            raise StepsMisuse(
                f"examples per step changed from {self.examples_per_step} to {count}: a trial's steps are all of "
                "one size (drop the last, smaller batch: drop_last=True)"
            )
        self.examples_per_step = count

    def mark(self) -> None:
        """One step is done: close a window where one is due; once every step is done, end the script's loop."""
        self.done += 1
        if self.clock.due(self.done) and self.done <= self.total_steps:
            self.sync()
            self.clock.close(self.done, None)
        if self.done >= self.total_steps:
            if self.finished_in is None:
                self.finished_in = threading.current_thread().name
                self.on_done()
            raise StepsDone

    def report(self, value: Any, name: str, target: Any, higher_is_better: bool) -> None:
        """A quality the script measured (``stepwatch.quality``), at the steps marked so far."""
        if isinstance(value, bool) or not isinstance(value, int | float) and not hasattr(value, "__float__"):
            raise StepsMisuse(f"stepwatch.quality takes a number, got {value!r}")
        if self.quality_name not in (None, name):
            raise StepsMisuse(
                f"stepwatch.quality reported {name!r} after {self.quality_name!r}: a trial tracks one quality"
            )
        self.quality_name, self.higher_is_better = name, bool(higher_is_better)
        if target is not None:
            self.target = float(target)
        self.qualities.append((self.done, time.perf_counter(), float(value)))

    def quality_fields(self) -> dict[str, Any]:
        """The row's quality columns: the values reported, the last, and the time to the target (from the end of
        the first step, as a model's; ``measure.to_target``)."""
        if not self.qualities:
            return {}
        first = [(m.steps, m.time, math.nan) for m in self.clock.marks[:1]]
        found = to_target(first + self.qualities, self.target, self.higher_is_better)
        values = [value for _, _, value in self.qualities]
        return {"quality_name": self.quality_name, "quality_values": values, "quality": values[-1], **found,
                "quality_higher_is_better": self.higher_is_better}  # fmt: skip

    @property
    def complete(self) -> bool:
        """Every step the trial needs was marked: every measured window closed."""
        return self.done >= self.total_steps


_session: Session | None = None


def start(session: Session | None) -> None:
    """Make ``session`` the one the script's markers count in (the trial process, before running the script)."""
    global _session
    _session = session


def active() -> Session | None:
    return _session


def steps(iterable: Iterable[T], examples_per_step: int) -> Iterable[T]:
    """``iterable``, one step per item. Outside a trial, ``iterable`` itself. In a stepwatch trial: the loop ends
    once the trial's warm-up and measured steps are done (the script stops there), and the time between items is
    the step's, the loader's time included; ``examples_per_step`` is this process's batch (per device). Several
    loops in a row (epochs) count on; a loop inside another, or beside ``stepwatch.step``, is an error."""
    session = _session
    return iterable if session is None else Counted(session, iterable, examples_per_step)


@dataclass
class Counted:
    """An iterable whose items are counted as steps (its length is the iterable's, for a progress bar)."""

    session: Session
    iterable: Iterable[Any]
    examples_per_step: int

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type] - a TypeError, as the iterable's own, if it has none

    def __iter__(self) -> Iterator[Any]:
        session = self.session
        session.examples(self.examples_per_step)
        session.claim("steps")
        try:
            for item in self.iterable:
                yield item
                session.mark()
        finally:
            session.marker = None


def quality(value: float, name: str = "quality", target: float | None = None, higher_is_better: bool = False) -> None:
    """Report the quality the script measured (a validation loss, an accuracy), as often as it measures it. In a
    stepwatch trial the row keeps the values, the last, and, with a ``target``, the steps and seconds the training
    took to reach it (time to target, MLPerf's metric); the numerics verdict of a check compares them when the script
    has no loss of stepwatch's. Outside a trial it does nothing."""
    session = _session
    if session is not None:
        session.report(value, name, target, higher_is_better)


SEED_ENV = "STEPWATCH_SEED"


def seed(default: int = 0) -> int:
    """The trial's seed (a check's trial i has the same one on both sides): seed your framework and data with it.
    Outside a trial, ``default``."""
    return int(os.environ.get(SEED_ENV, default))


def step(examples: int) -> None:
    """One step is done (call it at the end of each step), for loops that do not iterate over one loader."""
    session = _session
    if session is None:
        return
    session.examples(examples)
    session.claim("step")
    session.mark()


def keras_callback(examples_per_step: int) -> Any:
    """A Keras callback for ``model.fit(..., callbacks=[...])`` that marks each batch as a step; ``fit`` stops when
    the trial's steps are done. Outside a trial it does nothing."""
    import keras

    session = _session

    class StepwatchSteps(keras.callbacks.Callback):
        # Marks at the start of the next batch (async_safe: Keras adds no sync per step for it), and at the end.
        async_safe = True

        def __init__(self) -> None:
            super().__init__()
            self.begun = 0

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if session is None:
                return
            self.begun += 1
            if self.begun == 1:
                session.examples(examples_per_step)
                session.claim("keras_callback")
            else:
                session.mark()

        def on_train_end(self, logs: Any = None) -> None:
            if session is not None and self.begun:
                session.mark()

    return StepwatchSteps()
