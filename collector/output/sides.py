"""How the two sides of a comparison ran, said before any verdict: which attention and experts kernels each ran, and
whether its machine was throttled or shared (collector.trial.machine). Either can move a verdict without the
software."""

from __future__ import annotations

from stepwatch.collector.analysis.comparison import Comparison
from stepwatch.collector.schema import KERNELS


def machine_line(comparison: Comparison) -> str | None:
    """How many ok trials of each side ran throttled or shared, and how many did not read the machine (the
    machine's state, collector.trial.machine): a verdict over flagged or unread trials may be the machine's, not
    the software's. None when no side has trials."""
    parts = []
    for side in ("baseline", "candidate"):
        m = comparison.machine.get(side)
        if not m or not m["trials"]:
            continue
        flags = [f"{m[flag]} of {m['trials']} trial(s) {flag}" for flag in ("throttled", "shared") if m[flag]]
        if m["read"] < m["trials"]:
            flags.append(f"{m['trials'] - m['read']} of {m['trials']} not read")
        none = f"none of {m['trials']} trial(s) throttled or shared"
        parts.append(f"{side} " + (", ".join(flags) if flags else none))
    return "machine: " + "; ".join(parts) if parts else None


def kernel_lines(comparison: Comparison) -> list[str]:
    """Per kind of kernel (``schema.KERNELS``) whose sides ran different ones, what each ran (said before any
    verdict: a fused attention kernel that fell back to the math path changes the speed on its own, often 2-4x on
    long sequences; so do experts that fell back from one grouped matmul to a loop over them)."""
    lines = []
    for kind in KERNELS:
        if not comparison.kernel_differs(kind):
            continue

        def ran(side: str, kind: str = kind) -> str:
            kernels = comparison.kernels[kind][side]
            total = sum(kernels.values())
            return ", ".join(f"{kernel} ({count} of {total} trials)" for kernel, count in kernels.items())

        lines.append(f"{kind} kernel differs: the baseline ran {ran('baseline')}, the candidate {ran('candidate')}; "
                     "the change is partly the kernel's, not only the software's")  # fmt: skip
    return lines


def flagged(comparison: Comparison) -> bool:
    """Whether a side's verdict rests on trials that ran throttled or shared, or whose machine was not read."""
    return any(m.get("throttled") or m.get("shared") or m.get("read", 0) < m.get("trials", 0)
               for m in comparison.machine.values())  # fmt: skip
