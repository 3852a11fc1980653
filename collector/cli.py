"""The ``stepwatch`` command. Each subcommand is its arguments plus one ``run_*`` function.

Exit codes: 0 no problem (no regression), 1 regression, 2 usage error (bad flags, suite, catalog,
selection or metric), 3 inconclusive (with --fail-on-inconclusive), 4 benchmarks failed to run, results
could not be stored, or a file was quarantined.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from collector import alerts, analysis, catalog, metrics, objectstore, queries, report, runner, store, upgrade
from collector.config import BACKENDS, DATA, LOOPS, PRECISIONS, STRATEGIES, config_from_row
from collector.results import ResultFile, ResultsError
from collector.suite import SuiteError, load_suite, narrow, parse_bool

EXIT_OK, EXIT_USAGE, EXIT_FAILED = report.EXIT_OK, report.EXIT_USAGE, report.EXIT_FAILED
DEFAULT_OUT = Path("data/results")

console = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 150)


class UsageError(ValueError):
    """Something the user can fix on the command line, in one line."""


def _list(cast: Callable[[str], Any] = str, choices: Sequence[str] | None = None) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        if choices is not None:
            for value in values:
                if value not in choices:
                    raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(choices)}")
        try:
            return [cast(v) for v in values]
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def _xla(text: str) -> bool:
    try:
        return parse_bool(text)
    except ValueError:
        raise ValueError(f"{text!r} is not one of off, on") from None


def add_matrix_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite and the flags that narrow its matrix (shared by run and upgrade-check)."""
    parser.add_argument("--suite", default="smoke", help="bundled suite name (smoke, gpu-nightly, ...) or a TOML path")
    parser.add_argument("--models", type=_list(), help="keep only these models, e.g. resnet50,bert")
    parser.add_argument("--preset", type=_list(), help="set the size preset(s), e.g. tiny")
    parser.add_argument("--backend", type=_list(choices=BACKENDS), help="cpu, gpu or tpu")
    parser.add_argument("--devices", type=_list(int), dest="num_devices", help="devices per run")
    parser.add_argument("--strategy", type=_list(choices=STRATEGIES), help="default, mirrored or tpu")
    parser.add_argument("--xla", type=_list(_xla), help="off,on")
    parser.add_argument("--precision", type=_list(choices=PRECISIONS), help=", ".join(PRECISIONS))
    parser.add_argument("--batch", type=_list(int), dest="per_device_batch", help="per-device batch size(s)")
    parser.add_argument("--steps-per-execution", type=_list(int), dest="steps_per_execution")
    parser.add_argument("--loop", type=_list(choices=LOOPS), help="fit,ctl")
    parser.add_argument("--data", type=_list(choices=DATA), help="synthetic,pipeline")
    parser.add_argument("--steps", type=_list(int), help="measured steps after warm-up")
    parser.add_argument("--warmup", type=_list(int), dest="warmup_steps", help="warm-up steps (>= 2 windows)")
    parser.add_argument("--window", type=_list(int), dest="window_steps", help="steps per timing window")
    parser.add_argument("--learning-rate", type=_list(float), dest="learning_rate")
    parser.add_argument("--timeout", type=_list(float), dest="timeout_s", help="seconds before a trial is killed")
    parser.add_argument("--price-per-hour", type=float, help="USD per hour for the whole run, overriding the catalog")
    parser.add_argument("--prices", type=Path, default=catalog.PRICES_PATH, help="price catalog TOML")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument("--label", help="free text stored with every row, e.g. candidate")
    parser.add_argument("--find-max-batch", action="store_true", help="binary-search the largest per-device batch")
    parser.add_argument("--dry-run", action="store_true", help="list the configs and exit")


OVERRIDES = (
    "preset",
    "backend",
    "num_devices",
    "strategy",
    "xla",
    "precision",
    "per_device_batch",
    "steps_per_execution",
    "loop",
    "data",
    "steps",
    "warmup_steps",
    "window_steps",
    "learning_rate",
    "timeout_s",
)


def _summary(all_rows: list[dict[str, Any]]) -> Table:
    """One line per config: trials ok, median throughput in the model's unit, CV across trials."""
    table = Table(title="stepwatch results", show_lines=False)
    for name in ("config", "ok", "throughput", "cv", "step p50", "compile", "failures"):
        table.add_column(name, justify="left" if name in ("config", "failures") else "right")
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in all_rows:
        groups.setdefault(row["config_key"], []).append(row)
    for rows in groups.values():
        first = rows[0]
        ok = [r for r in rows if r["status"] == "ok"]
        rates = [r["units_per_sec"] for r in ok]
        unit = first.get("unit") or "examples"
        throughput = f"{statistics.median(rates):,.1f} {unit}/s" if rates else "-"
        cv = f"{statistics.stdev(rates) / statistics.mean(rates):.1%}" if len(rates) > 1 else "-"
        p50 = f"{statistics.median(r['step_time_p50_s'] for r in ok) * 1000:.1f} ms" if ok else "-"
        compiles = [r["compile_s"] for r in rows if r.get("compile_s") is not None]
        compile_s = f"{statistics.median(compiles):.1f} s" if compiles else "-"
        failures = ", ".join(sorted({r["status"] for r in rows if r["status"] != "ok"}))
        label = config_from_row(first).label()
        table.add_row(label, f"{len(ok)}/{len(rows)}", throughput, cv, p50, compile_s, failures)
    return table


PROGRESS_COLUMNS = (
    TextColumn("{task.description}"),
    BarColumn(),
    MofNCompleteColumn(),
    TimeElapsedColumn(),
    TextColumn("ETA"),
    TimeRemainingColumn(),
)


def _trial_line(label: str, outcome: runner.Outcome) -> str:
    row = outcome.row
    if row["status"] == "ok":
        detail = f"{row['units_per_sec']:,.1f} {row.get('unit')}/s, compile {row.get('compile_s') or 0:.1f} s"
    else:
        detail = f"[red]{row['status']}[/red]: {escape(str(row.get('error_message')))}"
    return f"{escape(label)} trial {outcome.trial + 1}: {detail}"


def run_run(args: argparse.Namespace) -> int:
    """Collect: run the (narrowed) suite and write one parquet file."""
    suite = load_suite(args.suite)
    overrides = {name: getattr(args, name) for name in OVERRIDES}
    configs = list(narrow(suite.configs, args.models, overrides))
    trials = args.trials if args.trials is not None else suite.trials
    if trials < 1:
        raise UsageError("--trials must be at least 1")
    if args.find_max_batch and any(c.backend == "cpu" for c in configs):
        raise UsageError(
            "--find-max-batch is not supported on CPU: host memory swaps or the kernel kills the process "
            "instead of raising out-of-memory; use it on GPU or TPU hosts"
        )
    if args.dry_run:
        for config in configs:
            print(config.label())
        print(f"{len(configs)} configs x {trials} trials")
        return EXIT_OK
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    options = runner.RunOptions(
        label=args.label,
        price_per_hour=args.price_per_hour,
        prices=catalog.load_prices(args.prices),
        workers=args.workers,
    )
    remote = objectstore.is_remote(args.out)
    out = DEFAULT_OUT if remote else Path(args.out)  # remote runs keep their file here too, then upload it
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the results folder {out}: {error.strerror or error}") from None
    results = ResultFile.latest(out, suite.name) if args.resume else None
    if results is None:
        if args.resume:
            console.print(f"nothing to resume for suite {suite.name} in {out}: starting a new run")
        suite_run_id = str(uuid.uuid4())
        results = ResultFile.create(out, suite.name, suite_run_id)
    else:
        suite_run_id = results.rows[0]["suite_run_id"] if results.rows else str(uuid.uuid4())
    plan = runner.interleave(configs, trials)
    todo = runner.pending(plan, results.rows)
    if len(todo) < len(plan):
        console.print(f"resuming {results.path}: {len(plan) - len(todo)} of {len(plan)} trials already recorded")

    if args.find_max_batch:
        for config in configs:
            console.print(f"finding the largest per-device batch for {config.label()} ...")
            options.max_batches[config.key] = runner.find_max_batch(config, options.python)
            console.print(f"  largest per-device batch: {options.max_batches[config.key]}")

    with Progress(*PROGRESS_COLUMNS, console=console, transient=False) as progress:
        task = progress.add_task("starting", total=len(todo))

        def on_start(config: Any, trial: int) -> None:
            progress.update(task, description=f"{config.label()} trial {trial + 1}/{trials}")

        def on_done(outcome: runner.Outcome) -> None:
            progress.console.print(_trial_line(outcome.config.label(), outcome))
            progress.advance(task)

        outcomes = runner.run_plan(todo, results, suite.name, suite_run_id, options, on_start, on_done)
    console.print(_summary(results.rows))
    failed = [o for o in outcomes if o.row["status"] != "ok"]
    print(f"results: {results.path}")
    if remote:
        try:
            uploaded = objectstore.upload(results.path, args.out)
        except objectstore.StorageError as error:
            raise ResultsError(
                f"{error}; the results are kept in {results.path}; rerun the same command with --resume to upload them"
            ) from None
        print(f"uploaded: {uploaded}")
    if failed:
        console.print(f"[red]{len(failed)} of {len(outcomes)} trials failed[/red]")
        return EXIT_FAILED
    return EXIT_OK


def run_ingest(args: argparse.Namespace) -> int:
    """Load result parquet into the DuckDB store: new files and rows only; bad files quarantined."""
    db = Path(args.db) if args.db else store.default_db(args.synthetic)
    return _ingest(args.sources or [str(DEFAULT_OUT)], db, args.synthetic)


def _ingest(sources: list[str], db: Path, synthetic: bool) -> int:
    for source in sources:
        if not objectstore.is_remote(source) and not Path(source).exists():
            hint = ": run `stepwatch run` first" if source == str(DEFAULT_OUT) else ""
            raise UsageError(f"{source} does not exist{hint}")
    columns = TextColumn("{task.description}"), MofNCompleteColumn()
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("ingesting", total=None)

        def on_file(uri: str, outcome: str) -> None:
            bar.advance(task)

        def on_wait() -> None:
            bar.console.print(f"waiting for another ingest into {db} to finish ...")

        report = store.ingest(sources, db, synthetic, on_file, on_wait)
    for uri, reason, moved in report.quarantined:
        console.print(f"quarantined {escape(uri)}: {escape(reason)} (moved to {escape(moved)})")
    refused: dict[str, list[str]] = {}
    for uri, reason in report.refused:
        refused.setdefault(reason, []).append(uri)
    for reason, uris in refused.items():
        more = f" and {len(uris) - 1} more" if len(uris) > 1 else ""
        console.print(f"skipped {escape(uris[0])}{more}: {escape(reason)}")
    console.print(
        f"{report.files_seen} file(s): {report.files_ingested} ingested ({report.rows_added:,} new rows of "
        f"{report.rows_read:,} read), {report.files_unchanged} already in the store, {len(report.quarantined)} "
        f"quarantined; {db} in {report.seconds:.2f} s"
    )
    return EXIT_FAILED if report.quarantined or report.refused else EXIT_OK


def _reader(db_arg: str | None) -> store.StoreReader:
    db = Path(db_arg) if db_arg else store.default_db()
    if not db.exists():
        raise UsageError(f"no store at {db}: run `stepwatch ingest` first")
    return store.StoreReader(db)


def run_export(args: argparse.Namespace) -> int:
    """Write the selected runs as CSV or parquet (parquet can be ingested into another store)."""
    selection = queries.Selection.parse(args.where)
    out = Path(args.out or f"stepwatch-export.{args.format}")
    reader = _reader(args.db)
    try:
        rows = queries.export(reader.connection(), selection, args.format, out)
    except OSError as error:
        raise ResultsError(f"cannot write {out}: {error.strerror or error}") from None
    finally:
        reader.close()
    console.print(f"{rows:,} run(s) matching {escape(selection.describe())}")
    print(f"exported: {out}")
    return EXIT_OK


def run_synthesize(args: argparse.Namespace) -> int:
    """Write synthetic history (for load tests) and ingest it into a store of its own."""
    from collector import synthetic  # numpy-heavy generator, only needed here

    if args.rows < 1:
        raise UsageError("--rows must be at least 1")
    db = Path(args.db) if args.db else store.default_db(synthetic=True)
    files = synthetic.generate(args.rows, Path(args.out), seed=args.seed)
    console.print(f"wrote {len(files)} synthetic file(s) to {args.out}")
    return _ingest([args.out], db, synthetic=True)


def _write_out(text: str, out: str | None) -> None:
    """Print ``text``; with --out also write it to that file (a job summary, a PR comment body)."""
    print(text, end="" if text.endswith("\n") else "\n")
    if out:
        _write_file(text, out)


def _write_file(text: str, out: str) -> None:
    try:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a" if out == os.environ.get("GITHUB_STEP_SUMMARY") else "w") as handle:
            handle.write(text)
    except OSError as error:
        raise ResultsError(f"cannot write {out}: {error.strerror or error}") from None


VERDICT_STYLES = {"regression": "red", "improvement": "green", "inconclusive": "yellow", "failed": "red"}


def _comparison_table(comparison: report.Comparison) -> Table:
    table = Table(title=f"{escape(comparison.baseline.describe())}  ->  {escape(comparison.candidate.describe())}")
    for name in ("verdict", "series", "metric", "change", "95% CI", "n", "q", "threshold"):
        table.add_column(name, justify="left" if name in ("verdict", "series", "metric") else "right")
    for row in comparison.ordered():
        cells = row.cells()
        style = VERDICT_STYLES.get(row.verdict, "")
        if style:
            cells["verdict"] = f"[{style}]{row.verdict}[/{style}]"
        cells["series"] = escape(cells["series"])
        table.add_row(*cells.values())
    return table


def run_compare(args: argparse.Namespace) -> int:
    """Baseline vs candidate per series: ratio of geometric means, 95% CI, verdict; exit code by verdict."""
    baseline, candidate = queries.Selection.parse(args.baseline), queries.Selection.parse(args.candidate)
    overrides = metrics.load_overrides(Path(args.thresholds) if args.thresholds else None)
    reader = _reader(args.db)
    try:
        comparison = report.build(reader.connection(), baseline, candidate, args.metric, overrides)
    finally:
        reader.close()
    for side, selection in (("baseline", baseline), ("candidate", candidate)):
        if comparison.versions[side]["runs"] == ["0"]:
            raise UsageError(f"the {side} selection {selection.describe()!r} matches no runs in {reader.db}")
    _show_comparison(comparison, args.format, args.out, "stepwatch comparison")
    return comparison.exit_code(args.fail_on_inconclusive)


def _show_comparison(
    comparison: report.Comparison, fmt: str, out: str | None, title: str, preface: tuple[str, ...] = ()
) -> None:
    if fmt == "json":
        _write_out(report.to_json(comparison), out)
        return
    if fmt == "markdown":
        _write_out(report.to_markdown(comparison, title, preface), out)
        return
    stdout = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
    stdout.print(_comparison_table(comparison))
    for metric in comparison.metrics:
        text = comparison.summary_text(metric)
        if text:
            stdout.print(f"{metric.name}: {text}")
    for side in ("baseline", "candidate"):
        only = comparison.only_on(side)
        if only:
            stdout.print(f"only in the {side} ({len(only)}): " + "; ".join(escape(row.label) for row in only))
    stdout.print(f"verdict: {report.headline(comparison)}")
    if out:
        _write_file(report.to_markdown(comparison, title, preface), out)


def _alerts_output(rows: list[dict[str, Any]], fmt: str, out: str | None, title: str) -> None:
    if fmt == "json":
        _write_out(json.dumps(rows, indent=2, default=str), out)
        return
    if fmt == "markdown":
        _write_out(report.alerts_markdown(rows, title), out)
        return
    table = Table(title=title)
    for name in ("id", "status", "series", "metric", "change at", "change", "95% CI", "versions changed", "note"):
        table.add_column(name)
    for a in rows:
        table.add_row(
            str(a["id"]), a["status"], escape(report.series_label(a)), a["metric"],
            a["change_at"].strftime("%Y-%m-%d %H:%M"), report.percent(a["ratio"]),
            report.interval(a["ci_low"], a["ci_high"]), escape(report.versions_text(a["versions_changed"])),
            escape(a.get("note") or ""),
        )  # fmt: skip
    Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200).print(table)
    if out:
        _write_file(report.alerts_markdown(rows, title), out)


def _records(frame: Any) -> list[dict[str, Any]]:
    return [{k: report.plain(v) for k, v in row.items()} for row in frame.to_dict("records")]


def run_detect(args: argparse.Namespace) -> int:
    """Change points over each series' nightly history, recorded as alerts; exit 1 on an open confirmed regression."""
    selection = queries.Selection.parse(args.where)
    metric = metrics.get_metric(args.metric)
    overrides = metrics.load_overrides(Path(args.thresholds) if args.thresholds else None)
    if args.nights < 2 * analysis.MIN_SIZE:
        raise UsageError(f"--nights must be at least {2 * analysis.MIN_SIZE}")
    reader = _reader(args.db)
    try:
        scanned = alerts.scan(reader.connection(), selection, metric, overrides, args.nights)
    finally:
        reader.close()
    now = datetime.now(UTC)
    with store.update(reader.db) as con:
        counts = alerts.record(con, scanned, metric.name, now)
        open_alerts = _records(alerts.list_alerts(con, alerts.OPEN, metric.name))
    open_alerts = [a for a in open_alerts if a["series_key"] in scanned.nights]
    console.print(
        f"{len(scanned.nights)} series, {len(scanned.found)} change(s) found, {scanned.outliers} outlier night(s) "
        f"set aside; alerts: {counts['created']} new, {counts['confirmed']} confirmed, {counts['updated']} updated, "
        f"{counts['withdrawn']} withdrawn"
    )
    _alerts_output(open_alerts, args.format, args.out, f"stepwatch: open {metric.name} alerts")
    regressions = [a for a in open_alerts if a["status"] == alerts.CONFIRMED and metric.worse(a["ratio"])]
    if regressions:
        console.print(f"[red]{len(regressions)} confirmed regression(s)[/red]: triage with `stepwatch alerts ack ID`")
        return report.EXIT_REGRESSION
    return EXIT_OK


def run_alerts_list(args: argparse.Namespace) -> int:
    """Show alerts: open ones by default, or a given status, or all."""
    statuses = {"open": alerts.OPEN, "all": alerts.STATUSES}.get(args.status, (args.status,))
    reader = _reader(args.db)
    try:
        rows = _records(alerts.list_alerts(reader.connection(), statuses, args.metric))
    finally:
        reader.close()
    _alerts_output(rows, args.format, args.out, f"stepwatch alerts ({args.status})")
    return EXIT_OK


def run_alerts_set(args: argparse.Namespace) -> int:
    """Move one alert along its lifecycle (acknowledged, false positive, fixed)."""
    db = Path(args.db) if args.db else store.default_db()
    note = getattr(args, "note", None)
    with store.update(db) as con:
        before = alerts.set_status(con, args.id, args.new_status, note, datetime.now(UTC))
    console.print(f"alert {args.id}: {before} -> {args.new_status}" + (f" ({escape(note)})" if note else ""))
    return EXIT_OK


UPGRADE_RESULTS = Path("data/upgrade-check")
UPGRADE_DB = Path("data/upgrade-check.duckdb")


def run_upgrade_check(args: argparse.Namespace) -> int:
    """Build (or reuse) an environment per side, run the suite interleaved, ingest, compare, report."""
    try:
        sides = {side: upgrade.parse_side(getattr(args, side), side) for side in upgrade.SIDES}
    except ValueError as error:
        raise UsageError(str(error)) from None
    suite = load_suite(args.suite)
    configs = list(narrow(suite.configs, args.models, {name: getattr(args, name) for name in OVERRIDES}))
    if args.trials < 2:
        raise UsageError("--trials must be at least 2: a side needs two trials for a confidence interval")
    if args.dry_run:
        for side, config, trial in upgrade.plan(configs, args.trials):
            print(f"{side} {config.label()} trial {trial + 1}")
        return EXIT_OK
    overrides = metrics.load_overrides(Path(args.thresholds) if args.thresholds else None)
    envs = {
        side: upgrade.ensure(side, requirements, args.reuse_site_packages, tuple(args.pip_arg), console.print)
        for side, requirements in sides.items()
    }
    resolved = {side: upgrade.installed(env) for side, env in envs.items()}
    for side in upgrade.SIDES:
        console.print(f"{side}: " + ", ".join(f"{k} {v}" for k, v in resolved[side].items()))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = Path(args.results) / f"{stamp}-{uuid.uuid4().hex[:8]}"
    options = runner.RunOptions(price_per_hour=args.price_per_hour, prices=catalog.load_prices(args.prices))
    total = len(configs) * args.trials * 2
    with Progress(*PROGRESS_COLUMNS, console=console, transient=False) as progress:
        task = progress.add_task("starting", total=total)

        def on_start(side: str, config: Any, trial: int) -> None:
            progress.update(task, description=f"{side}: {config.label()} trial {trial + 1}/{args.trials}")

        def on_done(side: str, outcome: runner.Outcome) -> None:
            progress.console.print(_trial_line(f"{side}: {outcome.config.label()}", outcome))
            progress.advance(task)

        results, outcomes = upgrade.run(configs, args.trials, suite.name, envs, out_dir, options, on_start, on_done)
    db = Path(args.db) if args.db else UPGRADE_DB
    _ingest([str(out_dir)], db, synthetic=False)
    selections = {
        side: queries.Selection.parse(f"suite_run_id={results[side].rows[0]['suite_run_id']}") for side in upgrade.SIDES
    }
    reader = store.StoreReader(db)
    try:
        comparison = report.build(
            reader.connection(), selections["baseline"], selections["candidate"], args.metric, overrides
        )
    finally:
        reader.close()
    failed = [o for o in outcomes if o.row["status"] != "ok"]
    host = results["baseline"].rows[0].get("accelerator") or results["baseline"].rows[0].get("host")
    preface = (
        f"Baseline `{' '.join(sides['baseline'])}`, candidate `{' '.join(sides['candidate'])}`: "
        f"{len(configs)} config(s) x {args.trials} trials per side of suite `{suite.name}`, interleaved on "
        f"{host}; {len(failed)} of {len(outcomes)} trials failed.",
        "",
    )
    changed = upgrade.package_diff(envs["baseline"], envs["candidate"])
    if changed:
        preface += (
            "Packages that differ between the two environments: "
            + ", ".join(f"{name} {a} -> {b}" for name, a, b in changed)
            + ".",
            "",
        )
    title = f"stepwatch upgrade check: {' '.join(sides['baseline'])} -> {' '.join(sides['candidate'])}"
    text = report.to_markdown(comparison, title, preface)
    (out_dir / "report.md").write_text(text)
    _show_comparison(comparison, args.format, args.out, title, preface)
    console.print(f"report: {out_dir / 'report.md'}")
    code = comparison.exit_code(args.fail_on_inconclusive)
    if code == EXIT_OK and failed:
        console.print(f"[red]{len(failed)} of {len(outcomes)} trials failed[/red]")
        return EXIT_FAILED
    return code


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (and exit code 2), like every other stepwatch error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="stepwatch", description="Track deep-learning training performance.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    run = commands.add_parser("run", help="run a benchmark suite and write parquet")
    add_run_arguments(run)
    run.set_defaults(handler=run_run)

    ingest = commands.add_parser("ingest", help="load result parquet into the DuckDB store")
    ingest.add_argument("sources", nargs="*", help="folders, files or s3:// / gs:// prefixes (default data/results)")
    ingest.add_argument("--db", help=f"store file (default ${store.DB_ENV} or {store.DEFAULT_DB})")
    ingest.add_argument("--synthetic", action="store_true", help=f"synthetic test data (default {store.SYNTHETIC_DB})")
    ingest.set_defaults(handler=run_ingest)

    export = commands.add_parser("export", help="write selected runs from the store as CSV or parquet")
    export.add_argument("--where", help="selection, e.g. model=resnet50,tf_version=2.21.0,since=2026-11-01")
    export.add_argument("--format", choices=queries.EXPORT_FORMATS, default="csv")
    export.add_argument("--out", help="output file (default stepwatch-export.FORMAT)")
    export.add_argument("--db", help=f"store file (default ${store.DB_ENV} or {store.DEFAULT_DB})")
    export.set_defaults(handler=run_export)

    synth = commands.add_parser("synthesize", help="generate synthetic history for load tests (never real)")
    synth.add_argument("--rows", type=int, default=100_000)
    synth.add_argument("--out", default="data/synthetic", help="folder for the synthetic parquet files")
    synth.add_argument("--db", help=f"synthetic store (default {store.SYNTHETIC_DB})")
    synth.add_argument("--seed", type=int, default=0)
    synth.set_defaults(handler=run_synthesize)

    compare = commands.add_parser("compare", help="baseline vs candidate: ratio, 95%% CI and verdict per series")
    compare.add_argument("--baseline", required=True, help="selection, e.g. tf_version=2.20.0 or label=baseline")
    compare.add_argument("--candidate", required=True, help="selection, e.g. tf_version=2.21.0 or suite_run_id=...")
    _analysis_arguments(compare, several_metrics=True)
    compare.add_argument("--fail-on-inconclusive", action="store_true", help="exit 3 when any verdict is inconclusive")
    compare.set_defaults(handler=run_compare)

    detect = commands.add_parser("detect", help="find change points in nightly history and record alerts")
    detect.add_argument("--where", help="which runs make up the history (default: all in the store)")
    detect.add_argument("--nights", type=int, default=alerts.DEFAULT_NIGHTS, help="nights per series to look at")
    _analysis_arguments(detect, several_metrics=False)
    detect.set_defaults(handler=run_detect)

    alert = commands.add_parser("alerts", help="list alerts or move one along (ack, false-positive, fixed)")
    actions = alert.add_subparsers(dest="action", required=True, parser_class=OneLineParser)
    listing = actions.add_parser("list", help="show alerts")
    listing.add_argument("--status", default="open", choices=("open", "all", *alerts.STATUSES))
    listing.add_argument("--metric", help="only this metric")
    listing.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    listing.add_argument("--out", help="also write the markdown (or JSON) to this file")
    listing.add_argument("--db", help=f"store file (default ${store.DB_ENV} or {store.DEFAULT_DB})")
    listing.set_defaults(handler=run_alerts_list)
    for name, status, needs_note in (
        ("ack", alerts.ACKNOWLEDGED, True),
        ("false-positive", alerts.FALSE_POSITIVE, False),
        ("fixed", alerts.FIXED, False),
    ):
        action = actions.add_parser(name, help=f"mark an alert {status}")
        action.add_argument("id", type=int, help="alert id (from `stepwatch alerts list`)")
        action.add_argument("--note", required=needs_note, help="why (kept with the alert)")
        action.add_argument("--db", help=f"store file (default ${store.DB_ENV} or {store.DEFAULT_DB})")
        action.set_defaults(handler=run_alerts_set, new_status=status)

    check = commands.add_parser(
        "upgrade-check", help="the suite under two package sets, interleaved on this machine, compared"
    )
    check.add_argument("--baseline", required=True, help="pip requirements, e.g. 'tensorflow==2.20.0'")
    check.add_argument("--candidate", required=True, help="pip requirements, e.g. 'tensorflow==2.21.0 keras==3.15.1'")
    add_matrix_arguments(check)
    check.add_argument("--trials", type=int, default=5, help="trials per config and side (default 5)")
    check.add_argument(
        "--results", default=str(UPGRADE_RESULTS), help=f"folder for the parquet (default {UPGRADE_RESULTS})"
    )
    check.add_argument("--reuse-site-packages", action="store_true",
                       help="build the side environments on top of this interpreter's packages (faster; the "
                       "pinned requirements still win)")  # fmt: skip
    check.add_argument("--pip-arg", action="append", default=[], help="extra pip install argument (repeatable)")
    check.add_argument("--fail-on-inconclusive", action="store_true", help="exit 3 when any verdict is inconclusive")
    check.add_argument("--dry-run", action="store_true", help="print the interleaved plan and exit")
    _analysis_arguments(check, several_metrics=True, default_db=UPGRADE_DB)
    check.set_defaults(handler=run_upgrade_check)
    return parser


def _analysis_arguments(parser: argparse.ArgumentParser, several_metrics: bool, default_db: Path | None = None) -> None:
    names = ", ".join(metrics.METRICS)
    if several_metrics:
        parser.add_argument(
            "--metric", type=_list(choices=tuple(metrics.METRICS)), default=[metrics.DEFAULT_METRIC],
            help=f"comma-separated metrics (default {metrics.DEFAULT_METRIC}): {names}",
        )  # fmt: skip
    else:
        parser.add_argument(
            "--metric", default=metrics.DEFAULT_METRIC, choices=tuple(metrics.METRICS), metavar="METRIC",
            help=f"default {metrics.DEFAULT_METRIC}: {names}",
        )  # fmt: skip
    parser.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    parser.add_argument("--out", help="also write the report (markdown, or JSON with --format json) to this file")
    parser.add_argument("--thresholds", help=f"per-series threshold overrides (default {metrics.THRESHOLDS_PATH})")
    where = default_db or f"${store.DB_ENV} or {store.DEFAULT_DB}"
    parser.add_argument("--db", help=f"store file (default {where})")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (
        SuiteError,
        UsageError,
        catalog.CatalogError,
        queries.SelectionError,
        metrics.MetricError,
        alerts.AlertError,
    ) as error:
        print(f"stepwatch: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (
        ResultsError,
        runner.MaxBatchError,
        store.StoreError,
        objectstore.StorageError,
        upgrade.UpgradeError,
    ) as error:
        print(f"stepwatch: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("stepwatch: interrupted; finished trials are saved, rerun with --resume to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
