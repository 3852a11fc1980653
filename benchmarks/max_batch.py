"""``--find-max-batch`` in one process against today's probing by short trials, side by side in one run, on the CPU
with a memory capacity set (XLA's memory analysis against it: JAX, jit_compile on).

Both searches are the same (``search_max_batch``, guided by the same analysis); only how a probe runs differs. The
one-process search includes its whole trial at the answer; the trial probing does not. Rounds alternate which goes
first. On a GPU the same command measures the real thing without ``--capacity``: ``--device gpu``.

    .venv/bin/python benchmarks/max_batch.py [--rounds 1] [--models tests/data/models/sentiment.py:sentiment=2MiB,\
transformer=20MiB] [--device cpu] [--precision fp32]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwatch.collector.cli.arguments import parse_bytes  # noqa: E402
from stepwatch.collector.config import BenchmarkConfig  # noqa: E402
from stepwatch.collector.runner import max_batch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--models", default="tests/data/models/sentiment.py:sentiment=2MiB,transformer=20MiB")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--keras-backend", default="jax")
    parser.add_argument("--loop", default="fit")
    args = parser.parse_args()
    print(f"{'model':<45} {'largest':>8} {'one process':>12} {'by trials':>10} {'ratio':>6}  probes (one process / "
          "trials)")  # fmt: skip
    for item in args.models.split(","):
        model, _, capacity_text = item.partition("=")
        capacity = parse_bytes(capacity_text) if capacity_text else None
        config = BenchmarkConfig(model=model, preset="tiny" if args.device == "cpu" else "default", device=args.device,
                                 keras_backend=args.keras_backend, loop=args.loop, xla=True, precision=args.precision,
                                 per_device_batch=8, timeout_s=600)  # fmt: skip
        times: dict[str, list[float]] = {"one": [], "trials": []}
        found: dict[str, max_batch.MaxBatch] = {}
        for index in range(args.rounds):
            sides = [("one", max_batch.find_max_batch), ("trials", max_batch.find_max_batch_by_trials)]
            for name, search in sides if index % 2 == 0 else reversed(sides):
                start = time.perf_counter()
                found[name] = search(config, sys.executable, capacity=capacity)
                times[name].append(time.perf_counter() - start)
        one, trials = min(times["one"]), min(times["trials"])
        same = found["one"].largest == found["trials"].largest
        print(
            f"{model:<45} {found['one'].largest!s:>8} {one:>10.0f} s {trials:>8.0f} s {one / trials:>6.2f}  "
            f"{len(found['one'].probes)} / {len(found['trials'].probes)}{'' if same else '  DIFFERENT ANSWERS'}"
        )


if __name__ == "__main__":
    main()
