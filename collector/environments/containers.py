"""A side that is a container image (``image=REF``): each of its trials is a fresh container of the image, started by
the host's engine (podman or docker), the trial's own measurement unchanged.

The image brings the framework, its CUDA libraries and its Python; stepwatch brings only its trial code, mounted
read-only (a copy of the installed stepwatch's, as a package set's environment gets). A side's ``python`` is a small
launcher (``python`` in the side's folder) that runs ``python3`` in a new container: the trial's result folder and
the folder its workload is read from mounted at the same paths, the host's process namespace and IPC shared (the
machine's state reads the host's other processes, as on the host; a data-parallel trial's ranks share memory), no
network but the container's own loopback, the host's GPUs passed through where it has them (CDI for podman,
``--gpus all`` for docker). A trial killed at its timeout takes its container with it (``reap``).

Before any trial, each side's image is found (pulled where the engine does not have it), started once, and asked for
its Python and its packages: an image that cannot be found, pulled or started, or whose Python cannot run stepwatch's
trial code, is one line and a non-zero exit. The packages it lists are the side's ``freeze.txt``, so the report says
what differs between two images as it does between two package sets; each row records the image it ran
(``container_image``: the reference and its digest) and the versions the trial read inside it.

Run as a module, this is the launcher: ``python -m stepwatch.collector.environments.containers run SPEC ARGS...``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepwatch.collector.errors import Failure
from stepwatch.collector.trial.host import IMAGE_ENV, INSIDE_ENV

MODULE = "stepwatch.collector.environments.containers"  # this module, by name (``__name__`` is __main__ when run)
IMAGE = "image="  # a side given as an image: image=REF
ENGINES = ("podman", "docker")
ENGINE_ENV = "STEPWATCH_CONTAINER_ENGINE"
CODE = "/opt/stepwatch-trial"  # where the trial code is mounted in the container
# What the harness sets for a trial, passed into its container; the image's own environment is left as it is.
PASSED = ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES")
PASSED_PREFIXES = ("STEPWATCH_",)
PROBE_TIMEOUT_S = 300.0
# What the image's Python is asked before any trial: its version, every Python distribution it has
# (importlib.metadata), its system packages (dpkg's status file, where it has one: a BLAS or a CUDA library is one),
# the CUDA, cuDNN and NCCL versions NVIDIA's images say in their environment, and whether it can import stepwatch's
# trial code.
PROBE = """
import importlib.metadata as m, json, os, re, sys
found = {d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}
system = {}
if os.path.exists('/var/lib/dpkg/status'):
    for entry in open('/var/lib/dpkg/status', errors='replace').read().split('\\n\\n'):
        fields = dict(re.findall(r'^(Package|Version|Status): (.*)$', entry, re.M))
        if fields.get('Status', '').endswith(' installed') and 'Version' in fields:
            system[fields['Package']] = fields['Version']
said = {k: v for k, v in os.environ.items() if re.fullmatch(r'(CUDA|CUDNN|NCCL|CUBLAS|TRT|NVIDIA_[A-Z]+)_VERSION', k)}
print(json.dumps({'python': sys.version.split()[0], 'packages': found, 'system': system, 'said': said}))
import stepwatch.collector.trial.process
"""


class ImageError(RuntimeError, Failure):
    """A side's image that cannot be used, in one line."""


def is_image(text: str) -> bool:
    return text.strip().startswith(IMAGE)


def parse_image(text: str, side: str) -> str:
    """The image reference of ``image=REF``; ValueError where it is empty or holds more than one word."""
    ref = text.strip()[len(IMAGE) :]
    if not ref or any(c.isspace() for c in ref):
        raise ValueError(f"--{side}: {text.strip()!r}: an image side is image=REF, one reference (e.g. "
                         "image=nvcr.io/nvidia/pytorch:25.11-py3)")  # fmt: skip
    return ref


def engine(choice: str | None = None) -> str:
    """The container engine to run: ``choice`` (``--container-engine``), else $STEPWATCH_CONTAINER_ENGINE, else the
    first of podman and docker on the PATH; ImageError where it is not there."""
    wanted = choice or os.environ.get(ENGINE_ENV)
    for name in (wanted,) if wanted else ENGINES:
        found = shutil.which(name)
        if found:
            return found
    raise ImageError(f"no container engine: {wanted or ' or '.join(ENGINES)} is not on the PATH (install podman or "
                     "docker, or give --container-engine)")  # fmt: skip


def _engine_line(done: subprocess.CompletedProcess) -> str:
    lines = [line.strip() for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else f"exit {done.returncode}"


def find(engine_path: str, ref: str, log: Callable[[str], None]) -> dict[str, Any]:
    """The image's id and digest, pulled first where the engine does not have it; ImageError in one line where it
    cannot be found or pulled."""

    def inspect() -> subprocess.CompletedProcess:
        return subprocess.run([engine_path, "image", "inspect", ref], capture_output=True, text=True, check=False)

    done = inspect()
    if done.returncode != 0:
        log(f"{ref}: not here, pulling it with {Path(engine_path).name}")
        pulled = subprocess.run([engine_path, "pull", ref], capture_output=True, text=True, check=False,
                                timeout=PROBE_TIMEOUT_S * 4)  # fmt: skip
        if pulled.returncode != 0:
            raise ImageError(f"image {ref}: not found here and cannot be pulled: {_engine_line(pulled)}")
        done = inspect()
    [found] = json.loads(done.stdout)
    digest = found.get("Digest") or next(iter(found.get("RepoDigests") or []), "").partition("@")[2]
    return {"id": found.get("Id", ""), "digest": digest or None}


def gpu_flags(engine_path: str) -> list[str]:
    """The host's GPUs into the container, where it has NVIDIA's (nvidia-smi on the PATH): CDI for podman, ``--gpus``
    for docker."""
    if not shutil.which("nvidia-smi"):
        return []
    return ["--device", "nvidia.com/gpu=all"] if Path(engine_path).name == "podman" else ["--gpus", "all"]


def run_command(spec: dict[str, Any], args: list[str], environ: dict[str, str], cwd: str, name: str) -> list[str]:
    """The engine's command line that runs ``python3 ARGS`` in a fresh container of the spec's image: the folders the
    trial reads and writes mounted at their own paths, the trial code read-only, the harness's variables passed."""
    mounts, read_only = {cwd}, set()
    if "--result" in args:
        mounts.add(str(Path(args[args.index("--result") + 1]).parent))
    if "--config" in args:  # a script or a model of yours named by an absolute path: its folder, read-only
        model = str(json.loads(args[args.index("--config") + 1]).get("model", ""))
        where = Path(model.rpartition(":")[0] if ":" in model and not model.endswith(".py") else model)
        if where.is_absolute() and where.exists():
            read_only.add(str(where.parent))
    passed = {k: v for k, v in environ.items() if k in PASSED or k.startswith(PASSED_PREFIXES)}
    passed.update({INSIDE_ENV: "1", IMAGE_ENV: spec["recorded"], "PYTHONPATH": CODE})
    command = [spec["engine"], "run", "--rm", "--name", name, "--network", "none", "--pid", "host", "--ipc", "host",
               *gpu_flags(spec["engine"]), "-v", f"{spec['code']}:{CODE}:ro", "-w", cwd]  # fmt: skip
    for folder in sorted(mounts):
        command += ["-v", f"{folder}:{folder}"]
    for folder in sorted(read_only - mounts):
        command += ["-v", f"{folder}:{folder}:ro"]
    for key, value in sorted(passed.items()):
        command += ["-e", f"{key}={value}"]
    return [*command, spec["ref"], "python3", *args]


def launcher_script(spec_path: Path) -> str:
    """The side's ``python``: this interpreter running this module's launcher on the side's spec."""
    return f'#!/bin/sh\nexec "{sys.executable}" -m {MODULE} run "{spec_path}" "$@"\n'


def ensure(
    side: str,
    ref: str,
    root: Path,
    copy_code: Callable[[Path], None],
    engine_choice: str | None = None,
    log: Callable[[str], None] = print,
    copy: int = 0,
) -> tuple[Path, str, str]:
    """The side's folder under ``root`` (its launcher, its copy of the trial code, its spec and freeze.txt): the
    image found and probed first. Returns the folder, the launcher and a line saying what the image holds."""
    engine_path = engine(engine_choice)
    found = find(engine_path, ref, log)
    key = hashlib.sha256(json.dumps([ref, found["id"], engine_path, copy]).encode()).hexdigest()[:16]
    folder = root / f"image-{key}"
    code = folder / "code"
    code.mkdir(parents=True, exist_ok=True)
    copy_code(code)
    recorded = f"{ref}@{found['digest']}" if found["digest"] else f"{ref}@{found['id'][:19]}"
    spec = {"engine": engine_path, "ref": ref, "code": str(code), "recorded": recorded, **found}
    spec_path = folder / "image.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    launcher = folder / "python"
    launcher.write_text(launcher_script(spec_path))
    launcher.chmod(0o755)
    probe = run_command(spec, ["-c", PROBE], dict(os.environ), str(folder), f"stepwatch-probe-{uuid.uuid4().hex[:12]}")
    try:
        done = subprocess.run(probe, capture_output=True, text=True, check=False, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ImageError(f"image {ref}: its python3 did not answer within {PROBE_TIMEOUT_S:g} s") from None
    first = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    if not first.startswith("{"):
        raise ImageError(f"image {ref}: cannot start python3 in it: {_engine_line(done)}")
    held = json.loads(first)
    if done.returncode != 0:
        raise ImageError(f"image {ref}: its Python {held['python']} cannot run stepwatch's trial code: "
                         f"{_engine_line(done)} (a trial needs numpy and psutil beside the framework)")  # fmt: skip
    (folder / "freeze.txt").write_text(freeze_lines(held))
    said = (f"{side}: image {recorded}, Python {held['python']}, {len(held['packages'])} Python and "
            f"{len(held['system'])} system packages ({folder})")  # fmt: skip
    return folder, str(launcher), said


SYSTEM = "deb-"  # a system package's name in a side's freeze.txt, beside the Python distributions


def freeze_lines(held: dict[str, Any]) -> str:
    """What the probe found, as the lines of a side's ``freeze.txt`` (``name==version``), so that the report's list of
    what differs between two sides reads the same for images as for package sets: the image's Python, its Python
    distributions, its system packages (``deb-NAME``) and the versions its environment says (``CUDA_VERSION``)."""
    found = {"python": held["python"], **held["packages"], **{f"{SYSTEM}{k}": v for k, v in held["system"].items()},
             **held["said"]}  # fmt: skip
    return "".join(f"{name}=={version.replace(' ', '_')}\n" for name, version in sorted(found.items()))


def reap(engine_path: str, name: str, watched: int) -> None:
    """Once the process ``watched`` (a trial's launcher) is gone, however it ended (a zombie is gone: killed, not yet
    waited for), remove the container ``name`` if it still runs: a trial killed at its timeout takes its container
    with it. It first leaves the launcher's tree (a second fork), which the runner kills whole at a timeout."""
    import psutil

    if os.fork() > 0:
        os._exit(0)
    while True:
        try:
            if psutil.Process(watched).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    subprocess.run([engine_path, "rm", "--force", "--time", "0", name], capture_output=True, check=False)


def launch(spec_path: str, args: list[str]) -> int:
    """A trial in a fresh container: the engine runs it in the foreground (its output is the trial's log), and a
    reaper in its own session removes the container if this process is killed first."""
    spec = json.loads(Path(spec_path).read_text())
    name = f"stepwatch-trial-{uuid.uuid4().hex[:12]}"
    reaper = subprocess.Popen([sys.executable, "-m", MODULE, "reap", spec["engine"], name, str(os.getpid())],
                              start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    reaper.wait()  # it has forked its watcher off and left
    return subprocess.run(run_command(spec, args, dict(os.environ), os.getcwd(), name), check=False).returncode


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["reap"]:
        reap(argv[1], argv[2], int(argv[3]))
        return 0
    if argv[:1] == ["run"]:
        return launch(argv[1], argv[2:])
    print(f"usage: python -m {MODULE} run SPEC ARGS... | reap ENGINE NAME PID", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
