"""``stepwatch bisect``: which package of an upgrade causes its regression (``collector.bench.bisect``).

Every step is an upgrade check (the good side against an intermediate environment, interleaved, with
upgrade-check's statistics), ingested into upgrade-check's store with the step recorded in ``bisect_steps``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collector.analysis import report
from collector.analysis.comparison import (
    EXIT_FAILED,
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    EXIT_REGRESSION,
    FAILED,
    Comparison,
    Row,
)
from collector.analysis.stats import IMPROVEMENT, NO_CHANGE, REGRESSION
from collector.bench import bisect, catalog, runner, upgrade
from collector.bench.suite import load_suite, narrow
from collector.cli.arguments import (
    UsageError,
    add_analysis_arguments,
    calibrated_between,
    console,
    db_path,
    matrix_values,
    overrides,
)
from collector.cli.upgrade import add_check_arguments, check_trials, measure
from collector.store import database

RESULTS_DIR = upgrade.RESULTS_DIR / "bisect"


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "bisect", help="find the package of an upgrade behind its regression (a search of upgrade checks)"
    )
    parser.add_argument("--good", required=True, help="pip requirements without the regression: 'tensorflow==2.20.0'")
    parser.add_argument("--bad", required=True, help="pip requirements with it: 'tensorflow==2.21.0'")
    add_check_arguments(parser, RESULTS_DIR)
    add_analysis_arguments(parser, several_metrics=True, default_db=upgrade.STORE, calibrated=True)
    parser.set_defaults(handler=run)


@dataclass
class Step:
    """One measured (or skipped) environment: what it applied, why, and what its targets showed."""

    number: int
    why: str
    applied: frozenset[bisect.Change]
    outcome: str
    rows: list[Row] = field(default_factory=list)
    reason: str = ""
    suite_run_ids: dict[str, str] = field(default_factory=dict)
    folder: Path | None = None


def classify(comparison: Comparison, targets: set[tuple[str, str]]) -> tuple[str, list[Row]]:
    """A step reproduces the regression when any target (series, metric) regresses; clears it when every
    target shows no change or an improvement; anything else cannot tell. Trials that all failed: skipped."""
    rows = [r for r in comparison.rows if (r.series["series_key"], r.metric.name) in targets]
    verdicts = {r.verdict for r in rows}
    if REGRESSION in verdicts:
        return bisect.REPRODUCES, rows
    if FAILED in verdicts or not rows:
        return bisect.SKIPPED, rows
    if verdicts <= {NO_CHANGE, IMPROVEMENT}:
        return bisect.CLEARS, rows
    return bisect.INCONCLUSIVE, rows


class Bisection:
    """The state of one bisect: its environments, steps and where they are recorded."""

    def __init__(self, args: argparse.Namespace, good: tuple[str, ...], bad: tuple[str, ...]) -> None:
        self.args, self.good, self.bad = args, good, bad
        self.id = uuid.uuid4().hex[:12]
        self.started = time.monotonic()
        self.folder = Path(args.results) / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{self.id}"
        self.db = db_path(args)
        self.thresholds = overrides(args)
        suite = load_suite(args.suite)
        self.suite = suite.name
        self.configs = list(narrow(suite.configs, matrix_values(args)))
        self.options = runner.RunOptions(price_per_hour=args.price_per_hour, prices=catalog.load_prices(args.prices))
        self.pip_args = tuple(args.pip_arg)
        self.steps: list[Step] = []
        self.targets: set[tuple[str, str]] = set()
        self.good_env: upgrade.Environment | None = None
        self.own: set[str] | None = None  # the good side's own packages, with --reuse-site-packages
        self.built = 0  # environments built (not taken from the cache)
        self.resolver_runs = 0
        self.host: str | None = None
        self.between = calibrated_between(args)  # per metric: the between-environment variance steps cover
        self.aa: Comparison | None = None  # the first step's A/A, with --aa

    def environment(
        self, side: str, requirements: tuple[str, ...], described: str | None, copy: int = 0
    ) -> upgrade.Environment:
        env = upgrade.ensure(side, requirements, self.args.reuse_site_packages, self.pip_args, console.print,
                             described, copy)  # fmt: skip
        self.built += not env.cached
        return env

    def step(self, applied: frozenset[bisect.Change], why: str, env: upgrade.Environment | None = None) -> Step:
        """Measure good + ``applied`` against good (``env`` when already built), record it and classify it."""
        number = len(self.steps)
        label = f"step {number}: "
        try:
            if env is None:
                assert self.good_env is not None
                pinned = bisect.pins(upgrade.frozen(self.good_env), applied, self.own)
                env = self.environment(f"step {number}", pinned, bisect.describe(applied))
        except upgrade.UpgradeError as error:
            done = Step(number, why, applied, bisect.SKIPPED, reason=str(error))
        else:
            assert self.good_env is not None
            envs = {"baseline": self.good_env, "candidate": env}
            if number == 0 and self.args.aa:  # the first step's A/A: its variation covers every later step too
                envs[upgrade.AA] = self.environment(upgrade.AA, self.good, None, copy=1)
            done = measure(
                self.configs, self.args.trials, self.suite, envs, self.folder, self.options, self.db,
                self.args.metric, self.thresholds, label, self.between,
            )  # fmt: skip
            check, comparison = done.check, done.comparison
            self.between, self.aa = done.between, self.aa or comparison.aa
            if not self.targets:  # the ends: what the bad side regresses is what the search follows
                self.targets = {(r.series["series_key"], r.metric.name) for r in comparison.by_verdict(REGRESSION)}
                targets = self.targets or {(r.series["series_key"], r.metric.name) for r in comparison.rows}
                outcome, rows = classify(comparison, targets)
            else:
                outcome, rows = classify(comparison, self.targets)
            failed = check.failed()
            self.host = self.host or check.host()
            reason = f"{len(failed)} of {len(check.outcomes)} trials failed" if failed else ""
            done = Step(number, why, applied, outcome, rows, reason, check.suite_run_ids, check.out_dir)
        self.steps.append(done)
        self.record(done)
        console.print(f"{label}{step_line(done)}")
        return done

    def record(self, step: Step) -> None:
        """The step into the store's ``bisect_steps`` (one row per target, one for a step without rows)."""
        applied = json.dumps([[c.name, c.good, c.bad] for c in sorted(step.applied)])
        base = [self.id, step.number, datetime.now(UTC), " ".join(self.good), " ".join(self.bad), step.why,
                applied, step.outcome, step.reason]  # fmt: skip
        ids = [step.suite_run_ids.get("baseline"), step.suite_run_ids.get("candidate")]
        rows = [[*base, r.series["series_key"], r.metric.name, r.verdict, *_numbers(r), *ids] for r in step.rows] or [
            [*base, None, None, None, None, None, None, *ids]
        ]
        with database.update(self.db) as con:
            con.executemany(f"INSERT INTO bisect_steps VALUES ({', '.join('?' * len(rows[0]))})", rows)

    def measure(self, applied: frozenset[bisect.Change], why: str) -> bisect.Probe:
        return probe(self.step(applied, why))


def probe(step: Step) -> bisect.Probe:
    """A step as the search reads it: its outcome and, per target, the two sides' trials and the threshold."""
    sides = {(r.series["series_key"], r.metric.name): (r.result.baseline, r.result.candidate, r.result.threshold)
             for r in step.rows}  # fmt: skip
    between = {(r.series["series_key"], r.metric.name): r.result.between for r in step.rows if r.result.between}
    return bisect.Probe(step.applied, step.outcome, step.reason, sides, between)


def _numbers(row: Row) -> list[float | None]:
    return [None if math.isnan(x) else x for x in (row.result.ratio, row.result.ci_low, row.result.ci_high)]


def step_line(step: Step) -> str:
    """'reproduces: bert/tiny ... peak_memory_bytes +16.1% [+15.9%, +16.3%]' for the log and the report."""
    if step.outcome == bisect.SKIPPED and not step.rows:
        return f"skipped: {step.reason}"
    cells = [f"{r.metric.name} {report.percent(r.result.ratio)} {report.interval(r.result.ci_low, r.result.ci_high)}"
             for r in step.rows]  # fmt: skip
    return f"{step.outcome}: " + "; ".join(cells) + (f" ({step.reason})" if step.reason else "")


def run(args: argparse.Namespace) -> int:
    try:
        good = upgrade.parse_side(args.good, "good")
        bad = upgrade.parse_side(args.bad, "bad")
    except ValueError as error:
        raise UsageError(str(error)) from None
    check_trials(args.trials)
    state = Bisection(args, good, bad)
    state.good_env = state.environment("good", good, None)
    bad_env = state.environment("bad", bad, None)
    state.own = upgrade.own_packages(state.good_env) if args.reuse_site_packages else None
    all_changes = bisect.changes(upgrade.frozen(state.good_env), upgrade.frozen(bad_env))
    console.print(f"{len(all_changes)} package(s) differ: {bisect.describe(all_changes)}")
    ends = state.step(frozenset(all_changes), "the whole upgrade", bad_env)
    search: bisect.Search | None = None
    if ends.outcome == bisect.REPRODUCES and all_changes:
        resolver = bisect.Resolver(args.reuse_site_packages, state.pip_args, console.print)
        console.print(f"asking pip's resolver which of the {len(all_changes)} changes need which")
        good_versions = upgrade.frozen(state.good_env)
        ordered = bisect.groups(bisect.all_needs(all_changes, good_versions, resolver.resolve, state.own))
        state.resolver_runs = resolver.runs
        console.print(f"{len(ordered)} group(s), {resolver.runs} resolver run(s)")
        search = bisect.search(ordered, state.measure, probe(ends))
    text = report.bisect_markdown(state, all_changes, search)
    state.folder.mkdir(parents=True, exist_ok=True)
    report.write_file(text, state.folder / "report.md")
    code = exit_code(ends, search)
    if args.format == "json":
        report.publish(json.dumps(report.bisect_json(state, all_changes, search, code), indent=2, default=str),
                       args.out)  # fmt: skip
    else:
        report.publish(text, args.out)
    console.print(f"report: {state.folder / 'report.md'}")
    return code


def exit_code(ends: Step, search: bisect.Search | None) -> int:
    """0 nothing to bisect, 1 a culprit, 3 the noise could not decide, 4 the ends could not be measured."""
    if ends.outcome == bisect.SKIPPED:
        return EXIT_FAILED
    if ends.outcome == bisect.INCONCLUSIVE:
        return EXIT_INCONCLUSIVE
    if search is None:
        return EXIT_OK
    if search.stopped:
        return EXIT_INCONCLUSIVE
    if search.culprit is None and search.together is None:
        return EXIT_FAILED
    return EXIT_REGRESSION
