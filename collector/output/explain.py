"""``stepwatch explain`` rendered: per pair of series, the profiled step on both sides, the ops whose time per
step changed most (ratio, interval, share of the change), ops on one side only, the remainder, and the raw
profiles; as text (also the top lines in upgrade-check and bisect reports) or JSON."""

from __future__ import annotations

import json
import math
from typing import Any

from stepwatch.collector.analysis.ops import Explained, OpChange
from stepwatch.collector.output.comparison import finite
from stepwatch.collector.output.text import interval, percent, series_label, shown_path

TOP = 10  # ops shown per pair


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def signed_ms(seconds: float) -> str:
    return f"{seconds * 1e3:+.3f} ms"


def share_text(share: float) -> str:
    return "n/a" if share is None or math.isnan(share) else f"{share * 100:+.0f}%"


def op_line(op: OpChange) -> str:
    """One op: its times on both sides, the change, the share of the step's change it explains."""
    name = f"{op.op} ({op.where})"
    if op.only:
        side_s = op.baseline_s if op.only == "baseline" else op.candidate_s
        change = f"{op.only} only, {ms(side_s)} a step, {op.step_share * 100:.1f}% of its step"
    else:
        mark = "  moved" if op.moved else ""
        change = f"{percent(op.ratio.ratio)} {interval(op.ratio.ci_low, op.ratio.ci_high)}{mark}"
    return (
        f"  {name:<48} {ms(op.baseline_s):>12} -> {ms(op.candidate_s):>12}  {signed_ms(op.delta_s):>12}  "
        f"share {share_text(op.share):>6}  {change}"
    )


def header_line(pair: Explained) -> str:
    """A pair of series in one line: the profiled step on both sides, its change, the profiled trials."""
    r = pair.step_ratio
    return (
        f"{series_label(pair.series)}: profiled step {ms(pair.step_s[0])} -> {ms(pair.step_s[1])} "
        f"({percent(r.ratio)} {interval(r.ci_low, r.ci_high)}, {signed_ms(pair.delta_s)}); "
        f"{pair.trials[0]} + {pair.trials[1]} profiled trials; {coverage_text(pair.coverage)}"
    )


def coverage_text(coverage: tuple[float, float]) -> str:
    """How much of each side's profiled step its named ops account for (``ops.coverage``)."""
    shown = [f"{c * 100:.0f}%" if c == c else "-" for c in coverage]
    return f"named ops cover {shown[0]} -> {shown[1]} of the step"


def pair_lines(pair: Explained, top: int = TOP) -> list[str]:
    """A pair of series: its header line, the ``top`` ops by absolute change, every op on one side only that is
    not among them, the remainder, and where the raw profiles are."""
    lines = [header_line(pair)]
    if not pair.aligned:
        lines.append(f"  the sides name their ops differently ({pair.vocabularies[0]} against {pair.vocabularies[1]}): "
                     "most ops are on one side only, and only the step's change and the remainder compare")  # fmt: skip
    if min(pair.trials) < 2:
        lines.append("  one profiled trial on a side: no intervals, and no op is said to have moved")
    shown = pair.ops[:top]
    lines += [op_line(op) for op in shown]
    rest = [op for op in pair.ops[top:] if op.appeared]
    if rest:
        lines.append(f"  and {len(rest)} more op(s) on one side only:")
        lines += [op_line(op) for op in rest[:top]]
    moved = len([op for op in pair.ops if op.moved])
    appeared = len([op for op in pair.ops if op.appeared])
    lines.append(
        f"  remainder (no op): {signed_ms(pair.remainder_s)}, share {share_text(_share(pair))}; "
        f"{len(pair.ops)} ops, {moved} moved, {appeared} on one side only"
    )
    for side, uris in pair.profiles.items():
        lines += [f"  {side} profile: {uri if '://' in uri else shown_path(uri)}" for uri in uris[:1]]
    return lines


def _share(pair: Explained) -> float:
    return pair.remainder_s / pair.delta_s if pair.delta_s else math.nan


def explain_text(
    pairs: list[Explained],
    unpaired: dict[str, list[dict[str, Any]]],
    top: int = TOP,
    errors: dict[str, list[str]] | None = None,
) -> str:
    """Every pair, then the series profiled on one side only; with no op table at all, why: the profiles' errors
    (``errors``, per side) where they failed, else that none was asked for."""
    if not pairs and not any(unpaired.values()):
        if errors:
            said = "; ".join(f"{side}: {', '.join(reasons)}" for side, reasons in errors.items())
            return f"no op table on either side: the profiles failed ({said})\n"
        return "no profiled trials on either side: run with --profile (run, upgrade-check, bisect)\n"
    lines = []
    for pair in pairs:
        lines += [*pair_lines(pair, top), ""]
    for side, series in unpaired.items():
        lines += [f"profiled on the {side} only (nothing to diff): {series_label(s)}" for s in series]
    return "\n".join(lines).rstrip("\n") + "\n"


def explain_json(pairs: list[Explained]) -> str:
    def op_entry(op: OpChange) -> dict[str, Any]:
        r = op.ratio
        return {
            "op": op.op, "where": op.where, "baseline_s": op.baseline_s, "candidate_s": op.candidate_s,
            "delta_s": op.delta_s, "ratio": finite(r.ratio), "ci_low": finite(r.ci_low), "ci_high": finite(r.ci_high),
            "q_value": finite(op.q_value), "share": finite(op.share), "step_share": finite(op.step_share),
            "only": op.only, "appeared": op.appeared, "moved": op.moved,
        }  # fmt: skip

    payload = [
        {
            "series": series_label(pair.series),
            "series_key": pair.series.get("series_key"),
            "trials": list(pair.trials),
            "step_s": list(pair.step_s),
            "step_ratio": finite(pair.step_ratio.ratio),
            "remainder_s": pair.remainder_s,
            "coverage": [finite(c) for c in pair.coverage],
            "profiles": pair.profiles,
            "ops": [op_entry(op) for op in pair.ops],
        }
        for pair in pairs
    ]
    return json.dumps(payload, indent=2)


REPORT_TOP = 3  # ops per series in an upgrade-check or bisect report


def report_lines(
    pairs: list[Explained],
    unpaired: dict[str, list[dict[str, Any]]],
    aa: list[Explained] | None = None,
    errors: dict[str, list[str]] | None = None,
) -> tuple[str, ...]:
    """The top lines of ``explain`` for an upgrade-check or bisect report, with the A/A's where one ran (the same
    environment on both sides: no op should move); ``errors``: why profiles failed, per side."""
    lines = ["Where the time went (stepwatch explain, from the profiled trials):", ""]
    lines += explain_text(pairs, unpaired, REPORT_TOP, errors).rstrip("\n").splitlines()
    if aa is not None:
        moved = [op for pair in aa for op in pair.moved()]
        lines += ["", f"A/A explain (baseline against its second environment): {len(moved)} op(s) moved in "
                  f"{len(aa)} series" + (" (expected none)" if moved else "")]  # fmt: skip
    return tuple(lines)
