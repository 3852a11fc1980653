"""A CPU trial's peak memory that is the program's own: its peak anonymous (private) resident memory, sampled
from outside the trial by the parent, which waits on it anyway. No framework here, and no thread inside the
trial, so sampling takes no time from the trial's interpreter.

Why not ``ru_maxrss``: the resident set also counts file-backed pages (the mapped shared libraries of the
framework, two thirds of a TensorFlow trial's RSS), and how many of those a process faults in depends on the
page cache and on where the package files lie on disk: two separately built environments of identical
packages differ by about 20 MiB in ``ru_maxrss`` and not at all in anonymous memory.

How well sampling catches the peak is checked per trial: the trial reports, at its end, the kernel's exact
peak of the whole resident set (VmHWM) and its file-backed and shared part then. File-backed pages only grow
during a trial (libraries are mapped, not unmapped), so at the moment of the resident peak the anonymous part
was at least VmHWM minus the final file-backed part: ``peak_anon_floor_bytes``. A sampled peak below that
floor missed the true peak by at least the difference (``peak_anon_missed_bytes`` in the row's extras), and
the row's peak is then the floor: each of the three (the sampled peak, the trial's last reading, the floor) is a
lower bound on the true peak, and the highest is the nearest. Under load the parent wakes late and misses a peak
that lasts less than a few readings (a compiler's brief buffers: about 1% of a torch.compile trial's peak); the
floor, from the kernel's exact VmHWM, does not. (It could only exceed the true anonymous peak where the kernel
dropped mapped file pages during the trial, under memory pressure.)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SAMPLE_INTERVAL_S = 0.01  # a read and a poll cost the parent ~70 us: 100 a second, under 1% of one core
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass
class PeakSampler:
    """Peak anonymous resident memory of one process (``/proc/PID/statm``: resident minus shared pages), and
    the file-backed part at that peak."""

    pid: int
    peak_anon: int = 0
    file_at_peak: int = 0
    samples: int = 0
    _fd: int | None = field(default=None, repr=False)

    def sample(self) -> None:
        """One reading; a process that has exited (or a system without /proc) reads as nothing."""
        try:
            if self._fd is None:
                self._fd = os.open(f"/proc/{self.pid}/statm", os.O_RDONLY)
            fields = os.pread(self._fd, 128, 0).split()
            resident, shared = int(fields[1]) * _PAGE, int(fields[2]) * _PAGE
        except (OSError, IndexError, ValueError):
            return
        if resident == 0:  # a zombie: nothing mapped any more
            return
        self.samples += 1
        if resident - shared > self.peak_anon:
            self.peak_anon, self.file_at_peak = resident - shared, shared

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def fields(self) -> dict[str, int]:
        """The row's fields: the peak and how many readings found it (none when nothing could be read)."""
        if not self.samples:
            return {}
        return {
            "peak_memory_bytes": self.peak_anon,
            "peak_file_bytes": self.file_at_peak,
            "memory_samples": self.samples,
        }


def sample_until_exit(
    pid: int | Callable[[], int | None],
    poll: Callable[[], int | None],
    timeout_s: float,
    interval_s: float = SAMPLE_INTERVAL_S,
    measured: Callable[[], bool] = lambda: False,
) -> tuple[PeakSampler, int | None, bool]:
    """Sample ``pid`` (or the process ``pid()`` names, once it names one: a launcher's rank 0) every
    ``interval_s`` until ``poll()`` gives its exit code or ``timeout_s`` passes: (the sampler, the exit code,
    whether it timed out). Once ``measured()`` is true (the trial has written what it measured), sampling stops:
    what the process does after that is not part of its peak."""
    sampler = PeakSampler(pid if isinstance(pid, int) else 0)
    deadline = time.monotonic() + timeout_s
    sampling = True
    try:
        while True:
            sampling = sampling and not measured()
            if sampling and not sampler.pid:  # a process found later (a launcher's rank 0)
                sampler.pid = pid() or 0
            if sampling and sampler.pid:
                sampler.sample()
            code = poll()
            if code is not None:
                return sampler, code, False
            if time.monotonic() >= deadline:
                return sampler, None, True
            time.sleep(interval_s)
    finally:
        sampler.close()


def own_status() -> dict[str, int]:
    """This process's own exact figures at this moment (/proc/self/status, kB -> bytes): the peak resident set
    (VmHWM) and its file-backed and shared parts now; empty where the OS does not say."""
    wanted = {"VmHWM": "hwm", "RssFile": "file", "RssShmem": "shmem"}
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key in wanted:
                    found[wanted[key]] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return found


def trial_end_fields(status: dict[str, int]) -> dict[str, int]:
    """What a CPU trial reports about its memory at its end: the lower bound on its anonymous peak
    (``peak_anon_floor_bytes``; see the module's docstring)."""
    if not {"hwm", "file", "shmem"} <= status.keys():
        return {}
    return {"peak_anon_floor_bytes": status["hwm"] - status["file"] - status["shmem"]}


def own_anon_fields() -> dict[str, int]:
    """This process's anonymous memory now, read as the parent samples it (``anon_end_bytes``): what a trial
    reports as it writes what it measured, the moment the parent stops sampling (a last reading it may miss)."""
    own = PeakSampler(os.getpid())
    own.sample()
    own.close()
    return {"anon_end_bytes": own.peak_anon, "file_end_bytes": own.file_at_peak} if own.samples else {}


def judged_peak(parent: dict[str, int], child: dict[str, Any]) -> dict[str, int]:
    """Merge the parent's sampled peak into a CPU trial's row with the trial's own last reading and its floor: the
    peak is the highest of these lower bounds, and the row keeps how far the readings (the parent's and the trial's
    last) fell below the floor (``peak_anon_missed_bytes``: how well the parent kept up)."""
    out = dict(parent)
    if "peak_memory_bytes" not in out:
        return out
    read = max(out["peak_memory_bytes"], child.get("anon_end_bytes") or 0)
    floor = child.get("peak_anon_floor_bytes")
    if floor is not None:
        out["peak_anon_missed_bytes"] = max(0, floor - read)
    # A peak the parent missed (the trial's last moment, or a brief peak between two readings on a loaded host):
    # the file-backed part is then the trial's own at its end.
    peak = max(read, floor or 0)
    if peak > out["peak_memory_bytes"]:
        out.update(peak_memory_bytes=peak, peak_file_bytes=child.get("file_end_bytes", out.get("peak_file_bytes")))
    return out
