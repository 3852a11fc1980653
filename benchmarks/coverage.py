"""How much of a profiled step explain can name: for each bundled model on each backend and compiler, one real
profiled trial (``stepwatch run --profile``), and the share of its profiled step that its named ops account for
(``collector.analysis.ops.coverage``: device time where the step ran on a device, else host time), with the ops
that take most of it.

    .venv/bin/python benchmarks/coverage.py [--models resnet50,bert,transformer,bilstm]
        [--backends tensorflow,jax,torch] [--xla off,on] [--out data/coverage]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from stepwatch.collector.analysis.ops import coverage


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet50,bert,transformer,bilstm")
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--xla", default="off,on")
    parser.add_argument("--out", type=Path, default=Path("data/coverage"))
    args = parser.parse_args()
    for backend in args.backends.split(","):
        done = subprocess.run(
            [sys.executable, "-m", "stepwatch", "run", "--suite", "smoke", "--keras-backend", backend,
             "--models", args.models, "--xla", args.xla, "--precision", "fp32", "--trials", "1", "--profile", "1",
             "--steps", "20", "--warmup", "20", "--out", str(args.out / backend)],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode not in (0, 4):
            print(f"{backend}: {done.stderr.strip().splitlines()[-1:]}")
    print("| model | backend | compiler | profiled step | named ops cover | the largest ops |")
    print("|---|---|---|---|---|---|")
    for path in sorted(args.out.rglob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            if row["status"] != "ok" or not row["op_types"]:
                print(f"| {row['model']} | {row['keras_backend']} | {row['compiler']} | - | - | {row['status']} |")
                continue
            table: dict[tuple[str, str], float] = defaultdict(float)
            for op, where, seconds in zip(row["op_types"], row["op_where"], row["op_time_s"]):
                table[(op, where)] += seconds
            step = row["profile_step_time_s"]
            top = sorted(table.items(), key=lambda item: -item[1])[:4]
            ops = ", ".join(f"{op} {seconds / step * 100:.0f}%" for (op, _), seconds in top)
            print(f"| {row['model']} | {row['keras_backend']} | {row['compiler']} | {step * 1000:.1f} ms "
                  f"| {coverage(step, table) * 100:.0f}% | {ops} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
