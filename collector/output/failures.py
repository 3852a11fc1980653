"""What failed in a check, said before anything else: which side, which workload, how many of its trials, and the
exception's last line. A workload that broke before its first step is run no more on that side
(``execution.Outcome.broken``), and the report says how many trials that left out."""

from __future__ import annotations

from typing import Any

from stepwatch.collector.environments.virtualenvs import Check

SHOWN = 300  # characters of an error a lead line keeps


def reason(row: dict[str, Any]) -> str:
    """A failed trial's reason in one line: its status (where not a crash), its error type and the last line of its
    message (which names the type itself where it already does)."""
    lines = [line.strip() for line in (row.get("error_message") or "").splitlines() if line.strip()]
    message = lines[-1] if lines else "no message"
    kind = row.get("error_type") or ""
    said = message if not kind or kind in message else f"{kind}: {message}"
    status = row.get("status")
    said = said if status == "crash" else f"{status}, {said}"
    return said if len(said) <= SHOWN else said[: SHOWN - 3] + "..."


def failure_lines(check: Check) -> tuple[str, ...]:
    """One line per side and workload with a failed trial, to lead the report; none when every trial ran."""
    lines = []
    for failed in check.failures():
        reasons = list(dict.fromkeys(reason(o.row) for o in failed.trials))
        when = " before its first step" if all(o.broken for o in failed.trials) else ""
        text = (f"**Failed on the {failed.side}: `{failed.config.label()}`**: {len(failed.trials)} of {failed.ran} "
                f"trial(s) failed{when}: {reasons[0]}")  # fmt: skip
        if len(reasons) > 1:
            text += f" (and {len(reasons) - 1} other reason(s): see the trials' rows)"
        if failed.skipped:
            text += f". Its other {failed.skipped} trial(s) were not run: the same code fails the same way"
        lines.append(text.rstrip(".") + ".")
    return (*lines, "") if lines else ()


def reason_line(check: Check) -> str | None:
    """The first failure in a few words, for a check run's title: 'candidate: models/net.py:net: NameError: ...'
    (one line, no markup); None when every trial ran."""
    for failed in check.failures():
        return " ".join(f"{failed.side}: {failed.config.model}: {reason(failed.trials[0].row)}".split())
    return None
