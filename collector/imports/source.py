"""Reading another tool's files: JSON read whole up to a size, JSON lines and logs streamed, times in the forms
the formats write them, and a file's digest (what the rows of a run are named by)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stepwatch.collector.imports.rows import ImportRefused

WHOLE_MAX = 256 * 2**20  # a JSON document is read whole; larger ones are refused with their size
HEAD = 4096


def head(path: Path) -> bytes:
    with path.open("rb") as handle:
        return handle.read(HEAD)


def file_digest(path: Path) -> str:
    found = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            found.update(block)
    return found.hexdigest()


def _strict(text: str) -> float:
    raise ValueError(f"{text} is not a number JSON allows")


def load_json(path: Path) -> Any:
    """A JSON document, read whole: refused when larger than WHOLE_MAX, truncated or not JSON. NaN and Infinity
    (which Python's json writes and asv records for an interval it has not) are read as floats."""
    size = path.stat().st_size
    if size > WHOLE_MAX:
        raise ImportRefused(f"{size / 2**30:.1f} GiB of JSON: stepwatch reads a JSON document whole, up to "
                            f"{WHOLE_MAX // 2**20} MiB (write JSON lines, or split it)")  # fmt: skip
    try:
        return json.loads(path.read_bytes())
    except UnicodeDecodeError:
        raise ImportRefused("not UTF-8 text") from None
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise ImportRefused(f"not valid JSON ({error.msg} at {where}; truncated?)") from None


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """Each line of a JSON lines file, streamed: (line number, value); a line that is not JSON is refused."""
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError):
                raise ImportRefused(f"line {number} is not JSON (truncated?)") from None


def when(value: Any) -> datetime | None:
    """A time as the formats write it: ISO 8601 text, or seconds or milliseconds since the epoch."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        if not math.isfinite(value) or value <= 0:
            return None
        seconds = value / 1000 if value > 1e11 else value  # milliseconds (asv, MLLOG) or seconds
        return datetime.fromtimestamp(seconds, UTC)
    try:
        found = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def modified(path: Path) -> datetime:
    """When a file was last written: the time of a run whose format records none (the row's extras say so)."""
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def number(value: Any) -> float | None:
    """A number a format gives, or None for what is not one (a string, a bool, null)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
