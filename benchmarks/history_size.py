"""The history branch after a synthetic year: 365 nights of 100 series (3 trials each, rows of the real schema) and
raw profiles at the night's budget, archived, bounded and pushed by the functions ``stepwatch publish`` runs
(``collector.workflows.publish``: archive, prune_profiles, compact_results, commit, push) to a bare repository on
this machine; then the branch's size, and a fresh clone's size and time. With ``--compare``, the same nights
unbounded too (every profile kept, every night a commit), side by side.

    .venv/bin/python benchmarks/history_size.py [--nights 365] [--series 100] [--profiles-mb 10] [--compare 60]

The goal (docs/reference.md, "History with a bound"): under 200 MB after a year. The profiles are random bytes:
git cannot compress them, where a real profile (an xplane.pb, a trace.json.gz) compresses a little or not at all,
so this is the bound's worst case. The night's ingest, detection and page are left out: they do not touch the
branch's size (the page is one file, replaced each night).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stepwatch.collector.workflows import publish
from stepwatch.collector.workflows.synthetic import generate

GOAL_MB = 200
PROFILE_MB = 2  # one profile's size: a night's budget holds a few


def git(*args: str, cwd: Path | None = None) -> str:
    who = ["-c", "user.name=b", "-c", "user.email=b@b"]
    return subprocess.run(["git", *who, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def template(series: int) -> pa.Table:
    """One night's rows: ``series`` series x 3 trials of the synthetic history (the real schema)."""
    with tempfile.TemporaryDirectory() as tmp:
        files = generate(series * 3 * 12, Path(tmp) / "synthetic")
        table = pa.concat_tables(pq.read_table(p) for p in files)
    keys = list(dict.fromkeys(table.column("series_key").to_pylist()))[:series]
    chosen = np.isin(np.asarray(table.column("series_key").to_pylist(), dtype=object), keys)
    night = table.filter(pa.array(chosen))
    first: dict[tuple[str, int], int] = {}
    for i, key in enumerate(zip(night.column("series_key").to_pylist(), night.column("trial").to_pylist())):
        first.setdefault(key, i)
    return night.take(pa.array(sorted(first.values())))


def a_night(rows: pa.Table, day: date, folder: Path, rng: np.random.Generator, profiles_mb: float) -> None:
    """The night's artifact: its rows (new run ids, that night's start, throughput with 2% noise) and raw profiles
    up to the budget."""
    n = rows.num_rows
    ids = pa.array([f"{day}-{i}" for i in range(n)])
    started = pa.array([datetime(day.year, day.month, day.day, 2, 17).astimezone()] * n, rows["started_at"].type)
    speed = pa.array(np.asarray(rows["examples_per_sec"].to_numpy(zero_copy_only=False)) * rng.normal(1, 0.02, n))
    night = rows.set_column(rows.column_names.index("run_id"), "run_id", ids)
    night = night.set_column(night.column_names.index("started_at"), "started_at", started)
    night = night.set_column(night.column_names.index("examples_per_sec"), "examples_per_sec", speed)
    job = folder / "results-gpu-0"
    job.mkdir(parents=True)
    pq.write_table(night, job / f"nightly-{day}.parquet", compression="zstd")
    for i in range(int(profiles_mb // PROFILE_MB)):
        kept = job / publish.PROFILES / f"{day}-{i}"
        kept.mkdir(parents=True)
        (kept / "trace.json.gz").write_bytes(rng.bytes(PROFILE_MB * 2**20 - 4096))


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def year(rows: pa.Table, nights: int, profiles_mb: float, bounded: bool, work: Path) -> dict[str, float]:
    """Publish ``nights`` nights to a bare repository, bounded or not; the branch's figures."""
    remote, tree = work / "github.git", work / "history"
    git("init", "-q", "--bare", str(remote))
    # The remote stands for GitHub, which serves a clone from packs it keeps: here, its objects arrive loose and each
    # clone packs them again, so it searches no deltas for large binary files (random bytes have none).
    git("-C", str(remote), "config", "core.bigFileThreshold", "1m")
    rng, start, spent = np.random.default_rng(0), date(2026, 1, 1), time.perf_counter()
    for number in range(nights):
        day = start + timedelta(days=number)
        # As the nightly's publish job fetches it: a clone of depth 1 (a push from a shallow clone sends only what
        # the branch lacks, also when the commit it pushes is a new root), a new branch the first night.
        shutil.rmtree(tree, ignore_errors=True)
        if number:
            git("clone", "-q", "--depth", "1", "--branch", "stepwatch-history", remote.as_uri(), str(tree))
        else:
            git("init", "-q", "-b", "stepwatch-history", str(tree))
            git("-C", str(tree), "remote", "add", "origin", remote.as_uri())
        (tree / "site").mkdir(exist_ok=True)
        folder = work / "night"
        a_night(rows, day, folder, rng, profiles_mb)
        jobs = publish.find_jobs([folder])
        publish.archive(jobs, [folder], tree, int(profiles_mb * 2**20), day.isoformat())
        if bounded:
            publish.prune_profiles(tree, publish.KEEP_NIGHTS)
            publish.compact_results(tree, day.isoformat())
        (tree / "site" / "index.html").write_bytes(rng.bytes(200_000))  # the page, replaced each night
        publish.commit(tree, f"stepwatch history: a night ({day})")
        publish.push(tree, "stepwatch-history", print, squash=bounded)
        shutil.rmtree(folder)
    published = time.perf_counter() - spent
    clone = work / "clone.git"
    start_clone = time.perf_counter()
    git("clone", "-q", "--bare", remote.as_uri(), str(clone))
    cloned = time.perf_counter() - start_clone
    return {
        "nights": nights, "publish_s": published / nights, "remote_mb": size_mb(remote),
        "tree_mb": size_mb(tree) - size_mb(tree / ".git"), "clone_mb": size_mb(clone), "clone_s": cloned,
        "results": len(list((tree / publish.RESULTS).glob("*.parquet"))),
        "commits": int(git("--git-dir", str(remote), "rev-list", "--count", "stepwatch-history")),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--series", type=int, default=100)
    parser.add_argument("--profiles-mb", type=float, default=publish.PROFILES_BUDGET / 2**20)
    parser.add_argument("--compare", type=int, default=0, metavar="NIGHTS", help="also these nights both ways")
    args = parser.parse_args()
    rows = template(args.series)
    print(f"a night: {rows.num_rows} rows ({args.series} series x 3 trials), {args.profiles_mb:g} MB of raw profiles "
          f"(random bytes: the worst case); profiles kept {publish.KEEP_NIGHTS} nights")  # fmt: skip
    runs = []
    if args.compare:
        runs += [("bounded", args.compare, True), ("unbounded", args.compare, False)]
    runs.append(("bounded", args.nights, True))
    header = f"{'history':<10} {'nights':>6} {'files':>6} {'commits':>7} {'tree MB':>8} {'clone MB':>9} {'clone s':>8}"
    lines = []
    for name, nights, bounded in runs:
        with tempfile.TemporaryDirectory(prefix="stepwatch-history-") as work:
            got = year(rows, nights, args.profiles_mb, bounded, Path(work))
        lines.append(f"{name:<10} {nights:>6} {got['results']:>6} {got['commits']:>7} {got['tree_mb']:>8.1f} "
                     f"{got['clone_mb']:>9.1f} {got['clone_s']:>8.2f}   ({got['publish_s']:.2f} s a night to "
                     "publish)")  # fmt: skip
        print(lines[-1] if len(lines) > 1 else f"{header}\n{lines[-1]}", flush=True)
    final = got["clone_mb"]
    print(f"after {args.nights} nights a fresh clone of the branch is {final:.1f} MB "
          f"({'under' if final < GOAL_MB else 'OVER'} the {GOAL_MB} MB goal)")  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    main()
