"""What stepwatch costs a training script of yours: the example scripts' throughput under `stepwatch run --script`
against the same script run bare, side by side in one run.

The bare side is the script itself, untouched (its `stepwatch.steps` gives back its loader), timed from outside:
two runs of the same arguments except the number of epochs, and the difference of their wall times divided by the
difference of their steps is the time of a step with everything fixed (imports, dataset files, worker start-up,
compiling) taken out. The stepwatch side is the script's row (`examples_per_sec`: measured steps over measured
seconds, its windows closed by a device sync). Rounds alternate which side runs first.

    .venv/bin/python benchmarks/script_overhead.py [--rounds 5] [--example torch,keras]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = {
    # name -> (script, --keras-backend, arguments, steps per epoch, the epoch flag and its two values)
    "torch": (
        "examples/torch_ddp_train.py",
        "torch",
        ["--batch", "16", "--shards", "8"],
        8 * 256 // 16,
        ("--epochs", 2, 6),
    ),  # fmt: skip
    "keras": (
        "examples/keras_fit_train.py",
        "tensorflow",
        ["--batch", "32", "--steps-per-epoch", "100"],
        100,
        ("--epochs", 2, 8),
    ),  # fmt: skip
}


def bare(script: str, args: list[str], flag: str, epochs: int, folder: Path) -> float:
    """Wall seconds of the script run on its own."""
    start = time.perf_counter()
    subprocess.run([sys.executable, script, *args, flag, str(epochs), *data_args(script, folder)], cwd=REPO,
                   check=True, capture_output=True)  # fmt: skip
    return time.perf_counter() - start


def data_args(script: str, folder: Path) -> list[str]:
    return ["--data", str(folder / "shards")] if "torch" in script else ["--records", str(folder / "data.tfrecord")]


def under_stepwatch(script: str, backend: str, args: list[str], flag: str, steps: int, folder: Path) -> float:
    """Examples/s of the script's row under `stepwatch run --script`."""
    out = folder / "results"
    done = subprocess.run(
        [sys.executable, "-m", "stepwatch", "run", "--script", script, "--keras-backend", backend, "--steps",
         str(steps), "--warmup", "20", "--window", "10", "--out", str(out), "--label", "overhead", "--",
         *args, flag, "1000", *data_args(script, folder)],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    newest = max(out.glob("*.parquet"), key=lambda p: p.stat().st_mtime)
    [row] = pq.read_table(newest).to_pylist()
    return row["examples_per_sec"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--example", default="torch,keras")
    args = parser.parse_args()
    print(f"{'example':8} {'bare examples/s':>16} {'stepwatch examples/s':>21} {'stepwatch / bare':>17}")
    for name in args.example.split(","):
        script, backend, extra, per_epoch, (flag, few, many) = EXAMPLES[name]
        batch = int(extra[extra.index("--batch") + 1])
        measured_steps = (many - few) * per_epoch
        bares, ours = [], []
        with tempfile.TemporaryDirectory(prefix="stepwatch-overhead-") as tmp:
            folder = Path(tmp)
            bare(script, extra, flag, 1, folder)  # the dataset's files written once, outside every timing
            for round_ in range(args.rounds):
                sides = ["bare", "stepwatch"] if round_ % 2 == 0 else ["stepwatch", "bare"]
                for side in sides:
                    if side == "bare":
                        seconds = bare(script, extra, flag, many, folder) - bare(script, extra, flag, few, folder)
                        bares.append(measured_steps * batch / seconds)
                    else:
                        ours.append(under_stepwatch(script, backend, extra, flag, measured_steps // 10 * 10, folder))
        b, s = statistics.median(bares), statistics.median(ours)
        print(f"{name:8} {b:16,.1f} {s:21,.1f} {s / b:17.3f}")
        print(f"         rounds: bare {', '.join(f'{v:,.0f}' for v in bares)}; stepwatch "
              f"{', '.join(f'{v:,.0f}' for v in ours)}")  # fmt: skip


if __name__ == "__main__":
    main()
