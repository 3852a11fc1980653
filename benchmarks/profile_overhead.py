"""Does --profile change what a trial measures? Runs each config in pairs of trials, one that records a profile
after its timed steps and one that does not, alternated (ABAB), and prints side by side: the throughput of
both (ratio with a 95% Welch interval, as stepwatch compares), what profiling added to the trial's wall time,
the raw profile's size, and the step time under the profiler against the step time measured.

    .venv/bin/python benchmarks/profile_overhead.py [--pairs 4] [--configs tensorflow:bert:off,...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from stepwatch.collector.analysis import stats
from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.output.text import interval, percent
from stepwatch.collector.runner import execution
from stepwatch.collector.runner.results import ResultFile

CONFIGS = "tensorflow:bert:off,tensorflow:bert:on,jax:bert:on,torch:bert:off"


def config_of(text: str) -> BenchmarkConfig:
    backend, model, xla = text.split(":")
    threads = "default" if backend == "jax" else "1/2"
    return BenchmarkConfig(model=model, keras_backend=backend, xla=xla == "on", threads=threads)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4, help="profiled + unprofiled trials per config")
    parser.add_argument("--configs", default=CONFIGS, help="backend:model:xla, comma-separated")
    args = parser.parse_args()
    configs = [config_of(text) for text in args.configs.split(",")]
    plain, profiled = execution.RunOptions(), execution.RunOptions(profile=1)
    rows: dict[str, dict[bool, list[dict]]] = {c.key: {False: [], True: []} for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        results = ResultFile(Path(tmp) / "overhead.parquet")
        for pair in range(args.pairs):
            for config in configs:
                order = (True, False) if pair % 2 == 0 else (False, True)  # ABAB: neither always goes first
                for profile in order:
                    options = profiled if profile else plain
                    done = execution.run_one(config, 0, results, "overhead", "overhead", options, Path(tmp))
                    rows[config.key][profile].append(done.row)
                    speed, wall = done.row.get("examples_per_sec") or 0, done.row["wall_s"]
                    kind = "profiled" if profile else "plain   "
                    print(f"{config.label()} {kind}: {done.row['status']} {speed:,.1f}/s, wall {wall:.1f} s")
    print()
    print(f"{'config':<44} {'plain /s':>10} {'profiled /s':>12} {'change [95% CI]':>28} {'+wall s':>8} "
          f"{'profile MB':>10} {'profiled step / timed step':>27}")  # fmt: skip
    for config in configs:
        sides = rows[config.key]
        ok = {p: [r for r in sides[p] if r["status"] == "ok"] for p in sides}
        eps = {p: [r["examples_per_sec"] for r in ok[p]] for p in ok}
        ratio = stats.welch_ratio(stats.Side.of(eps[False]), stats.Side.of(eps[True]))
        wall = statistics.median(r["wall_s"] for r in ok[True]) - statistics.median(r["wall_s"] for r in ok[False])
        size = statistics.median(r.get("profile_bytes", 0) for r in ok[True]) / 1e6  # rows as the runner makes them
        slower = statistics.median(r["profile_step_time_s"] / r["step_time_p50_s"] for r in ok[True])
        print(f"{config.label():<44} {statistics.median(eps[False]):>10,.1f} {statistics.median(eps[True]):>12,.1f} "
              f"{percent(ratio.ratio) + ' ' + interval(ratio.ci_low, ratio.ci_high):>28} {wall:>8.1f} {size:>10.2f} "
              f"{slower:>26.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
