"""An interleaved check: environments' trials run in turn on one machine, ingested, and compared. An upgrade
check is one (baseline, candidate and, with an A/A, a second baseline), each step of a bisect is one, and a
calibration runs k environments of the same requirements the same way.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from stepwatch.collector.analysis import calibration, comparison, ops, sequential, stats
from stepwatch.collector.analysis.thresholds import Override
from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.environments import virtualenvs
from stepwatch.collector.runner import execution, spawn
from stepwatch.collector.store import database, profiled
from stepwatch.collector.store.selection import Selection
from stepwatch.collector.workflows.hooks import Hooks, ingest_into


def interleave(
    configs: list[BenchmarkConfig],
    trials: int,
    suite: str,
    envs: dict[str, virtualenvs.Environment],
    results: str | Path,
    options: execution.RunOptions,
    hooks: Hooks,
    label: str = "",
) -> virtualenvs.Check:
    """Every environment's trials, interleaved, ``trials`` rounds (``label`` names them in the hooks' progress)."""
    with hooks.trials(len(configs) * trials * len(envs), label, trials) as (on_start, on_done):
        return virtualenvs.run(configs, trials, suite, envs, results, options, on_start, on_done)


def environments(
    sides: dict[str, tuple[str, ...]], reuse: bool, pip_args: tuple[str, ...], aa: bool, hooks: Hooks
) -> dict[str, virtualenvs.Environment]:
    """Every side's environment and, with ``aa``, a second one of the baseline's requirements (built separately)."""
    envs = virtualenvs.ensure_all(sides, reuse, pip_args, hooks.say)
    if aa:
        envs[virtualenvs.AA] = virtualenvs.ensure(virtualenvs.AA, sides["baseline"], reuse, pip_args, hooks.say, copy=1)
    return envs


@dataclass
class Measured:
    """One interleaved check, ingested and compared: the trials, baseline vs candidate (with its A/A, when one
    ran, as ``comparison.aa``), the between-environment variance per metric that its intervals cover, and its
    looks (``sequential``)."""

    check: virtualenvs.Check
    comparison: comparison.Comparison
    between: dict[str, stats.Between]
    explained: tuple[list[ops.Explained], dict[str, list[dict]]] | None = None  # with --profile: op by op
    aa_explained: list[ops.Explained] | None = None  # the A/A's, op by op
    profile_errors: dict[str, list[str]] | None = None  # with --profile: why a side's profiles failed
    sequential: sequential.Sequential | None = None


@dataclass(frozen=True)
class Asked:
    """What a check compares and against what: its metrics, its thresholds, what is known of the
    between-environment variance (a calibration, an earlier A/A), and whether an A/A side's own estimate is pooled
    in (not for sides that share one interpreter and its packages: a code check's commits, where the A/A only says
    whether this runner raises false alarms)."""

    metric_names: list[str]
    thresholds: list[Override]
    between: dict[str, stats.Between] = field(default_factory=dict)
    pool_aa: bool = True


def measure(
    configs: list[BenchmarkConfig],
    design: sequential.Design,
    suite: str,
    envs: dict[str, virtualenvs.Environment],
    results: str | Path,
    options: execution.RunOptions,
    db: Path,
    asked: Asked,
    hooks: Hooks,
    label: str = "",
    deadline: float | None = None,
    budget_minutes: float | None = None,
) -> Measured:
    """Run the environments' trials interleaved, look by look (``design``), ingest and compare at each look, and
    stop once no verdict asked for is inconclusive, at the design's last look, or when no round fits before
    ``deadline`` (``time.monotonic()``; ``budget_minutes`` is what the report calls it). After the first look, a
    config whose start-up outweighs its measured steps measures more steps a trial (``sequential.steps_for``).
    Each row's noise is its two sides' own, from this check's trials."""
    fill_caches(configs, envs, options, hooks)
    running = virtualenvs.Interleaving(configs, suite, envs, results, options)
    plan = sequential.Sequential(design, budget_minutes)
    began = time.monotonic()
    hooks.say(f"{label}sequential: {design.text()}; "
              + (f"budget {budget_minutes:g} minutes" if budget_minutes is not None else "no budget"))  # fmt: skip
    for number, trials in enumerate(design.looks):
        added = len(running.configs) * (trials - running.rounds) * len(envs)
        with hooks.trials(added, label, trials) as (on_start, on_done):
            running.more(trials, on_start, on_done, deadline)
        measured = _compare(running.check(), envs, db, asked, hooks, design.level)
        rows = measured.comparison.rows
        left = sequential.undecided([(row.verdict, row.result.spans is not None) for row in rows])
        plan.looks.append(sequential.Look(running.rounds, left, round(time.monotonic() - began, 1)))
        hooks.say(f"{label}look {number + 1}: {running.rounds} trials per side, {left} verdict(s) inconclusive")
        if running.rounds < trials:  # the deadline cut this look short
            plan.reason = sequential.BUDGET
        elif not left:
            plan.reason = sequential.DECIDED
        elif number == len(design.looks) - 1:
            plan.reason = sequential.MAXIMUM
        else:
            scale = _more_steps(running, plan) if number == 0 else {}  # later rows ran at the new steps already
            by_config = _rows_by_config(running.check(), trials - (design.looks[number - 1] if number else 0))
            next_round = sequential.round_seconds(by_config, scale, len(envs))
            if deadline is not None and time.monotonic() + next_round > deadline:
                plan.reason = sequential.BUDGET
        if plan.reason:
            break
    done = running.close()
    if options.profile:  # op by op, from the profiles, once
        measured = _compare(done, envs, db, asked, hooks, design.level, explain=True)
    measured.check, measured.sequential = done, plan
    return measured


def _more_steps(running: virtualenvs.Interleaving, plan: sequential.Sequential) -> dict[str, float]:
    """After the first look: the configs whose trials measure more steps from now on (``sequential.steps_for``),
    recorded in ``plan``; per config key, how many times its measured time a trial will take."""
    rows = _rows_by_config(running.check(), running.rounds)
    scale, changed = {}, []
    for config in running.configs:
        steps = sequential.steps_for(config.steps, config.window_steps, rows.get(config.key, []))
        if steps != config.steps:
            plan.steps[config.label()] = (config.steps, steps)
            scale[config.key] = steps / config.steps
            config = config.with_changes(steps=steps)
        changed.append(config)
    running.configs = changed
    return scale


def _rows_by_config(ran: virtualenvs.Check, last: int) -> dict[str, list[dict]]:
    """Per config key, the rows of its last ``last`` rounds' trials (every side)."""
    found: dict[str, list[dict]] = defaultdict(list)
    for outcome in ran.outcomes:
        if outcome.trial >= ran.rounds - last:
            found[outcome.config.key].append(outcome.row)
    return dict(found)


def _compare(
    ran: virtualenvs.Check,
    envs: dict[str, virtualenvs.Environment],
    db: Path,
    asked: Asked,
    hooks: Hooks,
    alpha: float,
    explain: bool = False,
) -> Measured:
    """The trials so far, ingested and compared at ``alpha`` (with their A/A, when one ran), and with ``explain``
    op by op from their profiles."""
    ingest_into([str(ran.out_dir)], db, False, hooks)
    selections = {side: Selection.of(suite_run_id=run_id) for side, run_id in ran.suite_run_ids.items()}
    known = dict(asked.between)
    aa = None
    names, thresholds = asked.metric_names, asked.thresholds
    with database.open_store(db) as reader:
        con = reader.connection()
        if virtualenvs.AA in envs:
            aa = comparison.build(con, selections["baseline"], selections[virtualenvs.AA], names, thresholds, known,
                                  own_noise=True, alpha=alpha)  # fmt: skip
            for name in (m.name for m in aa.metrics if asked.pool_aa and not m.deterministic):  # a counter is exact
                pairs = [(r.result.baseline, r.result.candidate) for r in aa.rows if r.metric.name == name]
                pooled = stats.pool_between([known.get(name), calibration.aa_between(pairs)])
                if pooled is not None:
                    known[name] = pooled
        result = comparison.build(con, selections["baseline"], selections["candidate"], names, thresholds, known,
                                  own_noise=True, alpha=alpha)  # fmt: skip
        measured = Measured(ran, result, known)
        if explain:
            measured.explained = ops.between(con, selections["baseline"], selections["candidate"])
            measured.profile_errors = profiled.profile_errors(con, selections["baseline"], selections["candidate"])
            if virtualenvs.AA in envs:
                measured.aa_explained = ops.between(con, selections["baseline"], selections[virtualenvs.AA])[0]
    result.aa = aa
    return measured


def fill_caches(
    configs: list[BenchmarkConfig],
    envs: dict[str, virtualenvs.Environment],
    options: execution.RunOptions,
    hooks: Hooks,
) -> list[str]:
    """With a compile cache: one short trial of every config on every side before the measured ones, recorded
    nowhere, so that every measured trial finds its programs compiled. A cold trial is not like a warm one in what
    is compared: its peak memory holds the compiler's, and its compile time is a compile. Returns the short
    trials' statuses."""
    if options.compile_cache is None:
        return []
    compiled, statuses = [config for config in configs if config.xla], []
    for side, env in envs.items():
        for config in compiled:
            short = config.with_changes(steps=config.window_steps, warmup_steps=2 * config.window_steps)
            kept = options.compile_cache / execution.COMPILE_CACHE_DIRS[config.keras_backend]
            before = execution.cache_entries(kept)
            with tempfile.TemporaryDirectory(prefix="stepwatch-cache-") as tmp:
                child, wall_s, _ = spawn.run_child(
                    short, env.python, Path(tmp), execution.cache_env(options.compile_cache), env.folder
                )
            why = "" if child["status"] == "ok" else f": {child.get('error_message')}"
            # Whether the cache held this side's programs already (restored from an earlier run: warm) or not.
            grew = execution.cache_entries(kept) > before
            held = "compiled" if grew else "held already" if child["status"] == "ok" else "nothing compiled"
            hooks.say(f"{side}: compile cache for {config.label()}: {held} ({child['status']}, {wall_s:.0f} s{why})")
            statuses.append(child["status"])
    return statuses


def values_by_environment(check: virtualenvs.Check, metrics: list[str]) -> dict[str, dict[str, list[list[float]]]]:
    """metric -> config -> per environment (in the check's order), the ok trials' values."""
    sides = list(check.results)
    found: dict[str, dict[str, list[list[float]]]] = {m: defaultdict(lambda: [[] for _ in sides]) for m in metrics}
    for i, side in enumerate(sides):
        for row in check.results[side].rows:
            if row.get("status") != "ok":
                continue
            for metric in metrics:
                value = row.get(metric)
                if value is not None and value > 0 and math.isfinite(value):
                    found[metric][row["config_key"]][i].append(float(value))
    return {m: dict(per) for m, per in found.items()}


def calibrate(
    label: str,
    requirements: tuple[str, ...],
    count: int,
    configs: list[BenchmarkConfig],
    trials: int,
    suite: str,
    metrics: list[str],
    results: str | Path,
    options: execution.RunOptions,
    db: Path,
    reuse: bool,
    pip_args: tuple[str, ...],
    hooks: Hooks,
) -> tuple[virtualenvs.Check, calibration.Calibration]:
    """``count`` separately built environments of ``requirements``, their trials interleaved and ingested, and
    the runner's calibration from them (``collector.analysis.calibration``)."""
    envs = {f"env-{i}": virtualenvs.ensure(f"env-{i}", requirements, reuse, pip_args, hooks.say, copy=i)
            for i in range(count)}  # fmt: skip
    check = interleave(configs, trials, suite, envs, results, options, hooks)
    ingest_into([str(check.out_dir)], db, False, hooks)
    return check, calibration.build(label, suite, requirements, trials, values_by_environment(check, metrics))
