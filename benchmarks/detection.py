"""Recall and false alarms of ``stepwatch detect`` on simulated nightly history with the noise shapes real
runners produce, side by side with Apache Otava's change-point detection and two naive rules.

Every series is N nights of 3 trials. Each shape sets a trial's noise; on every shape 5% of nights are
outlier nights (all trials of the night 8-25% down, or up one time in five). The step series carry one step
of 3, 5 or 10% (down or up) at least 10 nights from the end. Shapes:

- ``2% noise``: log-normal trial noise, 2% (a quiet runner).
- ``5% noise``: log-normal trial noise, 5% (a busy shared runner).
- ``heavy tails``: Student-t (3 degrees of freedom) log noise at scale 2%: now and then a trial far out.
- ``bimodal processes``: each trial lands on a fast or a slow mode 6% apart (even odds) plus 2% noise,
  as processes on a 2-core runner do.
- ``bimodal hosts``: each night runs on a fast or a slow host 6% apart (30% slow), all of its trials alike,
  plus 2% noise, as pools of cloud runners do.

``--grid bimodal-hosts`` runs the bimodal-hosts shape over a grid instead: mode separations of 3, 5, 7.5 and
10% by slow-host shares of 10, 20, 30 and 50%, each cell with its false alarms and its recall of 10% steps.

A rule *finds* a step if it flags a night within 2 nights of it; a *false alarm* is a series without a step
where the rule flags anything. ``stepwatch detect`` runs as ``detect`` does, on every trial of each night;
``(medians)`` gives it the nights' medians alone. Otava (``compute_change_points``, the E-divisive means
and t-test of Hunter) runs on the nights' medians, at its defaults (window 50, p < 0.001) and with its
``min_magnitude`` set to the 3% threshold stepwatch uses.

    .venv/bin/pip install --no-deps apache-otava==0.8.0   # its analysis needs only numpy and scipy
    .venv/bin/python benchmarks/detection.py [--series 1000] [--nights 90] [--seed 0] [--shapes ...]
    .venv/bin/python benchmarks/detection.py --grid bimodal-hosts [--series 300] [--rules "stepwatch detect" otava]
    .venv/bin/python benchmarks/detection.py --young [--series 200]
    .venv/bin/python benchmarks/detection.py --noisy-start [--series 200] [--spread half-normal]
    .venv/bin/python benchmarks/detection.py --nightly [--series 200]
    .venv/bin/python benchmarks/detection.py --verify [--series 200]

``--young`` runs young histories instead, 3 to 30 nights, as every new installation and every new series starts:
per shape and length, how often a 10% step and a model made 4x slower (-75%), 3 nights before the end and 2 or
more after the start, are confirmed (and seen at all: suspected or confirmed), and how often a quiet young series
confirms a change that is not there.

``--noisy-start`` runs young histories whose first two nights disagree, as a new installation's first nights do
(a cold runner, another host): one of the first two nights (either) is off the level by a factor up to 3x, up or
down, drawn log-uniformly (``--spread log-uniform``) or mostly near the level with 3x at its 99th percentile
(``--spread half-normal``), and 2 or 3 trials a night, on every shape. A drop of 10% to 99% starts right
after the two noisy nights (night 2), or after 3 quiet nights more (night 5). Each history is judged at every
length from its step to 30 nights, as the nightly judges it night after night: *by the k-th slow night* means a
confirmed change within 2 nights of the step at that night and at every later one (never withdrawn). Quiet
histories (the same starts, no step) count as a false alarm if anything is confirmed at any length of 3 to 30.

``--verify`` runs the same first month with a check deciding (``stepwatch alerts verify``): the history nominates (with
the last night's nomination) and each nomination gets a check modelled as ``check.measure`` runs one, both sides on
one runner (the shape's trial noise, no night offset), 3 to 12 trials a side; an issue opens on a reproduced
regression. Beside it, the history-only rule (a confirmed regression) in the same run, and the minutes the checks cost
a night at a smoke-suite trial's 15 s.

``--nightly`` runs a team's first month: 20 nights of 2 trials on kinds of machine whose nights move (a pool of hosts,
two hosts, faster weekends, heavy tails, a cold first night), judged every night from the 4th with the nights the
judgment before confirmed, alone and with the variance of a night's offset pooled with 8 other series of its suite
(as ``detect`` judges them): quiet alarms, a step's recall by its 3rd and 6th slow night, and whether a confirmed
step stays confirmed on its night.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwatch.collector.analysis import latest, sequential, stats, verification  # noqa: E402
from stepwatch.collector.analysis.changepoints import detect_changes  # noqa: E402

STEPS = (0.03, 0.05, 0.10)
THRESHOLD = 0.03
TOLERANCE = 2
TRIALS = 3


def _lognormal(sigma: float) -> Callable[[np.random.Generator, int], np.ndarray]:
    return lambda rng, nights: sigma * rng.standard_normal((nights, TRIALS))


def _heavy(rng: np.random.Generator, nights: int) -> np.ndarray:
    return 0.02 * rng.standard_t(3, (nights, TRIALS))


def _bimodal_processes(rng: np.random.Generator, nights: int) -> np.ndarray:
    return np.log(np.where(rng.random((nights, TRIALS)) < 0.5, 0.94, 1.0)) + 0.02 * rng.standard_normal(
        (nights, TRIALS)
    )


def _bimodal_hosts(rng: np.random.Generator, nights: int) -> np.ndarray:
    host = np.log(np.where(rng.random((nights, 1)) < 0.3, 0.94, 1.0))
    return host + 0.02 * rng.standard_normal((nights, TRIALS))


def bimodal_hosts(separation: float, slow_share: float) -> Callable[[np.random.Generator, int], np.ndarray]:
    """Each night on a fast or a slow host ``separation`` apart (``slow_share`` of nights slow), plus 2% noise."""

    def draw(rng: np.random.Generator, nights: int) -> np.ndarray:
        host = np.log(np.where(rng.random((nights, 1)) < slow_share, 1 - separation, 1.0))
        return host + 0.02 * rng.standard_normal((nights, TRIALS))

    return draw


GRID_SEPARATIONS = (0.03, 0.05, 0.075, 0.10)
GRID_SLOW_SHARES = (0.10, 0.20, 0.30, 0.50)
GRID_STEP = 0.10

SHAPES: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "2% noise": _lognormal(0.02),
    "5% noise": _lognormal(0.05),
    "heavy tails": _heavy,
    "bimodal processes": _bimodal_processes,
    "bimodal hosts": _bimodal_hosts,
}


def simulate(rng: np.random.Generator, shape: str, nights: int, step: float) -> tuple[np.ndarray, int | None]:
    """Trials (nights x 3) of one series, and the night its step starts (None without a step)."""
    trials = np.exp(SHAPES[shape](rng, nights)) * 1000
    bad = rng.random(nights) < 0.05
    sizes = rng.uniform(0.08, 0.25, bad.sum()) * np.where(rng.random(bad.sum()) < 0.8, -1, 1)
    trials[bad] *= (1 + sizes)[:, None]
    if not step:
        return trials, None
    at = int(rng.integers(30, nights - 10))
    trials[at:] *= 1 + step * rng.choice([-1, 1])
    return trials, at


def _confirmed(trials: np.ndarray, all_trials: bool) -> list[int]:
    """The confirmed nights: as ``detect`` judges a series alone on its runner (every trial, a night's offset from
    its own nights), or on the nights' medians alone."""
    changes = judged(trials) if all_trials else detect_changes(np.median(trials, axis=1), THRESHOLD, True).changes
    return [c.index for c in changes if c.status == "confirmed"]


def rule_detect(trials: np.ndarray) -> list[int]:
    return _confirmed(trials, True)


def rule_detect_medians(trials: np.ndarray) -> list[int]:
    return _confirmed(trials, False)


def _otava(trials: np.ndarray, min_magnitude: float) -> list[int]:
    from otava.analysis import compute_change_points  # noqa: PLC0415 (optional: installed for this benchmark)

    series = [float(v) for v in np.median(trials, axis=1)]  # Otava wants a list: an array raises ValueError
    points, _ = compute_change_points(series, window_len=50, max_pvalue=0.001, min_magnitude=min_magnitude)
    return [int(p.index) for p in points]


def rule_otava(trials: np.ndarray) -> list[int]:
    return _otava(trials, 0.0)


def rule_otava_magnitude(trials: np.ndarray) -> list[int]:
    return _otava(trials, THRESHOLD)


def rule_previous(trials: np.ndarray) -> list[int]:
    """Flag a night whose median is more than 5% away from the night before."""
    values = np.median(trials, axis=1)
    return [i for i in range(1, len(values)) if abs(values[i] / values[i - 1] - 1) > 0.05]


def rule_zscore(trials: np.ndarray) -> list[int]:
    """Flag a night whose median is more than 5 standard deviations from the mean of the 30 nights before it."""
    values = np.median(trials, axis=1)
    flags = []
    for i in range(30, len(values)):
        window = values[i - 30 : i]
        sd = window.std(ddof=1)
        if sd > 0 and abs(values[i] - window.mean()) / sd > 5:
            flags.append(i)
    return flags


RULES: dict[str, Callable[[np.ndarray], list[int]]] = {
    "stepwatch detect": rule_detect,
    "stepwatch (medians)": rule_detect_medians,
    "otava": rule_otava,
    "otava, min 3%": rule_otava_magnitude,
    "previous night +-5%": rule_previous,
    "z > 5 over 30 nights": rule_zscore,
}


@dataclass(frozen=True)
class Score:
    shape: str
    rule: str
    recall: dict[float, float]  # step size -> share of its series found
    false_alarms: float
    stray: float
    ms_per_series: float


def score(job: tuple[str, str, dict[float, list[tuple[np.ndarray, int | None]]]]) -> Score:
    shape, name, conditions = job
    rule = RULES[name]
    recall, stray, start = {}, 0, time.perf_counter()
    steps = [s for s in conditions if s]
    for step in steps:
        found = 0
        for trials, at in conditions[step]:
            flags = rule(trials)
            found += any(abs(f - at) <= TOLERANCE for f in flags)
            stray += any(abs(f - at) > TOLERANCE for f in flags)
        recall[step] = found / len(conditions[step])
    alarms = sum(bool(rule(trials)) for trials, _ in conditions[0.0]) / len(conditions[0.0])
    count = sum(len(c) for c in conditions.values())
    elapsed = (time.perf_counter() - start) / count * 1000
    return Score(shape, name, recall, alarms, stray / sum(len(conditions[s]) for s in steps), elapsed)


def grid(args: argparse.Namespace) -> None:
    """The bimodal-hosts grid: per separation and slow share, false alarms and recall of 10% steps per rule."""
    rng = np.random.default_rng(args.seed)
    jobs = []
    for separation in GRID_SEPARATIONS:
        for share in GRID_SLOW_SHARES:
            name = f"{separation:.1%} apart, {share:.0%} slow"
            SHAPES[name] = bimodal_hosts(separation, share)
            conditions = {
                s: [simulate(rng, name, args.nights, s) for _ in range(args.series)] for s in (0.0, GRID_STEP)
            }
            jobs += [(name, rule, conditions) for rule in args.rules]
    print(f"bimodal hosts: {args.series} series per cell and condition, {args.nights} nights of {TRIALS} trials, "
          "2% trial noise, 5% outlier nights\n")  # fmt: skip
    header = f"{'hosts':<22}{'rule':<22}{f'recall {GRID_STEP:.0%}':>11}{'false alarms':>14}{'ms/series':>11}"
    print(header + "\n" + "-" * len(header))
    misses = []
    with multiprocessing.Pool() as pool:
        for result in pool.imap(score, jobs):
            recall = result.recall[GRID_STEP]
            print(f"{result.shape:<22}{result.rule:<22}{recall:>11.1%}{result.false_alarms:>14.1%}"
                  f"{result.ms_per_series:>11.1f}", flush=True)  # fmt: skip
            if result.rule == "stepwatch detect" and (result.false_alarms > 0.01 or recall < 0.95):
                misses.append(result.shape)
    print(f"\nGoal for stepwatch detect in every cell: false alarms <= 1%, recall of {GRID_STEP:.0%} steps >= 95%. "
          f"Cells that miss it: {', '.join(misses) or 'none'}.")  # fmt: skip


YOUNG_LENGTHS = range(3, 31)
YOUNG_STEPS = (0.10, -0.75)  # a 10% step either way, and a model made 4x slower
BEFORE, AFTER = 2, 3  # a young step: two nights before it, confirmed after three


def young_history(rng: np.random.Generator, shape: str, nights: int, step: float) -> tuple[np.ndarray, int | None]:
    """A young series (``nights`` in all) of the shape, its step ``AFTER`` nights before its end (so that it can be
    confirmed) and at least ``BEFORE`` nights after its start; None: quiet. No outlier nights are planted: what a
    young history's false alarms are is what its own noise makes of it."""
    trials = np.exp(SHAPES[shape](rng, nights)) * 1000
    if not step:
        return trials, None
    at = nights - AFTER
    trials[at:] *= 1 + (step if step < 0 else step * rng.choice([-1, 1]))
    return trials, at


def young_score(job: tuple[str, int, int, int]) -> tuple[str, int, dict[float, tuple[float, float]], float]:
    """One shape at one length: per step (confirmed, suspected or confirmed) recall, and the quiet series' false
    alarms (anything confirmed)."""
    shape, nights, series, seed = job
    rng = np.random.default_rng([seed, nights, list(SHAPES).index(shape)])
    found = {}
    for step in YOUNG_STEPS if nights >= BEFORE + AFTER else ():
        confirmed = seen = 0
        for _ in range(series):
            trials, at = young_history(rng, shape, nights, step)
            changes = judged(trials)
            near = [c for c in changes if abs(c.index - at) <= TOLERANCE]
            confirmed += any(c.status == "confirmed" for c in near)
            seen += bool(near)
        found[step] = (confirmed / series, seen / series)
    alarms = 0
    for _ in range(series):
        trials, _ = young_history(rng, shape, nights, 0.0)
        changes = judged(trials)
        alarms += any(c.status == "confirmed" for c in changes)
    return shape, nights, found, alarms / series


def young(args: argparse.Namespace) -> None:
    """A young history, 3 to 30 nights: recall of a step 3 nights before the end and the false alarms of quiet
    series, per shape and length."""
    jobs = [(shape, nights, args.series, args.seed) for shape in args.shapes for nights in YOUNG_LENGTHS]
    print(f"young histories: {args.series} series per shape, length and condition, {TRIALS} trials a night, the step "
          f"{AFTER} nights before the end (at least {BEFORE} before it); no outlier nights planted\n")  # fmt: skip
    header = f"{'shape':<19}{'nights':>7}" + "".join(f"{f'{s:+.0%} confirmed':>17}{'(seen)':>8}" for s in YOUNG_STEPS)
    print(header + f"{'false alarms':>14}\n" + "-" * (len(header) + 14))
    worst: dict[str, float] = {}
    with multiprocessing.Pool() as pool:
        for shape, nights, found, alarms in pool.imap(young_score, jobs):
            cells = "".join(f"{found[s][0]:>17.1%}{found[s][1]:>8.1%}" if s in found else f"{'-':>17}{'':>8}"
                            for s in YOUNG_STEPS)  # fmt: skip
            print(f"{shape:<19}{nights:>7}{cells}{alarms:>14.1%}", flush=True)
            worst[shape] = max(worst.get(shape, 0.0), alarms)
    print("\nThe largest false-alarm rate of a quiet young history, per shape: "
          + ", ".join(f"{shape} {rate:.1%}" for shape, rate in worst.items()))  # fmt: skip


NOISY_SIZES = (0.10, 0.25, 0.50, 0.75, 0.90, 0.99)  # drops: the throughput falls to 1 - size
NOISY_AT = (2, 5)  # the step right after the two noisy nights, or after 3 quiet nights more
NOISY_NIGHTS = 30
NOISY_FACTOR = 3.0  # the most the two first nights are apart
# How far the off night is, in log units: evenly up to 3x (as often 2.9x as 1.1x), or mostly near the level with 3x
# at its 99th percentile (capped there).
SPREADS = {
    "log-uniform": lambda rng: rng.uniform(0, math.log(NOISY_FACTOR)),
    "half-normal": lambda rng: min(abs(rng.normal(0, math.log(NOISY_FACTOR) / 2.576)), math.log(NOISY_FACTOR)),
}


def noisy_start(
    rng: np.random.Generator, shape: str, size: float, at: int, spread: str = "log-uniform"
) -> tuple[np.ndarray, bool]:
    """A noisy-start history of ``NOISY_NIGHTS`` nights of 2 or 3 trials: one of the first two nights off by up to
    ``NOISY_FACTOR`` (drawn as ``spread`` says), and a drop of ``size`` from night ``at`` (none if 0); and whether
    the off night was drawn above the new level by more than the threshold (else it lies within or below it, and no
    order can tell the step from a noisy start)."""
    trials = np.exp(SHAPES[shape](rng, NOISY_NIGHTS))[:, : int(rng.integers(2, 4))] * 1000
    off = int(rng.integers(2))
    factor = math.exp(SPREADS[spread](rng) * rng.choice([-1, 1]))
    trials[off] *= factor
    if size:
        trials[at:] *= 1 - size
    return trials, factor > (1 - size) * (1 + THRESHOLD)


def confirmed_from(trials: np.ndarray, at: int | None) -> tuple[int | None, bool]:
    """The first length (nights) from which a confirmed change near ``at`` stands at every later length, and
    whether anything at all was confirmed at some length (for a quiet history: a false alarm)."""
    first, ever = None, False
    for length in range(3 if at is None else at + 1, len(trials) + 1):
        changes = judged(trials[:length])
        hit = any(c.status == "confirmed" and (at is None or abs(c.index - at) <= TOLERANCE) for c in changes)
        ever |= hit
        first = (first if first is not None else length) if hit else None
    return first, ever


def noisy_score(
    job: tuple[str, float, int, int, int, str],
) -> tuple[str, float, int, list[tuple[int | None, bool]], float]:
    """One shape and condition: per history the first length its step stays confirmed from and whether its off
    night lies above the new level (steps), or the share of quiet histories that confirmed anything (``size`` 0)."""
    shape, size, at, series, seed, spread = job
    rng = np.random.default_rng([seed, list(SHAPES).index(shape), int(size * 100), at])
    firsts, alarms = [], 0
    for _ in range(series):
        trials, clear = noisy_start(rng, shape, size, at, spread)
        first, ever = confirmed_from(trials, at if size else None)
        firsts.append((first, clear))
        alarms += ever
    return shape, size, at, firsts, alarms / series


def noisy(args: argparse.Namespace) -> None:
    """Young histories with noisy starts: how soon steps are confirmed for good, and how quiet the quiet ones are."""
    jobs = [(shape, 0.0, 0, args.series, args.seed, args.spread) for shape in args.shapes]
    jobs += [(shape, size, at, args.series, args.seed, args.spread) for shape in args.shapes for at in NOISY_AT
             for size in NOISY_SIZES]  # fmt: skip
    print(
        f"noisy starts: {args.series} histories per shape and condition, {NOISY_NIGHTS} nights of 2-3 trials, "
        f"one of the first two nights off by up to {NOISY_FACTOR:g}x ({args.spread}); a step is judged at every "
        "length from it\n"
    )
    header = f"{'shape':<19}{'step':>6}{'at':>4}" + "".join(f"{f'slow {k}':>9}" for k in (1, 2, 3, 5, 7, 10, 20))
    print(header + f"{'never':>8}{'above: slow 3':>15}\n" + "-" * (len(header) + 23))
    quiet: dict[str, float] = {}
    goals: dict[str, list[str]] = {}
    started = time.perf_counter()
    with multiprocessing.Pool() as pool:
        for shape, size, at, firsts, alarms in pool.imap(noisy_score, jobs):
            if not size:
                quiet[shape] = alarms
                print(f"{shape:<19}{'none':>6}{'':>4}  false alarms (anything confirmed at 3-30 nights): {alarms:.1%}")
                continue
            by = {
                k: sum(f is not None and f <= at + k for f, _ in firsts) / len(firsts) for k in (1, 2, 3, 5, 7, 10, 20)
            }
            never = sum(f is None for f, _ in firsts) / len(firsts)
            above = [f is not None and f <= at + 3 for f, clear in firsts if clear]
            share = f"{sum(above) / len(above):.1%} of {len(above)}" if above else "-"
            print(f"{shape:<19}{-size:>6.0%}{at:>4}" + "".join(f"{by[k]:>9.1%}" for k in by) + f"{never:>8.1%}"
                  + f"{share:>15}", flush=True)  # fmt: skip
            if at == NOISY_AT[0] and size >= 0.5 and by[3] < 0.95:
                goals.setdefault(shape, []).append(f"{-size:.0%} at night {at}: {by[3]:.1%} by the third slow night")
            if at == NOISY_AT[0] and size == 0.10 and by[7] < 0.80:
                goals.setdefault(shape, []).append(f"-10% at night {at}: {by[7]:.1%} by the seventh slow night")
    print(
        "\nslow k: the share of histories whose step is confirmed by its k-th slow night and at every night after; "
        "never: not confirmed for good by night 30. above: slow 3 among the histories whose off night was drawn above "
        "the new level (beyond the threshold): where it lies within or below it, no order tells a step from a noisy "
        "start."
    )
    print("False alarms of quiet histories: " + ", ".join(f"{shape} {rate:.1%}" for shape, rate in quiet.items()))
    for shape, rate in quiet.items():
        if rate > 0.01:
            goals.setdefault(shape, []).append(f"quiet histories confirm something {rate:.1%} of the time")
    print(
        "Goals (>= 50% at night 2 by the third slow night in 95%, -10% by the seventh in 80%, quiet <= 1%) missed: "
        + ("; ".join(f"{shape}: {', '.join(miss)}" for shape, miss in goals.items()) or "none")
        + f" ({time.perf_counter() - started:.0f} s)"
    )


NIGHTLY_NIGHTS = 20  # a team's first month of nights
NIGHTLY_AT = 3  # the step's first night (night 4): three quiet nights before it
NIGHTLY_STEPS = (-0.20, -0.50)
NIGHTLY_TRIALS = 2
SIBLINGS = 8  # the other series of the suite, on the same hosts each night, where the prior is learned from them


def _pool(rng: np.random.Generator, nights: int) -> np.ndarray:
    """A pool of 4 hosts whose speeds spread 4% (drawn once per history), each night on one of them."""
    return rng.normal(0, 0.04, 4)[rng.integers(0, 4, nights)]


def _two_hosts(rng: np.random.Generator, nights: int) -> np.ndarray:
    return np.where(rng.random(nights) < 0.5, math.log(0.90), 0.0)


def _weekends(rng: np.random.Generator, nights: int) -> np.ndarray:
    return np.where((np.arange(nights) + rng.integers(0, 7)) % 7 >= 5, math.log(1.06), 0.0)


def _cold_first(rng: np.random.Generator, nights: int) -> np.ndarray:
    return np.where(np.arange(nights) == 0, math.log(0.75), 0.0)


# Per kind of machine: the offset every series of a suite run shares each night (its host), and each trial's own noise.
NIGHTLY_SHAPES: dict[str, tuple[Callable[[np.random.Generator, int], np.ndarray], Callable]] = {
    "pool of hosts 4%": (_pool, lambda rng, shape: 0.02 * rng.standard_normal(shape)),
    "two hosts 10%": (_two_hosts, lambda rng, shape: 0.02 * rng.standard_normal(shape)),
    "faster weekends": (_weekends, lambda rng, shape: 0.02 * rng.standard_normal(shape)),
    "heavy tails": (lambda rng, nights: np.zeros(nights), lambda rng, shape: 0.02 * rng.standard_t(3, shape)),
    "cold first night": (_cold_first, lambda rng, shape: 0.02 * rng.standard_normal(shape)),
}


def nightly_suite(rng: np.random.Generator, shape: str, step: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """One history (nights x trials) of the shape with ``step`` from ``NIGHTLY_AT`` (0: quiet), and the quiet
    histories of its ``SIBLINGS`` other series, which ran on the same hosts the same nights."""
    hosts, noise = NIGHTLY_SHAPES[shape]
    offsets = hosts(rng, NIGHTLY_NIGHTS)[:, None]
    series = [1000 * np.exp(offsets + noise(rng, (NIGHTLY_NIGHTS, NIGHTLY_TRIALS))) for _ in range(SIBLINGS + 1)]
    series[0][NIGHTLY_AT:] *= 1 + step
    return series[0], series[1:]


def judged(
    trials: np.ndarray, siblings: Sequence[np.ndarray] = (), confirmed: Sequence[int] = (), nominate: bool = False
) -> list:
    """``detect``'s changes of one history (nights x trials) as ``alerts.scan`` judges it: with the variance of a
    night's offset pooled with its ``siblings`` (the other series of its runner), or alone on its runner, with
    ``stats.LONE_RUNNER`` while its nights are few (``latest.night_variances``), and the nights ``confirmed``; with
    ``nominate``, as it judges when a check decides (``--issue-on reproduced``: the last nights' nomination)."""
    logs = [np.log(t) for t in (trials, *siblings)]
    own = [stats.between_nights(list(t)) for t in logs]
    lone = [stats.between_nights(list(t), stats.LONE_RUNNER) for t in logs]
    keys = [str(i) for i in range(len(own))]
    night = latest.night_variances(keys, own, dict.fromkeys(keys, "runner"), None, lone)[0]
    return detect_changes(np.median(trials, axis=1), THRESHOLD, True, trials=trials, night=night,
                          confirmed=confirmed, nominate=nominate).changes  # fmt: skip


def judged_nightly(trials: np.ndarray, siblings: list[np.ndarray] | None) -> list[list[tuple[int, str]]]:
    """The history judged as the nightly judges it, night after night from the 4th: per length, its changes (night,
    status), each judgment given the nights of the alerts confirmed so far (``alerts.record`` keeps a confirmed
    alert open, and moves it with its change), and with ``siblings`` the variance of a night's offset pooled with
    theirs (``latest.night_variances``)."""
    out, held = [], set()
    for length in range(4, NIGHTLY_NIGHTS + 1):
        found = judged(trials[:length], [t[:length] for t in siblings or ()], sorted(held))
        held = (held - {c.moved_from for c in found}) | {c.index for c in found if c.status == "confirmed"}
        out.append([(c.index, c.status) for c in found])
    return out


def nightly_score(job: tuple[str, float, int, int, bool]) -> tuple[str, float, bool, dict[str, float]]:
    """One shape and step (0: quiet), with or without the siblings' prior: what the nightly judgments said."""
    shape, step, series, seed, pooled = job
    rng = np.random.default_rng([seed, list(NIGHTLY_SHAPES).index(shape), int(-step * 100)])
    by3 = by6 = confirmed = stayed = kept_night = alarms = 0
    for _ in range(series):
        trials, siblings = nightly_suite(rng, shape, step)
        judged = judged_nightly(trials, siblings if pooled else None)
        if not step:
            alarms += any(status == "confirmed" for changes in judged for _, status in changes)
            continue
        hits = [[i for i, status in changes if status == "confirmed" and abs(i - NIGHTLY_AT) <= TOLERANCE]
                for changes in judged]  # fmt: skip
        length = lambda k: NIGHTLY_AT + k - 4  # noqa: E731 (the judgment at the k-th slow night)
        by3 += bool(hits[length(3)])
        by6 += bool(hits[length(6)])
        first = next((i for i, h in enumerate(hits) if h), None)
        if first is None:
            continue
        confirmed += 1
        stayed += all(hits[first:])
        kept_night += all(h and h[0] == hits[first][0] for h in hits[first:])
    if not step:
        return shape, step, pooled, {"false alarms": alarms / series}
    return shape, step, pooled, {"by 3rd slow night": by3 / series, "by 6th": by6 / series,
                                 "stays confirmed": stayed / max(confirmed, 1),
                                 "keeps its night": kept_night / max(confirmed, 1)}  # fmt: skip


def nightly(args: argparse.Namespace) -> None:
    """A team's first month: young histories judged night by night, per kind of machine, alone and with the prior
    of their suite's other series."""
    jobs = [(shape, step, args.series, args.seed, pooled) for pooled in (False, True) for shape in NIGHTLY_SHAPES
            for step in (0.0, *NIGHTLY_STEPS)]  # fmt: skip
    print(f"a team's first month: {args.series} histories per kind of machine and step, {NIGHTLY_NIGHTS} nights of "
          f"{NIGHTLY_TRIALS} trials, the step on night {NIGHTLY_AT + 1}, judged every night from the 4th with the "
          f"nights confirmed the night before; 'with its suite': the variance of a night's offset pooled with "
          f"{SIBLINGS} other series on the same hosts\n")  # fmt: skip
    started = time.perf_counter()
    with multiprocessing.Pool() as pool:
        for shape, step, pooled, found in pool.imap(nightly_score, jobs):
            what = "quiet" if not step else f"{step:+.0%}"
            cells = ", ".join(f"{name} {share:.1%}" for name, share in found.items())
            print(f"{'with its suite' if pooled else 'alone':<15}{shape:<19}{what:>6}  {cells}", flush=True)
    print(f"({time.perf_counter() - started:.0f} s)")


# --verify: the history nominates, an interleaved check on one runner decides (``stepwatch alerts verify``).
VERIFY_STEPS = (-0.20, -0.10)
VERIFY_SHAPES: dict[str, tuple[Callable[[np.random.Generator, int], np.ndarray], Callable]] = {
    **NIGHTLY_SHAPES,
    "three hosts 5%": (lambda rng, nights: np.log([1.0, 0.95, 0.9025])[rng.integers(0, 3, nights)],
                       lambda rng, shape: 0.02 * rng.standard_normal(shape)),
    "drift 0.3%/night": (lambda rng, nights: np.arange(nights) * math.log(0.997),
                         lambda rng, shape: 0.02 * rng.standard_normal(shape)),
    "8 series, one host a night": (_pool, lambda rng, shape: 0.02 * rng.standard_normal(shape)),
}  # fmt: skip
SMOKE_TRIAL_MINUTES = 0.25  # a smoke-suite trial on 2 CPU cores (start-up included), for the minutes a check costs


def verify_check(rng: np.random.Generator, true_log: float, noise: Callable, regression: bool) -> tuple[str, int]:
    """A verifying check modelled as ``check.measure`` runs one: both sides' trials interleaved on one runner (the
    shape's trial noise, no night offset: the same host for both), looks of 3, 5, 8 and 12 trials per side, each at
    verification.ALPHA / 4, stopping once decided; the verdict as ``stats.judge`` gives it, beside its A/A's (a
    reproduced change whose A/A raised an alarm is undecided: ``verification.trusted``). Returns the alert's state
    and the trials per side it ran."""
    design = sequential.Design.of(3, sequential.MAX_TRIALS, verification.ALPHA)
    a, aa = noise(rng, (design.looks[-1],)), noise(rng, (design.looks[-1],))
    b = true_log + noise(rng, (design.looks[-1],))
    for n in design.looks:
        (_, _, said), (_, _, quiet) = stats.judge(
            [(stats.Side.of_logs(a[:n]), stats.Side.of_logs(b[:n])), (stats.Side.of_logs(a[:n]),
             stats.Side.of_logs(aa[:n]))], [THRESHOLD] * 2, [True] * 2, alpha=design.level,
        )  # fmt: skip
        if said != "inconclusive":
            break
    return verification.trusted(verification.state_of(said, regression), verification.aa_text(quiet)), n


def verify_history(job: tuple[str, float, int, int]) -> tuple[str, float, dict[str, float]]:
    """One shape and step (0: quiet): every night from the 4th, detect (lone prior, or pooled with the suite's other
    series on its shared hosts) with and without nomination; each new nomination (largest first, at most
    ``alerts.MOST`` a night, never the same night twice: a change that moves has new sides) gets a check of the
    commits either side of it (each night a new commit: the true ratio is the step where the sides straddle it, and
    the drift's), then, where that does not reproduce it, from ``verification.WIDEN_NIGHTS`` nights earlier, and a
    reproduced one is bisected over the nights' commits as ``verification.first_slow`` bisects (each probe a check).
    An issue opens on a reproduced regression (after) or a confirmed one (before: the history alone)."""
    shape, step, series, seed = job
    rng = np.random.default_rng([seed, list(VERIFY_SHAPES).index(shape), int(-step * 100)])
    checks = np.random.default_rng([seed, list(VERIFY_SHAPES).index(shape), int(-step * 100), 1])  # apart: the same
    hosts, noise = VERIFY_SHAPES[shape]  # histories whatever the checks draw
    drift = math.log(0.997) if shape.startswith("drift") else 0.0
    suite = shape.startswith("8 series")
    quiet_issue = quiet_before = by2 = by3 = named = before_by6 = 0
    minutes: list[float] = []
    for _ in range(series):
        offsets = hosts(rng, NIGHTLY_NIGHTS)[:, None]
        histories = [1000 * np.exp(offsets + noise(rng, (NIGHTLY_NIGHTS, NIGHTLY_TRIALS)))
                     for _ in range(SIBLINGS + 1 if suite else 1)]  # fmt: skip
        if step:
            histories[0][NIGHTLY_AT:] *= 1 + step
        verified: list[int] = []
        issue_night = before_night = None
        spent = 0.0
        for length in range(3, NIGHTLY_NIGHTS + 1):
            trials = histories[0][:length]
            siblings = [h[:length] for h in histories[1:]]
            lone_or_suite = siblings if suite else ()
            if before_night is None and any(c.status == "confirmed" and c.regression
                                            for c in judged(trials, lone_or_suite)):  # fmt: skip
                before_night = length - 1
            found = judged(trials, lone_or_suite, nominate=True)
            new = [c for c in found if c.regression and c.index not in verified]  # a moved change: its new sides
            for change in sorted(new, key=lambda c: math.log(c.ratio))[: verify_most()]:
                verified.append(change.index)

                def measured(base: int, head: int, aa: bool = True) -> str:
                    """A check of night ``base``'s commit against night ``head``'s; its cost added."""
                    nonlocal spent
                    moved = step if step and base < NIGHTLY_AT <= head else 0.0
                    state, n = verify_check(checks, math.log1p(moved) + drift * (head - base), noise, True)
                    spent += (3 if aa else 2) * n * SMOKE_TRIAL_MINUTES  # both sides, and the A/A
                    return state

                base, head = change.index - 1, change.index
                state = measured(base, head)
                wider = max(base - verification.WIDEN_NIGHTS, 0)
                if state == "not reproduced" and wider < base:  # the history may place a change late
                    base, state = wider, measured(wider, head)
                if state != "reproduced" or issue_night is not None:
                    continue
                commits = list(range(base + 1, head + 1))  # a commit a night: the bisect's probes, no A/A
                found, _, _ = verification.first_slow(
                    commits, lambda c, b=base: {"reproduced": True, "not reproduced": False}.get(measured(b, c, False))
                )
                issue_night, named_step = length - 1, found == NIGHTLY_AT
        minutes.append(spent / (NIGHTLY_NIGHTS - 3))
        if not step:
            quiet_issue += issue_night is not None
            quiet_before += before_night is not None
            continue
        slow = lambda k: NIGHTLY_AT + k - 1  # noqa: E731 (the k-th slow night's index)
        hit = issue_night is not None and named_step
        by2 += hit and issue_night <= slow(2)
        by3 += hit and issue_night <= slow(3)
        named += hit
        before_by6 += before_night is not None and before_night <= slow(6)
    out = {}
    if not step:
        out = {"issues on quiet, after": quiet_issue / series, "before (history alone)": quiet_before / series,
               "check minutes a night, mean": float(np.mean(minutes)), "p95": float(np.percentile(minutes, 95))}
    else:
        out = {"named by 2nd slow night": by2 / series, "by 3rd": by3 / series,
               "before (history alone, by 6th)": before_by6 / series}
    return shape, step, out  # fmt: skip


def verify_most() -> int:
    from stepwatch.collector.cli.alerts import MOST

    return MOST


def verify(args: argparse.Namespace) -> None:
    """The history nominates, a check decides: issues opened on quiet histories and steps named by their night,
    per shape, beside the history-only rule, and the minutes the checks cost."""
    jobs = [(shape, step, args.series, args.seed) for shape in VERIFY_SHAPES for step in (0.0, *VERIFY_STEPS)]
    print(f"the history nominates, a check decides: {args.series} histories per shape and step, {NIGHTLY_NIGHTS} "
          f"nights of {NIGHTLY_TRIALS} trials, the step on night {NIGHTLY_AT + 1}, each night a new commit; a check "
          f"interleaves both sides on one runner (the shape's trial noise, no night offset), 3 to 12 trials a side, "
          f"with an A/A; minutes at {SMOKE_TRIAL_MINUTES} min a trial\n")  # fmt: skip
    started = time.perf_counter()
    with multiprocessing.Pool() as pool:
        for shape, step, found in pool.imap(verify_history, jobs):
            what = "quiet" if not step else f"{step:+.0%}"
            cells = ", ".join(f"{name} {share:.1f}" if "minutes" in name or name == "p95" else f"{name} {share:.1%}"
                              for name, share in found.items())  # fmt: skip
            print(f"{shape:<28}{what:>6}  {cells}", flush=True)
    print("Goals: issues on quiet <= 1%, -20% named by its 2nd slow night >= 95%, -10% by its 3rd >= 80% "
          f"({time.perf_counter() - started:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000, help="series per shape and condition")
    parser.add_argument("--nights", type=int, default=90)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES), metavar="SHAPE")
    parser.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES), metavar="RULE")
    parser.add_argument("--grid", choices=["bimodal-hosts"], help="run the grid of bimodal hosts instead")
    parser.add_argument("--young", action="store_true", help="young histories of 3 to 30 nights instead")
    parser.add_argument("--noisy-start", action="store_true", help="young histories whose first nights disagree")
    parser.add_argument("--nightly", action="store_true", help="a team's first month, judged night by night")
    parser.add_argument("--verify", action="store_true", help="the history nominates, a modelled check decides")
    parser.add_argument("--spread", choices=list(SPREADS), default="log-uniform",
                        help="with --noisy-start: how the off night's distance is drawn")  # fmt: skip
    args = parser.parse_args()
    if args.verify:
        verify(args)
        return
    if args.nightly:
        nightly(args)
        return
    if args.noisy_start:
        noisy(args)
        return
    if args.grid:
        grid(args)
        return
    if args.young:
        young(args)
        return

    rng = np.random.default_rng(args.seed)
    jobs = []
    for shape in args.shapes:
        conditions = {s: [simulate(rng, shape, args.nights, s) for _ in range(args.series)] for s in (0.0, *STEPS)}
        jobs += [(shape, name, conditions) for name in args.rules]
    print(
        f"{args.series} series per shape and condition, {args.nights} nights of {TRIALS} trials, 5% outlier nights; "
        f"found = flagged within {TOLERANCE} nights of the step\n"
    )
    header = f"{'shape':<19}{'rule':<22}" + "".join(f"{f'{s:.0%} step':>10}" for s in STEPS)
    header += f"{'false alarms':>14}{'stray':>8}{'ms/series':>11}"
    print(header + "\n" + "-" * len(header))
    with multiprocessing.Pool() as pool:
        for i, result in enumerate(pool.imap(score, jobs)):
            row = f"{result.shape:<19}{result.rule:<22}" + "".join(f"{result.recall[s]:>10.1%}" for s in STEPS)
            print(row + f"{result.false_alarms:>14.1%}{result.stray:>8.1%}{result.ms_per_series:>11.1f}", flush=True)
            if (i + 1) % len(args.rules) == 0 and i + 1 < len(jobs):
                print()
    print(
        "\nColumns n% step: recall of steps of that size. stray: step series where the rule also flagged a night "
        "away from the step.\nGoals for stepwatch detect on every shape: false alarms <= 1%, recall of 10% steps "
        ">= 95%."
    )


if __name__ == "__main__":
    main()
