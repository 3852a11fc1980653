"""``stepwatch ingest`` and ``stepwatch synthesize``: parquet into the store, and synthetic history for load
tests into a store of its own."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.progress import MofNCompleteColumn, Progress, TextColumn

from collector.analysis import report
from collector.analysis.comparison import EXIT_FAILED, EXIT_OK
from collector.cli.arguments import DEFAULT_OUT, UsageError, add_db_argument, console, db_path
from collector.store import database, objectstore
from collector.store.ingest import ingest


def register(commands: Any) -> None:
    parser = commands.add_parser("ingest", help="load result parquet into the DuckDB store")
    parser.add_argument("sources", nargs="*", help="folders, files or s3:// / gs:// prefixes (default data/results)")
    add_db_argument(parser)
    parser.add_argument(
        "--synthetic", action="store_true", help=f"synthetic test data (default {database.SYNTHETIC_DB})"
    )
    parser.set_defaults(handler=run)

    synth = commands.add_parser("synthesize", help="generate synthetic history for load tests (never real)")
    synth.add_argument("--rows", type=int, default=100_000)
    synth.add_argument("--out", default="data/synthetic", help="folder for the synthetic parquet files")
    synth.add_argument("--db", type=Path, help=f"synthetic store (default {database.SYNTHETIC_DB})")
    synth.add_argument("--seed", type=int, default=0)
    synth.set_defaults(handler=run_synthesize)


def run(args: argparse.Namespace) -> int:
    """Load result parquet into the DuckDB store: new files and rows only; bad files quarantined."""
    return ingest_and_report(args.sources or [str(DEFAULT_OUT)], db_path(args, args.synthetic), args.synthetic)


def ingest_and_report(sources: list[str], db: Path, synthetic: bool) -> int:
    """Ingest with a progress line, then say what was ingested, skipped and quarantined; exit 4 on any refusal."""
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
