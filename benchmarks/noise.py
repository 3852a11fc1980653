"""Noise of the measurement: coefficient of variation of throughput over repeated trials of one config.

.venv/bin/python benchmarks/noise.py [--model resnet50] [--trials 5] [--steps 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.bench import runner  # noqa: E402
from collector.bench.results import ResultFile  # noqa: E402
from collector.config import BenchmarkConfig  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    config = BenchmarkConfig(
        model=args.model, per_device_batch=args.batch, steps=args.steps, warmup_steps=args.warmup, window_steps=10
    )
    with tempfile.TemporaryDirectory() as tmp:
        results = ResultFile(Path(tmp) / "noise.parquet")
        plan = runner.interleave([config], args.trials)
        outcomes = runner.run_plan(plan, results, "noise", str(uuid.uuid4()), runner.RunOptions())
    rates = []
    for outcome in outcomes:
        row = outcome.row
        assert row["status"] == "ok", row.get("error_message")
        rates.append(row["examples_per_sec"])
        within = row["step_time_jitter_s"] / row["step_time_p50_s"]
        print(
            f"trial {outcome.trial + 1}: {row['examples_per_sec']:8.1f} ex/s   within-trial jitter/p50 {within:.1%}",
            flush=True,
        )
    cv = statistics.stdev(rates) / statistics.mean(rates)
    print(f"{config.label()}, {args.steps} measured steps, {args.trials} trials")
    print(f"throughput mean {statistics.mean(rates):.1f} ex/s, CV {cv:.2%}; goal < 3%")


if __name__ == "__main__":
    main()
