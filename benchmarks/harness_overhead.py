"""Harness overhead: stepwatch's throughput / a bare model.fit timed around the call, side by side, for each
Keras backend.

Both sides run the same tiny config in fresh processes, alternating (stepwatch first in odd rounds, bare first in
even ones) and backend after backend, so machine drift hits all alike. The bare side sets KERAS_BACKEND, builds the same
model with the same seed, warms up with one fit call, then times a second fit call of the same number of
steps with perf_counter. It feeds what a user would: a repeated tf.data batch on TensorFlow (autotuner off, as
stepwatch's trials), a Python
generator repeating one device batch on JAX and torch. JAX compiles (jit_compile on; without it Keras runs JAX
op by op), the others run without it, as stepwatch's defaults.

    .venv/bin/python benchmarks/harness_overhead.py [--model resnet50] [--rounds 5] [--steps 500]
        [--keras-backend tensorflow,jax,torch]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwatch.collector.config import BenchmarkConfig  # noqa: E402
from stepwatch.collector.runner import execution  # noqa: E402
from stepwatch.collector.runner.results import ResultFile  # noqa: E402


def jit_for(backend: str) -> bool:
    return backend == "jax"


def bare_fit(backend: str, model_name: str, batch: int, warmup: int, steps: int) -> float:
    """Examples/s of a plain model.fit over ``steps`` steps, after a warm-up fit call (child process)."""
    os.environ["KERAS_BACKEND"] = backend
    import keras

    from stepwatch.trainers import get_model
    from stepwatch.trainers.spec import sparse_ce_loss

    spec = get_model(model_name)
    preset = spec.preset("tiny")
    keras.utils.set_random_seed(0)
    model = spec.build(preset)
    model.compile(
        optimizer=spec.optimizer(spec.default_learning_rate), loss=sparse_ce_loss(), jit_compile=jit_for(backend)
    )
    x, y = spec.synthetic_batch(preset, batch, 0)
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)
        from stepwatch.collector.trial.runtime.keras_tensorflow import constant_dataset

        # The trials' dataset: with tf.data's autotuner on, about a third of the fit calls end with a 0.6-2.4 s
        # wait for its thread after the last step, which a timing around the call would count as training.
        data = constant_dataset((x, y))
    else:
        batch_on_device = keras.tree.map_structure(keras.ops.convert_to_tensor, (x, y))

        def repeat():  # noqa: ANN202
            while True:
                yield batch_on_device

        data = repeat()
    model.fit(data, epochs=1, steps_per_epoch=1 + warmup, verbose=0)
    start = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0)
    return steps * batch / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keras-backend", default="tensorflow,jax,torch", help="comma-separated Keras backends")
    parser.add_argument("--bare", help=argparse.SUPPRESS)  # the backend of a bare child process
    args = parser.parse_args()
    if args.bare:
        print(json.dumps(bare_fit(args.bare, args.model, args.batch, args.warmup, args.steps)))
        return

    backends = args.keras_backend.split(",")
    configs = {
        b: BenchmarkConfig(
            model=args.model,
            keras_backend=b,
            xla=jit_for(b),
            per_device_batch=args.batch,
            steps=args.steps,
            warmup_steps=args.warmup,
            window_steps=10,
        )
        for b in backends
    }
    sizes = [
        "--model",
        args.model,
        "--batch",
        str(args.batch),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
    ]
    ours: dict[str, list[float]] = {b: [] for b in backends}
    bare: dict[str, list[float]] = {b: [] for b in backends}
    with tempfile.TemporaryDirectory() as tmp:
        results = ResultFile(Path(tmp) / "overhead.parquet")
        for i in range(args.rounds):
            for b, config in configs.items():
                # The side that runs first alternates every round (the process after another one of the same
                # framework finds its libraries in the page cache and the machine in another state).
                for side in ("stepwatch", "bare") if i % 2 == 0 else ("bare", "stepwatch"):
                    if side == "stepwatch":
                        [outcome] = execution.run_plan(
                            [(config, i)], results, "overhead", str(uuid.uuid4()), execution.RunOptions()
                        )
                        assert outcome.row["status"] == "ok", outcome.row.get("error_message")
                        ours[b].append(outcome.row["examples_per_sec"])
                    else:
                        done = subprocess.run(
                            [sys.executable, __file__, "--bare", b, *sizes], capture_output=True, text=True, check=True
                        )
                        bare[b].append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(
                    f"round {i + 1} {b:10s}: stepwatch {ours[b][-1]:8.1f} ex/s   bare model.fit {bare[b][-1]:8.1f} "
                    f"ex/s   ratio {ours[b][-1] / bare[b][-1]:.3f}",
                    flush=True,
                )
    print(f"{args.model}/tiny b{args.batch}, {args.steps} measured steps, {args.rounds} rounds; goal >= 0.98")
    for b in backends:
        ratios = [a / c for a, c in zip(ours[b], bare[b])]
        print(
            f"{configs[b].label():55s} stepwatch / bare model.fit throughput: median {statistics.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
        )


if __name__ == "__main__":
    main()
