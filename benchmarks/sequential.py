"""Sequential checks against fixed ones, on this machine: how often each calls a planted slowdown a regression, how
often an A/A raises an alarm, and what each costs.

A repository is made on the spot with two workloads of the team's own: a numpy training script (``train.py``:
``WORK`` matrix products a step; the checks run with ``OPENBLAS_NUM_THREADS=1``, as a team sets on a 2-core runner:
with OpenBLAS's two threads here a quarter of the processes ran at 30k examples/s instead of 53k, bimodal, and 12
trials a side could not decide some 10% and 20% changes; ``--blas-threads 2`` runs that)
and a Keras model on JAX with XLA (``models/net.py:net``: two dense layers of ``WIDTH``). A branch per planted change
makes one of them do 8/7, 1.25x or 1.43x the work a step (10%, 20% and 30% slower): the script more products a step,
the model wider layers (as many more flops). Every check is the real
``stepwatch code-check --aa --format json --metric examples_per_sec``, each in its own process, one after another:

- **sequential**: the defaults (``init`` writes no trial count): a first look of 3 trials a side, more rounds while
  a verdict is inconclusive, up to 12, within 20 minutes;
- **fixed 3**, **fixed 5**: ``--trials N --max-trials N``, one look at 0.05 (what a check did before).

Every check's A/A (the merge base in a second checkout, against the merge base) adds its verdicts to the A/A count:
any regression, improvement or change there is a false alarm. ``--load`` runs the same with another process
spinning one core all along (``yes > /dev/null``), where every trial should be flagged shared.

    .venv/bin/python benchmarks/sequential.py [--checks 20] [--fixed-checks 10] [--sizes 10,20,30]
        [--workloads script,model] [--designs sequential,3,5] [--load] [--json results.jsonl]
    # on a GPU: the torch script (2048x2048 products), a 2% and a 5% change, a 1% threshold
    python3 benchmarks/sequential.py --workloads torch --device gpu --sizes 2,5 --threshold 0.01 --designs sequential
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATH = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # this checkout, then what was set

WORK = 28  # the script's matrix products a step
WIDTH = 1024  # the model's dense layers
FEATURES = 1024
GPU_WORK = 100  # the torch script's matrix products a step, on a GPU
SIZES = {2: 1.02, 5: 1.05, 10: 8 / 7, 20: 1.25, 30: 1.43}  # planted slowdown (%) -> the work a step, times the base's
SCRIPT = '''"""The team's numpy training loop: WORK matrix products a step."""

import numpy as np

import stepwatch

WORK = {work}
rng = np.random.default_rng(0)
weights = rng.standard_normal((192, 192)).astype(np.float32) * 0.05


def batches():
    while True:
        yield rng.standard_normal((192, 192)).astype(np.float32)


for x in stepwatch.steps(batches(), examples_per_step=192):
    for _ in range(WORK):
        x = np.tanh(x @ weights)
'''
MODEL = '''"""The team's model: two dense layers of WIDTH."""

import keras

WIDTH = {width}


def net(preset):
    inputs = keras.Input(({features},), name="features")
    x = keras.layers.Dense(WIDTH, activation="relu")(inputs)
    x = keras.layers.Dense(WIDTH, activation="relu")(x)
    outputs = keras.layers.Dense(2, activation="softmax", dtype="float32")(x)
    return {{
        "model": keras.Model(inputs, outputs),
        "loss": "sparse_categorical_crossentropy",
        "inputs": {{"shape": ({features},), "dtype": "float32"}},
        "labels": {{"shape": (), "dtype": "int32", "high": 2}},
    }}
'''
TORCH = '''"""The team's torch training loop on a GPU: WORK matrix products a step."""

import torch

import stepwatch

WORK = {work}
device = "cuda" if torch.cuda.is_available() else "cpu"
weights = torch.randn({size}, {size}, device=device) * 0.02


def batches():
    while True:
        yield torch.randn({size}, {size}, device=device)


for x in stepwatch.steps(batches(), examples_per_step={size}):
    for _ in range(WORK):
        x = torch.tanh(x @ weights)
'''
CONFIGS = {  # workload -> its suite entry
    "script": """[[configs]]
model = "train.py"
keras_backend = "jax"
steps = 40
warmup_steps = 20
window_steps = 10
""",
    "model": """[[configs]]
model = "models/net.py:net"
keras_backend = "jax"
xla = "on"
per_device_batch = 128
threads = "auto"
steps = 60
warmup_steps = 20
window_steps = 10
""",
    "torch": """[[configs]]
model = "gpu_train.py"
keras_backend = "torch"
steps = 100
warmup_steps = 20
window_steps = 10
""",
}
DESIGNS = {"sequential": (), "3": ("--trials", "3", "--max-trials", "3"), "5": ("--trials", "5", "--max-trials", "5")}
ALARMS = ("regression", "improvement", "changed")


def flops(width: int) -> int:
    """The model's multiply-adds an example: input -> width -> width -> 2."""
    return FEATURES * width + width * width + width * 2


def wider(factor: float) -> int:
    """The width (a multiple of 8) whose flops are ``factor`` times the baseline's."""
    return min(range(WIDTH, 4 * WIDTH, 8), key=lambda w: abs(flops(w) - factor * flops(WIDTH)))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def commit(repo: Path, message: str, files: dict[str, str]) -> None:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


GPU_SIZE = int(os.environ.get("STEPWATCH_BENCH_GPU_SIZE", "2048"))  # the torch script's matrices (small: a CPU's try)


def planted(workload: str, factor: float) -> dict[str, str]:
    """A workload's files doing ``factor`` times the baseline's work a step."""
    if workload == "script":
        return {"train.py": SCRIPT.format(work=round(WORK * factor))}
    if workload == "torch":
        return {"gpu_train.py": TORCH.format(work=round(GPU_WORK * factor), size=GPU_SIZE)}
    return {"models/net.py": MODEL.format(width=wider(factor), features=FEATURES)}


def repository(folder: Path, workloads: list[str], sizes: list[int], device: str, threshold: float | None) -> Path:
    """The team's repository: main with the workloads, and a branch per workload and planted size."""
    repo = folder / "team"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "ci")
    suite = f'[defaults]\npreset = "tiny"\ndevice = "{device}"\ntimeout_s = 300\n\n' + "\n".join(
        CONFIGS[w] for w in workloads
    )
    settings = 'suite = "stepwatch-suite.toml"\n'
    files = {"stepwatch-suite.toml": suite, ".gitignore": "data/\n"}
    if threshold is not None:  # a quiet GPU runner's team asks for smaller changes than the default 3%
        settings += 'thresholds = "thresholds.toml"\n'
        files["thresholds.toml"] = (f'[[override]]\nwhere = "device={device}"\nmetric = "examples_per_sec"\n'
                                    f'threshold = {threshold}\nreason = "a quiet runner"\n')  # fmt: skip
    for workload in workloads:
        files.update(planted(workload, 1.0))
    commit(repo, "the workloads", {**files, "stepwatch.toml": settings})
    for workload in workloads:
        for size in sizes:
            git(repo, "checkout", "-q", "-b", f"{workload}-{size}", "main")
            commit(repo, f"{size}% more work", planted(workload, SIZES[size]))
    git(repo, "checkout", "-q", "main")
    return repo


def check(repo: Path, head: str, design: str, metric: str, blas: str) -> dict:
    """One code check of ``head`` against main: its throughput verdict, looks, stop, minutes, flags and A/A."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "stepwatch", "code-check", "--base", "main", "--head", head, "--aa", "--format",
         "json", "--metric", metric, *DESIGNS[design]],
        cwd=repo, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": PATH, "OPENBLAS_NUM_THREADS": blas},
    )  # fmt: skip
    minutes = (time.perf_counter() - start) / 60
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"code-check failed ({done.returncode}): {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    [row] = [r for r in report["rows"] if r["metric"] == "examples_per_sec"]
    looks = report.get("sequential") or {}
    shared = sum(side.get("shared", 0) for side in report.get("machine", {}).values())
    trials = sum(side.get("trials", 0) for side in report.get("machine", {}).values())
    aa = [(r["metric"], r["verdict"]) for r in report["aa"]["rows"]]
    return {"head": head, "design": design, "verdict": row["verdict"], "ratio": row["ratio"],
            "ci": [row["ci_low"], row["ci_high"]], "n": row["n_baseline"], "stopped": looks.get("stopped"),
            "steps": looks.get("steps"), "minutes": minutes, "shared": shared, "trials": trials, "aa": aa}  # fmt: skip


def first_looks(repo: Path, threshold: float) -> list[str]:
    """Every sequential check of ``repo`` read again as the fixed design of 3 trials a side would have read it: its
    first look's trials (run at the config's own steps, as a fixed design's are) at 0.05, beside its own verdict."""
    import pyarrow.parquet as pq

    from stepwatch.collector.analysis import sequential

    lines = []
    for folder in sorted((repo / "data" / "code-check").iterdir()):
        values = {}
        for path in folder.glob("*.parquet"):
            rows = sorted(pq.read_table(path).to_pylist(), key=lambda r: r["trial"])
            values[rows[0]["label"]] = [r["examples_per_sec"] for r in rows if r["status"] == "ok"]
        if len(values.get("baseline", [])) <= 3:  # a fixed design's own check, or one that stopped at its first look
            continue
        fixed, _ = sequential.replay(values["baseline"][:3], values["candidate"][:3], sequential.Design.of(3, 3),
                                     threshold)  # fmt: skip
        ran, n = sequential.replay(values["baseline"], values["candidate"], sequential.Design.of(3, 12), threshold)
        lines.append(f"{folder.name}: fixed 3 on the first look {fixed}; sequential {ran} at {n}")
    return lines


def summary(results: list[dict]) -> list[str]:
    """One line per workload, size and design; then the A/A."""
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in results:
        cells[r["head"], r["design"]].append(r)
    lines = ["| workload | planted | design | checks | regression | trials/side (mean) | stopped | minutes (mean) | "
             "trials shared |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for (head, design), found in sorted(cells.items()):
        workload, size = head.split("-")
        calls = Counter(r["verdict"] for r in found)
        stops = Counter(r["stopped"] for r in found if r["stopped"])
        shared = f"{sum(r['shared'] for r in found)}/{sum(r['trials'] for r in found)}"
        lines.append(
            f"| {workload} | -{size}% | {design} | {len(found)} | {calls['regression']}/{len(found)} | "
            f"{sum(r['n'] for r in found) / len(found):.1f} | {', '.join(f'{k} {v}' for k, v in stops.items())} | "
            f"{sum(r['minutes'] for r in found) / len(found):.1f} | {shared} |"
        )
    verdicts = [v for r in results for _, v in r["aa"]]
    alarms = [f"{r['head']} {r['design']}: {m} {v}" for r in results for m, v in r["aa"] if v in ALARMS]
    lines += ["", f"A/A: {len(alarms)} false alarm(s) in {len(verdicts)} verdicts of {len(results)} checks "
              f"({dict(Counter(verdicts))})", *(f"  {a}" for a in alarms)]  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=20, help="sequential checks per workload and size")
    parser.add_argument("--fixed-checks", type=int, default=10, help="fixed-design checks per workload and size")
    parser.add_argument("--sizes", default="10,20,30")
    parser.add_argument("--workloads", default="script,model")
    parser.add_argument("--designs", default="sequential,3,5")
    parser.add_argument("--load", action="store_true", help="another process spins one core all along")
    parser.add_argument(
        "--metric", default="examples_per_sec",
        help="what the checks judge (default examples_per_sec: a check asked for peak memory too waits on its 1%% "
        "threshold as well)",
    )  # fmt: skip
    parser.add_argument(
        "--first-looks", type=Path, metavar="REPO",
        help="read the sequential checks a run left in REPO (its temporary repository) as a fixed 3-trial design "
        "would have, and exit",
    )  # fmt: skip
    parser.add_argument("--blas-threads", default="1", help="OPENBLAS_NUM_THREADS of the checks (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu, or gpu (with --workloads torch)")
    parser.add_argument("--threshold", type=float, help="the throughput threshold (default: the metric's, 3%%)")
    parser.add_argument("--json", type=Path, help="append every check's result here, one JSON a line")
    args = parser.parse_args()
    if args.first_looks:
        found = first_looks(args.first_looks, args.threshold or 0.03)
        print("\n".join(found) + f"\n{sum('fixed 3 on the first look regression' in f for f in found)} of "
              f"{len(found)} checks that went past their first look: regression at 3 trials a side")  # fmt: skip
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    workloads = args.workloads.split(",")
    repo = repository(Path(tempfile.mkdtemp(prefix="stepwatch-sequential-")), workloads, sizes, args.device,
                      args.threshold)  # fmt: skip
    spinner = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) if args.load else None
    results: list[dict] = []
    try:
        # Interleaved over sizes and designs, so a drift of the machine favours none.
        plan = [(workload, size, design, i) for i in range(max(args.checks, args.fixed_checks))
                for workload in workloads for size in sizes for design in args.designs.split(",")
                if i < (args.checks if design == "sequential" else args.fixed_checks)]  # fmt: skip
        for number, (workload, size, design, _) in enumerate(plan, 1):
            found = check(repo, f"{workload}-{size}", design, args.metric, args.blas_threads)
            results.append(found)
            if args.json:
                with args.json.open("a") as out:
                    out.write(json.dumps({**found, "load": args.load}) + "\n")
            ratio = "n/a" if found["ratio"] is None else f"{found['ratio'] - 1:+.1%}"
            print(f"[{number}/{len(plan)}] {workload} -{size}% {design}: {found['verdict']} {ratio} at "
                  f"{found['n']}/side ({found['stopped']}), {found['minutes']:.1f} min, shared "
                  f"{found['shared']}/{found['trials']}, A/A {[v for _, v in found['aa']]}", flush=True)  # fmt: skip
    finally:
        if spinner is not None:
            spinner.kill()
    print("\n" + "\n".join(summary(results)))
    print(
        f"\nload: {'one core spinning' if args.load else 'none'}; {os.cpu_count()} cores; "
        f"{sum(r['minutes'] for r in results):.0f} minutes in all; widths {[wider(SIZES[s]) for s in sizes]}, "
        f"script work {[round(WORK * SIZES[s]) for s in sizes]} (baseline {WIDTH}, {WORK})"
    )
    if not math.isfinite(sum(r["minutes"] for r in results)):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
