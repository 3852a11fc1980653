"""What the compiler emitted for one training step, read from the program itself: counts that are the same in
every process for one program and software stack (the deterministic metrics of ``collector.metrics``).

Framework-free: the backends hand this module the text or the objects their framework gives, and it counts.
A trial reads them after its timed steps and after its memory is measured (``collector.trial.process``), so
reading them (which compiles the step once more on JAX and TensorFlow) changes no other figure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from stepwatch.collector.metrics import COUNTERS

# One HLO instruction: ``[ROOT ]%name = shape opcode(operands), attributes``. The opcode is the first
# ``word(`` after the shape (a shape holds no such word: layouts are ``{1,0}``, tiles ``:T(8,128)``).
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<rest>.*)$")
_OPCODE = re.compile(r"(?:^|\s)(?P<opcode>[a-z][a-z0-9\-]*)\(")


def _instructions(text: str) -> Iterator[tuple[str, str, str]]:
    """(name, opcode, the rest of the line) of every instruction of an HLO module's text."""
    for line in text.splitlines():
        instruction = _INSTRUCTION.match(line)
        if not instruction or line.lstrip().startswith(("HloModule", "ENTRY", "//")):
            continue
        opcode = _OPCODE.search(instruction["rest"])
        if opcode:
            yield instruction["name"], opcode["opcode"], instruction["rest"]


def hlo_instructions(text: str) -> list[tuple[str, str]]:
    """(name, opcode) of every instruction of an HLO module's text (every computation: the entry and the bodies
    of its fusions, loops and calls)."""
    return [(name, opcode) for name, opcode, _ in _instructions(text)]


_TARGET = re.compile(r'custom_call_target="(?P<target>[^"]+)"')
# What a custom call's target calls, in words (XLA hands these to a library rather than generating a kernel):
# the target's prefix -> its name. Longest prefixes first; anything else keeps its target.
LIBRARY_CALLS = {
    "__cudnn$convBiasActivationForward": "cuDNN convolution forward (fused bias and activation)",
    "__cudnn$convForwardGraph": "cuDNN convolution forward (graph)",
    "__cudnn$convForward": "cuDNN convolution forward",
    "__cudnn$convBackwardInput": "cuDNN convolution backward (input)",
    "__cudnn$convBackwardFilter": "cuDNN convolution backward (filter)",
    "__cudnn$fmha": "cuDNN fused attention",
    "__cudnn$norm": "cuDNN normalization",
    "__cublas$lt$matmul$f8": "cuBLASLt matmul (fp8)",
    "__cublas$lt$matmul": "cuBLASLt matmul",
    "__cublas$gemm": "cuBLAS gemm",
    "__cublas$triangularSolve": "cuBLAS triangular solve",
    "__onednn$matmul": "oneDNN matmul",
    "__onednn$convolution": "oneDNN convolution",
    "__onednn$softmax": "oneDNN softmax",
    "__onednn$layernorm": "oneDNN layer norm",
}


def library_call(target: str) -> str:
    """A custom call's target in words: ``__cudnn$convForward`` -> ``cuDNN convolution forward``; an unknown
    target as ``custom-call <target>``."""
    for prefix in sorted(LIBRARY_CALLS, key=len, reverse=True):
        if target.startswith(prefix):
            return LIBRARY_CALLS[prefix]
    return f"custom-call {target}"


def hlo_op_types(text: str) -> dict[str, str]:
    """Instruction name -> what the profile calls its type: its opcode, and for a custom call what it calls
    (``library_call``), so that a profile names cuDNN and cuBLAS calls instead of ``custom-call``."""
    types = {}
    for name, opcode, rest in _instructions(text):
        target = _TARGET.search(rest) if opcode == "custom-call" else None
        types[name] = library_call(target["target"]) if target else opcode
    return types


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


# What a backend may say about its compiled step beside the counters (kept in the row's extras, not judged).
DETAILS = ("graph_break_reasons",)


def graph_break_reasons(breaks: Mapping[str, int]) -> dict[str, int]:
    """torch.compile's graph breaks per reason, from dynamo's counter (reason text -> breaks): each reason's first
    line and its explanation, without the hints and links that follow ("Unsupported Tensor.backward() call:
    Dynamo currently does not support tracing `Tensor.backward()` ...")."""
    reasons: dict[str, int] = {}
    for text, count in breaks.items():
        lines = [line.strip() for line in str(text).splitlines() if line.strip()]
        head = lines[0] if lines else "unknown"
        explanation = next((line.removeprefix("Explanation:").strip() for line in lines if
                            line.startswith("Explanation:")), "")  # fmt: skip
        reason = f"{head}: {explanation}" if explanation else head
        reasons[reason[:300]] = reasons.get(reason[:300], 0) + int(count)
    return dict(sorted(reasons.items(), key=lambda item: -item[1]))


def known(counts: Mapping[str, Any]) -> dict[str, Any]:
    """Only the counters ``collector.metrics`` defines (and the ``DETAILS``), without the ones nothing was read
    for."""
    unknown = set(counts) - set(COUNTERS) - set(DETAILS)
    if unknown:
        raise KeyError(f"not counters of collector.metrics: {', '.join(sorted(unknown))}")
    return {name: value for name, value in counts.items() if value is not None}
