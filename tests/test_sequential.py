"""The sequential design of a check (``collector.analysis.sequential``): its looks and levels, that an A/A stays
at or below its nominal rate however often it looks, that it finds what a fixed design misses, and how a trial's
cost sets its steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepwatch.collector.analysis import sequential, stats
from stepwatch.collector.config import TRIALS
from stepwatch.collector.outcomes import IMPROVEMENT, INCONCLUSIVE, REGRESSION
from stepwatch.collector.store.database import StoreReader
from tests.conftest import commit, stepwatch
from tests.test_code_check import TRAIN
from tests.test_code_check import team as team_repository  # noqa: F401 (a fixture: the team's repository)

ALARMS = (REGRESSION, IMPROVEMENT)


def test_a_design_grows_its_looks_and_splits_alpha_over_them() -> None:
    design = sequential.Design.of(TRIALS, sequential.MAX_TRIALS)
    assert design.looks == (3, 5, 8, 12) and design.level == pytest.approx(0.0125)
    assert "3, 5, 8 and 12 trials per side, each look at α = 0.0125 (98.75% intervals; 0.05 over 4 looks)" == (
        design.text()
    )
    fixed = sequential.Design.of(5, 5)  # --trials 5 --max-trials 5: one look, the fixed design of before
    assert fixed.looks == (5,) and fixed.level == stats.ALPHA and "one look at α = 0.05" in fixed.text()
    assert sequential.Design.of(2, 3).looks == (2, 3)


def trials(rng: np.random.Generator, checks: int, n: int, cv: float, ratio: float = 1.0) -> np.ndarray:
    return 100.0 * ratio * np.exp(rng.normal(0.0, cv, (checks, n)))


def rates(design: sequential.Design, base: np.ndarray, cand: np.ndarray, threshold: float) -> dict[str, float]:
    calls = [sequential.replay(a, b, design, threshold)[0] for a, b in zip(base, cand)]
    return {call: calls.count(call) / len(calls) for call in set(calls)}


def test_an_aa_raises_no_more_false_alarms_than_alpha_however_often_the_check_looks() -> None:
    """Optional stopping, measured: with a threshold of 0 every significant difference is an alarm. Testing at 0.05
    at each of four looks raises about twice the nominal rate; spending 0.05 over the looks stays within it."""
    rng = np.random.default_rng(7)
    base, cand = trials(rng, 1500, 12, 0.03), trials(rng, 1500, 12, 0.03)
    spent = sequential.Design.of(3, 12)
    naive = sequential.Design(spent.looks, alpha=stats.ALPHA * len(spent.looks))  # 0.05 at every look
    at_each = sum(rates(naive, base, cand, 0.0).get(a, 0) for a in ALARMS)
    sequential_rate = sum(rates(spent, base, cand, 0.0).get(a, 0) for a in ALARMS)
    assert sequential_rate <= stats.ALPHA, sequential_rate
    assert at_each > 1.5 * stats.ALPHA, at_each  # why the alpha is spent, not reused


def test_a_noisy_runner_gets_more_trials_and_finds_what_three_or_five_miss() -> None:
    """A 10% slowdown at 5% trial-to-trial noise (a loaded shared runner): three or five trials a side at 0.05 call it
    a regression only some of the time (about 32% and 70%); the sequential check, adding rounds while it cannot
    tell, nearly always (about 97%)."""
    rng = np.random.default_rng(11)
    base, cand = trials(rng, 400, 12, 0.05), trials(rng, 400, 12, 0.05, 1 / 1.1)
    found = {n: rates(sequential.Design.of(n, n), base, cand, 0.05).get(REGRESSION, 0) for n in (3, 5)}
    design = sequential.Design.of(3, 12)
    sequential_found = rates(design, base, cand, 0.05).get(REGRESSION, 0)
    assert found[3] < 0.5 and found[5] < 0.8 and sequential_found >= 0.95, (found, sequential_found)
    # and it stops early where the change is plain: a quiet runner decides at the first look
    quiet = [sequential.replay(a, b, design, 0.05) for a, b in zip(trials(rng, 50, 12, 0.01),
                                                                    trials(rng, 50, 12, 0.01, 1 / 1.1))]  # fmt: skip
    assert {call for call, _ in quiet} == {REGRESSION} and {n for _, n in quiet} == {3}


def test_a_replay_ends_where_its_values_end() -> None:
    design = sequential.Design.of(3, 12)
    assert sequential.replay([100.0, 101.0, 99.0, 100.0], [100.0, 90.0, 110.0, 100.0], design, 0.05) == (
        INCONCLUSIVE, 4
    )  # fmt: skip


def row(measured: float, wall: float, profile: float = 0.0) -> dict:
    return {"status": "ok", "measured_s": measured, "wall_s": wall, "extras": {"profile_s": profile}}


def test_a_trial_whose_start_up_dominates_measures_more_steps_within_the_bound() -> None:
    # start-up and compiling 5x the measured steps: 4x the steps (the bound), a multiple of the window
    assert sequential.steps_for(20, 10, [row(1.0, 6.0), row(1.2, 6.1)]) == 20 * sequential.MAX_STEPS_FACTOR
    assert sequential.steps_for(30, 10, [row(1.0, 2.5)]) == 60  # 1.5x the rest: twice the steps
    assert sequential.steps_for(20, 10, [row(3.0, 4.0)]) == 20  # measured steps dominate already
    assert sequential.steps_for(20, 10, [row(1.0, 2.0, profile=10.0)]) == 20  # a profile is not start-up
    assert sequential.steps_for(20, 10, [{"status": "crash"}]) == 20
    # what one more round would then take: per config, its sides' mean rest plus its measured part scaled
    rows = {"k": [row(1.0, 6.0), row(1.0, 6.0)]}
    assert sequential.round_seconds(rows, {"k": 4.0}, 2) == pytest.approx(2 * (5.0 + 4.0))


def test_a_calibrated_runner_starts_with_as_many_trials_as_its_noise_needs() -> None:
    design = sequential.Design.of(3, 12)
    assert sequential.first_look(None, None, 0.05, design) == 3  # nothing known: the design's first
    assert sequential.first_look(0.005, None, 0.05, design) == 3  # a quiet runner: three see 5%
    noisy = sequential.first_look(0.03, None, 0.05, design)
    assert 3 < noisy <= 12
    # where the environments alone differ by more than the threshold, more trials cannot help: the design's first
    assert sequential.first_look(0.03, stats.Between(0.1**2, 3.0), 0.05, design) == 3


# The head's loop fails its first trial once, after a step (so it is no broken workload, and later trials run): at
# the first look the head has one ok trial, too few for an interval, so the check must look again.
FAILS_ONCE = (
    TRAIN.replace("import torch\n", "import pathlib\n\nimport torch\n", 1)
    .replace(
        "    optimizer.zero_grad()\n",
        "    seen.append(x)\n"
        "    if len(seen) == 3 and not once.exists():  # two steps are done: a failed trial, not a broken workload\n"
        "        once.write_text('')\n"
        "        raise RuntimeError('the first trial fails once')\n"
        "    optimizer.zero_grad()\n",
    )
    .replace("\n\nfor x, y in", "\n\nonce, seen = pathlib.Path(__file__).with_name('.failed-once'), []\nfor x, y in")
)


@pytest.mark.large
def test_a_check_that_cannot_tell_at_its_first_look_adds_a_round_with_more_steps_and_says_why_it_stopped(
    team_repository: Path,  # noqa: F811 (the fixture imported above)
) -> None:
    team = team_repository
    assert FAILS_ONCE != TRAIN
    commit(team, "A loop that fails once", {"train.py": FAILS_ONCE})
    done = stepwatch("code-check", "--trials", "2", "--max-trials", "3", "--models", "train.py", cwd=team)
    assert done.returncode in (0, 1, 3, 4), done.stderr[-3000:]
    assert "sequential: 2 and 3 trials per side, each look at α = 0.025 (97.5% intervals; 0.05 over 2 looks)" in (
        done.stderr
    )  # fmt: skip
    assert "look 1: 2 trials per side, " in done.stderr and "look 2: 3 trials per side, " in done.stderr
    [folder] = (team / "data" / "code-check").iterdir()
    report = (folder / "report.md").read_text()
    [rounds] = [line for line in report.splitlines() if line.startswith("**Rounds**: ")]
    assert rounds.startswith("**Rounds**: 2 look(s), at 2 -> 3 trials per side; stopped because "), rounds
    assert rounds.endswith(("every verdict asked for was decided.", "it reached the design's last look.")), rounds
    assert "| 97.5% CI |" in report
    # Start-up outweighed 20 steps of this small loop, so its later trials measured more (the series is the same).
    assert "After the first look, `train.py" in report and "measured 80 steps a trial instead of 20" in report
    con = StoreReader(team / "data" / "code-check.duckdb").connection()
    ran = con.sql("SELECT label, trial, status, measured_steps FROM runs ORDER BY 1, 2").fetchall()
    con.close()
    assert ran == [
        ("baseline", 0, "ok", 20),
        ("baseline", 1, "ok", 20),
        ("baseline", 2, "ok", 80),
        ("candidate", 0, "crash", 0),
        ("candidate", 1, "ok", 20),
        ("candidate", 2, "ok", 80),
    ], ran
