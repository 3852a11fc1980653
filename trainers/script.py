"""A training script of the user's, named as a benchmark by its path (``path/train.py``), wherever a model is
named. The script marks its steps with ``stepwatch.steps`` (``collector.trial.steps``); docs/reference.md ("Your
own training script") has the three lines it needs.

The parent process never imports it: it checks that the file exists and hashes it (a row says which code ran). The
trial process runs it as ``__main__``, with its arguments, in the trial's own process.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from stepwatch.trainers.user import UserModelError


@dataclass(frozen=True)
class Script:
    """``path/train.py``: absolute, or relative to the folder the command runs in."""

    name: str

    def check(self) -> Path:
        """The script's file, once it is known to be a readable file."""
        path = Path(self.name)
        if not path.is_file():
            raise UserModelError(f"script {self.name}: no such file (a script is named by its path, from {Path.cwd()})")
        try:
            with path.open("rb") as handle:
                handle.read(1)
        except OSError as error:
            raise UserModelError(f"script {self.name}: cannot read it: {error.strerror or error}") from None
        return path.resolve()

    def source_hash(self) -> str:
        """The first 16 hex digits of the SHA-256 of the script: an edited script is another series' code."""
        return hashlib.sha256(self.check().read_bytes()).hexdigest()[:16]
