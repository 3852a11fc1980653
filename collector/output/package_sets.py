"""``stepwatch package-sets`` rendered: the two sides a pull request's pin files give and what changes between
what they resolve to, as text, markdown (the job summary and the PR comment open with it), JSON, and the
step outputs the upgrade-pr workflow reads."""

from __future__ import annotations

import json

from stepwatch.collector.workflows.package_sets import Side, Sides

OUTPUT_KEYS = ("changed", "baseline", "candidate")  # what --github-output sets for the workflow's next steps


def _origin(side: Side) -> str:
    files = ", ".join(side.files) or "no pin file"
    constraints = f"; {side.constraints_applied} pin(s) of constraint and lock files applied" if (
        side.constraints_applied or side.constraints_unused) else ""  # fmt: skip
    unused = f", {side.constraints_unused} for packages it does not install" if side.constraints_unused else ""
    return f"{side.side} at {side.origin}: {files}{constraints}{unused}"


def verdict_line(sides: Sides) -> str:
    if not sides.changed:
        return (
            f"Nothing that the two package sets resolve to changes ({len(sides.baseline.resolved)} package(s) "
            "each): no upgrade to check."
        )
    return f"{len(sides.changes)} package(s) change between what the two package sets resolve to."


def sides_text(sides: Sides) -> str:
    lines = []
    for side in (sides.baseline, sides.candidate):
        lines += [_origin(side), "  " + " ".join(side.requirements)]
    lines.append(verdict_line(sides))
    lines += [f"  {change.text()}" for change in sides.changes]
    return "\n".join(lines) + "\n"


def sides_markdown(sides: Sides) -> str:
    lines = ["### Package sets", ""]
    for side in (sides.baseline, sides.candidate):
        lines += [f"- {_origin(side)}", f"  `{' '.join(side.requirements)}`"]
    lines += ["", f"**{verdict_line(sides)}**", ""]
    if sides.changed:
        lines += ["| package | baseline | candidate |", "|---|---|---|"]
        lines += [f"| {c.name} | {c.good or '-'} | {c.bad or '-'} |" for c in sides.changes]
        lines.append("")
    return "\n".join(lines) + "\n"


def sides_json(sides: Sides) -> str:
    def side(s: Side) -> dict:
        return {"origin": s.origin, "files": list(s.files), "requirements": list(s.requirements),
                "resolved": s.resolved, "constraints_applied": s.constraints_applied,
                "constraints_unused": s.constraints_unused}  # fmt: skip

    changes = [{"name": c.name, "baseline": c.good, "candidate": c.bad} for c in sides.changes]
    payload = {"changed": sides.changed, "baseline": side(sides.baseline), "candidate": side(sides.candidate),
               "changes": changes}  # fmt: skip
    return json.dumps(payload, indent=2) + "\n"


def step_outputs(sides: Sides) -> str:
    """``key=value`` lines for $GITHUB_OUTPUT: whether anything changed, and each side as upgrade-check takes it."""
    values = {
        "changed": "true" if sides.changed else "false",
        "baseline": " ".join(sides.baseline.requirements),
        "candidate": " ".join(sides.candidate.requirements),
    }
    return "".join(f"{key}={values[key]}\n" for key in OUTPUT_KEYS)
