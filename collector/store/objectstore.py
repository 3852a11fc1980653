"""Where result files live: a local folder, or an s3:// or gs:// prefix, through pyarrow's filesystems.

Credentials come from the standard environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
AWS_REGION or ~/.aws; GOOGLE_APPLICATION_CREDENTIALS for gs://). AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL
points s3:// at an S3-compatible server (MinIO, moto, Ceph), since pyarrow does not read those itself.
Every remote call is retried with exponential backoff, then fails as one StorageError line.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from stepwatch.collector.errors import Failure

REMOTE_SCHEMES = ("s3://", "gs://")
QUARANTINE = "quarantine"
T = TypeVar("T")


class StorageError(OSError, Failure):
    """Storage that cannot be reached or written, after retries, in one line."""


def is_remote(target: str | Path) -> bool:
    return str(target).startswith(REMOTE_SCHEMES)


def _attempts() -> int:
    return max(1, int(os.environ.get("STEPWATCH_STORAGE_ATTEMPTS", "5")))


def _backoff_s() -> float:
    return float(os.environ.get("STEPWATCH_STORAGE_BACKOFF_S", "1.0"))


def with_retries(action: Callable[[], T], what: str) -> T:
    """Run ``action``; on a storage error wait 1, 2, 4, ... x the base backoff and try again."""
    attempts = _attempts()
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise
        except OSError as error:
            if attempt == attempts:
                detail = " ".join(str(error).split())[:300]
                raise StorageError(f"{what} failed after {attempts} attempt(s): {detail}") from None
            time.sleep(_backoff_s() * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


def _s3() -> pafs.S3FileSystem:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return pafs.S3FileSystem(
        endpoint_override=endpoint,
        region=region,
        connect_timeout=5,
        request_timeout=30,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),  # our own backoff is around every call
    )


@dataclass(frozen=True)
class Location:
    """A folder: ``fs`` plus the path inside it; ``uri`` is how users name it."""

    fs: pafs.FileSystem
    path: str
    uri: str

    def child(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"

    def uri_of(self, path: str) -> str:
        if is_remote(self.uri):
            return self.uri.split("://")[0] + "://" + path
        return path


def location(target: str | Path) -> Location:
    """The filesystem and path of a local folder or an s3:// / gs:// prefix."""
    text = str(target)
    if text.startswith("s3://"):
        return Location(_s3(), text[len("s3://") :].rstrip("/"), text.rstrip("/"))
    if text.startswith("gs://"):
        return Location(pafs.GcsFileSystem(retry_time_limit=30), text[len("gs://") :].rstrip("/"), text.rstrip("/"))
    path = str(Path(text).resolve())
    return Location(pafs.LocalFileSystem(), path, path)


@dataclass(frozen=True)
class Entry:
    """One parquet file found under a location."""

    uri: str
    path: str
    size: int
    mtime_ns: int


def list_parquet(target: str | Path) -> tuple[Location, list[Entry]]:
    """The *.parquet files directly under a folder or prefix (not in quarantine/), or the one file named."""
    loc = location(target)
    info = with_retries(lambda: loc.fs.get_file_info(loc.path), f"looking up {loc.uri}")
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{loc.uri} does not exist")
    if info.type == pafs.FileType.File:
        parent = Location(loc.fs, loc.path.rsplit("/", 1)[0], loc.uri.rsplit("/", 1)[0])
        return parent, [Entry(loc.uri, loc.path, info.size or 0, info.mtime_ns or 0)]
    selector = pafs.FileSelector(loc.path, recursive=False)
    infos = with_retries(lambda: loc.fs.get_file_info(selector), f"listing {loc.uri}")
    entries = [Entry(loc.uri_of(i.path), i.path, i.size or 0, i.mtime_ns or 0) for i in infos if _result_file(i)]
    return loc, sorted(entries, key=lambda e: e.path)


def _result_file(info: pafs.FileInfo) -> bool:
    """A file ingest reads: *.parquet, not hidden (a file being written is hidden until it is renamed)."""
    name = info.base_name
    return info.type == pafs.FileType.File and name.endswith(".parquet") and not name.startswith(".")


def parquet_below(target: str | Path) -> list[tuple[Location, list[Entry]]]:
    """The *.parquet files in the folders below a folder or prefix (not the folder itself, nor any quarantine/
    folder), one (folder, files) per folder that has some, in path order; [] for a file."""
    loc = location(target)
    info = with_retries(lambda: loc.fs.get_file_info(loc.path), f"looking up {loc.uri}")
    if info.type != pafs.FileType.Directory:
        return []
    selector = pafs.FileSelector(loc.path, recursive=True)
    infos = with_retries(lambda: loc.fs.get_file_info(selector), f"listing {loc.uri}")
    folders: dict[str, list[Entry]] = {}
    top = loc.path.rstrip("/")
    for i in infos:
        folder = i.path.rsplit("/", 1)[0]
        inside = folder[len(top) :].strip("/").split("/")
        if not _result_file(i) or folder == top or QUARANTINE in inside or any(p.startswith(".") for p in inside):
            continue
        folders.setdefault(folder, []).append(Entry(loc.uri_of(i.path), i.path, i.size or 0, i.mtime_ns or 0))
    return [
        (Location(loc.fs, folder, loc.uri_of(folder)), sorted(entries, key=lambda e: e.path))
        for folder, entries in sorted(folders.items())
    ]


def read_bytes(loc: Location, path: str) -> bytes:
    def read() -> bytes:
        with loc.fs.open_input_stream(path) as stream:
            return stream.read()

    return with_retries(read, f"reading {loc.uri_of(path)}")


def quarantine(loc: Location, entry: Entry, reason: str) -> str:
    """Move a file that cannot be ingested into quarantine/ beside it, with a .reason file; returns where."""
    folder = loc.child(QUARANTINE)
    name = entry.path.rsplit("/", 1)[-1]
    target = f"{folder}/{name}"

    def move() -> None:
        loc.fs.create_dir(folder, recursive=True)
        with loc.fs.open_output_stream(f"{target}.reason") as out:
            out.write((reason + "\n").encode())
        loc.fs.move(entry.path, target)

    with_retries(move, f"moving {entry.uri} to quarantine")
    return loc.uri_of(target)


def quarantine_rows(loc: Location, entry: Entry, rows: pa.Table, reasons: list[str]) -> str:
    """Write the rows of a file that cannot be stored to quarantine/ beside it (``<name>.rows.parquet``, with a
    .reason file naming each run and why); the file itself stays where it is. Returns where."""
    name = entry.path.rsplit("/", 1)[-1].removesuffix(".parquet")
    folder = loc.child(QUARANTINE)
    target = f"{folder}/{name}.rows.parquet"
    why = "".join(f"run {run_id}: {reason}\n" for run_id, reason in zip(rows.column("run_id").to_pylist(), reasons))

    def write() -> None:
        loc.fs.create_dir(folder, recursive=True)
        with loc.fs.open_output_stream(f"{target}.reason") as out:
            out.write(why.encode())
        with loc.fs.open_output_stream(target) as out:
            pq.write_table(rows, out)

    with_retries(write, f"writing quarantined rows of {entry.uri}")
    return loc.uri_of(target)


def upload(local: Path, target: str) -> str:
    """Copy a local results file (or a folder, with what it holds: a trial's profile) to ``target`` (a folder or
    prefix); each object appears whole or not at all."""
    loc = location(target)
    destination = loc.child(local.name)

    def put() -> None:
        if isinstance(loc.fs, pafs.LocalFileSystem):
            loc.fs.create_dir(loc.path, recursive=True)
        pafs.copy_files(str(local), destination, destination_filesystem=loc.fs)

    with_retries(put, f"uploading {local} to {loc.uri}")
    return loc.uri_of(destination)
