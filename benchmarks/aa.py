"""A/A: does an upgrade check stay quiet when nothing changed? Repeats ``stepwatch upgrade-check --aa`` between two
requirement texts that resolve to the same packages (two separately built environments, plus the A/A's third),
and reads each run three ways:

- **with --aa**: the check's own verdicts, its intervals widened by the A/A's between-environment variation;
- **without**: the same trials compared with the trials' own intervals only (``stepwatch compare
  --calibration none`` on the two sides' suite runs), what a check without ``--aa`` says;
- **the A/A itself**: the baseline against its second environment.

A verdict of regression or improvement anywhere is a false alarm.

    .venv/bin/python benchmarks/aa.py [--runs 5] [--models bert,transformer] [--trials 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ALARMS = ("regression", "improvement")


def stepwatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stepwatch", *args], capture_output=True, text=True)


def cells(payload: dict, metric: str) -> str:
    rows = [r for r in payload["rows"] if r["metric"] == metric]
    out = []
    for r in rows:
        change = "n/a" if r["ratio"] is None else f"{(r['ratio'] - 1) * 100:+.1f}%"
        ci = "" if r["ci_low"] is None else f" [{(r['ci_low'] - 1) * 100:+.1f}, {(r['ci_high'] - 1) * 100:+.1f}]"
        out.append(f"{r['series']['model']} {r['verdict']} {change}{ci}")
    return "; ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", default="tensorflow==2.21.0")
    parser.add_argument("--candidate", default="tensorflow>=2.21.0,<2.21.1")
    parser.add_argument("--models", default="bert,transformer")
    parser.add_argument("--trials", default="5")
    parser.add_argument("--metric", default="examples_per_sec,peak_memory_bytes")
    parser.add_argument("--db", default="data/upgrade-check.duckdb")
    args = parser.parse_args()
    metrics = args.metric.split(",")
    tally: dict[str, Counter] = {way: Counter() for way in ("with --aa", "without", "A/A itself")}
    codes = {"with --aa": [], "without": []}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(1, args.runs + 1):
            out = Path(tmp) / f"check-{run}.json"
            check = stepwatch(
                "upgrade-check", "--baseline", args.baseline, "--candidate", args.candidate, "--aa",
                "--models", args.models, "--xla", "off", "--precision", "fp32", "--trials", args.trials,
                "--metric", args.metric, "--calibration", "none", "--db", args.db, "--format", "json",
                "--out", str(out),
            )  # fmt: skip
            if not out.exists():
                sys.exit(f"run {run}: upgrade-check wrote no report (exit {check.returncode}): {check.stderr[-500:]}")
            widened = json.loads(out.read_text())
            plain_out = Path(tmp) / f"plain-{run}.json"
            plain = stepwatch(
                "compare", "--db", args.db, "--baseline", widened["baseline"], "--candidate", widened["candidate"],
                "--metric", args.metric, "--calibration", "none", "--format", "json", "--out", str(plain_out),
            )  # fmt: skip
            plain_payload = json.loads(plain_out.read_text())
            codes["with --aa"].append(check.returncode)
            codes["without"].append(plain.returncode)
            for way, payload in (("with --aa", widened), ("without", plain_payload), ("A/A itself", widened["aa"])):
                tally[way].update(r["verdict"] for r in payload["rows"])
            print(f"run {run}: exit {check.returncode} with --aa, {plain.returncode} without", flush=True)
            for metric in metrics:
                print(f"  {metric}", flush=True)
                print(f"    with --aa:   {cells(widened, metric)}", flush=True)
                print(f"    without:     {cells(plain_payload, metric)}", flush=True)
                print(f"    A/A itself:  {cells(widened['aa'], metric)}", flush=True)
    print(f"\n{args.runs} runs of {args.baseline!r} vs {args.candidate!r} ({args.models}, {args.trials} trials a side)")
    for way, counts in tally.items():
        alarms = sum(counts[a] for a in ALARMS)
        print(f"{way:12s} false alarms {alarms} of {sum(counts.values())} verdicts: {dict(counts)}")
    for way, found in codes.items():
        print(f"exit codes {way}: {found}")


if __name__ == "__main__":
    main()
