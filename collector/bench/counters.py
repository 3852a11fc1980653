"""What the compiler emitted for one training step, read from the program itself: counts that are the same in
every process for one program and software stack (the deterministic metrics of ``collector.metrics``).

Framework-free: the backends hand this module the text or the objects their framework gives, and it counts.
A trial reads them after its timed steps and after its memory is measured (``collector.bench.trial``), so
reading them (which compiles the step once more on JAX and TensorFlow) changes no other figure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from collector.metrics import COUNTERS

# One HLO instruction: ``[ROOT ]%name = shape opcode(operands), attributes``. The opcode is the first
# ``word(`` after the shape (a shape holds no such word: layouts are ``{1,0}``, tiles ``:T(8,128)``).
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<rest>.*)$")
_OPCODE = re.compile(r"(?:^|\s)(?P<opcode>[a-z][a-z0-9\-]*)\(")


def hlo_instructions(text: str) -> list[tuple[str, str]]:
    """(name, opcode) of every instruction of an HLO module's text (every computation: the entry and the bodies
    of its fusions, loops and calls)."""
    found = []
    for line in text.splitlines():
        instruction = _INSTRUCTION.match(line)
        if not instruction or line.lstrip().startswith(("HloModule", "ENTRY", "//")):
            continue
        opcode = _OPCODE.search(instruction["rest"])
        if opcode:
            found.append((instruction["name"], opcode["opcode"]))
    return found


def hlo_opcodes(text: str) -> list[str]:
    """The opcode of every instruction of an HLO module's text."""
    return [opcode for _, opcode in hlo_instructions(text)]


def hlo_counts(text: str) -> dict[str, int]:
    """Instructions, fusions (each a kernel the step launches) and custom calls (library kernels: oneDNN, cuBLAS,
    cuDNN) of an optimized HLO module."""
    opcodes = hlo_opcodes(text)
    return {
        "hlo_instructions": len(opcodes),
        "hlo_fusions": opcodes.count("fusion"),
        "hlo_custom_calls": opcodes.count("custom-call"),
    }


def cost_counts(cost: Mapping[str, Any] | Iterable[Mapping[str, Any]] | None) -> dict[str, float]:
    """XLA's cost analysis of a compiled step (a dict, or a list of one per device in older JAX): its flops,
    bytes accessed and transcendentals."""
    if cost is None:
        return {}
    if not isinstance(cost, Mapping):
        cost = next(iter(cost), None) or {}
    names = {"flops": "compiled_flops", "bytes accessed": "compiled_bytes_accessed",
             "transcendentals": "compiled_transcendentals"}  # fmt: skip
    return {name: float(cost[key]) for key, name in names.items() if cost.get(key) is not None}


def memory_counts(stats: Any) -> dict[str, int]:
    """XLA's memory analysis of a compiled step (its buffer assignment, known without running it): the bytes its
    arguments, outputs and temporaries take at once, less the outputs that alias (reuse) argument buffers.
    The device memory one step needs beyond what the framework holds elsewhere; what bounds the batch search."""
    if stats is None:
        return {}
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes")
    arguments, outputs, temporaries, aliased = (int(getattr(stats, name, 0) or 0) for name in fields)
    total = arguments + outputs + temporaries - aliased
    return {"compiled_memory_bytes": total} if total > 0 else {}


def graph_op_count(graph_def: Any) -> int:
    """Ops of a TensorFlow GraphDef: its nodes and those of every function in its library (loop bodies,
    gradients), as traced (before Grappler rewrites it at run time)."""
    return len(graph_def.node) + sum(len(function.node_def) for function in graph_def.library.function)


def known(counts: Mapping[str, Any]) -> dict[str, Any]:
    """Only the counters ``collector.metrics`` defines, without the ones nothing was read for."""
    unknown = set(counts) - set(COUNTERS)
    if unknown:
        raise KeyError(f"not counters of collector.metrics: {', '.join(sorted(unknown))}")
    return {name: value for name, value in counts.items() if value is not None}
