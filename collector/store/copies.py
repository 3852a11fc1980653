"""What a shared store's local copy holds (``collector.store.shared``): each shared table's metadata location and
the runs' snapshot, in the copy's store_meta and in a file beside it (read without opening the store: a page's poll
reads this file alone)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from stepwatch.collector.store.engine import snapshot
from stepwatch.collector.store.tables import meta

SYNCED = "shared_synced"  # the copy's store_meta key: what it holds, as JSON


def holds(held: dict[str, str] | None, locations: dict[str, str]) -> bool:
    """Whether a copy that holds ``held`` is at the shared tables' ``locations``."""
    return held is not None and all(held.get(name) == location for name, location in locations.items())


def held_path(cache: Path) -> Path:
    return cache.with_name(cache.name + ".synced.json")


def held(cache: Path) -> dict[str, str] | None:
    """What the copy at ``cache`` holds (None: no copy yet)."""
    if not cache.exists():
        return None
    try:
        return json.loads(held_path(cache).read_text())
    except (OSError, ValueError):
        snap = snapshot(cache, views=False)
        if snap is None:
            return None
        try:
            value = meta(snap.con, SYNCED, snap.catalogs[-1])
        finally:
            snap.con.close()
        return json.loads(value) if value else None


def remember(cache: Path, state: dict[str, str]) -> None:
    """The file beside the copy, after its write: replaced in one rename."""
    path = held_path(cache)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def remove(cache: Path) -> None:
    """The copy gone, to be made again (the shared table was rewritten, not only appended to)."""
    held_path(cache).unlink(missing_ok=True)
    cache.unlink(missing_ok=True)
    shutil.rmtree(cache.with_name(cache.name + ".d"), ignore_errors=True)
