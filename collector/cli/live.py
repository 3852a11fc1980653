"""``stepwatch run --dashboard``: the dashboard first, the trials after. The server starts as soon as the run's results
file exists, each trial's row is ingested into the store as it finishes (the Overview fills in: the dashboard
reruns its page when the store changes while a suite runs), and the suite's progress is written where the Run page
reads it (``collector.runner.progress``). Once the trials are done the dashboard keeps serving until Ctrl-C."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.markup import escape

from stepwatch.collector.cli.arguments import console, db_path
from stepwatch.collector.runner import execution
from stepwatch.collector.runner.progress import PROGRESS_ENV, Progress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dashboard", action="store_true",
        help="serve the dashboard before the first trial, ingest each trial's row into the store (--db) as it "
        "finishes, and keep serving after the last (Ctrl-C to stop)",
    )  # fmt: skip
    parser.add_argument("--db", help="with --dashboard: the store (default $STEPWATCH_DB or data/stepwatch.duckdb)")
    parser.add_argument("--dashboard-address", default="127.0.0.1", help="with --dashboard (default 127.0.0.1)")
    parser.add_argument("--dashboard-port", type=int, default=8501, help="with --dashboard (default 8501)")


class LiveDashboard:
    """The dashboard's server beside a running suite, and the progress it shows."""

    def __init__(self, args: argparse.Namespace, results: Path, suite: str, total: int) -> None:
        from stepwatch.collector.cli.dashboard import serve  # the store's modules (DuckDB): only with --dashboard
        from stepwatch.collector.store.address import attached

        db = db_path(args)
        self.db = db if attached(db) else db.resolve()
        self.results = results
        self.path = results.with_name(results.name + ".progress.json")
        self.progress = Progress(suite, total)
        self.progress.write(self.path)
        self.server = serve(self.db, args.dashboard_address, args.dashboard_port, {PROGRESS_ENV: str(self.path)})

    def started(self, config: Any, trial: int, trials: int) -> None:
        self.progress.running = f"{config.label()} trial {trial + 1}/{trials}"
        self.progress.write(self.path)

    def done(self, outcome: execution.Outcome) -> None:
        """The trial's row into the store (the results file so far: rows already there are skipped), then the
        progress."""
        from stepwatch.collector.workflows.hooks import Hooks, ingest_into

        try:
            ingest_into([str(self.results)], self.db, False, Hooks())
        except Exception as error:  # noqa: BLE001 - the row is in the results file; the next trial's ingest retries
            console.print(f"note: the dashboard's store did not take this row yet: {escape(str(error))}")
        self.progress.done += 1
        self.progress.failed += outcome.row["status"] != "ok"
        self.progress.running = None
        self.progress.write(self.path)

    def serve_on(self) -> int:
        """The run has ended: said so, and the dashboard served until Ctrl-C."""
        from stepwatch.collector.cli.dashboard import served

        self.progress.ended, self.progress.running = True, None
        self.progress.write(self.path)
        try:
            self.server.wait()
        except KeyboardInterrupt:
            pass
        finally:
            self.close()
        return served(self.server)

    def close(self) -> None:
        """The server stopped (the run's end, or its failure before it), and the progress file with it."""
        from stepwatch.collector.cli.dashboard import stop

        stop(self.server)
        self.path.unlink(missing_ok=True)
