"""Do instruction counts of the measured steps repeat? Runs one tiny model's training steps under Valgrind's
callgrind in several processes, in one or more Python environments, counting the instructions of the measured
steps only, and prints each process's count and the spread.

How only the measured steps are counted: callgrind starts with instrumentation off (``--instr-atstart=no``:
startup, imports and compilation run uninstrumented, at a few times native speed). After the warm-up steps, each
of which ends by reading its loss (so no work is in flight), a client request switches instrumentation on for
every thread (``CALLGRIND_START_INSTRUMENTATION``, after ``CALLGRIND_ZERO_STATS``); after the measured steps and
a read of the last loss, it is switched off and the counts dumped (``CALLGRIND_DUMP_STATS_AT``). Instrumentation,
not collection, is toggled: ``CALLGRIND_TOGGLE_COLLECT`` acts on the calling thread only, and the frameworks run
a step's kernels on their own thread pools. The client requests are compiled into a small shared library
(``gcc``, ``valgrind/callgrind.h``) that the steps call through ctypes.

Needs valgrind and gcc (``apt-get install valgrind gcc``).

    .venv/bin/python benchmarks/instructions.py [--backend tensorflow] [--model bilstm] [--processes 5]
        [--warmup 3] [--steps 5] [--python PYTHON ...]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOGGLE = """
#include <valgrind/callgrind.h>
void sw_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void sw_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("measured"); }
"""
# The steps, as a trial runs them: the config's backend prepared as stepwatch prepares it (the other frameworks
# hidden, host threads set), the model built and compiled for fit, a loss read after every warm-up step.
STEPS = """
import ctypes, json, sys
sys.path.insert(0, sys.argv[1])
from stepwatch.collector.trial import runtime
from stepwatch.collector.config import BenchmarkConfig, resolve
config = resolve(BenchmarkConfig.from_json(sys.argv[2]))
runtime.prepare(config)
backend = runtime.load(config)
from stepwatch.trainers import get_model
toggle = ctypes.CDLL(sys.argv[3])
spec = get_model(config.model)
setup = backend.configure(config)
model, optimizer = backend.build_model(spec, config, setup)
x, y = spec.synthetic_batch(spec.preset(config.preset), config.per_device_batch, config.seed)
for _ in range(int(sys.argv[4])):
    float(model.train_on_batch(x, y))
toggle.sw_start()
for _ in range(int(sys.argv[5])):
    loss = model.train_on_batch(x, y)
float(loss)
toggle.sw_stop()
"""


def count(
    python: str, config: str, library: Path, warmup: int, steps: int, out: Path, env: dict[str, str]
) -> tuple[list[int], float]:
    """One process under callgrind: the instructions of its measured steps per thread (the thread that runs the
    steps first), and its wall seconds."""
    start = time.perf_counter()
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
               f"--callgrind-out-file={out}.%p", python, "-c", STEPS, str(REPO), config, str(library), str(warmup),
               str(steps)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    if done.returncode != 0:
        raise SystemExit(f"{python}: exit {done.returncode}: {done.stderr[-1500:]}")

    # With --separate-threads a file per thread. The dump request writes the calling thread's counts
    # (<out>.<pid>.1-01); every other thread's are written at exit (<out>.<pid>-NN). Instrumentation was on only
    # during the measured steps, so every count is of those steps: the calling thread's first, then the others'.
    def thread_of(path: Path) -> int:
        found = re.search(r"-(\d+)$", path.name)
        return int(found[1]) if found else 0

    files = sorted(out.parent.glob(f"{out.name}.*"), key=lambda p: (".1-" not in p.name, thread_of(p)))
    totals = [int(m[1]) for p in files for m in re.finditer(r"^totals: (\d+)", p.read_text(), re.M)]
    for path in files:
        path.unlink()
    if not files or ".1-" not in files[0].name:
        raise SystemExit("found no dump of the measured steps")
    return [totals[0], *(t for t in totals[1:] if t)], time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="tensorflow")
    parser.add_argument("--model", default="bilstm")
    parser.add_argument("--xla", default="on", choices=("on", "off"))
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--python", action="append", help="an environment's python (repeatable; default this one)")
    parser.add_argument("--hash-seed", type=int, help="PYTHONHASHSEED for every process (default: random, as a trial)")
    args = parser.parse_args()
    config = (
        f'{{"model": "{args.model}", "preset": "tiny", "keras_backend": "{args.backend}", '
        f'"xla": {str(args.xla == "on").lower()}, "threads": "auto", "warmup_steps": 20, "window_steps": 10}}'
    )
    pythons = args.python or [sys.executable]
    with tempfile.TemporaryDirectory() as tmp:
        library = Path(tmp) / "libswtoggle.so"
        (Path(tmp) / "toggle.c").write_text(TOGGLE)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(library), str(Path(tmp) / "toggle.c")], check=True)
        found: dict[str, list[int]] = {}
        env = {"PYTHONHASHSEED": str(args.hash_seed)} if args.hash_seed is not None else {}
        for i in range(args.processes):  # the environments alternate, so a drift of the machine hits both
            for python in pythons:
                threads, wall = count(python, config, library, args.warmup, args.steps, Path(tmp) / "cg", env)
                total = sum(threads)
                found.setdefault(python, []).append(total)
                print(f"{python}: process {i + 1}: {total:,} instructions in {args.steps} steps "
                      f"({total / args.steps:,.0f} a step), {wall:.0f} s; the steps' thread {threads[0]:,}, "
                      f"the others {[f'{t:,}' for t in threads[1:]]}",
                      flush=True)  # fmt: skip
    every = [v for values in found.values() for v in values]
    for python, values in found.items():
        spread = (max(values) - min(values)) / statistics.mean(values)
        print(f"{python}: {len(values)} processes, spread {spread:.3%} (max-min over mean)")
    spread = (max(every) - min(every)) / statistics.mean(every)
    print(f"all {len(every)} processes: spread {spread:.3%}; within 0.5%: {'yes' if spread <= 0.005 else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
