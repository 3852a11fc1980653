"""The parquet file of one suite invocation, rewritten atomically after every trial."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stepwatch.collector.errors import Failure
from stepwatch.collector.schema import SchemaError, conform, to_table, write_parquet


class ResultsError(RuntimeError, Failure):
    """Results that cannot be written or read back, in one line."""


class ResultFile:
    """All rows of one invocation. Each append rewrites the file under a temporary name, then renames
    it over the old one, so a kill at any moment leaves the previous complete file in place."""

    def __init__(self, path: Path, rows: list[dict[str, Any]] | None = None) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = list(rows or [])

    @classmethod
    def create(cls, out_dir: Path, suite: str, suite_run_id: str) -> ResultFile:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        return cls(out_dir / f"{suite}-{stamp}-{suite_run_id[:8]}.parquet")

    @classmethod
    def latest(cls, out_dir: Path, suite: str) -> ResultFile | None:
        """The most recent file of ``suite`` in ``out_dir``, with its rows, for --resume."""
        candidates = sorted(out_dir.glob(f"{suite}-*.parquet"), key=lambda p: p.stat().st_mtime)
        if not candidates:
            return None
        return cls(candidates[-1], read_rows(candidates[-1]))

    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        try:
            self._write()
        except OSError as error:
            self.rows.pop()
            raise ResultsError(
                f"cannot write {self.path}: {error.strerror or error}; "
                f"the {len(self.rows)} trial(s) recorded before are still in it"
            ) from None

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as handle:
                write_parquet(to_table(self.rows), handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a stepwatch parquet file; a corrupt or foreign file is one ResultsError."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        raise ResultsError(f"{path} is not a readable parquet file: {error}") from None
    try:
        return conform(table).to_pylist()
    except SchemaError as error:
        raise ResultsError(f"{path} is not a stepwatch results file: {error}") from None
