"""Where a store is: a DuckDB file (a path), or a shared store named by an address,
``iceberg+postgresql://user@host:5432/catalog?warehouse=s3://bucket/stepwatch`` (``collector.store.shared``).

A shared store is read through a local copy (a DuckDB store of the usual kind, the cache) that follows the shared
one snapshot by snapshot; every command works on that copy's path. ``attached`` says which shared store a cache
path stands for, so that the writes (ingest, alerts, bisect steps) go to the shared store instead.

The address's query keys that are stepwatch's own: ``warehouse`` (where the table files live: ``s3://``, ``gs://`` or
``file://``), ``namespace`` (default ``stepwatch``: several teams' stores in one catalog are namespaces), and
``as_of`` (a snapshot id or an ISO time: the store as it was then, read-only). The rest go to the catalog's
database driver.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from stepwatch.collector.store.errors import StoreError

SCHEME = "iceberg+"
CACHE_ENV = "STEPWATCH_CACHE"
OWN_KEYS = ("warehouse", "namespace", "as_of")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def is_shared(text: str | Path) -> bool:
    return str(text).startswith(SCHEME)


@dataclass(frozen=True)
class Address:
    """A shared store's address, parsed."""

    text: str
    catalog_uri: str  # SQLAlchemy's URL of the catalog's database
    warehouse: str
    namespace: str
    as_of: str | None

    @property
    def shown(self) -> str:
        """The address with its password masked: what messages and pages print."""
        return _masked(self.text)

    @property
    def dialect(self) -> str:
        return self.catalog_uri.split(":", 1)[0].split("+", 1)[0]

    def cache_dir(self) -> Path:
        """The local copy's folder: $STEPWATCH_CACHE, else $XDG_CACHE_HOME/stepwatch, else ~/.cache/stepwatch; one
        folder per address (snapshot included), named by its digest, so no password is written to a path."""
        root = (
            os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stepwatch"
        )
        digest = hashlib.sha256(self.text.encode()).hexdigest()[:16]
        return Path(root) / f"shared-{digest}"

    def cache(self) -> Path:
        return self.cache_dir() / "store.duckdb"


def parse(text: str) -> Address:
    """An address, or StoreError saying what is wrong with it (in one line)."""
    if not is_shared(text):
        raise StoreError(f"{text!r} is not a shared store's address (iceberg+postgresql://...?warehouse=s3://...)")
    parts = urlsplit(text[len(SCHEME) :])
    if not parts.scheme or not (parts.netloc or parts.path):
        raise StoreError(f"{_masked(text)}: the catalog's database is missing (iceberg+postgresql://user@host/db)")
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {key: value for key, value in query if key in OWN_KEYS}
    rest = [(key, value) for key, value in query if key not in OWN_KEYS]
    warehouse = own.get("warehouse")
    if not warehouse:
        raise StoreError(f"{_masked(text)}: name where the table files go, ?warehouse=s3://bucket/prefix")
    namespace = own.get("namespace") or "stepwatch"
    if not _NAME.fullmatch(namespace):
        raise StoreError(f"{_masked(text)}: namespace {namespace[:40]!r} must be letters, digits and _")
    scheme = parts.scheme
    if scheme == "postgresql":  # the driver stepwatch installs for it
        scheme = "postgresql+psycopg2"
    uri = urlunsplit(parts._replace(scheme=scheme, query=urlencode(rest)))
    return Address(text, uri, warehouse, namespace, own.get("as_of") or None)


def _masked(text: str) -> str:
    """``text`` with the password of a ``scheme://user:password@host`` masked."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", text)


# The shared store each cache path of this process stands for (set by ``shared.attach``).
_ATTACHED: dict[Path, Address] = {}


def remember(cache: Path, address: Address) -> None:
    _ATTACHED[cache] = address


def attached(db: Path) -> Address | None:
    """The shared store ``db`` is the local copy of, if it is one."""
    return _ATTACHED.get(db) or _ATTACHED.get(Path(os.path.abspath(db)))


def shown(db: Path) -> str:
    """How messages name a store: its address for a shared store's copy, else its path."""
    address = attached(db)
    return address.shown if address else str(db)


def named(db: Path) -> str:
    """How another stepwatch command is told of this store (its ``--db``, or a child process's $STEPWATCH_DB): a
    shared store's address, with its password (never printed: messages use ``shown``), else the path."""
    address = attached(db)
    return address.text if address else str(db)
