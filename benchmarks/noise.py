"""Noise of the measurement: trial-to-trial CV of throughput for every model of a suite at its defaults, side by
side with the same configs under the former defaults (the framework's own thread pools, 100 measured steps).

Every trial is a fresh process, as in a real run; the two settings and the models are interleaved (round 1 of
every config, then round 2, ...), so machine drift hits all alike. Per config: the CV (sample standard deviation
over the mean) and the median throughput over the trials, and the ratio of medians new / former.

    .venv/bin/python benchmarks/noise.py [--suite smoke] [--trials 5] [--precision fp32] [--xla off]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwatch.collector.config import THREADS_DEFAULT, parse_bool  # noqa: E402
from stepwatch.collector.runner import execution  # noqa: E402
from stepwatch.collector.runner.results import ResultFile  # noqa: E402
from stepwatch.collector.runner.suite import load_suite, narrow  # noqa: E402

FORMER = {"threads": THREADS_DEFAULT, "steps": 100}  # what the smoke suite ran before threads were configuration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--precision", default="fp32", help="keep the suite's configs of this precision")
    parser.add_argument("--xla", default="off", help="keep the suite's configs with this XLA setting")
    args = parser.parse_args()
    suite = load_suite(args.suite)
    xla = parse_bool(args.xla, "--xla")
    current = [c for c in narrow(suite.configs, {}) if c.precision == args.precision and c.xla == xla]
    former = [c.with_changes(**FORMER) for c in current]
    configs = [c for pair in zip(current, former) for c in pair]
    rates: dict[int, list[float]] = {i: [] for i in range(len(configs))}
    with tempfile.TemporaryDirectory() as tmp:
        results = ResultFile(Path(tmp) / "noise.parquet")
        for trial in range(args.trials):
            for i, config in enumerate(configs):
                [outcome] = execution.run_plan(
                    [(config, trial)], results, "noise", str(uuid.uuid4()), execution.RunOptions()
                )
                row = outcome.row
                assert row["status"] == "ok", (config.label(), row.get("error_message"))
                rates[i].append(row["examples_per_sec"])
                measured = row["steps"] / row["examples_per_sec"] * row["global_batch"]
                print(
                    f"round {trial + 1} {config.label():55s} steps {config.steps:5d}: {rates[i][-1]:8.1f} ex/s "
                    f"({measured:.1f} s measured)",
                    flush=True,
                )

    def cv(values: list[float]) -> float:
        return statistics.stdev(values) / statistics.mean(values)

    print(f"\n{args.suite} suite, {args.precision}, xla {args.xla}, {args.trials} interleaved trials per config")
    print(f"{'model':12s} {'now: threads, steps':22s} {'CV':>6s} {'median':>9s} | {'before':14s} {'CV':>6s} "
          f"{'median':>9s} | now/before")  # fmt: skip
    for k in range(len(current)):
        a, b = rates[2 * k], rates[2 * k + 1]
        now, before = configs[2 * k], configs[2 * k + 1]
        print(
            f"{now.model:12s} {now.threads + ', ' + str(now.steps):22s} {cv(a):6.1%} {statistics.median(a):9.1f} | "
            f"{before.threads + ', ' + str(before.steps):14s} {cv(b):6.1%} {statistics.median(b):9.1f} | "
            f"{statistics.median(a) / statistics.median(b):.2f}x"
        )
    print("goal: CV under 3% for each model at the suite's defaults")


if __name__ == "__main__":
    main()
