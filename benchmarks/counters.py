"""Do the compiled step's counters repeat? Runs the four tiny models on every backend (TensorFlow with XLA off and
on, JAX with XLA, torch with torch.compile), each config in several separate processes (``stepwatch run
--trials N``), and prints per backend a table of the counters: one value where every process read the same,
else the exact spread. Also prints what reading them cost per trial (``counters_s``).

    .venv/bin/python benchmarks/counters.py [--trials 2] [--backends tensorflow,jax,torch] [--models ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from stepwatch.collector.metrics import COUNTERS, METRICS

XLA = {"tensorflow": ("false", "true"), "jax": ("true",), "torch": ("true",)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--models", default="resnet50,bert,transformer,bilstm")
    args = parser.parse_args()
    backends, models = args.backends.split(","), args.models.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        configs = "".join(
            f'[[configs]]\nkeras_backend = "{b}"\nmodel = "{m}"\nxla = {x}\n\n'
            for b in backends
            for x in XLA[b]
            for m in models
        )
        suite = root / "suite.toml"
        suite.write_text(f'name = "counters"\n[defaults]\npreset = "tiny"\n\n{configs}')
        run = [sys.executable, "-m", "stepwatch", "run", "--suite", str(suite), "--trials", str(args.trials)]
        done = subprocess.run([*run, "--out", str(root / "out")], capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-2000:])
        rows = [r for path in (root / "out").glob("*.parquet") for r in pq.read_table(path).to_pylist()]
    values: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    cost: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        key = (row["keras_backend"], row["compiler"], row["model"])
        if row["status"] != "ok":
            print(f"{key}: {row['status']} {row['error_message']}")
            continue
        for name in COUNTERS:
            if row[name] is not None:
                values[key][name].append(row[name])
        extras = json.loads(row["extras"] or "{}")
        cost[row["keras_backend"]].append(extras.get("counters_s", float("nan")))
    repeated = True
    for backend in backends:
        keys = sorted(k for k in values if k[0] == backend)
        names = [n for n in COUNTERS if any(n in values[k] for k in keys)]
        print(f"\n## {backend} ({args.trials} processes per config)\n")
        print("| compiler | model | " + " | ".join(names) + " |")
        print("|---|---|" + "---|" * len(names))
        for key in keys:
            cells = []
            for name in names:
                seen = values[key].get(name, [])
                if not seen:
                    cells.append("-")
                    continue
                low, high = METRICS[name].shown(min(seen)), METRICS[name].shown(max(seen))
                repeated &= low == high and len(seen) == args.trials
                cells.append(low if low == high else f"{low}..{high} (differ)")
            print(f"| {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
        spent = cost.get(backend, [])
        if spent:
            print(f"\nreading the counters: {min(spent):.2f}-{max(spent):.2f} s per trial")
    print("\nevery counter repeated in every process" if repeated else "\nSOME COUNTERS DIFFERED between processes")
    return 0 if repeated else 1


if __name__ == "__main__":
    sys.exit(main())
