"""Does ``stepwatch explain`` put the right ops at the top? Plants changes whose ops are known in advance, runs
the same config with and without each (alternating, one fresh ``stepwatch run --profile`` per trial), and
prints the ops explain ranks first against the ops the plant should move.

Plants:
- ``wide-ffn``: bert tiny's feed-forward layer 8 times wider (intermediate 128 -> 1024, the source edited in
  a copy): the feed-forward matmuls and the activation between them grow 8x, nothing else. On TensorFlow
  without and with XLA, JAX and torch.
- ``no-simd`` (torch): ``ATEN_CPU_CAPABILITY=default``, torch's CPU kernels without their vector code: the
  element-wise operators slow down; the matmuls (oneDNN / MKL) do not.
- ``no-ynn`` (JAX): ``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=`` (empty), XLA's CPU backend without
  its YNNPACK fusions: the ``ynn_fusion`` ops go, their dots run as XLA's own.
- ``no-onednn`` (TensorFlow, XLA off): ``TF_ENABLE_ONEDNN_OPTS=0``, TensorFlow's kernels without oneDNN.

    .venv/bin/python benchmarks/explain_planted.py [--trials 3] [--plants wide-ffn,no-simd,no-ynn,no-onednn]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHORT = ("--steps", "60", "--warmup", "20", "--window", "10")
YNN = "xla_cpu_experimental_ynn_fusion_type"
WIDE = ('"tiny": BertSize(2, 64, 2, 128, 1000', '"tiny": BertSize(2, 64, 2, 1024, 1000')

# name -> [(backend, xla, what the plant should move, environment of the planted side)]
PLANTS = {
    "wide-ffn": [
        ("tensorflow", "off", "the feed-forward MatMuls and the GELU's element-wise ops", {}),
        ("tensorflow", "on", "the feed-forward dots (HLO named after TensorFlow's MatMul) and their fusions", {}),
        ("jax", "on", "the feed-forward dots (dot or ynn_fusion) and the GELU fusions", {}),
        ("torch", "off", "aten::mm / aten::addmm and aten::gelu", {}),
    ],
    "no-simd": [("torch", "off", "element-wise operators, not aten::mm", {"ATEN_CPU_CAPABILITY": "default"})],
    "no-ynn": [("jax", "on", "ynn_fusion gone, dot in its place", {"XLA_FLAGS": f"--{YNN}="})],
    "no-onednn": [("tensorflow", "off", "MatMul / Einsum / BatchMatMulV2", {"TF_ENABLE_ONEDNN_OPTS": "0"})],
}  # fmt: skip


def stepwatch(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "stepwatch", *args], cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:])
    return done


def wide_copy(root: Path) -> dict[str, str]:
    """A copy of the source with bert tiny's feed-forward layer 8x wider; the environment that runs it."""
    tree = root / "wide"
    for part in ("collector", "trainers"):
        shutil.copytree(REPO / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "stepwatch", tree / "stepwatch", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    bert = tree / "trainers" / "bert.py"
    text = bert.read_text()
    assert WIDE[0] in text
    bert.write_text(text.replace(*WIDE))
    return {"PYTHONPATH": str(tree)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3, help="profiled trials per side")
    parser.add_argument("--plants", default=",".join(PLANTS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        out, db = root / "results", root / "store.duckdb"
        wide = wide_copy(root)
        cases = []
        for plant in args.plants.split(","):
            for backend, xla, expected, env in PLANTS[plant]:
                name = f"{plant}-{backend}-xla-{xla}"
                planted_env, cwd = (wide, root / "wide") if plant == "wide-ffn" else (env, REPO)
                threads = ("--threads", "default") if backend == "jax" else ()
                config = ("--suite", "smoke", "--models", "bert", "--keras-backend", backend, "--xla", xla, *threads,
                          "--precision", "fp32", *SHORT, "--trials", "1", "--profile", "--out", str(out))  # fmt: skip
                for trial in range(args.trials):  # alternating, the first side switching every round
                    sides = [("base", {}, REPO), ("planted", planted_env, cwd)]
                    for side, side_env, side_cwd in sides if trial % 2 == 0 else sides[::-1]:
                        stepwatch("run", *config, "--label", f"{name}-{side}", cwd=side_cwd, env=side_env)
                        print(f"{name} {side} trial {trial + 1}", flush=True)
                cases.append((name, expected))
        stepwatch("ingest", str(out), "--db", str(db))
        for name, expected in cases:
            report = root / f"{name}.json"
            stepwatch("explain", "--baseline", f"label={name}-base", "--candidate", f"label={name}-planted",
                      "--db", str(db), "--format", "json", "--out", str(report))  # fmt: skip
            text = stepwatch("explain", "--baseline", f"label={name}-base", "--candidate", f"label={name}-planted",
                             "--db", str(db), "--top", "5").stdout  # fmt: skip
            pairs = json.loads(report.read_text())
            print(f"\n## {name}: should move {expected}")
            print(text)
            for pair in pairs:
                moved = [op for op in pair["ops"] if op["moved"] or op["appeared"]][:5]
                print("  moved, largest first: " + "; ".join(
                    f"{op['op']} {op['delta_s'] * 1e3:+.3f} ms" + (f" ({op['only']} only)" if op["only"] else "")
                    for op in moved
                ))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
