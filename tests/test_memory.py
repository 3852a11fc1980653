"""A CPU trial's peak memory: the peak anonymous memory the parent samples, checked against real processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.metrics import ANON_KIND
from stepwatch.collector.runner import spawn
from stepwatch.collector.schema import conform, to_table
from stepwatch.collector.trial import memory

MIB = 2**20
BUFFER = 256 * MIB

# A process that allocates (and touches) a buffer of N bytes, says so (a file), holds it until told to free it
# (another file), frees it and goes on: the peak is the buffer's, though the process ends well below it.
HOLD = """
import sys, time
from pathlib import Path
n, holding, release = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
buffer = bytearray(n) if n else b""
for i in range(0, n, 4096):
    buffer[i] = 1
holding.write_text("")
while not release.exists():
    time.sleep(0.005)
del buffer
time.sleep(0.05)
"""
HELD_SAMPLES = 25


def releasing_after(samples: int, holding: Path, release: Path, poll: Callable[[], int | None]):  # noqa: ANN201
    """``poll`` for ``memory.sample_until_exit`` that tells the process to go on (``release``) once ``samples``
    samples were taken while it held its buffer: the sampler samples, then polls, so every poll after the first
    that sees ``holding`` follows a sample taken while it was held, however slow the machine."""
    seen = 0

    def polled() -> int | None:
        nonlocal seen
        if holding.exists():
            seen += 1
            if seen > samples:
                release.touch()
        return poll()

    return polled


def sampled_peak(buffer: int, folder: Path) -> tuple[memory.PeakSampler, int | None]:
    holding, release = folder / f"holding-{buffer}", folder / f"release-{buffer}"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(buffer), str(holding), str(release)])
    poll = releasing_after(HELD_SAMPLES, holding, release, proc.poll)
    sampler, code, timed_out = memory.sample_until_exit(proc.pid, poll, timeout_s=120)
    assert not timed_out
    return sampler, code


def test_a_held_buffer_raises_the_sampled_anonymous_peak_by_its_size(tmp_path: Path) -> None:
    without, code = sampled_peak(0, tmp_path)
    with_buffer, code_2 = sampled_peak(BUFFER, tmp_path)
    assert code == code_2 == 0
    rise = with_buffer.peak_anon - without.peak_anon
    assert abs(rise - BUFFER) <= 0.05 * BUFFER, rise / MIB
    assert with_buffer.samples > HELD_SAMPLES  # it sampled all along
    # file-backed pages (the interpreter, its libraries) are reported beside the peak, not in it
    assert 0 < with_buffer.file_at_peak < BUFFER


FLOOR = """
import json
from stepwatch.collector.trial import memory
buffer = bytearray(64 << 20)
buffer[::4096] = b"x" * (len(buffer) // 4096)
del buffer
print(json.dumps(memory.trial_end_fields(memory.own_status())))
"""


def test_the_trial_end_floor_is_a_lower_bound_on_the_anonymous_peak() -> None:
    out = subprocess.run([sys.executable, "-c", FLOOR], capture_output=True, text=True, check=True).stdout
    floor = json.loads(out)["peak_anon_floor_bytes"]
    assert floor >= 64 * MIB  # the freed buffer still counts: VmHWM is the kernel's exact peak


# A process whose peak is a buffer held for under a millisecond, between two of the parent's readings at most.
BRIEF = """
import json, time
from stepwatch.collector.trial import memory
time.sleep(0.2)
buffer = bytearray(64 << 20)
buffer[::4096] = b"x" * (len(buffer) // 4096)
del buffer
time.sleep(0.2)
print(json.dumps({**memory.trial_end_fields(memory.own_status()), **memory.own_anon_fields()}))
"""


def test_a_peak_too_brief_for_the_sampler_is_held_by_the_floor() -> None:
    proc = subprocess.Popen([sys.executable, "-c", BRIEF], stdout=subprocess.PIPE, text=True)
    sampler, code, timed_out = memory.sample_until_exit(proc.pid, proc.poll, timeout_s=60)
    child = json.loads(proc.stdout.read())
    proc.stdout.close()
    assert code == 0 and not timed_out
    judged = memory.judged_peak(sampler.fields(), child)
    assert judged["peak_memory_bytes"] >= 64 * MIB > child["anon_end_bytes"]  # the buffer, freed long before the end
    assert judged["peak_memory_bytes"] == max(sampler.peak_anon, child["peak_anon_floor_bytes"])
    assert judged["peak_anon_missed_bytes"] == max(0, child["peak_anon_floor_bytes"] - sampler.peak_anon)


def test_a_real_trial_with_a_known_buffer_reports_it_in_its_peak(tmp_path: Path) -> None:
    """Two real trials of a script without a framework (its own memory is small and steady), one with 256 MiB of
    ballast allocated at interpreter start (sitecustomize): the judged peak memory rises by the ballast within 5%,
    and the sampled peak is not below the trial's floor (also checked on every backend's compiled steps:
    test_counters)."""
    config = BenchmarkConfig(model="tests/data/scripts/bad.py", script_args="good", steps=20, warmup_steps=20,
                             window_steps=10)  # fmt: skip
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        textwrap.dedent(f"""
        BALLAST = bytearray({BUFFER})
        for i in range(0, len(BALLAST), 4096):
            BALLAST[i] = 1
        """)
    )
    rows = []
    for name, extra in (("plain", None), ("ballast", {"PYTHONPATH": str(site)})):
        work = tmp_path / name
        work.mkdir()
        child, _, code = spawn.run_child(config, sys.executable, work, extra)
        assert child["status"] == "ok", child.get("error_message")
        assert child["peak_memory_kind"] == ANON_KIND
        assert child["memory_samples"] > 10
        assert child["peak_rss_bytes"] > child["peak_memory_bytes"]  # RSS also counts the mapped libraries
        assert child["peak_file_bytes"] > 0
        assert child["peak_anon_missed_bytes"] <= 0.01 * child["peak_memory_bytes"]
        rows.append(child)
    rise = rows[1]["peak_memory_bytes"] - rows[0]["peak_memory_bytes"]
    assert abs(rise - BUFFER) <= 0.05 * BUFFER, rise / MIB


def test_rows_from_before_move_their_rss_aside_and_never_mix_with_anonymous_peaks() -> None:
    old = to_table(
        [
            {"run_id": "a", "suite_run_id": "s", "config_key": "k", "status": "ok", "model": "bert", "trial": 0,
             "started_at": None, "device": "cpu", "peak_memory_bytes": 800 * MIB, "peak_memory_kind": "host_rss"},
            {"run_id": "b", "suite_run_id": "s", "config_key": "k", "status": "ok", "model": "bert", "trial": 1,
             "started_at": None, "device": "gpu", "peak_memory_bytes": 3 * 2**30, "peak_memory_kind": "device"},
            {"run_id": "c", "suite_run_id": "s", "config_key": "k", "status": "ok", "model": "bert", "trial": 2,
             "started_at": None, "device": "cpu", "peak_memory_bytes": 700 * MIB, "peak_memory_kind": None},
        ]
    ).drop_columns(["peak_rss_bytes", "peak_file_bytes"])  # fmt: skip
    old = old.set_column(0, "schema_version", pa.array([3, 3, 3], pa.int64()))
    old = old.set_column(
        old.column_names.index("started_at"), "started_at", pa.array([0, 0, 0], pa.timestamp("us", "UTC"))
    )
    new = conform(old.replace_schema_metadata({b"stepwatch_schema_version": b"3"})).to_pylist()
    assert new[0]["peak_memory_bytes"] is None and new[0]["peak_rss_bytes"] == 800 * MIB
    assert new[1]["peak_memory_bytes"] == 3 * 2**30 and new[1]["peak_rss_bytes"] is None
    assert new[2]["peak_memory_bytes"] is None and new[2]["peak_rss_bytes"] == 700 * MIB  # a CPU row of no kind


# A process that says it has measured (writes a marker file), then, once told to go on, allocates a buffer and
# holds it until told to free it: what a trial does when it reads the compiled step's counters after its timed
# steps.
AFTER_MEASURED = """
import sys, time
from pathlib import Path
marker, go, holding, release = map(Path, sys.argv[1:5])
marker.write_text("measured")
while not go.exists():
    time.sleep(0.005)
buffer = bytearray(int(sys.argv[5]))
for i in range(0, len(buffer), 4096):
    buffer[i] = 1
holding.write_text("")
while not release.exists():
    time.sleep(0.005)
"""


def test_what_a_process_does_after_it_has_measured_is_not_in_its_peak(tmp_path: Path) -> None:
    peaks = {}
    for stop in (False, True):
        names = ("measured", "go", "holding", "release")
        marker, go, holding, release = (tmp_path / f"{name}-{stop}" for name in names)
        proc = subprocess.Popen([sys.executable, "-c", AFTER_MEASURED, *map(str, (marker, go, holding, release)),
                                 str(BUFFER)])  # fmt: skip

        def measured(marker: Path = marker, go: Path = go, stop: bool = stop) -> bool:
            if marker.exists():
                go.touch()  # sampling stops before the process allocates (where it is told to stop)
            return stop and marker.exists()

        poll = releasing_after(3, holding, release, proc.poll)
        sampler, code, timed_out = memory.sample_until_exit(proc.pid, poll, timeout_s=120, measured=measured)
        assert code == 0 and not timed_out
        peaks[stop] = sampler.peak_anon
    assert peaks[False] - peaks[True] >= 0.9 * BUFFER, (peaks[False] / MIB, peaks[True] / MIB)
    assert peaks[True] < BUFFER / 4  # the interpreter alone


def test_the_trials_own_last_reading_raises_a_sampled_peak_that_missed_it() -> None:
    sampled = {"peak_memory_bytes": 100 * MIB, "peak_file_bytes": 50 * MIB, "memory_samples": 10}
    child = {"anon_end_bytes": 101 * MIB, "file_end_bytes": 51 * MIB, "peak_anon_floor_bytes": 101 * MIB}
    judged = memory.judged_peak(sampled, child)
    assert (judged["peak_memory_bytes"], judged["peak_file_bytes"], judged["peak_anon_missed_bytes"]) == (
        101 * MIB, 51 * MIB, 0)  # fmt: skip
    lower = memory.judged_peak(sampled, {**child, "anon_end_bytes": 90 * MIB, "peak_anon_floor_bytes": 95 * MIB})
    assert lower["peak_memory_bytes"] == 100 * MIB  # a peak earlier in the trial stays the peak
    own = memory.own_anon_fields()
    assert 0 < own["anon_end_bytes"] < 4 * 2**30 and own["file_end_bytes"] > 0
