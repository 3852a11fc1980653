"""How a trial's processes are started: one process, or N data-parallel processes the way the script's framework
expects. A launcher knows how to start and stop processes, nothing about what they measure; each is one process
the runner waits on (its timeout, its log, its whole tree killed), which exits non-zero when any rank does, having
stopped the others.

- ``one``: the trial process itself.
- ``torchrun``: torch's elastic launcher (``python -m torch.distributed.run --standalone``), for keras_backend
  torch: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in every rank's environment.
- ``workers``: this module's own (``python -m stepwatch.collector.runner.launchers``), for TensorFlow and JAX:
  the same variables, and TF_CONFIG (a worker per rank on 127.0.0.1) or the coordinator's address that the trial
  gives ``jax.distributed.initialize``. When one rank fails, the others are stopped, as torch's launcher does.

Run as a module, this is the ``workers`` launcher: ``launchers --nproc N --backend B -- COMMAND...``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.trial import ranks

POLL_S = 0.05


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def name(config: BenchmarkConfig) -> str:
    """The launcher a config's trial runs under."""
    if config.processes == 1:
        return "one"
    return "torchrun" if config.keras_backend == "torch" else "workers"


def command(config: BenchmarkConfig, python: str, trial: list[str]) -> list[str]:
    """The command line that starts ``trial`` (the trial module's arguments after the interpreter) under the
    config's launcher."""
    launcher = name(config)
    if launcher == "one":
        return [python, *trial]
    if launcher == "torchrun":
        return [python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                f"--nproc-per-node={config.processes}", "--max-restarts=0", *trial]  # fmt: skip
    return [python, "-m", __name__, "--nproc", str(config.processes), "--backend", config.keras_backend, "--",
            python, *trial]  # fmt: skip


def tf_config(addresses: list[str], index: int) -> str:
    """TF_CONFIG of worker ``index`` of a cluster of workers at ``addresses`` (MultiWorkerMirroredStrategy reads it)."""
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})


def rank_environment(index: int, nproc: int, backend: str, port: int, addresses: list[str]) -> dict[str, str]:
    """What rank ``index`` of ``nproc`` on this host finds in its environment."""
    env = {"RANK": str(index), "LOCAL_RANK": str(index), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip
    if backend == "tensorflow":
        env["TF_CONFIG"] = tf_config(addresses, index)
    if backend == "jax":
        env[ranks.COORDINATOR_ENV] = f"127.0.0.1:{port}"
    return env


def run_workers(nproc: int, backend: str, argv: list[str]) -> int:
    """Start ``nproc`` ranks of ``argv``, wait for all; when one exits non-zero, stop the rest and exit with its
    code, naming it (as torch's launcher names its first failure)."""
    port = free_port()
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(nproc)]
    procs = [subprocess.Popen(argv, env={**os.environ, **rank_environment(i, nproc, backend, port, addresses)})
             for i in range(nproc)]  # fmt: skip

    def stop_all(sig: int = signal.SIGTERM, frame: Any = None) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait()

    signal.signal(signal.SIGTERM, lambda sig, frame: (stop_all(), sys.exit(128 + sig)))
    while True:
        codes = [proc.poll() for proc in procs]
        failed = next((i for i, code in enumerate(codes) if code not in (None, 0)), None)
        if failed is not None or all(code == 0 for code in codes):
            break
        time.sleep(POLL_S)
    if failed is None:
        return 0
    stop_all()
    for index, proc in enumerate(procs):  # as torch's launcher lists its failures: every rank's exit code
        print(f"stepwatch launcher: rank {index} exitcode {proc.returncode}", file=sys.stderr, flush=True)
    code = codes[failed]
    return code if code > 0 else 128 - code


# Each rank's exit code in a launcher's log: torch's lists "rank : 1 (local_rank: 1)" then "exitcode : 7", and
# this module "rank 1 exitcode 7".
EXIT_CODES = re.compile(r"rank\s*:?\s*(\d+)[^\n]*\n?\s*exitcode\s*:?\s*(-?\d+)")


def rank_exit_codes(log: str) -> dict[int, int]:
    """The exit code of each rank that a launcher's log says ended non-zero."""
    return {int(rank): int(code) for rank, code in EXIT_CODES.findall(log)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepwatch.collector.runner.launchers", description=__doc__)
    parser.add_argument("--nproc", type=int, required=True)
    parser.add_argument("--backend", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command_line = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run_workers(args.nproc, args.backend, command_line)


if __name__ == "__main__":
    sys.exit(main())
