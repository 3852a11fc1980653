"""The two kinds of error a user is shown, each in one line: a usage error (exit 2: something to fix on the command
line or in a file the user named) and a failure (exit 4: the work could not be done, and what was recorded is kept).
Every such error derives from one of the two, so the command line catches these two and imports no module to know
its errors (collector.cli.exits says what each code means)."""

from __future__ import annotations


class UsageError(ValueError):
    """Something the user can fix on the command line or in an input they named, in one line."""


class Failure(Exception):
    """Work that could not be done (a store, a file, an environment, a report), in one line; mixed into the
    error's own builtin kind (OSError, RuntimeError)."""
