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

``--young`` runs young histories instead, 3 to 30 nights, as every new installation and every new series starts:
per shape and length, how often a 10% step and a model made 4x slower (-75%), 3 nights before the end and 2 or
more after the start, are confirmed (and seen at all: suspected or confirmed), and how often a quiet young series
confirms a change that is not there.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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
    detection = detect_changes(np.median(trials, axis=1), THRESHOLD, True, trials=trials if all_trials else None)
    return [c.index for c in detection.changes if c.status == "confirmed"]


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
            changes = detect_changes(np.median(trials, axis=1), THRESHOLD, True, trials=trials).changes
            near = [c for c in changes if abs(c.index - at) <= TOLERANCE]
            confirmed += any(c.status == "confirmed" for c in near)
            seen += bool(near)
        found[step] = (confirmed / series, seen / series)
    alarms = 0
    for _ in range(series):
        trials, _ = young_history(rng, shape, nights, 0.0)
        changes = detect_changes(np.median(trials, axis=1), THRESHOLD, True, trials=trials).changes
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000, help="series per shape and condition")
    parser.add_argument("--nights", type=int, default=90)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES), metavar="SHAPE")
    parser.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES), metavar="RULE")
    parser.add_argument("--grid", choices=["bimodal-hosts"], help="run the grid of bimodal hosts instead")
    parser.add_argument("--young", action="store_true", help="young histories of 3 to 30 nights instead")
    args = parser.parse_args()
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
