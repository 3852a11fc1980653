"""The Overview's false alarms on an A/A: synthetic nightly history where nothing changes, but each night moves
the whole series a little (host, thermals, co-tenants: a night's offset) on top of the trials' own noise. How many
series does each of the Overview's two columns call a regression, with the night-to-night column judged by the two
nights' trials alone (the former way) and with a night's offset in its interval (``latest.changes``)?

    .venv/bin/python benchmarks/overview_aa.py [--series 400] [--nights 90] [--trials 3] [--seed 0] [--trial-cv 0.01]

Pure analysis (``collector.analysis.latest.changes`` on generated points), no store, no trials: seconds.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwatch.collector.analysis import latest  # noqa: E402
from stepwatch.collector.metrics import METRICS  # noqa: E402
from stepwatch.collector.outcomes import NO_CHANGE, REGRESSION  # noqa: E402

TRIAL_CV = 0.01  # a GPU trial's throughput repeats to about 1% (docs/reference.md, "GPU: the main path")


def points(
    rng: np.random.Generator,
    series: int,
    nights: int,
    trials: int,
    night_cv: float,
    latest: float = 1.0,
    trial_cv: float = TRIAL_CV,
) -> pd.DataFrame:
    """What ``queries.recent_points`` returns, newest night first: only noise (a night's offset of ``night_cv``,
    trials of ``trial_cv``), and the latest night's level times ``latest`` (1: no change anywhere)."""
    rows = []
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for s in range(series):
        level = rng.uniform(np.log(100), np.log(5000))
        for back in range(1, nights + 1):
            offset = rng.normal(0.0, night_cv)
            values = np.exp(level + offset + rng.normal(0.0, trial_cv, trials)) * (latest if back == 1 else 1.0)
            rows.append({"series_key": f"s{s}", "suite_run_id": f"r{s}-{back}", "night": start - timedelta(days=back),
                         "trials": trials, "n": trials, "value": float(np.median(values)),
                         "values": values.tolist(), "back": back})  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=400)
    parser.add_argument("--nights", type=int, default=latest.VARIANCE_NIGHTS)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trial-cv", type=float, default=TRIAL_CV)
    args = parser.parse_args()
    metric = METRICS["examples_per_sec"]
    print(f"{args.series} series x {args.nights} nights x {args.trials} trials, trial CV {args.trial_cv:.1%}, no "
          f"change; threshold {metric.threshold:.0%}: the share of series called a regression, and the share the "
          "Overview's status calls no change")  # fmt: skip
    print(f"{'night CV':>9} {'previous, former':>17} {'previous, now':>14} {'baseline, former':>17} "
          f"{'baseline, now':>14} {'status, now':>12} {'no change, now':>15} {'10% drop seen, now':>19}")  # fmt: skip
    for night_cv in (0.0, 0.01, 0.02, 0.04):

        def overview(drop: float, night_cv: float = night_cv) -> tuple[pd.DataFrame, list[str]]:
            frame = points(np.random.default_rng(args.seed), args.series, args.nights, args.trials, night_cv, drop,
                           args.trial_cv)  # fmt: skip
            table = latest.changes(frame, metric, {}, [], {})
            return table, latest.statuses(table, metric, [])

        frame = points(np.random.default_rng(args.seed), args.series, args.nights, args.trials, night_cv, 1.0,
                       args.trial_cv)  # fmt: skip
        former = latest.changes(frame, metric, {}, [], {}, night_to_night=False)
        now, status = overview(1.0)
        _, caught = overview(0.9)

        def share(verdicts: object, verdict: str = REGRESSION) -> str:
            return f"{np.mean(np.asarray(list(verdicts)) == verdict):.1%}"

        print(f"{night_cv:9.0%} {share(former['previous_verdict']):>17} {share(now['previous_verdict']):>14} "
              f"{share(former['baseline_verdict']):>17} {share(now['baseline_verdict']):>14} {share(status):>12} "
              f"{share(status, NO_CHANGE):>15} {share(caught):>19}")  # fmt: skip


if __name__ == "__main__":
    main()
