"""The machine's state in every row (collector.trial.machine): on this CPU for real, a trial run under a CPU quota
(a cgroup of its own) with a busy process beside it is flagged throttled and shared, and its note names the
busy process; the NVML path runs the real nvidia-ml-py bindings against a stand-in of the driver's library
(tests/data/nvml/standin.c) serving an H100's values, as it runs, throttled by heat and shared; the measured
windows leave the reading out; and compare says how many trials of each side were flagged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from stepwatch.collector.schema import COLUMN_NAMES, to_table
from stepwatch.collector.trial import machine
from stepwatch.collector.trial.measure import WindowClock, summarize
from stepwatch.dashboard import charts
from tests.conftest import REPO, result_rows, rows_in, stepwatch, write_results

NVML = REPO / "tests" / "data" / "nvml"


def cpu_cgroup(quota: float) -> tuple[Path, str]:
    """A cgroup of its own with a CPU quota of ``quota`` cores (v1's cpu controller or v2's cpu.max): its folder
    and the file a process writes its pid to, to join it; skipped where this machine gives none."""
    name = f"stepwatch-test-{uuid.uuid4().hex[:8]}"
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    try:
        if (v1 / "cpu.cfs_quota_us").exists():
            folder = v1 / name
            folder.mkdir()
            (folder / "cpu.cfs_quota_us").write_text(str(int(quota * 100_000)))
        elif "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
            folder = v2 / name
            folder.mkdir()
            (folder / "cpu.max").write_text(f"{int(quota * 100_000)} 100000")
        else:
            pytest.skip("no cgroup with a cpu controller here")  # ok-skip: needs a cgroup this user can make
    except OSError as error:
        pytest.skip(f"cannot make a cgroup here: {error}")  # ok-skip: needs root and a writable cgroup file system
    return folder, str(folder / "cgroup.procs")


@pytest.mark.large
def test_a_trial_under_a_cpu_quota_beside_a_busy_process_is_flagged_throttled_and_shared(tmp_path: Path) -> None:
    folder, procs = cpu_cgroup(quota=0.2)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:

        def join() -> None:
            Path(procs).write_text(str(os.getpid()))

        measure = ("--trials", "1", "--steps", "100", "--warmup", "20", "--window", "10", "--out", str(tmp_path))
        command = [sys.executable, "-m", "stepwatch", "run", "--script", "tests/data/scripts/bad.py", *measure, "--"]
        command.append("spins")
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=join)
    finally:
        busy.kill()
        busy.wait()
        for _ in range(50):  # the cgroup goes once its processes have
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = rows_in(tmp_path)
    assert row["status"] == "ok", row["error_message"]
    assert row["throttled"] is True and row["cpu_throttled_s"] > 0.01 * row["measured_s"], row["machine_note"]
    assert row["shared"] is True and row["host_other_cpu"] >= machine.SHARED_OTHER_CORES, row["machine_note"]
    assert "a CPU quota (cgroup) held it back" in row["machine_note"]
    assert f"(pid {busy.pid})" in row["machine_note"]  # the busy process is named
    assert row["gpu_sm_clock_mhz"] is None  # a CPU trial reads no GPU

    # compare says how many trials of each side ran flagged
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(tmp_path), "--db", str(db)).returncode == 0
    shown = stepwatch("compare", "--db", str(db), "--baseline", "trial=0", "--candidate", "trial=0")
    assert "machine: baseline 1 of 1 trial(s) throttled, 1 of 1 trial(s) shared; candidate 1 of 1" in shown.stdout


def test_compare_counts_trials_whose_machine_was_not_read_and_exclude_flagged_drops_them(tmp_path: Path) -> None:
    rows = result_rows(6, label="a")
    for row, (throttled, shared) in zip(rows, [(True, False), (None, None), (False, None), *[(False, False)] * 3]):
        row.update(throttled=throttled, shared=shared)
    write_results(tmp_path / "results" / "a.parquet", rows)
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(tmp_path / "results"), "--db", str(db)).returncode == 0
    sides = ("--db", str(db), "--baseline", "label=a", "--candidate", "label=a")
    shown = stepwatch("compare", *sides)
    assert "machine: baseline 1 of 6 trial(s) throttled, 2 of 6 not read;" in shown.stdout, shown.stdout
    kept = stepwatch("compare", *sides, "--exclude-flagged", "--format", "json")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["machine"]["baseline"] == {"trials": 3, "read": 3, "throttled": 0, "shared": 0}
    none_left = stepwatch("compare", "--db", str(db), "--baseline", "trial=0", "--candidate", "label=a",
                          "--exclude-flagged")  # fmt: skip
    assert none_left.returncode == 2 and "the baseline selection" in none_left.stderr, none_left.stderr


def test_the_pages_say_which_verdicts_rest_on_flagged_or_unread_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_dashboard import figures, render, values

    clean = result_rows(3, label="a", host_other_cpu=0.1)
    later = result_rows(3, label="b", start=10, host_other_cpu=0.1)  # the CPU read: what was not, was not read
    for row in clean:
        row.update(throttled=False, shared=False)
    for row, (throttled, shared) in zip(later, [(False, True), (None, None), (False, False)]):
        row.update(throttled=throttled, shared=shared)
    write_results(tmp_path / "results" / "a.parquet", clean)
    write_results(tmp_path / "results" / "b.parquet", later)
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(tmp_path / "results"), "--db", str(db)).returncode == 0

    overview = render(db, "overview", monkeypatch)
    [table] = [frame.value for frame in overview.dataframe if "machine" in frame.value.columns]
    assert list(table["machine"]) == ["1 throttled/shared, 1 not read"]
    assert any("1 series' latest run has trials whose machine" in w.value for w in overview.warning)

    history = render(db, "history", monkeypatch)
    [ringed] = [t for t in figures(history)[0]["data"] if t.get("name") == charts.MACHINE_FLAGGED]
    later_median = sorted(row["examples_per_sec"] for row in later)[1]
    assert values(ringed["y"]) == pytest.approx([later_median])  # the second run only
    assert any("Ringed: 1 points" in c.value for c in history.caption)

    compare = render(db, "compare", monkeypatch, baseline="label=a", candidate="label=b")
    warned = [w.value for w in compare.warning]
    assert any("; candidate 1 of 3 trial(s) shared, 1 of 3 not read: a verdict" in w for w in warned), warned
    kept = render(db, "compare", monkeypatch, baseline="label=a", candidate="label=b", exclude="flagged")
    assert kept.checkbox[0].value is True
    assert any(c.value == "machine: baseline none of 3 trial(s) throttled or shared; candidate none of 1 trial(s) "
               "throttled or shared" for c in kept.caption)  # fmt: skip


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in NVML library, built here (a folder to put on LD_LIBRARY_PATH)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        pytest.skip("no C compiler to build the NVML stand-in")  # ok-skip: the stand-in is C
    folder = tmp_path_factory.mktemp("nvml")
    built = subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(folder / "libnvidia-ml.so.1"),
                            str(NVML / "standin.c")], capture_output=True, text=True)  # fmt: skip
    assert built.returncode == 0, built.stderr
    return folder


READ_GPU = """
import json, sys, time
from stepwatch.collector.trial import machine
watch = machine.Watch("gpu", 1, 1)
watch.read()
time.sleep(0.5)
watch.read()
print(json.dumps(watch.fields(examples=40_000)))
"""


def gpu_state(standin: Path, recording: str, **env: str) -> dict:
    """What a GPU trial's watch reads through the real bindings from the stand-in serving ``recording``."""
    done = subprocess.run([sys.executable, "-c", READ_GPU], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "LD_LIBRARY_PATH": str(standin), "NVML_STANDIN": str(NVML / recording),
                               **env})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_nvml_state_of_an_h100_that_runs_as_it_should(standin: Path) -> None:
    state = gpu_state(standin, "h100_sxm.txt")
    assert (state["gpu_sm_clock_mhz"], state["gpu_max_sm_clock_mhz"], state["gpu_mem_clock_mhz"]) == (1980, 1980, 2619)
    assert state["gpu_power_limit_w"] == 700 and state["gpu_temp_c"] == 61 and state["gpu_ecc"] is True
    assert state["gpu_mig"] is False and state["gpu_other_processes"] == 0 and state["gpu_clock_reasons"] == ""
    # energy: NVML's counter over the measured time; power is energy over that time (612 W in the recording)
    assert state["gpu_power_w"] == pytest.approx(612, rel=0.02)
    assert state["gpu_energy_j"] == pytest.approx(612 * 0.5, rel=0.2)
    assert state["gpu_wh_per_1m_examples"] == pytest.approx(state["gpu_energy_j"] / 3600 / 40_000 * 1e6, rel=1e-3)
    # Nothing on the GPU held it back (the CPU's own state is this machine's: another test may share it).
    assert "GPU" not in (state["machine_note"] or "") and state["gpu_thermal_held_s"] == 0
    assert not [k for k in state if k not in COLUMN_NAMES]  # every field is a column of the row
    assert to_table([{**result_rows(1)[0], **state}]).column("gpu_sm_clock_mhz").to_pylist() == [1980]


def test_nvml_state_of_an_h100_held_back_by_heat_is_flagged_throttled(standin: Path) -> None:
    state = gpu_state(standin, "h100_throttled.txt")
    assert state["throttled"] is True and state["gpu_sm_clock_mhz"] == 1410 and state["gpu_temp_c"] == 88
    assert state["gpu_clock_reasons"] == "sw_thermal_slowdown"
    assert "throttled: GPU clocks held back: sw_thermal_slowdown" in state["machine_note"]
    assert state["gpu_thermal_held_s"] == pytest.approx(0.6 * 0.5, rel=0.25)


def test_nvml_state_of_a_shared_h100_and_of_a_gpu_named_by_uuid(standin: Path) -> None:
    state = gpu_state(standin, "h100_shared.txt")
    assert state["shared"] is True and state["gpu_other_processes"] == 1
    assert "1 other compute process(es) on its GPU(s)" in state["machine_note"]
    uuid_ = "GPU-6f1c2a8e-52b1-4f0e-9d7a-0c3b1e5a9f21"  # CUDA_VISIBLE_DEVICES by UUID, as schedulers set it
    assert gpu_state(standin, "h100_sxm.txt", CUDA_VISIBLE_DEVICES=uuid_)["gpu_sm_clock_mhz"] == 1980
    missing = gpu_state(standin, "h100_sxm.txt", CUDA_VISIBLE_DEVICES="GPU-not-this-one")
    assert missing["gpu_state_missing"].startswith("NVML: ") and "gpu_sm_clock_mhz" not in missing


def test_a_gpu_trial_without_a_driver_says_why_it_has_no_gpu_state() -> None:
    watch = machine.Watch("gpu", 1, 1)  # no libnvidia-ml.so.1 on this machine
    watch.read()
    watch.read()
    fields = watch.fields(examples=100)
    assert fields["gpu_state_missing"].startswith("NVML: ") and "gpu_sm_clock_mhz" not in fields
    # Its GPU was not read: not "not throttled" (False) but not read (None), unless the CPU's state, read all the
    # same, flagged it.
    note = fields["machine_note"] or ""
    assert fields["throttled"] is (True if "throttled: " in note else None)
    assert fields["shared"] is (True if "shared: " in note else None)


def reading(**values: object) -> machine.GpuReading:
    device = {key: None for key in ("sm_clock", "mem_clock", "max_sm_clock", "power_mw", "limit_mw",
                                    "default_limit_mw", "temp_c", "reasons", "energy_mj", "power_held_ns",
                                    "thermal_held_ns", "ecc", "mig", "processes")}  # fmt: skip
    return machine.GpuReading(time.monotonic(), [{**device, **values}])


def test_gpu_state_not_read_is_empty_where_a_read_that_found_nothing_is_false() -> None:
    """A driver that gives no clock event reasons nor processes: the flags are not read (None) and the reasons
    are empty (None), where a read that found none gives "" and False."""
    fields, throttled, shared = machine.gpu_fields(reading(), reading(), own_pids={1}, processes=1)
    assert (fields["gpu_clock_reasons"], fields["gpu_other_processes"], throttled, shared) == (None, None, None, None)
    fields, throttled, shared = machine.gpu_fields(reading(reasons=0, processes=[]), reading(reasons=0, processes=[]),
                                                   own_pids={1}, processes=1)  # fmt: skip
    assert (fields["gpu_clock_reasons"], fields["gpu_other_processes"], throttled, shared) == ("", 0, [], [])
    # What was found stands where the rest was not read.
    _, throttled, _ = machine.gpu_fields(reading(), reading(limit_mw=500_000, default_limit_mw=700_000), {1}, 1)
    assert throttled == ["GPU 0: power limit 500 W, below the card's default 700 W"]
    # A flag is False only where every part that could raise it was read.
    assert machine.flag_reasons([[], []]) == [] and machine.flag_reasons([[], None]) is None
    assert machine.flag_reasons([["x"], None]) == ["x"]


def test_a_host_without_its_cpu_counters_has_its_flags_unread() -> None:
    def cpu(machine_times: tuple[float, float] | None) -> machine.CpuReading:
        return machine.CpuReading(time.monotonic(), machine_times, 0.0, set(), {}, [], None, None)

    _, throttled, shared = machine.cpu_fields(cpu(None), cpu(None))  # no /proc/stat, no cgroup, no thermal counter
    assert (throttled, shared) == (None, None)
    _, throttled, shared = machine.cpu_fields(cpu((0.0, 0.0)), cpu((0.0, 0.0)))
    assert (throttled, shared) == (None, [])


class SlowWatch:
    def __init__(self) -> None:
        self.reads = 0

    def read(self) -> None:
        self.reads += 1
        time.sleep(0.3)


def test_the_measured_windows_leave_the_machine_reading_out() -> None:
    clock = WindowClock(first_steps=1, window_steps=2)
    watch = SlowWatch()
    clock.watch_measured(watch, warmup_steps=2, total_steps=7)
    clock.begin()
    for steps in (1, 3, 5, 7):
        time.sleep(0.01)
        clock.close(steps, None)
    assert watch.reads == 2  # as the measured steps begin (after 3) and end (after 7)
    stats = summarize(clock, warmup_steps=2, global_batch=1)
    assert stats.measured_steps == 4 and stats.measured_s < 0.2  # two 10 ms windows, not the 300 ms readings


def test_rows_from_before_empty_the_flags_they_could_not_read_and_a_scripts_first_step_is_its_start() -> None:
    """Schema 7 wrote False for a flag it could not read, and a script's time to its first step as compile_s."""
    import pyarrow as pa

    from stepwatch.collector.schema import conform, to_table

    base = {"suite_run_id": "s", "config_key": "k", "status": "ok", "model": "bert", "host_other_cpu": 0.1}
    old = to_table([
        {**base, "run_id": "gpu-unread", "trial": 0, "throttled": False, "shared": False,
         "extras": json.dumps({"gpu_state_missing": "NVML: not found"})},
        {**base, "run_id": "gpu-unread-cpu-quota", "trial": 1, "throttled": True, "shared": False,
         "machine_note": "throttled: a CPU quota (cgroup) held it back 0.50 s of 1.00 s",
         "extras": json.dumps({"gpu_state_missing": "NVML: not found"})},
        {**base, "run_id": "no-proc-stat", "trial": 2, "throttled": False, "shared": False, "host_other_cpu": None},
        {**base, "run_id": "read", "trial": 3, "throttled": False, "shared": False},
        {**base, "run_id": "script", "trial": 4, "loop": "script", "compile_s": 10.9, "startup_s": 11.4},
        {**base, "run_id": "fit", "trial": 5, "loop": "fit", "compile_s": 2.5, "startup_s": 9.0},
    ]).drop_columns(["startup_script_s"])  # fmt: skip
    old = old.set_column(0, "schema_version", pa.array([7] * old.num_rows, pa.int64()))
    rows = {
        r["run_id"]: r for r in conform(old.replace_schema_metadata({b"stepwatch_schema_version": b"7"})).to_pylist()
    }
    assert (rows["gpu-unread"]["throttled"], rows["gpu-unread"]["shared"]) == (None, None)
    assert (rows["gpu-unread-cpu-quota"]["throttled"], rows["gpu-unread-cpu-quota"]["shared"]) == (True, None)
    assert (rows["no-proc-stat"]["throttled"], rows["no-proc-stat"]["shared"]) == (False, None)
    assert (rows["read"]["throttled"], rows["read"]["shared"]) == (False, False)
    assert (rows["script"]["compile_s"], rows["script"]["startup_script_s"]) == (None, 10.9)
    assert (rows["fit"]["compile_s"], rows["fit"]["startup_script_s"]) == (2.5, None)
