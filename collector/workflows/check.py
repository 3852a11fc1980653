"""An interleaved check: environments' trials run in turn on one machine, ingested, and compared. An upgrade
check is one (baseline, candidate and, with an A/A, a second baseline), each step of a bisect is one, and a
calibration runs k environments of the same requirements the same way.
"""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from stepwatch.collector.analysis import calibration, comparison, ops, stats
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
    budget_s: float | None = None,
) -> virtualenvs.Check:
    """Every environment's trials, interleaved (``label`` names them in the hooks' progress; ``budget_s`` stops
    starting rounds: ``virtualenvs.run``)."""
    with hooks.trials(len(configs) * trials * len(envs), label, trials) as (on_start, on_done):
        return virtualenvs.run(configs, trials, suite, envs, results, options, on_start, on_done, budget_s)


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
    ran, as ``comparison.aa``), and the between-environment variance per metric that its intervals cover."""

    check: virtualenvs.Check
    comparison: comparison.Comparison
    between: dict[str, stats.Between]
    explained: tuple[list[ops.Explained], dict[str, list[dict]]] | None = None  # with --profile: op by op
    aa_explained: list[ops.Explained] | None = None  # the A/A's, op by op
    profile_errors: dict[str, list[str]] | None = None  # with --profile: why a side's profiles failed


def measure(
    configs: list[BenchmarkConfig],
    trials: int,
    suite: str,
    envs: dict[str, virtualenvs.Environment],
    results: str | Path,
    options: execution.RunOptions,
    db: Path,
    metric_names: list[str],
    thresholds: list[Override],
    hooks: Hooks,
    label: str = "",
    between: dict[str, stats.Between] | None = None,
    budget_s: float | None = None,
    pool_aa: bool = True,
) -> Measured:
    """Run the environments' trials interleaved, ingest them and compare them: an upgrade check, and each step
    of a bisect. ``between``: what is already known of the between-environment variance (a calibration, an
    earlier A/A); with an A/A side in ``envs`` its own estimate is pooled in, unless ``pool_aa`` is false (sides
    that share one interpreter and its packages: a code check's commits, where the A/A only says whether this
    runner raises false alarms). Each row's noise is its two sides' own, from this check's trials."""
    fill_caches(configs, envs, options, hooks)
    check = interleave(configs, trials, suite, envs, results, options, hooks, label, budget_s)
    ingest_into([str(check.out_dir)], db, False, hooks)
    selections = {side: Selection.of(suite_run_id=run_id) for side, run_id in check.suite_run_ids.items()}
    known = dict(between or {})
    aa = None
    with database.open_store(db) as reader:
        con = reader.connection()
        if virtualenvs.AA in envs:
            aa = comparison.build(
                con, selections["baseline"], selections[virtualenvs.AA], metric_names, thresholds, known, own_noise=True
            )
            for name in (m.name for m in aa.metrics if pool_aa and not m.deterministic):  # a counter is exact
                pairs = [(r.result.baseline, r.result.candidate) for r in aa.rows if r.metric.name == name]
                pooled = stats.pool_between([known.get(name), calibration.aa_between(pairs)])
                if pooled is not None:
                    known[name] = pooled
        result = comparison.build(
            con, selections["baseline"], selections["candidate"], metric_names, thresholds, known, own_noise=True
        )
        measured = Measured(check, result, known)
        if options.profile:
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
