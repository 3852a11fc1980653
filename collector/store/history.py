"""History that survives losing the store: the alerts' triage saved as a file beside the results, and a store
rebuilt from the results and that file (for when the store, a CI cache entry say, is gone).

The results files are the store's runs; the alerts file is the only state a person adds (statuses, notes,
new baselines). Everything else in the store is derived from those two.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from stepwatch.collector.store import objectstore, records
from stepwatch.collector.store.address import attached, shown
from stepwatch.collector.store.database import (
    StoreError,
    compact,
    delta_dir,
    ingest,
    open_store,
    snapshot,
    update,
    writer_lock,
)
from stepwatch.collector.store.ingest import IngestReport

ALERT_KEYS = ("id", "series_key", "metric", "status", "change_at")


def save_alerts(db: Path, target: str) -> int:
    """Write the store's alerts (every column, ids included) to ``target``, a local path or s3:// / gs:// URI;
    the file appears whole or not at all. Returns how many alerts."""
    with open_store(db) as reader:
        table = records.all_alerts(reader.connection())
    folder, name = target.rsplit("/", 1) if "/" in target else (".", target)
    with tempfile.TemporaryDirectory(prefix=".stepwatch-alerts-") as work:
        local = Path(work) / name
        pq.write_table(table, local)
        if objectstore.is_remote(target):
            objectstore.upload(local, folder)  # whole or not at all, retried
        else:
            Path(folder).mkdir(parents=True, exist_ok=True)
            tmp = Path(folder) / f".{name}.{os.getpid()}.tmp"
            shutil.copyfile(local, tmp)
            os.replace(tmp, target)
    return table.num_rows


def read_alerts(source: str) -> pa.Table:
    """A saved alerts file (local or remote, read as ingest reads a results file), checked: StoreError (one
    line) when it is not one."""
    try:
        loc, [entry] = objectstore.list_parquet(source)
        table = pq.read_table(pa.BufferReader(objectstore.read_bytes(loc, entry.path)))
    except FileNotFoundError:
        raise StoreError(f"{source} does not exist") from None
    except (pa.ArrowException, OSError, ValueError) as error:
        raise StoreError(f"{source} is not a saved alerts file: {' '.join(str(error).split())[:200]}") from None
    missing = [c for c in ALERT_KEYS if c not in table.column_names]
    if missing:
        raise StoreError(f"{source} is not a saved alerts file (no column {', '.join(missing)})")
    unknown = set(table.column("status").to_pylist()) - set(records.STATUSES)
    if unknown:
        raise StoreError(f"{source} holds alerts of unknown status {', '.join(map(repr, sorted(unknown, key=str)))}")
    return table


def rebuild(
    sources: list[str],
    db: Path,
    alerts: str | None,
    synthetic: bool = False,
    on_file: Callable[[str, str], None] = lambda uri, outcome: None,
    recursive: bool = False,
) -> tuple[IngestReport, int]:
    """A new store at ``db`` from result files and a saved alerts file: built beside it, compacted into one
    file and renamed into place, so that ``db`` is whole or absent. Returns the ingest's report and how many
    alerts were restored. Refuses to replace a store that exists."""
    if attached(db):
        raise StoreError(f"{shown(db)} is a shared store: it keeps its own history; ingest the files into it instead")
    if db.exists() or delta_dir(db).exists():
        raise StoreError(f"{db} already exists: a rebuild makes a new store; move it away or name another --db")
    saved = read_alerts(alerts) if alerts else None
    db.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=db.parent, prefix=f".{db.name}.rebuild-") as work:
        built = Path(work) / db.name
        report = ingest(sources, built, synthetic, on_file, recursive=recursive)
        if not built.exists():
            raise StoreError(f"nothing to rebuild from: no results files under {', '.join(sources)}")
        if saved is not None:
            with update(built) as con:
                records.restore_alerts(con, saved)
        with writer_lock(built):
            compact(built, snapshot(built, views=False))
        with writer_lock(db):
            if db.exists():
                raise StoreError(f"{db} was created while rebuilding; the rebuilt store is discarded")
            os.replace(built, db)
        shutil.rmtree(delta_dir(built), ignore_errors=True)
    return report, saved.num_rows if saved is not None else 0
