"""The state of the machine a trial ran on, read just before and just after its measured steps (the reading is
not timed: ``measure.WindowClock`` starts the first measured window after it).

- The CPU: its frequency and governor where the OS says, the time the hypervisor held the machine's CPUs back
  (steal), the CPU time of every process that is not the trial's (the runner's process tree is the trial's), the
  time a CPU quota (the trial's cgroup and its parents: a container's CPU limit) held the trial back, and
  thermal throttle events.
- The GPUs a trial used, through NVML (the ``nvidia-ml-py`` package, with the driver's ``libnvidia-ml.so.1``):
  SM and memory clocks, power limit and draw, temperature, clock event reasons ("throttle reasons"), the time
  the power and thermal limits held clocks back, ECC and MIG mode, compute processes that are not the trial's,
  and the energy the measured steps took.

A trial is flagged ``throttled`` (a CPU quota, thermal throttling, a GPU held back by heat or a hardware
slowdown, or a power limit set below the card's default) or ``shared`` (other processes busy on its CPUs, the
hypervisor taking CPU time, other compute processes on its GPUs); ``machine_note`` says why in one line. A flag
is empty (None), not False, where what could raise it was not read: a GPU trial whose NVML read failed, a host
without /proc/stat (shared) or without a cgroup's cpu.stat and a thermal counter (throttled).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.trial.measure import WindowClock
from stepwatch.collector.trial.ranks import rank

RUNNER_PID_ENV = "STEPWATCH_RUNNER_PID"  # set by the runner: its process tree is the trial's own
# The limits a flag stands on, in one place (docs/reference.md, "The machine's state").
SHARED_OTHER_CORES = 0.5  # other processes' CPU, in cores, at least this or 5% of the machine's cores
SHARED_OTHER_SHARE = 0.05
SHARED_STEAL_CORES = 0.1  # CPU time the hypervisor took, in cores
THROTTLED_SHARE = 0.01  # of the measured time: a CPU quota or a GPU's thermal limit held back at least this long
TOP_OTHERS = 3  # the busiest other processes named in the note

# NVML's clock event reasons (nvmlClocksEventReason*): the bit, its name, and whether it is throttling. Idle, the
# application clocks, a sync boost and the display are settings; the software power cap is the card working at
# its power limit (a trial is flagged for it only when that limit is set below the card's default).
GPU_REASONS = (
    (0x1, "gpu_idle", False),
    (0x2, "applications_clocks", False),
    (0x4, "sw_power_cap", False),
    (0x8, "hw_slowdown", True),
    (0x10, "sync_boost", False),
    (0x20, "sw_thermal_slowdown", True),
    (0x40, "hw_thermal_slowdown", True),
    (0x80, "hw_power_brake_slowdown", True),
    (0x100, "display_clock", False),
)
_NVML_POWER, _NVML_THERMAL = 0, 1  # NVML_PERF_POLICY_POWER, NVML_PERF_POLICY_THERMAL
_NVML_CLOCK_SM, _NVML_CLOCK_MEM, _NVML_TEMPERATURE_GPU = 1, 2, 0

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def reason_names(mask: int) -> list[str]:
    return [name for bit, name, _ in GPU_REASONS if mask & bit]


def _read(path: Path | str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _machine_cpu() -> tuple[float, float] | None:
    """(busy, steal) seconds of all CPUs since boot (/proc/stat); busy is user, nice, system, irq and softirq."""
    text = _read("/proc/stat")
    if not text:
        return None
    fields = [int(v) for v in text.split("\n", 1)[0].split()[1:]]
    if len(fields) < 8:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq) / _CLOCK_TICKS, steal / _CLOCK_TICKS


def host_steal_s() -> float:
    """Seconds the hypervisor held back this machine's CPUs (all of them) since boot; NaN where the OS does not say."""
    reading = _machine_cpu()
    return reading[1] if reading else math.nan


def _cpu_seconds(process: psutil.Process) -> float:
    """A process's CPU time, and that of the children it has waited for (a finished worker counts)."""
    t = process.cpu_times()
    return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)


def own_processes() -> list[psutil.Process]:
    """The trial's processes: the runner that started it and everything under the runner (launcher, ranks, data
    loader workers), and this process and its children, which are not under the runner when the trial runs in a
    container (its engine starts it); without a runner (a trial started by hand), this process and its children."""
    me = psutil.Process()
    mine = [me, *me.children(recursive=True)]
    try:
        root = psutil.Process(int(os.environ.get(RUNNER_PID_ENV, os.getpid())))
        tree = [root, *root.children(recursive=True)]
    except (psutil.Error, ValueError):
        return mine
    return [*tree, *(p for p in mine if p.pid not in {t.pid for t in tree})]


def cgroup_cpu_stats() -> list[Path]:
    """The cpu.stat files of this process's cgroup and of its parents (cgroup v2, or v1's cpu controller): a CPU
    quota on any of them can hold the trial back."""
    found = []
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, path = parts[1], parts[2].strip("/")
        if controllers == "":
            roots = [Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")]
        elif "cpu" in controllers.split(","):
            roots = [
                Path("/sys/fs/cgroup") / controllers,
                Path("/sys/fs/cgroup/cpu"),
                Path("/sys/fs/cgroup/cpu,cpuacct"),
            ]
        else:
            continue
        below = Path(path).parts
        for root in roots:  # the first root that holds this hierarchy: the cgroup's cpu.stat, then its parents'
            chain = [root.joinpath(*below[:depth], "cpu.stat") for depth in range(len(below), -1, -1)]
            existing = [stat for stat in chain if stat.exists()]
            if existing:
                found += [stat for stat in existing if stat not in found]
                break
    return found


def throttled_seconds(stat: Path) -> float | None:
    """Seconds the cgroup's CPU quota throttled it (v2 throttled_usec, v1 throttled_time in ns)."""
    values = dict(line.split()[:2] for line in (_read(stat) or "").splitlines() if len(line.split()) >= 2)
    if "throttled_usec" in values:
        return int(values["throttled_usec"]) / 1e6
    if "throttled_time" in values:
        return int(values["throttled_time"]) / 1e9
    return None


def _thermal_events() -> int | None:
    paths = list(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/thermal_throttle/*_throttle_count"))
    counts = [int(v) for v in (_read(p) for p in paths) if v and v.strip().isdigit()]
    return sum(counts) if counts else None


def _cpu_frequency() -> float | None:
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, RuntimeError):
        return None
    return float(freq.current) if freq and freq.current else None


def _governor() -> str | None:
    text = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    return text.strip() if text else None


@dataclass
class CpuReading:
    time: float
    machine: tuple[float, float] | None  # busy, steal seconds
    own: float  # the trial's processes' CPU seconds
    own_pids: set[int]  # the trial's processes at the reading
    others: dict[int, tuple[str, float]]  # pid -> (name, CPU seconds) of every other process
    throttled: list[float | None]  # per cgroup cpu.stat
    thermal: int | None
    frequency: float | None


def read_cpu(stats: list[Path]) -> CpuReading:
    own = own_processes()
    own_pids = {p.pid for p in own}
    own_s = 0.0
    for process in own:
        try:
            own_s += _cpu_seconds(process)
        except psutil.Error:
            pass
    others = {}
    for process in psutil.process_iter(["name"]):
        if process.pid in own_pids:
            continue
        try:
            t = process.cpu_times()
            others[process.pid] = (process.info["name"] or "?", t.user + t.system)
        except psutil.Error:
            pass
    return CpuReading(
        time.monotonic(),
        _machine_cpu(),
        own_s,
        own_pids,
        others,
        [throttled_seconds(s) for s in stats],
        _thermal_events(),
        _cpu_frequency(),
    )


# The reasons a trial is flagged for, found by reading one part of the machine: None where that part could not be
# read (no /proc/stat, no cgroup cpu.stat nor thermal counter, NVML failed), else the reasons found (empty: none).
Reasons = list[str] | None


def cpu_fields(before: CpuReading, after: CpuReading) -> tuple[dict[str, Any], Reasons, Reasons]:
    """The CPU's columns over the measured steps, and the reasons (throttled, shared) found."""
    seconds = max(after.time - before.time, 1e-9)
    out: dict[str, Any] = {"cpu_freq_mhz": after.frequency, "cpu_governor": _governor()}
    throttled: Reasons = None
    shared: Reasons = None
    started = {pid: cpu for pid, (_, cpu) in before.others.items()}  # a process started since: all of it counts
    busiest = sorted(((cpu - started.get(pid, 0.0), name, pid) for pid, (name, cpu) in after.others.items()),
                     reverse=True)  # fmt: skip
    if before.machine and after.machine:
        shared = []
        busy = after.machine[0] - before.machine[0]
        steal = after.machine[1] - before.machine[1]
        # The machine's busy time less the trial's (it counts processes that ended), or the other processes' own
        # CPU time where that is more (the two clocks differ by a tick's rounding)
        other = max(busy - (after.own - before.own), sum(max(b[0], 0.0) for b in busiest), 0.0) / seconds
        out["host_other_cpu"] = round(other, 3)
        out["host_steal_cpu"] = round(steal / seconds, 3)
        limit = max(SHARED_OTHER_CORES, SHARED_OTHER_SHARE * (os.cpu_count() or 1))
        if other >= limit:
            named = ", ".join(f"{name} (pid {pid}) {cpu / seconds:.2f}" for cpu, name, pid in busiest[:TOP_OTHERS]
                              if cpu / seconds >= 0.05)  # fmt: skip
            shared.append(f"other processes used {other:.2f} cores" + (f": {named}" if named else ""))
        if steal / seconds >= SHARED_STEAL_CORES:
            shared.append(f"the hypervisor took {steal / seconds:.2f} cores (steal)")
    quota = [b2 - b1 for b1, b2 in zip(before.throttled, after.throttled) if b1 is not None and b2 is not None]
    if quota:
        throttled = []
        out["cpu_throttled_s"] = round(max(quota), 4)
        if max(quota) >= THROTTLED_SHARE * seconds:
            throttled.append(f"a CPU quota (cgroup) held it back {max(quota):.2f} s of {seconds:.2f} s")
    if before.thermal is not None and after.thermal is not None:
        throttled = throttled or []
        if after.thermal > before.thermal:
            throttled.append(f"{after.thermal - before.thermal} CPU thermal throttle event(s)")
    return out, throttled, shared


def visible_gpus(count: int) -> list[str]:
    """The GPUs a trial uses, as NVML indices or UUIDs: CUDA_VISIBLE_DEVICES' first ``count`` (or 0..count-1)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(i) for i in range(count)]
    return [token.strip() for token in visible.split(",") if token.strip()][:count]


@dataclass
class GpuReading:
    time: float
    values: list[dict[str, Any]]  # per device


def _get(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception:  # noqa: BLE001 - a field the driver or device does not give (NVMLError_NotSupported...)
        return None


class Nvml:
    """The GPUs' state through NVML; ``available`` False where there is no nvidia-ml-py or no driver library."""

    def __init__(self, devices: list[str]) -> None:
        self.handles: list[Any] = []
        self.error: str | None = None
        try:
            import pynvml
        except ImportError:
            self.error = "nvidia-ml-py is not installed"
            return
        self.nvml = pynvml
        try:
            pynvml.nvmlInit()
            for token in devices:
                if token.isdigit():
                    self.handles.append(pynvml.nvmlDeviceGetHandleByIndex(int(token)))
                else:
                    self.handles.append(pynvml.nvmlDeviceGetHandleByUUID(token))
        except Exception as error:  # noqa: BLE001 - no driver, no device: the row says so
            self.error = f"NVML: {error}"
            self.handles = []

    @property
    def available(self) -> bool:
        return bool(self.handles)

    def read(self) -> GpuReading:
        n = self.nvml
        values = []
        for h in self.handles:
            values.append(
                {
                    "sm_clock": _get(lambda h=h: n.nvmlDeviceGetClockInfo(h, _NVML_CLOCK_SM)),
                    "mem_clock": _get(lambda h=h: n.nvmlDeviceGetClockInfo(h, _NVML_CLOCK_MEM)),
                    "max_sm_clock": _get(lambda h=h: n.nvmlDeviceGetMaxClockInfo(h, _NVML_CLOCK_SM)),
                    "power_mw": _get(lambda h=h: n.nvmlDeviceGetPowerUsage(h)),
                    "limit_mw": _get(lambda h=h: n.nvmlDeviceGetEnforcedPowerLimit(h)),
                    "default_limit_mw": _get(lambda h=h: n.nvmlDeviceGetPowerManagementDefaultLimit(h)),
                    "temp_c": _get(lambda h=h: n.nvmlDeviceGetTemperature(h, _NVML_TEMPERATURE_GPU)),
                    "reasons": _get(lambda h=h: n.nvmlDeviceGetCurrentClocksEventReasons(h)),
                    "energy_mj": _get(lambda h=h: n.nvmlDeviceGetTotalEnergyConsumption(h)),
                    "power_held_ns": _get(lambda h=h: n.nvmlDeviceGetViolationStatus(h, _NVML_POWER).violationTime),
                    "thermal_held_ns": _get(lambda h=h: n.nvmlDeviceGetViolationStatus(h, _NVML_THERMAL).violationTime),
                    "ecc": _get(lambda h=h: n.nvmlDeviceGetEccMode(h)[0]),
                    "mig": _get(lambda h=h: n.nvmlDeviceGetMigMode(h)[0]),
                    "processes": _get(
                        lambda h=h: [(p.pid, p.usedGpuMemory) for p in n.nvmlDeviceGetComputeRunningProcesses(h)]
                    ),
                }
            )
        return GpuReading(time.monotonic(), values)


def _delta(before: dict, after: dict, key: str) -> float | None:
    a, b = before.get(key), after.get(key)
    return b - a if a is not None and b is not None and b >= a else None


def _known(values: list[Any]) -> list[Any]:
    return [v for v in values if v is not None]


def gpu_fields(
    before: GpuReading, after: GpuReading, own_pids: set[int], processes: int
) -> tuple[dict[str, Any], Reasons, Reasons]:
    """The GPUs' columns over the measured steps (the slowest clock, the hottest device, all devices' power and
    energy), and the reasons (throttled, shared) found. The clock event reasons are read for every device or
    not read (None, where an empty string is "read: none"); so are the compute processes."""
    seconds = max(after.time - before.time, 1e-9)
    readings = [*before.values, *after.values]
    pairs = list(zip(before.values, after.values))
    reasons_read = bool(readings) and all(r["reasons"] is not None for r in readings)
    throttled: Reasons = [] if reasons_read else None
    shared: Reasons = None
    mask = 0
    for r in readings:
        mask |= r["reasons"] or 0
    energy = [_delta(b, a, "energy_mj") for b, a in pairs]
    energy_j = sum(energy) / 1000 if energy and None not in energy else None
    powers = _known([r["power_mw"] for r in readings])
    out: dict[str, Any] = {
        "gpu_sm_clock_mhz": min(_known([r["sm_clock"] for r in readings]), default=None),
        "gpu_max_sm_clock_mhz": min(_known([r["max_sm_clock"] for r in readings]), default=None),
        "gpu_mem_clock_mhz": min(_known([r["mem_clock"] for r in readings]), default=None),
        "gpu_temp_c": max(_known([r["temp_c"] for r in readings]), default=None),
        "gpu_power_limit_w": sum(_known([r["limit_mw"] for r in after.values])) / 1000 or None,
        # energy over time; without an energy counter, the mean of the two readings of all devices' draw
        "gpu_power_w": energy_j / seconds if energy_j is not None else (sum(powers) / 2 / 1000 if powers else None),
        "gpu_energy_j": energy_j,
        "gpu_clock_reasons": ",".join(reason_names(mask)) if reasons_read else None,
        "gpu_ecc": all(r["ecc"] == 1 for r in after.values) if _known([r["ecc"] for r in after.values]) else None,
        "gpu_mig": any(r["mig"] == 1 for r in after.values) if _known([r["mig"] for r in after.values]) else None,
    }
    held = [d for b, a in pairs if (d := _delta(b, a, "thermal_held_ns")) is not None]
    power_held = [d for b, a in pairs if (d := _delta(b, a, "power_held_ns")) is not None]
    out["gpu_thermal_held_s"] = max(held) / 1e9 if held else None
    out["gpu_power_held_s"] = max(power_held) / 1e9 if power_held else None
    found = []
    hard = [name for bit, name, throttling in GPU_REASONS if throttling and mask & bit]
    if hard:
        found.append("GPU clocks held back: " + ", ".join(hard))
    elif held and max(held) / 1e9 >= THROTTLED_SHARE * seconds:
        found.append(f"the GPU's thermal limit held clocks back {max(held) / 1e9:.2f} s of {seconds:.2f} s")
    for i, r in enumerate(after.values):
        limit, default = r["limit_mw"], r["default_limit_mw"]
        if limit and default and limit < default:
            found.append(f"GPU {i}: power limit {limit / 1000:.0f} W, below the card's default {default / 1000:.0f} W")
    if found:
        throttled = found  # what was found stands even where the reasons were not read on every device
    others = 0
    for r in after.values:
        procs = r["processes"] or []
        foreign = [p for p in procs if p[0] not in own_pids]
        if len(foreign) == len(procs):  # none of the trial's ids: another process namespace (a container)
            foreign = procs[processes:]
        others += len(foreign)
    processes_read = bool(after.values) and all(r["processes"] is not None for r in after.values)
    out["gpu_other_processes"] = others if processes_read or others else None
    if processes_read or others:
        shared = [f"{others} other compute process(es) on its GPU(s)"] if others else []
    return out, throttled, shared


def flag_reasons(parts: list[Reasons]) -> Reasons:
    """One flag's reasons from every part of the machine that can raise it: those found wherever they were found;
    none (an empty list: the flag is False) only where every part was read; else None (not read)."""
    found = [reason for part in parts for reason in part or []]
    if found or all(part is not None for part in parts):
        return found
    return None


@dataclass
class Watch:
    """Reads the machine before and after a trial's measured steps; ``fields`` gives the row's columns."""

    device: str = "cpu"
    devices: int = 1
    processes: int = 1
    stats: list[Path] = field(default_factory=cgroup_cpu_stats)
    readings: list[tuple[CpuReading, GpuReading | None]] = field(default_factory=list)
    nvml: Nvml | None = None

    def __post_init__(self) -> None:
        if self.device == "gpu":
            self.nvml = Nvml(visible_gpus(self.devices))

    def read(self) -> None:
        if len(self.readings) < 2:
            gpu = self.nvml.read() if self.nvml and self.nvml.available else None
            self.readings.append((read_cpu(self.stats), gpu))

    def fields(self, examples: float | None) -> dict[str, Any]:
        """The row's machine columns; empty until both readings are taken (a trial that stopped early)."""
        if len(self.readings) < 2:
            return {}
        (cpu0, gpu0), (cpu1, gpu1) = self.readings
        out, cpu_throttled, cpu_shared = cpu_fields(cpu0, cpu1)
        parts = [(cpu_throttled, cpu_shared)]
        if gpu0 is not None and gpu1 is not None:
            gpu, gpu_throttled, gpu_shared = gpu_fields(gpu0, gpu1, cpu1.own_pids, self.processes)
            out.update(gpu)
            parts.append((gpu_throttled, gpu_shared))
            energy = gpu.get("gpu_energy_j")
            if energy is not None and examples:
                out["gpu_wh_per_1m_examples"] = energy / 3600 / examples * 1e6
        else:
            parts.append((None, None) if self.device == "gpu" else ([], []))  # a GPU trial's GPU was not read
            if self.nvml is not None and self.nvml.error:
                out["gpu_state_missing"] = self.nvml.error  # kept in extras: why a GPU trial has no GPU state
        throttled, shared = (flag_reasons([part[i] for part in parts]) for i in (0, 1))
        notes = [f"throttled: {t}" for t in throttled or []] + [f"shared: {s}" for s in shared or []]
        out["throttled"] = None if throttled is None else bool(throttled)
        out["shared"] = None if shared is None else bool(shared)
        out["machine_note"] = "; ".join(notes) or None
        return {k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v) for k, v in out.items()}


def watch_trial(clock: WindowClock, config: BenchmarkConfig, total_steps: int) -> None:
    """Have a trial's clock read the machine as its measured steps begin and end: in the process that writes the
    row (rank 0 of several, whose processes are all the trial's)."""
    if rank() == 0:
        watch = Watch(config.device, config.devices, config.processes)
        clock.watch_measured(watch, config.warmup_steps, total_steps)


def trial_fields(clock: WindowClock, examples: float | None) -> dict[str, Any]:
    """The row's machine columns of a trial ``watch_trial`` set up (none in the other ranks)."""
    return clock.watch.fields(examples) if clock.watch is not None else {}
