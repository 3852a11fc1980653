"""Where does a slow process's time go? Bare Keras training on TensorFlow (no stepwatch harness) in fresh
processes, with what the kernel says about each: step times, how long the training threads ran, waited on a
run queue or slept, context switches, and the machine's steal time (a vCPU held back by the hypervisor).

A slow process that *sleeps* is waiting on something (a timer, a wake-up); one that *waits on the run queue*
has more runnable threads than cores; *steal* is time the host took from the VM. Variants:

- ``fit``: ``model.fit`` over ``tf.data.Dataset.from_tensors(batch).repeat()``, as most users write it.
- ``fit-noautotune``: the same with tf.data's autotuning off (what stepwatch's TF trials do since).
- ``train_on_batch``: ``model.train_on_batch`` on constant tensors, a host sync each step.

Threads: ``default`` (the framework's pools) or ``INTRA/INTER``. ``--aslr off`` runs the children under
``setarch -R`` (no address-space randomisation: the same memory layout in every process).

    .venv/bin/python benchmarks/step_floor.py [--model bert] [--processes 6] [--steps 300] \
        [--variants fit fit-noautotune train_on_batch] [--threads default 1/1 1/2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _task_stats() -> dict[str, float]:
    """Sum over this process's threads of run time and run-queue wait (ns, /proc schedstat), and context
    switches (/proc status)."""
    run = wait = vol = invol = 0
    threads = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            r, w, _ = (task / "schedstat").read_text().split()
            status = (task / "status").read_text().splitlines()
        except (FileNotFoundError, ValueError):
            continue
        threads += 1
        run, wait = run + int(r), wait + int(w)
        for line in status:
            if line.startswith("voluntary_ctxt_switches"):
                vol += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                invol += int(line.split()[1])
    return {"run_ns": run, "wait_ns": wait, "voluntary": vol, "involuntary": invol, "threads": threads}


def child(model: str, variant: str, steps: int) -> None:
    import keras  # noqa: PLC0415 (after the thread settings are in the environment)
    import tensorflow as tf  # noqa: PLC0415

    sys.path.insert(0, str(ROOT))
    from stepwatch.collector.trial.machine import host_steal_s  # noqa: PLC0415
    from stepwatch.collector.trial.runtime.keras_tensorflow import constant_dataset  # noqa: PLC0415
    from stepwatch.trainers import get_model  # noqa: PLC0415
    from stepwatch.trainers.spec import sparse_ce_loss  # noqa: PLC0415

    spec = get_model(model)
    size = spec.preset("tiny")
    net = spec.build(size)
    net.compile(optimizer=spec.optimizer(spec.default_learning_rate), loss=sparse_ce_loss(), jit_compile=False)
    x, y = spec.synthetic_batch(size, 8, 0)
    stamps: list[float] = []

    class Stamp(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            stamps.append(time.perf_counter())

    warmup = 20
    if variant == "train_on_batch":
        xs, ys = tf.nest.map_structure(tf.constant, x), tf.constant(y)
        for _ in range(warmup):
            net.train_on_batch(xs, ys)
        before, steal0 = _task_stats(), host_steal_s()
        start = time.perf_counter()
        for _ in range(steps):
            float(net.train_on_batch(xs, ys, return_dict=True)["loss"])  # host sync each step
            stamps.append(time.perf_counter())
    else:
        if variant == "fit-noautotune":
            dataset = constant_dataset((x, y))  # what stepwatch's trials feed
        else:
            dataset = tf.data.Dataset.from_tensors((x, y)).repeat()
        net.fit(dataset, steps_per_epoch=warmup, epochs=1, verbose=0)
        before, steal0 = _task_stats(), host_steal_s()
        start = time.perf_counter()
        net.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[Stamp()])
    elapsed = time.perf_counter() - start
    after, steal1 = _task_stats(), host_steal_s()
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]  # between steps: what a window of the harness sees
    delta = {k: after[k] - before[k] for k in ("run_ns", "wait_ns", "voluntary", "involuntary")}
    print(
        json.dumps(
            {
                "step_ms": 1000 * elapsed / steps,
                "first_ms": 1000 * (stamps[0] - start),  # the call's start to the end of its first step
                "tail_ms": 1000 * (start + elapsed - stamps[-1]),  # the last step's end to the call's return
                "median_step_ms": 1000 * statistics.median(gaps),
                "p90_step_ms": 1000 * statistics.quantiles(gaps, n=10)[-1],
                "cpu_per_step_ms": delta["run_ns"] / 1e6 / steps,
                "runqueue_per_step_ms": delta["wait_ns"] / 1e6 / steps,
                "voluntary_per_step": delta["voluntary"] / steps,
                "involuntary_per_step": delta["involuntary"] / steps,
                "steal_per_step_ms": (steal1 - steal0) * 1000 / steps,
                "threads": after["threads"],
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert")
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--variants", nargs="+", default=["fit", "fit-noautotune", "train_on_batch"])
    parser.add_argument("--threads", nargs="+", default=["default", "1/1", "1/2"])
    parser.add_argument(
        "--aslr", nargs="+", default=["on"], choices=["on", "off"], help="off: children under setarch -R"
    )
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.child[0], int(args.child[1]))
        return
    cells = [(v, t, a) for v in args.variants for t in args.threads for a in args.aslr]
    print(f"{args.model} tiny, batch 8, {args.steps} steps, {args.processes} processes per cell, interleaved")
    columns = ("step_ms", "first_ms", "tail_ms", "median_step_ms", "p90_step_ms", "cpu_per_step_ms")
    columns += ("runqueue_per_step_ms",)
    columns += ("voluntary_per_step", "involuntary_per_step", "steal_per_step_ms", "threads")
    names = "".join(f"{c.replace('_per_step', '/step'):>15s}" for c in columns)
    print(f"{'variant':16s}{'threads':9s}{'aslr':6s}" + names)
    for _ in range(args.processes):
        for variant, threads, aslr in cells:
            env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
            if threads != "default":
                intra, inter = threads.split("/")
                env |= {"TF_NUM_INTRAOP_THREADS": intra, "TF_NUM_INTEROP_THREADS": inter}
            prefix = ["setarch", os.uname().machine, "-R"] if aslr == "off" else []
            done = subprocess.run(
                [*prefix, sys.executable, __file__, "--model", args.model, "--child", variant, str(args.steps)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{variant:16s}{threads:9s}{aslr:6s}" + "".join(f"{row[c]:15.2f}" for c in columns), flush=True)


if __name__ == "__main__":
    main()
