"""``stepwatch ingest``, ``stepwatch rebuild`` and ``stepwatch synthesize``: parquet into the store, a lost
store rebuilt from its results and saved alerts, and synthetic history for load tests into a store of its own."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.progress import MofNCompleteColumn, Progress, TextColumn

from collector.analysis import report
from collector.analysis.comparison import EXIT_FAILED, EXIT_OK
from collector.cli.arguments import DEFAULT_OUT, UsageError, add_db_argument, console, db_path
from collector.store import database, history, objectstore
from collector.store.ingest import ingest


def register(commands: Any) -> None:
    parser = commands.add_parser("ingest", help="load result parquet into the DuckDB store")
    parser.add_argument("sources", nargs="*", help="folders, files or s3:// / gs:// prefixes (default data/results)")
    add_db_argument(parser)
    parser.add_argument(
        "--synthetic", action="store_true", help=f"synthetic test data (default {database.SYNTHETIC_DB})"
    )
    parser.set_defaults(handler=run)

    again = commands.add_parser("rebuild", help="make a lost store again from its results and saved alerts")
    again.add_argument("sources", nargs="+", help="folders, files or s3:// / gs:// prefixes of results")
    again.add_argument("--alerts", help="the alerts file `stepwatch alerts save` wrote (path or URI)")
    add_db_argument(again)
    again.add_argument("--synthetic", action="store_true", help="the results are synthetic test data")
    again.set_defaults(handler=run_rebuild)

    synth = commands.add_parser("synthesize", help="generate synthetic history for load tests (never real)")
    synth.add_argument("--rows", type=int, default=100_000)
    synth.add_argument("--out", default="data/synthetic", help="folder for the synthetic parquet files")
    synth.add_argument("--db", type=Path, help=f"synthetic store (default {database.SYNTHETIC_DB})")
    synth.add_argument("--seed", type=int, default=0)
    synth.set_defaults(handler=run_synthesize)


def run(args: argparse.Namespace) -> int:
    """Load result parquet into the DuckDB store: new files and rows only; bad files quarantined."""
    return ingest_and_report(args.sources or [str(DEFAULT_OUT)], db_path(args, args.synthetic), args.synthetic)


def run_rebuild(args: argparse.Namespace) -> int:
    """A new store from results and a saved alerts file (a store lost with a cache, say)."""
    db = db_path(args, args.synthetic)
    _check_sources(args.sources)
    with _progress(db) as (on_file, _):
        done, restored = history.rebuild(args.sources, db, args.alerts, args.synthetic, on_file)
    for line in report.ingest_lines(done, db):
        console.print(line)
    console.print(f"rebuilt {db}: {done.rows_added:,} run(s), {restored} alert(s) restored")
    return EXIT_FAILED if done.quarantined or done.refused else EXIT_OK


def _check_sources(sources: list[str]) -> None:
    for source in sources:
        if not objectstore.is_remote(source) and not Path(source).exists():
            hint = ": run `stepwatch run` first" if source == str(DEFAULT_OUT) else ""
            raise UsageError(f"{source} does not exist{hint}")


@contextlib.contextmanager
def _progress(db: Path) -> Iterator[tuple[Callable[[str, str], None], Callable[[], None]]]:
    """A progress line counting files, and what to say while another write holds the store."""
    columns = TextColumn("{task.description}"), MofNCompleteColumn()
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("ingesting", total=None)

        def on_file(uri: str, outcome: str) -> None:
            bar.advance(task)

        def on_wait() -> None:
            bar.console.print(f"waiting for another ingest into {db} to finish ...")

        yield on_file, on_wait


def ingest_and_report(sources: list[str], db: Path, synthetic: bool) -> int:
    """Ingest with a progress line, then say what was ingested, skipped and quarantined; exit 4 on any refusal."""
    _check_sources(sources)
    with _progress(db) as (on_file, on_wait):
        done = ingest(sources, db, synthetic, on_file, on_wait)
    for line in report.ingest_lines(done, db):
        console.print(line)
    return EXIT_FAILED if done.quarantined or done.refused else EXIT_OK


def run_synthesize(args: argparse.Namespace) -> int:
    """Write synthetic history (for load tests) and ingest it into a store of its own."""
    from collector.store import synthetic  # numpy-heavy generator, only needed here

    if args.rows < 1:
        raise UsageError("--rows must be at least 1")
    files = synthetic.generate(args.rows, Path(args.out), seed=args.seed)
    console.print(f"wrote {len(files)} synthetic file(s) to {args.out}")
    return ingest_and_report([args.out], db_path(args, synthetic=True), synthetic=True)
