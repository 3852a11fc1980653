"""torchtitan's metrics from a TensorBoard log folder: its event files (``events.out.tfevents.*``, TFRecord-framed
``Event`` protocol buffers, read here without TensorFlow or TensorBoard), the scalars torchtitan logs under its own tag
names (``torchtitan/components/metrics.py``): throughput, TFLOPs, MFU, step time and memory. The steps after a warm-up
(WARMUP_STEPS: compiling, the allocator settling) are the run's trials. One event file is one run; a file still being
written adds its new steps on the next import."""

from __future__ import annotations

import re
import struct
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stepwatch.collector.imports.rows import ImportRefused, Result, Run, digest

NAME = "torchtitan"
WARMUP_STEPS = 10
# torchtitan's tags: (metric, unit, better). ``wps`` is the name before throughput(tps).
TAGS = {
    "throughput(tps)": ("throughput", "tokens/s", "higher"),
    "wps": ("throughput", "tokens/s", "higher"),
    "tflops": ("tflops", "TFLOP/s", "higher"),
    "mfu(%)": ("mfu", "%", "higher"),
    "time_metrics/end_to_end(s)": ("step time", "s", "lower"),
    "time_metrics/data_loading(s)": ("data loading", "s", "lower"),
    "memory/max_active(GiB)": ("max active memory", "GiB", "lower"),
    "memory/max_reserved(GiB)": ("max reserved memory", "GiB", "lower"),
}


def event_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("events.out.tfevents.*") if p.is_file())


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protocol buffer message: varints as ints, fixed64/32 as their bytes,
    length-delimited fields as bytes."""
    out, at = [], 0
    while at < len(data):
        tag, at = _varint(data, at)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 1:
            value, at = data[at : at + 8], at + 8
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at : at + size], at + size
        elif wire == 5:
            value, at = data[at : at + 4], at + 4
        else:
            raise ValueError(f"wire type {wire}")
        if at > len(data):
            raise ValueError("truncated field")
        out.append((number, wire, value))
    return out


def _scalar(value: bytes) -> tuple[str, float] | None:
    """(tag, value) of a Summary.Value: its simple_value (torch's SummaryWriter), or a scalar tensor's (tf.summary)."""
    tag, found = "", None
    for number, wire, field in _fields(value):
        if number == 1 and wire == 2:
            tag = field.decode("utf-8", "replace")
        elif number == 2 and wire == 5:
            found = struct.unpack("<f", field)[0]
        elif number == 8 and wire == 2:  # TensorProto: dtype 1 (float) or 2 (double), float_val 5, double_val 6
            for n, _, f in _fields(field):
                if n == 5:
                    found = struct.unpack("<f", f[:4])[0]
                elif n == 6:
                    found = struct.unpack("<d", f[:8])[0]
                elif n == 4 and len(f) in (4, 8):  # tensor_content
                    found = struct.unpack("<f" if len(f) == 4 else "<d", f)[0]
    return (tag, found) if tag and found is not None else None


def events(path: Path) -> list[tuple[float, int, str, float]]:
    """(wall time, step, tag, value) of every scalar in an event file; a truncated last record (a writer still
    writing) ends it, a corrupt one refuses it."""
    out = []
    data = path.read_bytes()
    at = 0
    while at + 12 <= len(data):
        (size,) = struct.unpack("<Q", data[at : at + 8])
        if at + 12 + size + 4 > len(data):
            break  # the writer's last record, not yet whole
        record = data[at + 12 : at + 12 + size]
        at += 12 + size + 4
        try:
            wall, step, scalars = 0.0, 0, []
            for number, wire, field in _fields(record):
                if number == 1 and wire == 1:
                    wall = struct.unpack("<d", field)[0]
                elif number == 2 and wire == 0:
                    step = field
                elif number == 5 and wire == 2:
                    scalars += [s for n, w, v in _fields(field) if n == 1 and w == 2 and (s := _scalar(v))]
        except (ValueError, struct.error, UnicodeDecodeError):
            raise ImportRefused(f"a corrupt event record at byte {at}") from None
        out += [(wall, step, tag, value) for tag, value in scalars]
    return out


def job_name(path: Path) -> str:
    """What names a torchtitan job's series: the first folder above its event file that is not the run's timestamp
    (torchtitan writes ``<dump folder>/tb/<timestamp>[/rank_N]``), ``tb`` or a rank's."""
    for folder in path.parents:
        name = folder.name
        skipped = name in ("tb", "tensorboard") or re.match(r"rank_\d+$", name)
        if name and re.search("[A-Za-z]", name) and not skipped:
            return name
    return ""


def read(path: Path, data: Any = None) -> list[Run]:
    """One event file's run."""
    found = events(path)
    if not found:
        raise ImportRefused("an event file with no scalars")
    mine = [e for e in found if e[2] in TAGS]
    if not mine:
        raise ImportRefused(f"no torchtitan metric among its tags (it logs {', '.join(sorted(TAGS)[:4])}, ...)")
    start = datetime.fromtimestamp(min(e[0] for e in found), UTC)
    parts = path.name.split(".")  # events.out.tfevents.<time>.<host>[.<pid>.<n>]
    host = ".".join(parts[4:-2]) if len(parts) > 6 else parts[4] if len(parts) > 4 else None
    job = job_name(path)
    run = Run(NAME, digest(path.name), start, host=host, device="gpu", extras={"tensorboard_folder": str(path.parent)})
    results: dict[str, Result] = {}
    for _, step, tag, value in sorted(mine, key=lambda e: e[1]):
        if step <= WARMUP_STEPS:
            continue
        metric, unit, better = TAGS[tag]
        results.setdefault(metric, Result("torchtitan", metric, unit, [], better, job)).values.append(value)
    if not results:
        raise ImportRefused(f"no step after the warm-up (steps up to {WARMUP_STEPS} are left out)")
    run.results = list(results.values())
    return [run]
