"""Host, driver and process environment of a trial, read without any framework. Unknown is None, never a guess."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

REPO_ROOT = Path(__file__).resolve().parents[2]
# Set in the container of a trial of an image side (collector.environments.containers): the image it runs, and that
# the trial's memory is its own to read (the parent samples the engine's client, not the trial: spawn.with_peak).
IMAGE_ENV, INSIDE_ENV = "STEPWATCH_CONTAINER_IMAGE", "STEPWATCH_IN_CONTAINER"
# Environment variables that change what TensorFlow, XLA or the GPU runtime does (TF_ alone would catch
# unrelated tools' variables, such as Terraform's).
TF_ENV_PREFIXES = (
    "TF_CPP_",
    "TF_XLA",
    "TF_ENABLE_",
    "TF_GPU_",
    "TF_FORCE_",
    "TF_DETERMINISTIC",
    "TF_CUDNN",
    "TF_NUM_",
    "TF_USE_",
    "TF_CUDA_",
    "TF_INTRA_OP",
    "TF_INTER_OP",
    "XLA_",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_TF32",
    "TPU_",
    "KERAS_",
    "JAX_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "PYTORCH_",
    "OMP_NUM_THREADS",
)


def distribution_version(distribution: str) -> str | None:
    """An installed distribution's version, or None."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def package_set() -> str:
    """Every distribution installed where the trial runs, as JSON (canonical name -> version, sorted): what a
    verifying check of two nights installs for each (``stepwatch alerts verify``), beyond the versions of columns."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").strip()
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
    return json.dumps(dict(sorted(found.items())))


def cpu_model() -> str | None:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _nvidia_smi(query: str) -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def gpu_capability() -> tuple[tuple[int, int], str] | None:
    """The first GPU's compute capability and product name, as nvidia-smi reads them; None without a driver."""
    for line in _nvidia_smi("compute_cap,name")[:1]:
        capability, _, name = line.partition(",")
        major, _, minor = capability.strip().partition(".")
        if major.isdigit() and minor.isdigit():
            return (int(major), int(minor)), name.strip()
    return None


def cuda_runtime_version() -> str | None:
    """cudaRuntimeGetVersion of the libcudart the process can load, e.g. '12.5'."""
    for name in ("libcudart.so", "libcudart.so.12", "libcudart.so.11.0"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int()
        if lib.cudaRuntimeGetVersion(ctypes.byref(version)) == 0:
            return f"{version.value // 1000}.{(version.value % 1000) // 10}"
    return None


def git_sha(root: Path = REPO_ROOT) -> str | None:
    """The stepwatch checkout's commit (STEPWATCH_GIT_SHA wins, for installs without .git). Only a repository
    whose top level is stepwatch's own root counts: a copy of the source inside another repository (a vendored
    checkout, an unpacked archive) has no commit of its own, and the enclosing one's would be a wrong answer."""
    if os.environ.get("STEPWATCH_GIT_SHA"):
        return os.environ["STEPWATCH_GIT_SHA"]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (subprocess.SubprocessError, OSError):
        return None
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != root.resolve():
        return None
    return lines[1]


def host_environment(device: str) -> dict[str, Any]:
    """Every software and hardware column that can be read without a framework."""
    tf_env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(TF_ENV_PREFIXES)}
    env: dict[str, Any] = {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python_version": platform.python_version(),
        "numpy_version": distribution_version("numpy"),
        "package_set": package_set(),
        "keras_hub_version": distribution_version("keras-hub"),
        "stepwatch_version": distribution_version("stepwatch"),
        "stepwatch_git_sha": git_sha(),
        "xla_flags": os.environ.get("XLA_FLAGS"),
        "tf_env": json.dumps(tf_env),
        "container_image": os.environ.get(IMAGE_ENV),
        "runner_label": os.environ.get("STEPWATCH_RUNNER_LABEL") or os.environ.get("RUNNER_NAME"),
        "cpu_model": cpu_model(),
        "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "host_memory_bytes": psutil.virtual_memory().total,
        "driver_version": None,
        "cuda_runtime_version": None,
        "accelerator_memory_bytes": None,
    }
    if os.environ.get(INSIDE_ENV):  # kept in extras: a trial of an image side, in its container
        env["in_container"] = True
    if device == "gpu":
        drivers = _nvidia_smi("driver_version")
        memory = _nvidia_smi("memory.total")
        names = _nvidia_smi("name")
        env["accelerator"] = names[0] if names else None
        env["driver_version"] = drivers[0] if drivers else None
        env["accelerator_memory_bytes"] = int(float(memory[0]) * 2**20) if memory else None
        env["cuda_runtime_version"] = cuda_runtime_version()
    if device == "cpu":
        env["accelerator"] = env["cpu_model"]
        env["accelerator_count"] = 1
    return env
