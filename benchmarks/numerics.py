"""The numerics verdict on planted changes, beside the speed verdict, on this machine: what `stepwatch compare` says
of each, and how long the trials took.

Every run is the real ``stepwatch run`` (trial i from seed i), ingested into one store; every verdict the real
``stepwatch compare --format json``:

- **precision**: the bundled ``teacher`` (a student regressing a fixed random teacher, ``trainers/teacher.py``)
  at two precisions, in one run: mixed_bfloat16 against fp32 on a CPU, tf32 against fp32 on a GPU (TF32 matmuls);
  at the smoke suite's 200 steps and at 3,000 (where the loss falls far enough for the precision to floor it);
- **code**: a model of the team's own (the teacher-student task, its learning rate in its code) run as it is, again
  (an A/A), with a comment added, and with its learning rate x10: the same series, its ``model_hash`` changed.

    .venv/bin/python benchmarks/numerics.py [--out data/reference/cpu-2026-11-27-numerics]
    # on a GPU (JAX; TF32 against fp32 on the teacher's "large" preset, matmul-heavy)
    python3 benchmarks/numerics.py --device gpu --keras-backend jax --preset large --parts precision \
      --out "$OUT/numerics"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATH = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

MODEL = '''\
"""A teacher-student regression of the team's own, its learning rate in its code."""
import keras

from stepwatch.trainers import teacher

SIZE = teacher.PRESETS["{preset}"]
LEARNING_RATE = 1e-3


def build():
    return {{
        "model": teacher.build(SIZE),
        "loss": "mse",
        "batch": lambda size, seed: teacher.synthetic_batch(SIZE, size, seed),
        "optimizer": keras.optimizers.Adam(LEARNING_RATE),
    }}
'''
CHANGES = {  # label -> (what changed in the model's code, trials)
    "base": (lambda code: code, 3),
    "aa": (lambda code: code, 3),
    "comment": (lambda code: code.replace("def build():", "# the same model, a comment added\ndef build():"), 3),
    "lr-x10": (lambda code: code.replace("LEARNING_RATE = 1e-3", "LEARNING_RATE = 1e-2"), 3),
}


def stepwatch(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PATH}
    done = subprocess.run([sys.executable, "-m", "stepwatch", *args], capture_output=True, text=True, cwd=cwd, env=env)
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"stepwatch {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done


def compared(db: Path, baseline: str, candidate: str) -> dict:
    """The numerics and speed verdicts of the one series two selections share."""
    payload = json.loads(stepwatch("compare", "--baseline", baseline, "--candidate", candidate, "--format", "json",
                                   "--db", str(db)).stdout)  # fmt: skip
    [numerics] = payload["numerics"]
    [speed] = [r for r in payload["rows"] if r["metric"] == "examples_per_sec"]
    return {"numerics": numerics["verdict"], "numerics_text": numerics["text"], "speed": speed["verdict"],
            "speed_ratio": speed["ratio"], "speed_ci": [speed["ci_low"], speed["ci_high"]]}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "reference" / "cpu-2026-11-27-numerics")
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--keras-backend", default="tensorflow")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--parts", default="precision,code", help="what to plant: precision, code (comma-separated)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    common = ["--device", args.device, "--keras-backend", args.keras_backend, "--threads", "auto"] if (
        args.device == "cpu") else ["--device", args.device, "--keras-backend", args.keras_backend]  # fmt: skip
    other = "mixed_bfloat16" if args.device == "cpu" else "tf32"
    results, db = [], Path(tempfile.mkdtemp(prefix="numerics-")) / "store.duckdb"
    lengths = {"200": ["--steps", "200"], "3000": ["--steps", "3000", "--window", "50", "--warmup", "100"]}
    for steps, flags in lengths.items() if "precision" in parts else ():
        out, label = args.out / f"precision-{steps}", f"precision-{steps}"
        start = time.monotonic()
        stepwatch("run", "--models", "teacher", "--preset", args.preset, "--xla", "on", "--precision", f"fp32,{other}",
                  "--trials", str(args.trials), "--label", label, *common, *flags, "--out", str(out))  # fmt: skip
        seconds = time.monotonic() - start
        stepwatch("ingest", str(out), "--db", str(db))
        found = compared(db, f"label={label},precision=fp32", f"label={label},precision={other}")
        results.append({"planted": f"{other} vs fp32, teacher/{args.preset}, {steps} steps", **found,
                        "run_s": round(seconds)})  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model.py"
        for label, (change, trials) in CHANGES.items() if "code" in parts else ():
            model.write_text(change(MODEL.format(preset=args.preset)))
            out = args.out / f"code-{label}"
            stepwatch("run", "--models", f"{model}:build", "--label", label, "--trials", str(trials), *common,
                      "--out", str(out), cwd=Path(tmp))  # fmt: skip
            stepwatch("ingest", str(out), "--db", str(db))
    for label in ("aa", "comment", "lr-x10") if "code" in parts else ():
        results.append({"planted": f"model code: {label}", **compared(db, "label=base", f"label={label}")})
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    width = max(len(r["planted"]) for r in results)
    for r in results:
        low, high = r["speed_ci"]
        speed = f"{r['speed']} {r['speed_ratio'] - 1:+.1%} [{low - 1:+.1%}, {high - 1:+.1%}]" if low else r["speed"]
        print(f"{r['planted']:<{width}}  numerics: {r['numerics_text']}\n{'':<{width}}  speed: {speed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
