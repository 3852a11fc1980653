"""The selection language, one parser for every place that picks runs or series: the CLI's ``--where``,
``--baseline`` and ``--candidate``, the dashboard's Compare page and the per-series thresholds file.

``tf_version=2.20.0,label=candidate``, ``since=2026-11-01``, ``model=resnet50|bert``: a comma separates
conditions that must all hold, ``|`` separates alternatives of one field. Field names are result columns
or config fields (``xla`` is the column ``xla_requested``); values are typed by their column, booleans
take the words of ``collector.config.BOOL_WORDS``. A selection becomes a WHERE clause over known column
names with every value bound as a parameter: nothing a user types is ever formatted into SQL.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from stepwatch.collector.config import (
    COLUMN_ALIASES,
    FIELD_NAMES,
    FIELD_OF_COLUMN,
    FORMER_NAMES,
    ROLES,
    ConfigError,
    column,
    parse_bool,
)
from stepwatch.collector.errors import UsageError
from stepwatch.collector.schema import SCHEMA

# The longest value a link may carry for a filter or a selection (the dashboard drops longer ones unread; a report's
# link keeps to it).
LINK_VALUE_MAX = 200

TYPES = {f.name: f.type for f in SCHEMA}
SELECTABLE = tuple(
    name
    for name, dtype in TYPES.items()
    if not pa.types.is_floating(dtype)
    and not pa.types.is_timestamp(dtype)
    and not pa.types.is_list(dtype)
    and name not in ("extras", "log_tail")
)
# Other names a selection may use: config fields stored under another column, fields' former names (old links
# and threshold files keep working: ``backend=cpu`` is ``device=cpu``), and two shorthands.
ALIASES = {
    **COLUMN_ALIASES,
    **{old: column(name) for old, name in FORMER_NAMES.items()},
    "series": "series_key",
    "version": "tf_version",
}
# Allowed values of the columns that hold a config field with a fixed set of choices.
CHOICES = {column(name): ROLES[name].choices for name in FIELD_NAMES if ROLES[name].choices}
RANGE_KEYS = ("since", "until")
# The machine's flags (collector.trial.machine): a trial is flagged where one is true, and unread where one is empty.
FLAGS = ("shared", "throttled")


# The value a filter picks for a dimension a row has none of (an imported result whose tool recorded no accelerator,
# no device, no precision, and that ran no Keras backend): ``Selection.of`` matches it to an empty column or text.
NOT_RECORDED = "(none)"


class SelectionError(UsageError):
    """A selection that names an unknown field or a value of the wrong kind, in one line."""


def named(names: Iterable[str], alias: str = "", aggregate: str = "") -> str:
    """``column AS field`` for config fields (``xla_requested AS xla``), optionally inside an aggregate."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(f'{aggregate}({prefix}"{ALIASES.get(n, n)}") AS "{n}"' for n in names)


def as_fields(names: Iterable[str], alias: str = "") -> str:
    """``any_value(column) AS field``, for a query that groups runs into series."""
    return named(names, alias, "any_value")


def _value(name: str, text: str) -> Any:
    dtype = TYPES[name]
    if name in CHOICES and text not in CHOICES[name]:
        elsewhere = [other for other, allowed in CHOICES.items() if text in allowed]
        hint = f" (did you mean {elsewhere[0]}={text}?)" if elsewhere else ""
        raise SelectionError(f"{name}={text!r}: expected one of {', '.join(CHOICES[name])}{hint}")
    if pa.types.is_boolean(dtype):
        try:
            return parse_bool(text, name)
        except ConfigError:
            raise SelectionError(f"{name}={text!r}: expected on or off") from None
    if pa.types.is_integer(dtype):
        try:
            return int(text)
        except ValueError:
            raise SelectionError(f"{name}={text!r}: expected a whole number") from None
    return text


def _instant(key: str, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise SelectionError(f"{key}={text!r}: expected a date such as 2026-11-01 or 2026-11-01T12:00") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Selection:
    """Equality filters (several values of one field are alternatives) and a started_at range."""

    equals: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    since: datetime | None = None
    until: datetime | None = None

    @classmethod
    def parse(cls, text: str | None) -> Selection:
        """``key=value[|value...][,key=value...]``; raises SelectionError naming the bad part."""
        equals: dict[str, tuple[Any, ...]] = {}
        since = until = None
        for part in (text or "").split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, raw = part.partition("=")
            key = key.strip()
            if not sep or not key:
                raise SelectionError(f"{part!r} is not key=value (e.g. tf_version=2.20.0)")
            key = ALIASES.get(key, key)
            raw = raw.strip()
            if re.search(r"\s\w+=", raw):  # label=before model=x: two conditions run together
                raise SelectionError(f"{part!r} holds two conditions: a comma separates them (a=1,b=2)")
            if key in RANGE_KEYS:
                moment = _instant(key, raw)
                since, until = (moment, until) if key == "since" else (since, moment)
                continue
            if key not in SELECTABLE:
                close = difflib.get_close_matches(key, SELECTABLE + RANGE_KEYS + tuple(ALIASES), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise SelectionError(f"unknown field {key!r} in selection{hint}")
            equals[key] = equals.get(key, ()) + tuple(_value(key, v.strip()) for v in raw.split("|"))
        return cls(tuple(sorted(equals.items())), since, until)

    @classmethod
    def of(cls, **fields: Any) -> Selection:
        """Equality filters from keyword arguments (a list is alternatives; None or empty means any)."""
        equals = []
        for name, values in sorted(fields.items()):
            values = values if isinstance(values, list | tuple) else [values]
            values = tuple(None if v == NOT_RECORDED else v for v in values if v is not None)
            if values:
                equals.append((ALIASES.get(name, name), values))
        return cls(tuple(sorted(equals)))

    def unflagged(self) -> Selection:
        """This selection less the trials whose machine was flagged or not read: each flag read and false."""
        equals = {**dict(self.equals), **{flag: (False,) for flag in FLAGS}}
        return Selection(tuple(sorted(equals.items())), self.since, self.until)

    def where(self, alias: str = "") -> tuple[str, list[Any]]:
        """SQL condition and its parameters; column names come from the schema, values are bound."""
        prefix = f"{alias}." if alias else ""
        clauses, params = ["TRUE"], []
        for name, values in self.equals:
            given = [v for v in values if v is not None]
            found = [f'{prefix}"{name}" IN ({", ".join("?" for _ in given)})'] if given else []
            found += [f"""coalesce(CAST({prefix}"{name}" AS VARCHAR), '') = ''"""] if len(given) < len(values) else []
            clauses.append(found[0] if len(found) == 1 else f"({' OR '.join(found)})")
            params.extend(given)
        if self.since is not None:
            clauses.append(f"{prefix}started_at >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append(f"{prefix}started_at < ?")
            params.append(self.until)
        return " AND ".join(clauses), params

    def matches(self, row: Mapping[str, Any]) -> bool:
        """Whether a row or a series (columns or config fields as keys) passes the equality filters."""
        for name, values in self.equals:
            value = row[name] if name in row else row.get(FIELD_OF_COLUMN.get(name, name))
            if value not in values:
                return False
        return True

    def describe(self) -> str:
        parts = [f"{k}={'|'.join(map(str, v))}" for k, v in self.equals]
        parts += [f"since={self.since.isoformat()}"] if self.since else []
        parts += [f"until={self.until.isoformat()}"] if self.until else []
        return ",".join(parts) or "all runs"


ALL = Selection()  # every run
