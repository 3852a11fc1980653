"""``stepwatch bisect``: the resolver's grouping, the search, and a real bisect end to end.

The end-to-end bisect runs on small pure-Python packages this test builds as local wheels: several move
between the good and the bad side (one version bump, one removal, and a coupled pair whose versions each
require the other's), and one version of the coupled pair plants a measurable effect: a ``.pth`` file that
holds 100 MB in every Python process of its environment, a trial's included, so its peak memory rises. The
side environments are built on top of this interpreter's packages (``--reuse-site-packages``), with
``--no-index``: pip's resolver and the trials are real, nothing is downloaded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stepwatch.collector.analysis import stats
from stepwatch.collector.environments import packages, virtualenvs
from stepwatch.collector.environments.packages import Change, Needs
from stepwatch.collector.outcomes import CLEARS, INCONCLUSIVE, REPRODUCES, SKIPPED
from stepwatch.collector.output.bisect import bisect_headline
from stepwatch.collector.store.database import open_store
from stepwatch.collector.workflows import search as searching
from stepwatch.collector.workflows.bisect import Step
from stepwatch.collector.workflows.search import Probe
from tests.conftest import stepwatch
from tests.wheels import wheel

SMALL = ("--models", "bilstm", "--xla", "off", "--precision", "fp32", "--steps", "20", "--warmup", "20")


# The stand-ins. The bad side bumps swt-alpha and swt-beta, drops swt-legacy, and moves the coupled pair
# swt-core / swt-plugin (each version of the plugin requires the same major of the core; the new core needs
# swt-beta 1.1, so it is searched after swt-beta). swt-core 2.0 plants the effect.
GOOD = "swt-alpha==1.0 swt-beta==1.0 swt-core==1.0 swt-plugin==1.0 swt-legacy==1.0"
BAD = "swt-alpha==2.0 swt-beta==1.1 swt-core==2.0 swt-plugin==2.0"


def build_wheels(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, version in (("swt-alpha", "1.0"), ("swt-alpha", "2.0"), ("swt-beta", "1.0"), ("swt-beta", "1.1"),
                          ("swt-legacy", "1.0")):  # fmt: skip
        wheel(folder, name, version)
    wheel(folder, "swt-core", "1.0")
    wheel(folder, "swt-core", "2.0", requires=("swt-beta>=1.1",), planted=True)
    wheel(folder, "swt-plugin", "1.0", requires=("swt-core<2",))
    wheel(folder, "swt-plugin", "2.0", requires=("swt-core>=2",))
    return folder


def test_changes_and_pins_cover_versions_additions_and_removals() -> None:
    good = {"a": "1", "b": "1", "gone": "3", "pip": "23", "same": "5"}
    bad = {"a": "2", "b": "1", "new": "4", "pip": "24", "same": "5"}
    found = packages.changes(good, bad)
    assert [c.text() for c in found] == ["a 1 -> 2", "gone 3 (removed)", "new 4 (added)"]
    applied = {Change("gone", "3", None), Change("new", None, "4")}
    assert packages.pins(good, applied) == ("a==1", "b==1", "new==4", "same==5")


def test_the_conflict_names_come_from_pip_own_words() -> None:
    output = (
        "ERROR: Cannot install h5py==3.16.0, keras==3.15.1 and tensorflow==2.21.0 because these package versions "
        "have conflicting dependencies.\n\nThe conflict is caused by:\n    The user requested h5py==3.16.0\n"
        "    keras 3.15.1 depends on h5py\n    tensorflow 2.21.0 depends on h5py<3.15.0 and >=3.11.0\n"
    )
    assert packages.conflict_names(output) == {"h5py", "keras", "tensorflow"}


def _needs(change: Change, *others: Change, reason: str = "") -> Needs:
    return Needs(change, frozenset({change, *others}), reason)


def test_groups_put_what_needs_each_other_together_and_after_what_it_needs() -> None:
    h5py, tf = Change("h5py", "3.16", "3.14"), Change("tensorflow", "2.20", "2.21")
    text, board = Change("tensorflow-text", "2.20", "2.21"), Change("tensorboard", "2.20", None)
    ordered = packages.groups([
        _needs(h5py), _needs(tf, h5py, text), _needs(text, tf), _needs(board, tf),
    ])  # fmt: skip
    assert [g.changes for g in ordered] == [(h5py,), (tf, text), (board,)]
    assert ordered[1].closure == {h5py, tf, text}  # the pair needs h5py (transitively, through tensorflow-text too)
    assert ordered[2].closure == {h5py, tf, text, board}
    for k in range(len(ordered) + 1):  # every prefix holds everything its groups need
        applied = packages.prefix(ordered, k)
        assert all(g.closure <= applied for g in ordered[:k])


def _measure_planted(culprit: set[Change], log: list[frozenset[Change]], unbuildable: frozenset = frozenset()):
    def measure(applied: frozenset[Change], why: str) -> Probe:
        log.append(applied)
        if applied in unbuildable:
            return Probe(applied, SKIPPED, "cannot install")
        return Probe(applied, REPRODUCES if culprit <= applied else CLEARS)

    return measure


def test_the_search_halves_then_measures_the_culprit_alone() -> None:
    units = [Change(name, "1", "2") for name in "abcdefgh"]
    ordered = packages.groups([_needs(c) for c in units])
    log: list[frozenset[Change]] = []
    found = searching.search(ordered, _measure_planted({units[5]}, log))
    assert found.culprit is not None and found.culprit.changes == (units[5],)
    assert len(log) == 4  # three halvings of eight groups, then f alone
    assert found.culprit_alone is not None and found.culprit_alone.applied == {units[5]}
    assert found.cleared == set(units[:5]) and found.unneeded == set(units[6:])


def test_a_culprit_that_needs_company_is_reported_with_it() -> None:
    units = [Change(name, "1", "2") for name in "abcd"]
    ordered = packages.groups([_needs(c) for c in units])
    found = searching.search(ordered, _measure_planted({units[0], units[2]}, []))
    assert found.culprit is not None and found.culprit.changes == (units[2],)
    assert found.together == {units[0], units[1], units[2]}  # c alone clears: it needs a (and b came along)


def test_a_step_that_cannot_be_built_is_skipped_for_its_neighbour() -> None:
    units = [Change(name, "1", "2") for name in "abcd"]
    ordered = packages.groups([_needs(c) for c in units])
    log: list[frozenset[Change]] = []
    found = searching.search(ordered, _measure_planted({units[3]}, log, frozenset({packages.prefix(ordered, 2)})))
    assert log[0] == packages.prefix(ordered, 2) and log[1] == packages.prefix(ordered, 3)
    assert found.culprit is not None and found.culprit.changes == (units[3],)


def test_an_inconclusive_step_stops_the_search() -> None:
    units = [Change(name, "1", "2") for name in "abcd"]
    ordered = packages.groups([_needs(c) for c in units])
    found = searching.search(ordered, lambda applied, why: Probe(applied, INCONCLUSIVE))
    assert found.stopped and found.culprit is None


def test_ends_that_do_not_reproduce_are_not_searched_and_say_why() -> None:
    """The headline of a bisect whose first step (the two ends, measured as an upgrade check) shows no regression,
    or cannot tell, or could not run: no search, and the reason (a real one: test_an_upgrade_without_...)."""

    class Ended:
        def __init__(self, outcome: str, reason: str = "") -> None:
            self.steps = [Step(0, "the ends", frozenset(), outcome, reason=reason)]

    assert bisect_headline(Ended(CLEARS), None) == "No regression between the ends: nothing to bisect"
    assert bisect_headline(Ended(INCONCLUSIVE), None).startswith("Cannot tell whether the upgrade regresses")
    assert bisect_headline(Ended(SKIPPED, "no wheel"), None) == "The ends could not be measured: no wheel"


def test_bad_requirements_are_one_line_and_exit_2() -> None:
    done = stepwatch("bisect", "--good", "tensorflow=2.20.0", "--bad", "tensorflow==2.21.0")
    assert done.returncode == 2 and "--good: 'tensorflow=2.20.0' is not a pip requirement" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


# The two real bisects (3 minutes and 1 of trials on 2 cores) are opt-in (--run-large; CI's `large` job). The search
# is tested above on stand-in measurements, and the upgrade check that each step runs is run for real by test_upgrade.
@pytest.mark.large
def test_bisect_finds_the_planted_package_among_several(tmp_path: Path) -> None:
    wheels = build_wheels(tmp_path / "wheels")
    cache, results, db, out = tmp_path / "envs", tmp_path / "results", tmp_path / "check.duckdb", tmp_path / "b.json"
    # Two trials a side, and a third where a step is inconclusive at two: peak memory's 1% is about the half-width
    # of a two-trial interval (Student's t at 2 degrees of freedom), so a step without the culprit can need it.
    done = stepwatch(
        "bisect", "--good", GOOD, "--bad", BAD, "--reuse-site-packages", "--pip-arg=--no-index",
        f"--pip-arg=--find-links={wheels}", *SMALL, "--trials", "2", "--max-trials", "3", "--metric",
        "peak_memory_bytes", "--results", str(results), "--db", str(db), "--format", "json", "--out", str(out),
        env={virtualenvs.CACHE_ENV: str(cache)}, timeout=900,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(out.read_text())
    names = {c["package"] for c in found["changes"]}
    assert names == {"swt-alpha", "swt-beta", "swt-core", "swt-plugin", "swt-legacy"}
    # The resolver coupled the pair, and ordered it after swt-beta, which the new core needs.
    pair = next(g for g in found["groups"] if len(g["changes"]) > 1)
    assert {c["package"] for c in pair["changes"]} == {"swt-core", "swt-plugin"}
    assert {c["package"] for c in pair["needs"]} == {"swt-core", "swt-plugin", "swt-beta"}
    assert {c["package"] for c in found["culprit"]} == {"swt-core", "swt-plugin"}
    assert {c["package"] for c in found["cleared"]} >= {"swt-alpha"}
    # Every step has its verdict with an interval; the culprit alone carries the planted 100 MB.
    steps = found["steps"]
    assert steps[0]["outcome"] == REPRODUCES and steps[0]["targets"][0]["verdict"] == "regression"
    last = steps[-1]
    assert {c["package"] for c in last["applied"]} == {"swt-core", "swt-plugin", "swt-beta"}
    assert last["outcome"] == REPRODUCES and last["targets"][0]["ci_low"] > 1.05
    assert any(s["outcome"] == CLEARS for s in steps)
    # The report says the same, and the store holds the path for the dashboard.
    [folder] = results.iterdir()
    markdown = (folder / "report.md").read_text()
    assert "**Culprit: swt-core 1.0 -> 2.0, swt-plugin 1.0 -> 2.0 (they move together)" in markdown
    assert "**Cleared** (measured without the regression): swt-alpha 1.0 -> 2.0, swt-legacy 1.0 (removed)." in markdown
    with open_store(db) as reader:
        recorded = reader.connection().execute("SELECT step, outcome FROM bisect_steps ORDER BY step").fetchall()
    assert [o for _, o in recorded] == [s["outcome"] for s in steps]


@pytest.mark.large
def test_an_upgrade_without_a_regression_is_not_bisected(tmp_path: Path) -> None:
    """A version bump without an effect: no search; exit 0, or 3 where two trials cannot rule out 1%."""
    wheels = build_wheels(tmp_path / "wheels")
    done = stepwatch(
        "bisect", "--good", "swt-alpha==1.0", "--bad", "swt-alpha==2.0", "--reuse-site-packages", "--aa",
        "--pip-arg=--no-index", f"--pip-arg=--find-links={wheels}", *SMALL, "--trials", "2", "--max-trials", "2",
        "--metric", "peak_memory_bytes", "--results", str(tmp_path / "results"), "--db", str(tmp_path / "check.duckdb"),
        env={virtualenvs.CACHE_ENV: str(tmp_path / "envs")}, timeout=600,
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr[-3000:]
    expected = "No regression between the ends" if done.returncode == 0 else "Cannot tell whether the upgrade"
    assert f"**{expected}" in done.stdout and "asking pip's resolver" not in done.stderr
    # --aa: the first step also measured the good side in a second environment, and says what it saw
    assert "baseline-aa: building an environment for swt-alpha==1.0" in done.stderr
    assert "A/A (the baseline in a second environment of the same packages)" in done.stdout


def test_an_effect_with_several_sources_is_split_until_each_is_one_group() -> None:
    """Group 1 adds 5%, group 2 adds 16%, group 4 takes 5% off (as the real TensorFlow upgrade does: h5py,
    then TensorFlow itself, then the removal of tensorboard): the search names the first, then splits every
    stretch that still moves the target until each source is one group."""
    units = [Change(name, "1", "2") for name in "abcd"]
    ordered = packages.groups([_needs(c) for c in units])
    sizes = {units[0]: 0.05, units[1]: 0.16, units[3]: -0.05}
    target = ("series", "peak_memory_bytes")
    noise = 0.001**2

    def measure(applied: frozenset[Change], why: str = "") -> Probe:
        effect = sum(math.log1p(sizes.get(c, 0.0)) for c in applied)
        sides = {target: (stats.Side(5, 0.0, noise), stats.Side(5, effect, noise), 0.01)}
        return Probe(applied, REPRODUCES if effect > math.log1p(0.01) else CLEARS, "", sides)

    found = searching.search(ordered, measure, measure(packages.prefix(ordered, 4)))
    assert found.culprit is not None and found.culprit.changes == (units[0],)
    parts = {(c.first, c.last): c for c in found.contributions()}
    assert set(parts) == {(1, 1), (2, 2), (3, 3), (4, 4)}
    assert [parts[k].changed for k in sorted(parts)] == [True, True, False, True]
    assert parts[(2, 2)].effects[target].ratio == pytest.approx(1.16)
    assert parts[(4, 4)].effects[target].ratio == pytest.approx(0.95)


def test_a_share_within_the_variation_between_environments_is_not_a_change() -> None:
    """Group 1 adds 2% on top of nothing, measured to 0.1%: beyond the 1% threshold when only the trials count,
    within the noise when environments of the same packages are known to differ by 2% (each step is one)."""
    units = [Change(name, "1", "2") for name in "ab"]
    ordered = packages.groups([_needs(c) for c in units])
    target = ("series", "peak_memory_bytes")
    tight = {target: (stats.Side(5, 0.0, 0.001**2), stats.Side(5, math.log(1.02), 0.001**2), 0.01)}
    plain = Probe(packages.prefix(ordered, 1), REPRODUCES, "", tight)
    widened = Probe(plain.applied, REPRODUCES, "", tight, {target: stats.Between(0.02**2, 5)})
    assert searching.contribution(ordered, 0, 1, None, plain).changed
    part = searching.contribution(ordered, 0, 1, None, widened)
    assert not part.changed and part.effects[target].ci_low < 1 < part.effects[target].ci_high


def test_a_removal_takes_along_what_still_requires_it_up_the_chain() -> None:
    """markdown goes only when tensorboard goes, which goes only when tensorflow moves: a stand-in resolver that
    answers as pip's dry run does (a package that something installed still requires is installed too)."""
    tf, board = Change("tensorflow", "2.20", "2.21"), Change("tensorboard", "2.20", None)
    markdown = Change("markdown", "3.1", None)
    good = {"tensorflow": "2.20", "tensorboard": "2.20", "markdown": "3.1"}
    requires = {("tensorflow", "2.20"): ["tensorboard"], ("tensorboard", "2.20"): ["markdown"]}

    def resolve(pinned: tuple[str, ...]) -> packages.Resolution:
        installs = dict(p.split("==") for p in pinned)
        for _ in range(len(good)):
            for name, version in list(installs.items()):
                for needed in requires.get((name, version), []):
                    installs.setdefault(needed, good[needed])
        listed = {name: requires.get((name, version), []) for name, version in installs.items()}
        return packages.Resolution(True, installs, listed)

    found = packages.needs(markdown, [board, markdown, tf], good, resolve)
    assert found.closure == {markdown, board, tf} and not found.reason
    assert packages.needs(tf, [board, markdown, tf], good, resolve).closure == {tf}
