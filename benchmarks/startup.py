"""A trial process's start-up against a bare import of its framework: the harness's own share of a start-up.

For each Keras backend, side by side in one run and alternating which goes first: a trial of bilstm tiny (its row's
start-up phases: the interpreter and stepwatch's imports, reading the host, importing Keras and its framework) and a
bare ``python -c "import keras"`` with the same KERAS_BACKEND, timed from outside, plus ``python -c "import
FRAMEWORK"`` alone. What the trial takes to the end of its imports beyond the bare Keras import is stepwatch's share.

    .venv/bin/python benchmarks/startup.py [--rounds 3] [--keras-backend tensorflow,jax,torch]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwatch.collector.runner.results import read_rows  # noqa: E402

PHASES = ("startup_python_s", "startup_environment_s", "startup_imports_s")


def bare(code: str, backend: str) -> float:
    """Wall seconds of ``python -c CODE`` with KERAS_BACKEND set: the interpreter's start and the import."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def trial(backend: str) -> dict[str, float]:
    """One trial of bilstm tiny (10 steps): its start-up phases to the end of its framework's import."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [sys.executable, "-m", "stepwatch", "run", "--suite", "smoke", "--models", "bilstm", "--keras-backend",
             backend, "--xla", "off", "--precision", "fp32", "--trials", "1", "--steps", "10", "--warmup", "20",
             "--window", "10", "--out", out],
            check=True, capture_output=True,
        )  # fmt: skip
        [row] = read_rows(next(Path(out).glob("*.parquet")))
    return {phase: row[phase] for phase in PHASES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keras-backend", default="tensorflow,jax,torch")
    args = parser.parse_args()
    print(f"{'backend':<11} {'trial to imports':>16} {'of it stepwatch':>15} {'bare keras':>10} {'bare framework':>14} "
          f"{'harness share':>13}")  # fmt: skip
    for backend in args.keras_backend.split(","):
        trials, kerases, frameworks = [], [], []
        for index in range(args.rounds):
            sides = ["trial", "keras", "framework"]
            for side in sides if index % 2 == 0 else reversed(sides):
                if side == "trial":
                    trials.append(trial(backend))
                else:
                    module = "keras" if side == "keras" else backend  # a backend is named as its module
                    (kerases if side == "keras" else frameworks).append(bare(f"import {module}", backend))
        to_imports = statistics.median(sum(t[p] for p in PHASES) for t in trials)
        own = statistics.median(t["startup_python_s"] + t["startup_environment_s"] for t in trials)
        keras_s, framework_s = statistics.median(kerases), statistics.median(frameworks)
        print(f"{backend:<11} {to_imports:>14.2f} s {own:>13.2f} s {keras_s:>8.2f} s {framework_s:>12.2f} s "
              f"{to_imports / keras_s:>12.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
