"""The store's files: where a store is (the default, or ``$STEPWATCH_DB``), the base, the folder of deltas beside
it and their names, the writer lock, and how a finished file is made durable and put in place. What they hold, and
how they are written and read, is ``collector.store.engine``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from stepwatch.collector.store.errors import StoreError

DEFAULT_DB = Path("data/stepwatch.duckdb")
SYNTHETIC_DB = Path("data/stepwatch-synthetic.duckdb")
DB_ENV = "STEPWATCH_DB"


DELTA_NAME = re.compile(r"(\d{8})-(\d{8})\.duckdb")


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def one_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


@contextlib.contextmanager
def writer_lock(db: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[None]:
    """One write at a time per store; the lock dies with its process, so a killed write never wedges it."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def delta_dir(db: Path) -> Path:
    """The folder of a store's delta files."""
    return db.with_name(db.name + ".d")


@dataclass(frozen=True)
class Delta:
    first: int  # the write sequence numbers it holds, inclusive
    last: int
    path: Path


def deltas(db: Path) -> list[Delta]:
    try:
        names = os.listdir(delta_dir(db))
    except FileNotFoundError:
        return []
    found = (DELTA_NAME.fullmatch(name) for name in names)
    return [Delta(int(m[1]), int(m[2]), delta_dir(db) / m[0]) for m in found if m]


def delta_chain(deltas: list[Delta], merged_through: int) -> list[Delta]:
    """The deltas after the base, oldest first: from the newest sequence number down, each time the widest
    file ending where the last one taken begins. Files already merged (into the base or a wider delta) are
    left out; a missing number is a broken store."""
    widest: dict[int, Delta] = {}
    for delta in deltas:
        if delta.last > merged_through and (delta.last not in widest or delta.first < widest[delta.last].first):
            widest[delta.last] = delta
    chain, upto = [], max(widest, default=merged_through)
    while upto > merged_through:
        if upto not in widest:
            raise StoreError(f"the store's delta files have a gap: no file ends at write {upto}")
        chain.append(widest[upto])
        upto = widest[upto].first - 1
    return chain[::-1]


def identity(db: Path) -> tuple[int, int, int] | None:
    try:
        stat = db.stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


def store_identity(db: Path) -> tuple | None:
    """What identifies the store's current contents: the base file and the names of the delta files."""
    base = identity(db)
    if base is None:
        return None
    return base, tuple(sorted(d.path.name for d in deltas(db)))


def clean_stale(db: Path) -> None:
    """Temporary files left by a killed write, and deltas a finished compaction had not yet deleted (safe:
    we hold the writer lock)."""
    for stale in [*db.parent.glob(f".{db.name}.*.tmp*"), *delta_dir(db).glob(".*.tmp*")]:
        stale.unlink(missing_ok=True)


def clean(db: Path, on_wait: Callable[[], None] = lambda: None) -> None:
    """Remove what a killed write left behind (a write does this itself; this is for when there is nothing to
    write)."""
    if db.exists() or delta_dir(db).exists():
        with writer_lock(db, on_wait):
            clean_stale(db)


def replace(tmp: Path, final: Path) -> None:
    """Make a finished file durable, then put it in place in one rename (the commit), and make that durable."""
    fsync(tmp)
    os.replace(tmp, final)
    fsync(final.parent)


def tmp_name(folder: Path, name: str) -> Path:
    return folder / f".{name}.{os.getpid()}.tmp"


# An ingest's staging folder beside its store: .spool-<host>-<pid>-<random>/ (an older stepwatch's shared ingest:
# .ingest-<pid>/). A cache may be on a disk several machines share, so a folder is another process's only when its
# host is this one and that process is gone; an older one, without its host, only when also an hour old.
STAGING = re.compile(r"^\.(?:spool-(?P<host>[A-Za-z0-9_.]+)-(?P<pid>\d+)-.*|ingest-(?P<old>\d+))$")
OLD_STAGING_S = 3600.0


def host() -> str:
    """This machine's name as a staging folder carries it."""
    import socket

    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def staging_prefix() -> str:
    return f".spool-{host()}-{os.getpid()}-"


def remove_dead_staging(folder: Path) -> int:
    """The staging folders in ``folder`` of writers that are gone, removed; how many."""
    import shutil
    import time

    removed, here = 0, host()
    for path in folder.glob(".*") if folder.is_dir() else ():
        found = STAGING.match(path.name)
        if not found or not path.is_dir():
            continue
        if found["old"] is not None:
            pid, mine = int(found["old"]), time.time() - path.stat().st_mtime > OLD_STAGING_S
        else:
            pid, mine = int(found["pid"]), found["host"] == here
        if not mine or alive(pid):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (another user's process counts as running: nothing is removed for it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
