"""``stepwatch bisect`` as a workflow: which package of an upgrade causes its regression. Every step is an
interleaved check (``collector.workflows.check``) of the good side against an intermediate environment, with
upgrade-check's statistics, ingested into the store with the step recorded (``records.add_bisect_steps``); the
search over the groups of changes is ``collector.workflows.search``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace
from datetime import UTC, datetime
from pathlib import Path

from stepwatch.collector.analysis import sequential, stats
from stepwatch.collector.analysis.comparison import Comparison, Row
from stepwatch.collector.analysis.ops import Explained
from stepwatch.collector.analysis.thresholds import Override
from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.environments import packages, virtualenvs
from stepwatch.collector.environments.packages import Change
from stepwatch.collector.outcomes import (
    CLEARS,
    FAILED,
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSION,
    REPRODUCES,
    SKIPPED,
)
from stepwatch.collector.runner import execution
from stepwatch.collector.store import database, records
from stepwatch.collector.workflows import search as searching
from stepwatch.collector.workflows.check import Asked, measure
from stepwatch.collector.workflows.hooks import Hooks


@dataclass
class Step:
    """One measured (or skipped) environment: what it applied, why, and what its targets showed."""

    number: int
    why: str
    applied: frozenset[Change]
    outcome: str
    rows: list[Row] = field(default_factory=list)
    reason: str = ""
    suite_run_ids: dict[str, str] = field(default_factory=dict)
    folder: Path | None = None
    explained: tuple[list[Explained], dict[str, list[dict]]] | None = None  # with --profile: op by op


class BisectHooks(Hooks):
    def stepped(self, step: Step) -> None:
        """A step was measured (or skipped) and recorded."""


@dataclass(frozen=True)
class Plan:
    """What a bisect is asked: the two sides, the suite's configs and trials, the statistics, the store."""

    good: tuple[str, ...]
    bad: tuple[str, ...]
    suite: str
    configs: list[BenchmarkConfig]
    design: sequential.Design  # each step's looks
    metrics: list[str]
    thresholds: list[Override]
    results: Path
    db: Path
    options: execution.RunOptions
    reuse_site_packages: bool = False
    pip_args: tuple[str, ...] = ()
    aa: bool = False
    between: dict[str, stats.Between] = field(default_factory=dict)  # a calibration's, per metric
    budget_minutes: float | None = None  # each step's budget


def classify(comparison: Comparison, targets: set[tuple[str, str]]) -> tuple[str, list[Row]]:
    """A step reproduces the regression when any target (series, metric) regresses; clears it when every
    target shows no change or an improvement; anything else cannot tell. Trials that all failed: skipped."""
    rows = [r for r in comparison.rows if (r.series["series_key"], r.metric.name) in targets]
    verdicts = {r.verdict for r in rows}
    if REGRESSION in verdicts:
        return REPRODUCES, rows
    if FAILED in verdicts or not rows:
        return SKIPPED, rows
    if verdicts <= {NO_CHANGE, IMPROVEMENT}:
        return CLEARS, rows
    return INCONCLUSIVE, rows


class Bisection:
    """The state of one bisect: its environments, steps and where they are recorded."""

    def __init__(self, plan: Plan, hooks: BisectHooks) -> None:
        self.plan, self.hooks = plan, hooks
        self.good, self.bad = plan.good, plan.bad
        self.id = uuid.uuid4().hex[:12]
        self.started = time.monotonic()
        self.folder = plan.results / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{self.id}"
        self.steps: list[Step] = []
        self.targets: set[tuple[str, str]] = set()
        self.good_env: virtualenvs.Environment | None = None
        self.own: set[str] | None = None  # the good side's own packages, with --reuse-site-packages
        self.built = 0  # environments built (not taken from the cache)
        self.resolver_runs = 0
        self.host: str | None = None
        self.between = dict(plan.between)  # per metric: the between-environment variance steps cover
        self.aa: Comparison | None = None  # the first step's A/A, with an A/A

    def environment(
        self, side: str, requirements: tuple[str, ...], described: str | None, copy: int = 0
    ) -> virtualenvs.Environment:
        plan = self.plan
        env = virtualenvs.ensure(side, requirements, plan.reuse_site_packages, plan.pip_args, self.hooks.say,
                             described, copy)  # fmt: skip
        self.built += not env.cached
        return env

    def step(self, applied: frozenset[Change], why: str, env: virtualenvs.Environment | None = None) -> Step:
        """Measure good + ``applied`` against good (``env`` when already built), record it and classify it."""
        number, plan = len(self.steps), self.plan
        try:
            if env is None:
                assert self.good_env is not None
                pinned = packages.pins(virtualenvs.frozen(self.good_env), applied, self.own)
                env = self.environment(f"step {number}", pinned, packages.describe(applied))
        except virtualenvs.UpgradeError as error:
            done = Step(number, why, applied, SKIPPED, reason=str(error))
        else:
            assert self.good_env is not None
            envs = {"baseline": self.good_env, "candidate": env}
            if number == 0 and plan.aa:  # the first step's A/A: its variation covers every later step too
                envs[virtualenvs.AA] = self.environment(virtualenvs.AA, self.good, None, copy=1)
            deadline = time.monotonic() + plan.budget_minutes * 60 if plan.budget_minutes else None
            measured = measure(
                plan.configs, plan.design, plan.suite, envs, self.folder, plan.options, plan.db,
                Asked(plan.metrics, plan.thresholds, self.between), self.hooks, f"step {number}: ", deadline,
                plan.budget_minutes,
            )  # fmt: skip
            check, comparison = measured.check, measured.comparison
            self.between, self.aa = measured.between, self.aa or comparison.aa
            if not self.targets:  # the ends: what the bad side regresses is what the search follows
                self.targets = {(r.series["series_key"], r.metric.name) for r in comparison.by_verdict(REGRESSION)}
                targets = self.targets or {(r.series["series_key"], r.metric.name) for r in comparison.rows}
                outcome, rows = classify(comparison, targets)
            else:
                outcome, rows = classify(comparison, self.targets)
            failed = check.failed()
            self.host = self.host or check.host()
            reason = f"{len(failed)} of {len(check.outcomes)} trials failed" if failed else ""
            done = Step(number, why, applied, outcome, rows, reason, check.suite_run_ids, check.out_dir,
                        measured.explained)  # fmt: skip
        self.steps.append(done)
        self.record(done)
        self.hooks.stepped(done)
        return done

    def record(self, step: Step) -> None:
        """The step into the store's bisect steps (one row per target, one for a step without rows)."""
        base = records.BisectStep(
            self.id, step.number, datetime.now(UTC), " ".join(self.good), " ".join(self.bad), step.why,
            [[c.name, c.good, c.bad] for c in sorted(step.applied)], step.outcome, step.reason,
            baseline_suite_run_id=step.suite_run_ids.get("baseline"),
            candidate_suite_run_id=step.suite_run_ids.get("candidate"),
        )  # fmt: skip
        rows = [
            dataclass_replace(base, series_key=r.series["series_key"], metric=r.metric.name, verdict=r.verdict,
                              ratio=r.result.ratio, ci_low=r.result.ci_low, ci_high=r.result.ci_high)
            for r in step.rows
        ] or [base]  # fmt: skip
        with database.update(self.plan.db) as con:
            records.add_bisect_steps(con, rows)

    def measure(self, applied: frozenset[Change], why: str) -> searching.Probe:
        return probe(self.step(applied, why))


def probe(step: Step) -> searching.Probe:
    """A step as the search reads it: its outcome and, per target, the two sides' trials and the threshold."""
    sides = {(r.series["series_key"], r.metric.name): (r.result.baseline, r.result.candidate, r.result.threshold)
             for r in step.rows}  # fmt: skip
    between = {(r.series["series_key"], r.metric.name): r.result.between for r in step.rows if r.result.between}
    return searching.Probe(step.applied, step.outcome, step.reason, sides, between)


@dataclass
class Bisected:
    state: Bisection
    changes: list[Change]
    search: searching.Search | None

    @property
    def ends(self) -> Step:
        return self.state.steps[0]


def bisect(plan: Plan, hooks: BisectHooks) -> Bisected:
    """Build both ends, measure the whole upgrade and, when it reproduces the regression, search the changes."""
    state = Bisection(plan, hooks)
    state.good_env = state.environment("good", plan.good, None)
    bad_env = state.environment("bad", plan.bad, None)
    state.own = virtualenvs.own_packages(state.good_env) if plan.reuse_site_packages else None
    all_changes = packages.changes(virtualenvs.frozen(state.good_env), virtualenvs.frozen(bad_env))
    hooks.say(f"{len(all_changes)} package(s) differ: {packages.describe(all_changes)}")
    ends = state.step(frozenset(all_changes), "the whole upgrade", bad_env)
    found: searching.Search | None = None
    if ends.outcome == REPRODUCES and all_changes:
        resolver = packages.Resolver(plan.reuse_site_packages, plan.pip_args, hooks.say)
        hooks.say(f"asking pip's resolver which of the {len(all_changes)} changes need which")
        good_versions = virtualenvs.frozen(state.good_env)
        ordered = packages.groups(packages.all_needs(all_changes, good_versions, resolver.resolve, state.own))
        state.resolver_runs = resolver.runs
        hooks.say(f"{len(ordered)} group(s), {resolver.runs} resolver run(s)")
        found = searching.search(ordered, state.measure, probe(ends))
    return Bisected(state, all_changes, found)
