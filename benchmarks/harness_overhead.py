"""Harness overhead: stepwatch's throughput / a bare model.fit timed around the call, side by side.

Both sides run the same tiny config in fresh processes, alternating (stepwatch, bare, stepwatch, ...),
so machine drift hits both alike. The bare side builds the same model with the same seed, warms up
with one fit call, then times a second fit call of the same number of steps with perf_counter.

    .venv/bin/python benchmarks/harness_overhead.py [--model resnet50] [--rounds 5] [--steps 500]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.bench import runner  # noqa: E402
from collector.bench.results import ResultFile  # noqa: E402
from collector.config import BenchmarkConfig  # noqa: E402


def bare_fit(model_name: str, batch: int, warmup: int, steps: int) -> float:
    """Examples/s of a plain model.fit over ``steps`` steps, after a warm-up fit call (child process)."""
    import keras
    import tensorflow as tf

    from trainers import get_model
    from trainers.spec import sparse_ce_loss

    tf.config.experimental.enable_tensor_float_32_execution(False)
    spec = get_model(model_name)
    preset = spec.preset("tiny")
    keras.utils.set_random_seed(0)
    model = spec.build(preset)
    model.compile(optimizer=spec.optimizer(spec.default_learning_rate), loss=sparse_ce_loss(), jit_compile=False)
    x, y = spec.synthetic_batch(preset, batch, 0)
    dataset = tf.data.Dataset.from_tensors((x, y)).repeat()
    model.fit(dataset, epochs=1, steps_per_epoch=1 + warmup, verbose=0)
    start = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
    return steps * batch / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        print(json.dumps(bare_fit(args.model, args.batch, args.warmup, args.steps)))
        return

    config = BenchmarkConfig(
        model=args.model, per_device_batch=args.batch, steps=args.steps, warmup_steps=args.warmup, window_steps=10
    )
    bare_cmd = [
        sys.executable,
        __file__,
        "--bare",
        "--model",
        args.model,
        "--batch",
        str(args.batch),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
    ]
    ours, bare = [], []
    with tempfile.TemporaryDirectory() as tmp:
        results = ResultFile(Path(tmp) / "overhead.parquet")
        for i in range(args.rounds):
            [outcome] = runner.run_plan([(config, i)], results, "overhead", str(uuid.uuid4()), runner.RunOptions())
            assert outcome.row["status"] == "ok", outcome.row.get("error_message")
            ours.append(outcome.row["examples_per_sec"])
            done = subprocess.run(bare_cmd, capture_output=True, text=True, check=True)
            bare.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(
                f"round {i + 1}: stepwatch {ours[-1]:8.1f} ex/s   bare model.fit {bare[-1]:8.1f} ex/s   "
                f"ratio {ours[-1] / bare[-1]:.3f}",
                flush=True,
            )
    ratios = [a / b for a, b in zip(ours, bare)]
    print(f"{config.label()}, {args.steps} measured steps, {args.rounds} rounds")
    print(
        f"stepwatch / bare model.fit throughput: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); goal >= 0.98"
    )


if __name__ == "__main__":
    main()
