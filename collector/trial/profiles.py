"""Per-op statistics of a few profiled training steps: the time each op took per step (its self time: what
ran inside it, on the same thread, is its children's), how often it ran per step, and where (host or device).

Framework-free: a backend records a profile with its framework's profiler after the timed steps and after the
counters (``collector.trial.process``), so profiling changes no timed figure, and hands this module the events
its framework reads back. XSpace profiles (TensorFlow, JAX) come as planes of lines of events; torch's profiler
writes a Chrome trace (JSON), read here without torch.

What an op is, by backend and compiler:
- XLA (TensorFlow with jit_compile, JAX): an HLO instruction the compiled step runs (an event with an
  ``hlo_op`` stat): its name (``multiply_add_fusion.12``) and its type: its opcode (``dot``) where the step's
  optimized HLO was read for its counters, the name less its numeric suffix for a fusion
  (``multiply_add_fusion``) or where it was not. Names and numbering differ between compilations and
  versions, so types are what align across versions.
- TensorFlow without XLA: a graph op (an event named ``node:OpType``): the node's name and its op type, the
  stock op's where oneDNN rewrote it (``graph_type``).
- torch: an operator (``aten::addmm``), read from the Chrome trace torch's profiler exports (``torch_spans``); the
  profiler names no instances, so on the host name and type are one. On a GPU each kernel (copy, memset) is
  counted once, typed by the operator that launched it and named by itself (torch's own per-op totals count it
  twice: under its operator and again under its own name). torch.compile's regions (``TORCH_WRAPPERS``) are
  where compiled code runs, not ops: their kernels are typed by their own names, as a command buffer's.
On a CPU every op runs on the host; on an accelerator its kernels are ``device`` rows, read from the device's
streams, and typed by the instruction that launched them: a custom call by what it calls (cuDNN convolution
forward, cuBLAS gemm: ``counters.hlo_op_types``); a kernel of a command buffer (a CUDA graph, where the profiler
knows only the buffer) by its own name (``kernel_type``). JAX's profiled step is compiled without command
buffers, so its kernels keep their instructions.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepwatch.collector.metrics import OP_COLUMNS

PROFILE_ENV = "STEPWATCH_PROFILE_DIR"  # set by the parent for a trial it profiles: where the raw profile goes
PROFILE_STEPS = 5  # training steps recorded, after the timed ones
TORCH_TRACE = "trace.json.gz"  # where torch's profiler writes its trace in a trial's profile folder

_XLA_SUFFIX = re.compile(r"(?:[._]\d+)+$")
_TORCH_SUFFIX = re.compile(r":\s*\d+/\d+$")  # a compiled region's frame and recompile: 42/0
_TF_OP = re.compile(r"^(?P<name>[^:\s]+):(?P<type>_?[A-Z][A-Za-z0-9_]*)$")
# oneDNN's graph rewrite (on by default where TensorFlow finds AVX-512 VNNI or newer) renames the ops it takes
# over: _MklMatMul, _MklNativeFusedConv2D. Typed as the op they replace, a profile names the same ops on every
# x86 CPU (_FusedConv2D is TensorFlow's own fused op, from its remapper).
_ONEDNN = re.compile(r"^_Mkl(?:Native)?(?:(?P<fused>Fused(?:Conv2D|Conv3D|DepthwiseConv2dNative|MatMul|BatchMatMulV2|"
                     r"BatchNormEx))|(?P<op>[A-Z]\w*))$")  # fmt: skip


@dataclass(frozen=True)
class Span:
    """One op's execution on one timeline (a thread, or a device stream)."""

    track: str
    op_type: str
    op_name: str
    where: str
    start_ns: float
    end_ns: float


@dataclass(frozen=True)
class Event:
    """An event of an XSpace line as a framework reads it back: its name, start and duration, and the stats
    that say which op it is (``hlo_op``, ``tf_op``) where it has them."""

    name: str
    start_ns: float
    duration_ns: float
    hlo_op: str | None = None
    tf_op: str | None = None


# An XSpace as (plane name, [(line name, events)]), from whichever reader the framework has; the stats that say
# which op an event is.
Planes = list[tuple[str, list[tuple[str, Iterable[Event]]]]]
_OP_STATS = ("hlo_op", "tf_op")


def graph_type(op_type: str) -> str:
    """A TensorFlow graph op's type, as stock TensorFlow names it: oneDNN's rewrites by the op they replace
    (``_MklMatMul`` -> ``MatMul``, ``_MklNativeFusedMatMul`` -> ``_FusedMatMul``)."""
    found = _ONEDNN.match(op_type)
    if found is None:
        return op_type
    return f"_{found['fused']}" if found["fused"] else found["op"]


def xla_type(hlo_op: str) -> str:
    """An HLO instruction's type: its name less the numeric suffixes of repeats (``dot.21`` -> ``dot``; TensorFlow's
    op names carry their own: ``MatMul_1.42`` -> ``MatMul``)."""
    return _XLA_SUFFIX.sub("", hlo_op)


def torch_type(key: str) -> str:
    """A torch operator's type: its name, less the frame numbers of a compiled region
    (``Torch-Compiled Region: 42/0`` -> ``Torch-Compiled Region``)."""
    return _TORCH_SUFFIX.sub("", key)


# Library kernels by their names (what a GPU profile's stream shows where no instruction is known): a pattern of
# the kernel's name -> what it is. cuDNN's convolutions are xmma/cutlass kernels named by their pass.
_KERNELS = (
    (re.compile(r"fprop|conv.*fwd|convolve", re.I), "cuDNN convolution forward"),
    (re.compile(r"dgrad", re.I), "cuDNN convolution backward (input)"),
    (re.compile(r"wgrad", re.I), "cuDNN convolution backward (filter)"),
    (re.compile(r"fmha|flash", re.I), "cuDNN fused attention"),
    (re.compile(r"gemm|nvjet|cublas|cutlass", re.I), "cuBLAS gemm"),
)
# Lines of a device plane that XProf derives from its streams' kernels (a raw profile may carry them too):
# counting them beside the streams would count every kernel twice.
DERIVED_LINES = ("XLA Ops", "XLA Modules", "Steps", "Framework Ops", "Framework Name Scope", "Source code")
COMMAND_BUFFER = "command_buffer"  # XLA's op for a CUDA graph of many kernels (XLA's GPU command buffers)


def kernel_type(name: str) -> str:
    """A GPU kernel's type from its name: XLA names a kernel after its fusion (``loop_multiply_fusion_2`` ->
    ``loop_multiply_fusion``), libraries after what they compute (``sm90_xmma_fprop_...`` -> cuDNN convolution
    forward)."""
    if "fusion" in name:
        return xla_type(name)
    for pattern, kind in _KERNELS:
        if pattern.search(name):
            return kind
    return xla_type(name)


def op_of(event: Event, opcodes: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(op type, op name) of an event that is an op, else None (the framework's own work: executors,
    profiler and runtime annotations). ``opcodes`` (instruction name -> opcode, from the step's optimized HLO)
    types an HLO instruction by its opcode, whatever the frontend named it (TensorFlow 2.21 names some dots
    ``MatMul.86`` where 2.20 named them ``dot.21``); a fusion keeps the type of its name, which XLA makes from
    what it fuses (``multiply_add_fusion``)."""
    if event.hlo_op:
        opcode = (opcodes or {}).get(event.hlo_op)
        op_type = opcode if opcode and opcode != "fusion" else xla_type(event.hlo_op)
        if op_type == COMMAND_BUFFER or (opcode == "call" and COMMAND_BUFFER in event.hlo_op):
            # A kernel of a command buffer: the profiler knows only the buffer; the kernel's name says what ran.
            return kernel_type(event.name), event.name
        return op_type, event.hlo_op
    for text in (event.tf_op, event.name):
        found = _TF_OP.match(text or "")
        if found:
            return graph_type(found["type"]), found["name"]
    return None


def xspace_spans(planes: Planes, opcodes: Mapping[str, str] | None = None) -> Iterator[Span]:
    """The op spans of an XSpace, given as (plane name, [(line name, events)]): a ``/device:`` plane's ops run
    on the device, the rest on the host. ``opcodes``: see ``op_of``."""
    for plane, lines in planes:
        where = "device" if plane.startswith("/device:") else "host"
        for index, (line, events) in enumerate(lines):
            if where == "device" and line in DERIVED_LINES:
                continue
            track = f"{plane}/{index}/{line}"
            for event in events:
                op = op_of(event, opcodes)
                if op is not None:
                    end = event.start_ns + event.duration_ns
                    yield Span(track, op[0], op[1], where, event.start_ns, end)


# torch.compile's wrapper regions: the compiled graph's call and the guard check before it, not operators.
TORCH_WRAPPERS = ("Torch-Compiled Region", "TorchDynamo Cache Lookup")
_TORCH_HOST = ("cpu_op",)  # a Chrome trace's operator events (user annotations and ProfilerStep are not ops)
_TORCH_DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")  # what runs on a device stream


def torch_spans(trace: Mapping[str, Any]) -> Iterator[Span]:
    """The op spans of torch's profiler trace (``export_chrome_trace``'s JSON): each operator on the host thread
    that ran it, and each kernel, copy and memset on its device stream, typed by the operator that launched it
    (the event's ``External id`` is that operator's) and named by itself; one launched from no operator or from a
    compiled region (``TORCH_WRAPPERS``) is typed by its own name (``kernel_type``)."""
    events = [event for event in trace.get("traceEvents", []) if event.get("ph") == "X"]
    launched_by = {
        event["args"]["External id"]: torch_type(event["name"])
        for event in events
        if event.get("cat") in _TORCH_HOST and "External id" in event.get("args", {})
    }
    for event in events:
        category, name = event.get("cat"), str(event.get("name", ""))
        start = float(event["ts"]) * 1e3  # microseconds
        end = start + float(event.get("dur", 0)) * 1e3
        track = f"{event.get('pid')}/{event.get('tid')}"
        if category in _TORCH_HOST and torch_type(name) not in TORCH_WRAPPERS:
            yield Span(track, torch_type(name), name, "host", start, end)
        elif category in _TORCH_DEVICE:
            operator = launched_by.get(event.get("args", {}).get("External id"))
            op_type = operator if operator and operator not in TORCH_WRAPPERS else kernel_type(name)
            yield Span(track, op_type, name, "device", start, end)


def torch_trace(logdir: Path) -> dict[str, Any]:
    """The Chrome trace torch's profiler wrote under ``logdir`` (``trace.json.gz``)."""
    with gzip.open(logdir / TORCH_TRACE, "rt") as stream:
        return json.load(stream)


def proto_planes(space: Any) -> Planes:
    """The planes of an ``XSpace`` protobuf message (TensorFlow's ``xplane_pb2``): names, stats and times resolved
    through each plane's metadata (a stat's value is a string or a reference to another metadata's name)."""

    def value(plane: Any, stat: Any) -> str:
        if stat.WhichOneof("value") == "ref_value":
            return plane.stat_metadata[stat.ref_value].name
        return str(getattr(stat, stat.WhichOneof("value") or "str_value"))

    def events(plane: Any, line: Any) -> Iterator[Event]:
        for event in line.events:
            metadata = plane.event_metadata[event.metadata_id]
            stats = {}
            for stat in (*metadata.stats, *event.stats):
                name = plane.stat_metadata[stat.metadata_id].name
                if name in _OP_STATS:
                    stats[name] = value(plane, stat)
            start = line.timestamp_ns + event.offset_ps / 1000
            yield Event(metadata.name, start, event.duration_ps / 1000, **stats)

    return [(plane.name, [(line.name, events(plane, line)) for line in plane.lines]) for plane in space.planes]


def profile_data_planes(data: Any) -> Planes:
    """The planes of JAX's ``jax.profiler.ProfileData`` (an XSpace read by jaxlib)."""

    def events(line: Any) -> Iterator[Event]:
        for event in line.events:
            stats = {name: str(value) for name, value in event.stats if name in _OP_STATS}
            yield Event(event.name, event.start_ns, event.duration_ns, **stats)

    return [(plane.name, [(line.name, events(line)) for line in plane.lines]) for plane in data.planes]


def self_times(spans: Iterable[Span]) -> dict[tuple[str, str, str], tuple[float, int]]:
    """(op type, op name, where) -> (total self time in seconds, occurrences). An op's self time is its duration
    less that of the ops nested in it on the same track."""
    by_track: dict[str, list[Span]] = {}
    for span in spans:
        by_track.setdefault(span.track, []).append(span)
    totals: dict[tuple[str, str, str], list[float]] = {}
    for track in by_track.values():
        track.sort(key=lambda s: (s.start_ns, -s.end_ns))
        selfs = [s.end_ns - s.start_ns for s in track]
        stack: list[int] = []
        for i, span in enumerate(track):
            while stack and track[stack[-1]].end_ns <= span.start_ns:
                stack.pop()
            if stack:  # nested in the op on top: what this one took is not the parent's own time
                parent = track[stack[-1]]
                selfs[stack[-1]] -= min(span.end_ns, parent.end_ns) - span.start_ns
            stack.append(i)
        for span, own in zip(track, selfs):
            entry = totals.setdefault((span.op_type, span.op_name, span.where), [0.0, 0])
            entry[0] += max(own, 0.0) / 1e9
            entry[1] += 1
    return {key: (time_s, int(count)) for key, (time_s, count) in totals.items()}


def op_table(totals: dict[tuple[str, str, str], tuple[float, int]], steps: int) -> dict[str, list[Any]]:
    """The result row's op columns (``collector.metrics.OP_COLUMNS``) from per-op totals over ``steps`` steps: type,
    name, where, time and count per step; the slowest op first."""
    rows = sorted(totals.items(), key=lambda item: (-item[1][0], item[0]))
    columns = (
        [key[0] for key, _ in rows],
        [key[1] for key, _ in rows],
        [key[2] for key, _ in rows],
        [time_s / steps for _, (time_s, _) in rows],
        [count / steps for _, (_, count) in rows],
    )
    return dict(zip(OP_COLUMNS, columns, strict=True))


def xspace_file(logdir: Path) -> Path:
    """The XSpace file a TensorFlow or JAX profile wrote under ``logdir`` (``plugins/profile/RUN/HOST.xplane.pb``)."""
    found = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
    if not found:
        raise FileNotFoundError(f"the profiler wrote no .xplane.pb under {logdir}")
    return found[-1]


def size_bytes(folder: Path) -> int:
    """What a raw profile takes on disk."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


# The raw profile's files a viewer opens, and which viewer: XSpace (TensorFlow, JAX) in XProf, the trace JSON
# that torch writes in Perfetto.
VIEWERS = (
    ("*.xplane.pb", "XProf: `pip install xprof && xprof --logdir {folder}`, then http://localhost:8791"),
    (TORCH_TRACE, "Perfetto: open the file at https://ui.perfetto.dev (Open trace file)"),
)


def raw_profile(uri: str) -> tuple[Path | None, str]:
    """The raw profile's file under a profile's folder (None where it is not on this machine: object storage, or
    deleted) and how to open it."""
    folder = Path(uri)
    for pattern, viewer in VIEWERS:
        found = sorted(folder.rglob(pattern)) if folder.is_dir() else []
        if found:
            return found[-1], viewer.format(folder=folder)
    return None, f"not on this machine: {uri}"
