"""A shared store kept clean (``stepwatch maintain``), safe beside writers: small data files compacted, old snapshots
expired, files no live snapshot reads removed from the warehouse, and dead writers' staging folders removed.

- **Compaction.** Each table's data files smaller than SMALL_FILE_BYTES (an ingest writes one) are read and written
  again as one file, in one commit that replaces them; the snapshot says ``stepwatch.operation=compact``, so a local
  copy knows it adds no rows. A writer that commits meanwhile wins; the compaction is made again on top of it.
- **Expiry.** Snapshots older than the retention are dropped, but never the current one, nor the newest one at or
  before the retention's start: so ``as_of`` at any time within the retention still reads what it read.
- **Orphans.** pyiceberg removes none, so the warehouse is listed under each table's location against what every
  live snapshot reads (the current metadata file, each snapshot's manifest list, its manifests and their live data
  files). A file nothing reads is removed only when older than the grace: a writer that has written its files and
  not yet committed is never younger than that (an ingest commits within seconds of writing them).
- **Staging.** Staging folders beside this machine's copy whose writer is gone (``files.remove_dead_staging``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.fs as pafs

from stepwatch.collector.store import files, iceberg, objectstore
from stepwatch.collector.store.errors import StoreError
from stepwatch.collector.store.shared_rows import COMPACTED, TABLES

SMALL_FILE_BYTES = 64 * 1024**2  # data files smaller than this are compacted together
KEEP_DAYS = 30.0
GRACE_S = 24 * 3600.0


@dataclass
class Maintained:
    """What maintenance did."""

    compacted: dict[str, tuple[int, int]] = field(default_factory=dict)  # table -> (data files before, after)
    expired: int = 0  # snapshots
    removed: int = 0  # files nothing read
    removed_bytes: int = 0
    kept_young: int = 0  # files nothing reads, younger than the grace
    staging: int = 0  # dead writers' folders
    before: tuple[int, int] = (0, 0)  # the warehouse's files and bytes
    after: tuple[int, int] = (0, 0)


def maintain(
    store: Any, keep_days: float = KEEP_DAYS, grace_s: float = GRACE_S, say: Callable[[str], None] = lambda line: None
) -> Maintained:
    """Compact, expire, remove orphans and dead staging folders of the shared store ``store`` (a SharedStore). Storage
    or the catalog lost on the way: one StoreError line; each step done so far is kept, and running it again is safe."""
    try:
        return _maintain(store, keep_days, grace_s, say)
    except (iceberg.Lost, iceberg.Unsure) as error:
        raise StoreError(f"{store.address.shown}: maintenance stopped: {error}; run it again") from None
    except (*iceberg.storage_failures(), *iceberg.catalog_failures()) as error:
        raise StoreError(f"{store._fail(error, 'maintenance stopped')}; run it again") from None


def _maintain(store: Any, keep_days: float, grace_s: float, say: Callable[[str], None]) -> Maintained:
    done = Maintained()
    present = [name for name in TABLES if name in store.locations()]
    done.before = _size(store, present)
    for name in present:
        done.compacted[name] = _compact(store, name)
        before, after = done.compacted[name]
        if after < before:
            say(f"{name}: {before} data files compacted into {after}")
    cutoff = datetime.now(UTC) - timedelta(days=keep_days)
    for name in present:
        done.expired += _expire(store, name, int(cutoff.timestamp() * 1000))
    say(f"{done.expired} snapshot(s) older than {keep_days:g} days expired")
    for name in present:
        _orphans(store, name, grace_s, done)
    young = f" ({done.kept_young} younger than {grace_s:g} s kept)" if done.kept_young else ""
    say(f"{done.removed} file(s) no snapshot reads removed, {_bytes(done.removed_bytes)}{young}")
    done.staging = files.remove_dead_staging(store.address.cache_dir())
    say(f"{done.staging} staging folder(s) of writers that are gone removed")
    done.after = _size(store, present)
    (count, size), (count_after, size_after) = done.before, done.after
    say(f"warehouse: {count} files, {_bytes(size)} -> {count_after} files, {_bytes(size_after)}")
    return done


def _bytes(n: int) -> str:
    return f"{n / 1024**2:.1f} MiB" if n >= 1024**2 else f"{n / 1024:.1f} KiB"


def _retrying(store: Any, action: Callable[[Any], Any], name: str) -> Any:
    """``action(table)`` on the table as loaded now, again on a fresh load whenever a writer committed first."""
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(30):
        try:
            return action(store.load(name))
        except CommitFailedException:
            time.sleep(min(2.0, 0.1 * 2**attempt))
    raise StoreError(f"{store.address.shown}: maintenance of {name}: 30 commits lost to writers; run it again")


def _compact(store: Any, name: str) -> tuple[int, int]:
    """The table's small data files rewritten as one; (data files before, after)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
    from pyiceberg.table import FileScanTask

    def compact(table: Any) -> tuple[int, int]:
        if table.current_snapshot() is None:
            return 0, 0
        files = [task.file for task in table.scan().plan_files()]
        small = [f for f in files if f.file_size_in_bytes < SMALL_FILE_BYTES]
        if len(small) < 2:
            return len(files), len(files)
        rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(
            [FileScanTask(f) for f in small]
        )
        tx = table.transaction()
        written = list(_dataframe_to_data_files(table_metadata=table.metadata, write_uuid=uuid.uuid4(), df=rows,
                                                io=table.io))  # fmt: skip
        with tx.update_snapshot(snapshot_properties={COMPACTED: "compact"}).overwrite() as rewrite:
            for old in small:
                rewrite.delete_data_file(old)
            for new in written:
                rewrite.append_data_file(new)
        iceberg.commit(store.catalog, [iceberg.Staged(table, tx)])
        return len(files), len(files) - len(small) + len(written)

    return _retrying(store, compact, name)


def _expire(store: Any, name: str, cutoff_ms: int) -> int:
    """Snapshots older than ``cutoff_ms`` dropped, but the current one and the newest at or before the cutoff."""
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    def expire(table: Any) -> int:
        current = table.current_snapshot()
        snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
        before = [s for s in snapshots if s.timestamp_ms <= cutoff_ms]
        keep = {current.snapshot_id if current else None, before[-1].snapshot_id if before else None}
        old = [s.snapshot_id for s in before if s.snapshot_id not in keep]
        if not old:
            return 0
        tx = table.transaction()
        ExpireSnapshots(tx).by_ids(old).commit()
        iceberg.commit(store.catalog, [iceberg.Staged(table, tx)])
        return len(old)

    return _retrying(store, expire, name)


def _plain(path: str) -> str:
    """A file's path without its scheme (s3://b/k and b/k alike)."""
    return path.split("://", 1)[-1]


def live_files(table: Any) -> set[str]:
    """What the table's current metadata reads: itself, and each snapshot's manifest list, manifests and the data
    files they hold (not those they mark deleted)."""
    from pyiceberg.manifest import ManifestEntryStatus

    live = {_plain(table.metadata_location)}
    manifests: dict[str, Any] = {}
    for snap in table.snapshots():
        live.add(_plain(snap.manifest_list))
        for manifest in snap.manifests(table.io):
            manifests[manifest.manifest_path] = manifest
    for path, manifest in manifests.items():
        live.add(_plain(path))
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.status != ManifestEntryStatus.DELETED:
                live.add(_plain(entry.data_file.file_path))
    return live


def _listed(table: Any) -> tuple[pafs.FileSystem, list[pafs.FileInfo]]:
    loc = objectstore.location(table.location().removeprefix("file://"))
    selector = pafs.FileSelector(loc.path, recursive=True, allow_not_found=True)
    infos = objectstore.with_retries(lambda: loc.fs.get_file_info(selector), f"listing {loc.uri}")
    return loc.fs, [i for i in infos if i.type == pafs.FileType.File]


def _size(store: Any, names: list[str]) -> tuple[int, int]:
    """The files and bytes under the tables' locations."""
    infos = [i for name in names for i in _listed(store.load(name))[1]]
    return len(infos), sum(i.size or 0 for i in infos)


def _orphans(store: Any, name: str, grace_s: float, done: Maintained) -> None:
    """Files under the table's location that its live snapshots do not read, older than the grace, removed. The
    listing comes first and what is live is read after it: a file committed in between is live, not removed."""
    table = store.load(name)
    fs, infos = _listed(table)
    live = live_files(store.load(name))
    now_ns = time.time_ns()
    for info in infos:
        if _plain(info.path) in live:
            continue
        if info.mtime_ns is not None and now_ns - info.mtime_ns < grace_s * 1e9:
            done.kept_young += 1
            continue
        objectstore.with_retries(lambda path=info.path: fs.delete_file(path), f"removing {info.path}")
        done.removed += 1
        done.removed_bytes += info.size or 0
