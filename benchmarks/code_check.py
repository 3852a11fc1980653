"""What a code check costs on this machine, and how often it raises a false alarm.

A repository is made on the spot with the example CNN (``examples/keras_cnn.py``, tiny preset, JAX, XLA) as the
team's model, and two pull requests:

- **A/A**: a rename of a local variable. The code differs (its syntax tree does), so the check runs; the program
  it compiles is the same, so every verdict that is not "no change" or "inconclusive" is a false alarm. Run
  ``--repeats`` times, each with ``--aa`` (a second comparison of identical code, the merge base checked out
  twice): every run gives two comparisons of identical programs, counters and timing.
- **Planted**: a LayerNormalization after every convolution block, once: what such a check costs here, in minutes
  and trials, and whether it resolves the slowdown.

    .venv/bin/python benchmarks/code_check.py [--repeats 5] [--trials 3]
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
sys.path.insert(0, str(ROOT))

from tests.conftest import commit, git  # noqa: E402

SETTINGS = """models = ["models/cnn.py:cifar_cnn"]
keras-backend = "jax"
xla = ["on"]
precision = ["fp32"]
preset = "tiny"
steps = 40
warmup = 20
window = 10
"""
FALSE_ALARMS = ("regression", "improvement", "changed", "failed")


def check(repo: Path, trials: str, *more: str) -> tuple[int, dict, float]:
    """One ``code-check --aa`` in ``repo``: its exit code, its JSON report and its wall time."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "stepwatch", "code-check", "--aa", "--trials", trials, "--metric",
         "examples_per_sec,counters,peak_memory_bytes", "--format", "json", *more],
        cwd=repo, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"code-check failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.returncode, json.loads(done.stdout), seconds


def alarms(report: dict) -> list[str]:
    return [f"{row['metric']} {row['verdict']}" for row in report["rows"] if row["verdict"] in FALSE_ALARMS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trials", default="3")
    args = parser.parse_args()
    repo = Path(tempfile.mkdtemp(prefix="stepwatch-code-check-")) / "team"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "ci")
    cnn = (ROOT / "examples" / "keras_cnn.py").read_text()
    commit(repo, "the model", {"models/cnn.py": cnn, "stepwatch.toml": SETTINGS, ".gitignore": "data/\n"})

    git(repo, "checkout", "-q", "-b", "rename")
    assert "for width in WIDTHS[preset]:" in cnn
    renamed = cnn.replace("for width in WIDTHS[preset]:", "for channels in WIDTHS[preset]:").replace(
        "Conv2D(width,", "Conv2D(channels,"
    )
    commit(repo, "Rename a variable", {"models/cnn.py": renamed})
    compared, alarmed, spent = 0, [], 0.0
    for repeat in range(args.repeats):
        code, report, seconds = check(repo, args.trials)
        spent += seconds
        for name, found in (("head", report), ("A/A", report["aa"])):
            compared += len(found["rows"])
            alarmed += [f"run {repeat + 1} {name}: {a}" for a in alarms(found)]
        print(f"A/A run {repeat + 1}: exit {code}, {seconds:.0f} s; {alarms(report) + alarms(report['aa']) or 'quiet'}")
    minutes = spent / args.repeats / 60
    print(f"A/A: {len(alarmed)} false alarm(s) in {compared} verdicts over {args.repeats} checks "
          f"({2 * args.repeats} comparisons of identical programs); {minutes:.1f} min a check")  # fmt: skip
    for line in alarmed:
        print(f"  {line}")

    git(repo, "checkout", "-q", "-b", "planted", "main")
    relu = "        x = keras.layers.ReLU()(x)\n"
    commit(repo, "LayerNormalization", {"models/cnn.py": cnn.replace(
        relu, relu + "        x = keras.layers.LayerNormalization()(x)\n")})  # fmt: skip
    code, report, seconds = check(repo, args.trials)
    rows = {row["metric"]: row for row in report["rows"]}
    throughput = rows["examples_per_sec"]
    trials = 3 * int(args.trials)
    print(f"planted: exit {code}, {seconds / 60:.1f} min for {trials} trials ({seconds / trials:.0f} s a trial, "
          f"checkouts and report included); throughput {throughput['verdict']} "
          f"{throughput['ratio'] - 1:+.1%} [{throughput['ci_low'] - 1:+.1%}, {throughput['ci_high'] - 1:+.1%}], "
          f"compiled_flops {rows['compiled_flops']['verdict']} {rows['compiled_flops']['ratio'] - 1:+.1%}, "
          f"A/A {'quiet' if not alarms(report['aa']) else alarms(report['aa'])}")  # fmt: skip


if __name__ == "__main__":
    main()
