"""``stepwatch ingest``, ``stepwatch rebuild`` and ``stepwatch synthesize``: parquet into the store, a lost
store rebuilt from its results and saved alerts, and synthetic history for load tests into a store of its own."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.markup import escape

from stepwatch.collector import imports
from stepwatch.collector.cli.arguments import DEFAULT_OUT, add_db_argument, console, db_path
from stepwatch.collector.cli.exits import EXIT_FAILED, EXIT_OK
from stepwatch.collector.cli.progress import TerminalHooks
from stepwatch.collector.errors import UsageError
from stepwatch.collector.imports.rows import BETTER
from stepwatch.collector.store import objectstore
from stepwatch.collector.store.files import DB_ENV, SYNTHETIC_DB
from stepwatch.collector.workflows.hooks import ingest_into

IMPORTED_DIR = Path("data/imported")  # another tool's output, as result rows (what a store is rebuilt from)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "ingest", help="load result parquet, or another tool's benchmark output, into the DuckDB store"
    )
    parser.add_argument(
        "sources", nargs="*",
        help="folders, files or s3:// / gs:// prefixes (default data/results); a file or folder of another tool's "
        f"output is imported ({imports.known()})",
    )  # fmt: skip
    add_recursive_argument(parser)
    add_db_argument(parser)
    parser.add_argument("--format", choices=tuple(imports.FORMATS), help="the format of every source (default: each "
                        "file's, from its content)")  # fmt: skip
    parser.add_argument("--better", choices=BETTER, help="which way is better for imported results whose format "
                        "does not say (a track_ benchmark's, a custom metric's)")  # fmt: skip
    parser.add_argument("--commit", help="the commit of imported results whose format records none")
    parser.add_argument("--imported-to", type=Path, default=IMPORTED_DIR, metavar="FOLDER",
                        help=f"where imported results are kept as parquet (default {IMPORTED_DIR})")  # fmt: skip
    parser.add_argument("--synthetic", action="store_true", help=f"synthetic test data (default {SYNTHETIC_DB})")
    parser.set_defaults(handler=run)

    again = commands.add_parser("rebuild", help="make a lost store again from its results and saved alerts")
    again.add_argument("sources", nargs="+", help="folders, files or s3:// / gs:// prefixes of results")
    add_recursive_argument(again)
    again.add_argument("--alerts", help="the alerts file `stepwatch alerts save` wrote (path or URI)")
    add_db_argument(again)
    again.add_argument("--synthetic", action="store_true", help="the results are synthetic test data")
    again.set_defaults(handler=run_rebuild)

    synth = commands.add_parser("synthesize", help="generate synthetic history for load tests (never real)")
    synth.add_argument("--rows", type=int, default=100_000)
    synth.add_argument("--out", default="data/synthetic", help="folder for the synthetic parquet files")
    synth.add_argument("--db", type=Path, help=f"synthetic store (default {SYNTHETIC_DB})")
    synth.add_argument("--seed", type=int, default=0)
    synth.set_defaults(handler=run_synthesize)

    keep = commands.add_parser(
        "maintain", help="keep a shared store clean: compact, expire old snapshots, remove files nothing reads"
    )
    keep.add_argument("--db", help="the shared store's address (default $STEPWATCH_DB)")
    keep.add_argument(
        "--keep-days",
        type=float,
        default=30.0,
        help="snapshots younger than this stay, so that as_of reads any time in them (default 30)",
    )
    keep.add_argument("--orphans-older-than", type=float, default=24.0, metavar="HOURS",
                      help="remove a file nothing reads only when older than this: no writer still commits it "
                           "(default 24)")  # fmt: skip
    keep.set_defaults(handler=run_maintain)


def add_recursive_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--recursive", action="store_true", help="also the parquet in every folder below (not in quarantine/)"
    )


def run(args: argparse.Namespace) -> int:
    """Load result parquet into the DuckDB store: new files and rows only; bad files quarantined. Another tool's
    output is imported first (``collector.imports``): each file becomes a parquet file of result rows."""
    sources = args.sources or [str(DEFAULT_OUT)]
    foreign = [s for s in sources if not objectstore.is_remote(s) and (args.format or imports.is_foreign(Path(s)))]
    if args.synthetic and foreign:
        raise UsageError("imported results are real: they go into a store of real results (drop --synthetic)")
    for source in foreign:
        if not Path(source).exists():
            raise UsageError(f"{source} does not exist")
    converted = imports.convert([Path(s) for s in foreign], args.imported_to, args.format, args.better, args.commit)
    for path, fmt, count in converted.read:
        console.print(f"imported {escape(path)} ({fmt}): " + (f"{count:,} result row(s)" if count else "as before"))
    parquet = [s for s in sources if s not in foreign] + [str(f) for f in converted.files]
    if not parquet:
        for path, why in converted.refused:
            console.print(f"skipped {escape(path)}: {escape(why)}")
        return EXIT_FAILED
    code = ingest_and_report(
        parquet,
        db_path(args, args.synthetic, follow=False),
        args.synthetic,
        args.recursive,
        bool(args.sources),
        converted.refused,
    )
    return EXIT_FAILED if converted.refused else code


def run_rebuild(args: argparse.Namespace) -> int:
    """A new store from results and a saved alerts file (a store lost with a cache, say)."""
    from stepwatch.collector.store import (
        history,  # the alerts it restores are read with pandas, which ingest never needs
    )

    db = db_path(args, args.synthetic)
    _check_sources(args.sources, args.recursive, named=True)
    hooks = TerminalHooks()
    with hooks.ingesting(db) as (on_file, _):
        done, restored = history.rebuild(args.sources, db, args.alerts, args.synthetic, on_file, args.recursive)
    hooks.ingested(done, db)
    console.print(f"rebuilt {db}: {done.rows_added:,} run(s), {restored} alert(s) restored")
    return EXIT_FAILED if done.quarantined or done.refused else EXIT_OK


def _check_sources(sources: list[str], recursive: bool, named: bool) -> None:
    """Every source exists; a folder with no parquet of its own but some in folders below it is a usage error
    when the user named it (a note when it is the default folder), naming them and --recursive."""
    for source in sources:
        if not objectstore.is_remote(source) and not Path(source).exists():
            hint = ": run `stepwatch run` first" if source == str(DEFAULT_OUT) else ""
            raise UsageError(f"{source} does not exist{hint}")
        if recursive or objectstore.list_parquet(source)[1]:
            continue
        below = objectstore.parquet_below(source)
        if below:
            files = sum(len(entries) for _, entries in below)
            top = objectstore.location(source).path.rstrip("/")
            counts = ", ".join(f"{loc.path[len(top) + 1 :]} {len(entries)}" for loc, entries in below[:3])
            more = ", ..." if len(below) > 3 else ""
            first = below[0][0].path[len(top) + 1 :]
            line = (
                f"{source} holds no parquet of its own, but {files} file(s) in {len(below)} folder(s) below it "
                f"({counts}{more}): name one (stepwatch ingest {source.rstrip('/')}/{first}) or pass --recursive"
            )
            if named:
                raise UsageError(line)
            console.print(f"note: {line}")


def ingest_and_report(
    sources: list[str],
    db: Path,
    synthetic: bool,
    recursive: bool = False,
    named: bool = True,
    refused: list[tuple[str, str]] | None = None,
) -> int:
    """Ingest with a progress line, then say what was ingested, skipped and quarantined; exit 4 on any refusal.
    ``named``: the user named the sources (a folder whose parquet all sit deeper is then an error); ``refused``:
    files an import refused, said with the ingest's own."""
    _check_sources(sources, recursive, named)
    done = ingest_into(sources, db, synthetic, TerminalHooks(), recursive, refused or [])
    return EXIT_FAILED if done.quarantined or done.refused else EXIT_OK


def run_maintain(args: argparse.Namespace) -> int:
    """Compact, expire and clean a shared store (``collector.store.maintain``), saying what it removed."""
    from stepwatch.collector.store import address, maintain, shared

    text = args.db or os.environ.get(DB_ENV, "")
    if not address.is_shared(text):
        raise UsageError("maintain keeps a shared store clean: --db iceberg+postgresql://...?warehouse=... (a DuckDB "
                         "file compacts itself as it is written)")  # fmt: skip
    if args.keep_days < 0 or args.orphans_older_than < 0:
        raise UsageError("--keep-days and --orphans-older-than cannot be negative")
    store = shared.SharedStore(address.parse(text))
    store.writable()
    console.print(f"maintaining {store.address.shown}")
    maintain.maintain(store, args.keep_days, args.orphans_older_than * 3600, lambda line: console.print(f"  {line}"))
    return EXIT_OK


def run_synthesize(args: argparse.Namespace) -> int:
    """Write synthetic history (for load tests) and ingest it into a store of its own."""
    from stepwatch.collector.workflows import synthetic  # numpy-heavy generator, only needed here

    if args.rows < 1:
        raise UsageError("--rows must be at least 1")
    files = synthetic.generate(args.rows, Path(args.out), seed=args.seed)
    console.print(f"wrote {len(files)} synthetic file(s) to {args.out}")
    return ingest_and_report([args.out], db_path(args, synthetic=True), synthetic=True)
