"""``stepwatch run``: collect. Run the (narrowed) suite, one fresh process a trial, into one parquet file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.progress import Progress

from stepwatch.collector.cli import live
from stepwatch.collector.cli.arguments import (
    DEFAULT_OUT,
    PROGRESS_COLUMNS,
    add_environment_arguments,
    add_import_arguments,
    add_matrix_arguments,
    add_profile_argument,
    console,
    import_command,
    matrix_values,
    parse_bytes,
    price_options,
    trial_options,
)
from stepwatch.collector.cli.exits import EXIT_FAILED, EXIT_OK
from stepwatch.collector.config import FP8, fp8_refusal
from stepwatch.collector.environments import virtualenvs
from stepwatch.collector.errors import UsageError
from stepwatch.collector.output.runs import run_summary, trial_line
from stepwatch.collector.runner import execution, max_batch
from stepwatch.collector.runner.results import ResultsError
from stepwatch.collector.runner.suite import load_suite, narrow
from stepwatch.collector.store import objectstore
from stepwatch.collector.trial import host


def register(commands: Any) -> None:
    parser = commands.add_parser("run", help="run a benchmark suite and write parquet")
    add_matrix_arguments(parser)
    parser.add_argument("--trials", type=int, help="trials per config (default: the suite's)")
    parser.add_argument(
        "--workers", type=int, default=2,
        help="worker processes on this host for --strategy multi-worker (without a TF_CONFIG of your own)",
    )  # fmt: skip
    parser.add_argument(
        "--out",
        default=str(DEFAULT_OUT),
        help="results folder, or an s3:// or gs:// prefix the file is uploaded to (default data/results)",
    )
    parser.add_argument("--resume", action="store_true", help="continue the latest file of this suite in --out")
    parser.add_argument(
        "--shard", type=shard, metavar="K/N",
        help="run the K-th of N equal shares of the configs (1/4 ... 4/4), so that N jobs run one suite in parallel, "
        "each within its timeout",
    )  # fmt: skip
    parser.add_argument("--label", help="free text stored with every row, e.g. candidate")
    parser.add_argument(
        "--with", dest="packages", metavar="REQUIREMENTS",
        help="run the trials in an environment of these pip requirements ('tensorflow==2.19.1'), built on first "
        "use and cached like upgrade-check's sides",
    )  # fmt: skip
    add_environment_arguments(parser)
    add_profile_argument(parser)
    parser.add_argument(
        "--find-max-batch", action="store_true",
        help="before the trials, search each config's largest per-device batch (probes in one process, then one "
        "whole trial at the answer); recorded in its rows beside the batch they ran",
    )  # fmt: skip
    parser.add_argument(
        "--max-batch-memory", type=parse_bytes, default=None, metavar="BYTES",
        help="with --find-max-batch: the device memory a step may take (e.g. 12GiB; default: the accelerator's). "
        "Needed on a CPU, where only a compiler's memory analysis (JAX, --xla on) can say what a step takes",
    )  # fmt: skip
    parser.add_argument(
        "--max-batch-budget", type=float, default=max_batch.DEFAULT_BUDGET_S, metavar="SECONDS",
        help="with --find-max-batch: seconds of probes before no larger batch is tried (default %(default)g)",
    )  # fmt: skip
    parser.add_argument(
        "--max-batch-probe-limit", type=float, default=max_batch.DEFAULT_PROBE_LIMIT_S, metavar="SECONDS",
        help="with --find-max-batch: seconds one probe may take before the search stops there, answering the largest "
        "batch that fit (default %(default)g)",
    )  # fmt: skip
    live.add_arguments(parser)
    add_import_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="list the configs and exit")
    parser.add_argument(
        "--fill-compile-cache", action="store_true",
        help="with --compile-cache: compile each compiled config's step into the cache, as a code check fills it "
        "before its trials (one short trial each, recorded nowhere), and exit; the nightly keeps this cache on the "
        "default branch for pull requests",
    )  # fmt: skip
    parser.set_defaults(handler=run)


def run_imported(command: Any, args: argparse.Namespace) -> int:
    """``run --import``: the command once, here, and what it wrote imported into ``--out`` (its commit, where the
    format records none, this checkout's)."""
    from stepwatch.collector.project import identity
    from stepwatch.collector.workflows.import_check import CommandFailed, run_once

    if objectstore.is_remote(args.out):
        raise UsageError("--import writes its results into a local folder (--out); `stepwatch ingest` reads it")
    if args.dry_run:
        print(f"would run `{command.text}` and import {command.results}")
        return EXIT_OK
    print(f"running `{command.text}`")
    try:
        done = run_once(command, Path.cwd(), Path(args.out), identity()["project_commit"])
    except CommandFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    for path, fmt, count in done.read:
        print(f"imported {path} ({fmt}): {count:,} result row(s) into {args.out}")
    for path, why in done.refused:
        print(f"skipped {path}: {why}", file=sys.stderr)
    return EXIT_FAILED if done.refused else EXIT_OK


def fill_compile_cache(configs: list[Any], args: argparse.Namespace) -> int:
    """``--fill-compile-cache``: the code check's own fill (``workflows.check.fill_caches``) in this interpreter, so
    that a check's side finds exactly these programs; the exit code says whether every config compiled."""
    if args.compile_cache is None:
        raise UsageError("--fill-compile-cache needs --compile-cache DIR (where to keep the compiled steps)")
    from stepwatch.collector.cli.progress import TerminalHooks
    from stepwatch.collector.workflows import check  # the checks' analysis: loaded by this flag only

    compiled = [config for config in configs if config.xla]
    if not compiled:
        print("no config compiles its step (XLA or torch.compile off in every one): nothing to keep")
        return EXIT_OK
    here = {"this environment": virtualenvs.Environment.here("this environment")}
    statuses = check.fill_caches(compiled, here, execution.RunOptions(**trial_options(args)), TerminalHooks())
    return EXIT_OK if all(status == "ok" for status in statuses) else EXIT_FAILED


def shard(text: str) -> tuple[int, int]:
    """``K/N`` with 1 <= K <= N."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N, e.g. 1/4") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"{text!r}: K must be between 1 and N")
    return k, n


def run(args: argparse.Namespace) -> int:
    """Collect: run the (narrowed) suite and write one parquet file; or, with ``--import``, the team's own benchmark
    command, its output imported into the results folder."""
    command = import_command(args)
    if command is not None:
        return run_imported(command, args)
    suite = load_suite(args.suite)
    configs = list(narrow(suite.configs, matrix_values(args), suite.defaults))
    if args.shard:  # every N-th config from the K-th: the shares differ by one config at most
        (k, n), total = args.shard, len(configs)
        configs = configs[k - 1 :: n]
        if not configs:  # more jobs than configs (a narrow matrix): nothing to do is no failure
            print(f"--shard {k}/{n}: this share of the suite's {total} configs is empty; nothing to run")
            return EXIT_OK
    trials = args.trials if args.trials is not None else suite.trials
    if trials < 1:
        raise UsageError("--trials must be at least 1")
    if args.find_max_batch:
        refusal = next(filter(None, (max_batch.cpu_refusal(c, args.max_batch_memory) for c in configs)), None)
        if refusal:
            raise UsageError(refusal)
    try:
        requirements = virtualenvs.parse_side(args.packages, "with") if args.packages is not None else ()
    except ValueError as error:
        raise UsageError(str(error)) from None
    if any(config.precision == FP8 for config in configs):  # before any trial: not a failed row per trial
        refusal = fp8_refusal(*(host.gpu_capability() or (None, None)))
        if refusal:
            raise UsageError(refusal)
    if args.dry_run:
        for config in configs:
            print(config.label())
        print(f"{len(configs)} configs x {trials} trials")
        return EXIT_OK
    if args.fill_compile_cache:
        return fill_compile_cache(configs, args)
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    options = execution.RunOptions(
        label=args.label,
        **price_options(args),
        workers=args.workers,
        **trial_options(args),
    )
    remote = objectstore.is_remote(args.out)
    options.profile_home = args.out if remote else None
    out = DEFAULT_OUT if remote else Path(args.out)  # remote runs keep their file here too, then upload it
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the results folder {out}: {error.strerror or error}") from None
    if requirements:  # after the cheap checks: building an environment takes minutes
        envs = virtualenvs.ensure_all(
            {"with": requirements}, args.reuse_site_packages, tuple(args.pip_arg), console.print
        )
        options.python = envs["with"].python
    plan = execution.interleave(configs, trials)
    opened = execution.open_results(out, suite.name, plan, args.resume)
    results = opened.results
    if opened.nothing_to_resume:
        console.print(f"nothing to resume for suite {suite.name} in {out}: starting a new run")
    if opened.done:
        console.print(f"resuming {results.path}: {opened.done} of {len(plan)} trials already recorded")
    todo = execution.pending(plan, results.rows)

    dashboard = live.LiveDashboard(args, results.path, suite.name, len(todo)) if args.dashboard else None
    try:
        if args.find_max_batch:
            search_max_batches(configs, options, args)
        outcomes = run_trials(todo, results, suite.name, opened.suite_run_id, options, trials, dashboard)
    except BaseException:
        if dashboard:
            dashboard.close()
        raise
    console.print(run_summary(results.rows))
    failed = [o for o in outcomes if o.row["status"] != "ok"]
    print(f"results: {results.path}")
    if remote:
        try:
            uploaded = objectstore.upload(results.path, args.out)
            for row in results.rows:  # the profiles of this file's trials, under the same prefix
                kept = out / execution.PROFILES_DIR / row["run_id"]
                if row.get("profile_uri") and kept.is_dir():
                    objectstore.upload(kept, f"{args.out.rstrip('/')}/{execution.PROFILES_DIR}")
        except objectstore.StorageError as error:
            raise ResultsError(
                f"{error}; the results are kept in {results.path}; rerun the same command with --resume to upload them"
            ) from None
        print(f"uploaded: {uploaded}")
    if failed:
        console.print(f"[red]{len(failed)} of {len(outcomes)} trials failed[/red]")
    if dashboard:
        console.print("the dashboard keeps serving (Ctrl-C to stop)")
        served = dashboard.serve_on()
        return EXIT_FAILED if failed else served
    return EXIT_FAILED if failed else EXIT_OK


def search_max_batches(configs: list[Any], options: execution.RunOptions, args: argparse.Namespace) -> None:
    """Each config's largest per-device batch, kept for its rows (``options.max_batches``)."""
    for config in configs:
        console.print(f"finding the largest per-device batch for {config.label()} ...")
        found = options.max_batches[config.key] = max_batch.find_max_batch(
            config,
            options.python,
            console.print,
            args.max_batch_memory,
            args.max_batch_budget,
            args.max_batch_probe_limit,
        )
        console.print(f"  largest per-device batch that trained: {found.largest} (the search ended: {found.ended})")


def run_trials(
    todo: list[Any], results: Any, suite: str, suite_run_id: str, options: execution.RunOptions, trials: int,
    dashboard: live.LiveDashboard | None,
) -> list[execution.Outcome]:  # fmt: skip
    """The trials with a progress bar and a line each; beside a dashboard, each row ingested as it is recorded."""
    with Progress(*PROGRESS_COLUMNS, console=console, transient=False) as progress:
        task = progress.add_task("starting", total=len(todo))

        def on_start(config: Any, trial: int) -> None:
            progress.update(task, description=f"{config.label()} trial {trial + 1}/{trials}")
            if dashboard:
                dashboard.started(config, trial, trials)

        def on_done(outcome: execution.Outcome) -> None:
            progress.console.print(trial_line(outcome.config.label(), outcome.row, outcome.trial))
            progress.advance(task)
            if dashboard:
                dashboard.done(outcome)

        return execution.run_plan(todo, results, suite, suite_run_id, options, on_start,
                                  on_done)  # fmt: skip
