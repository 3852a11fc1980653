"""What one side environment of an upgrade check costs to build: its pip install time and its size on disk, as
stepwatch builds it now (the side's requirements, the framework stack installed where stepwatch runs, numpy and
psutil, a copy of the trial code) beside the former way (the side's requirements and all of stepwatch's former
core dependencies: TensorFlow 2.21.0 pinned, Streamlit, Plotly, DuckDB, pandas, pyarrow, scipy, rich, keras-hub).

Run it with the interpreter of the environment a team measures in (stepwatch installed there), e.g.

    venv/bin/python benchmarks/side_environment.py --side keras==3.14.0

Both builds use this interpreter's pip and its cache; each is built once untimed first so that both are timed
with every download in the cache (what a second check on a runner sees).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from stepwatch.collector.environments import virtualenvs

# stepwatch's core dependencies before the core install stopped pinning a framework (pyproject.toml at 4b72157).
FORMER = ["tensorflow==2.21.0", "keras>=3.10", "keras-hub>=0.22", "numpy>=1.26", "pyarrow>=15", "pandas>=2.1",
          "psutil>=5.9", "rich>=13", "duckdb>=1.1", "pytz", "scipy>=1.11", "packaging>=23", "streamlit>=1.45",
          "plotly>=5.20"]  # fmt: skip


def build(folder: Path, requirements: list[str]) -> tuple[float, int]:
    """Seconds to pip install ``requirements`` into a fresh environment there, and its size in bytes."""
    shutil.rmtree(folder, ignore_errors=True)
    python = virtualenvs.create_venv(folder, reuse_site_packages=False)
    start = time.perf_counter()
    subprocess.run([*virtualenvs.pip_command(python), "install", "--quiet", *requirements], check=True)
    seconds = time.perf_counter() - start
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    return seconds, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", default="keras==3.14.0", help="the side's requirements, space-separated")
    args = parser.parse_args()
    side = tuple(args.side.split())
    named = {r.split("=")[0].split(">")[0] for r in side}
    ways = {
        "now": virtualenvs.environment_requirements(side, reuse_site_packages=False),
        "former": [*side, *(r for r in FORMER if r.split("=")[0].split(">")[0] not in named)],
    }
    with tempfile.TemporaryDirectory(prefix="stepwatch-side-") as tmp:
        results = {}
        for name, requirements in ways.items():
            build(Path(tmp) / name, requirements)  # fills pip's cache
            results[name] = build(Path(tmp) / name, requirements)
            print(
                f"{name:>6}: {results[name][0]:6.1f} s, {results[name][1] / 2**20:7.0f} MiB  ({' '.join(requirements)})"
            )
    (t_now, s_now), (t_former, s_former) = results["now"], results["former"]
    print(f"former / now: install time {t_former / t_now:.1f}x, size {s_former / s_now:.1f}x")


if __name__ == "__main__":
    main()
