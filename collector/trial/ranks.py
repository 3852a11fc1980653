"""A rank's place among a trial's processes, as the rank itself sees it: its number, where it writes its result,
and that it dies with the process that started it. The launchers that start the ranks (``runner/launchers.py``)
read the same names."""

from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path

COORDINATOR_ENV = "STEPWATCH_COORDINATOR"
PR_SET_PDEATHSIG = 1


def rank() -> int:
    """This process's rank under a launcher (RANK, as torch's launcher and stepwatch's set it); 0 alone."""
    return int(os.environ.get("RANK", "0"))


def rank_result(result_path: Path, index: int) -> Path:
    """Where rank ``index`` writes its result (rank 0: the trial's result file)."""
    return result_path if index == 0 else result_path.with_name(f"rank-{index}.json")


def rank0_pid_file(result_path: Path) -> Path:
    """Where rank 0 writes its process id, so that the parent samples the memory of rank 0, not of a launcher."""
    return result_path.with_name("rank-0.pid")


def die_with_parent() -> None:
    """Get SIGKILL when the parent process dies (Linux): a trial started by stepwatch (before exec), and a rank
    under a launcher that starts its workers in sessions of their own (torch's), so that no process outlives a
    killed suite or trial."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
