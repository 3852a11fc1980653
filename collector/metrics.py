"""Every metric stepwatch judges, in one table: its column, unit, which direction is better and the smallest
change that matters. The CLI, the analysis and the dashboard all read it; none repeats it. (A series can
have its own threshold: see ``collector.analysis.thresholds``.)

A *deterministic* metric is a count of what the compiler emitted for the training step (HLO instructions,
fusions, the cost analysis' flops and bytes, torch.compile's graphs and kernels): the same program and software
give the same value in every process, so two sides are compared exactly (``stats.exact``), not by a t-test.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stepwatch.collector.errors import UsageError


@dataclass(frozen=True)
class Metric:
    name: str  # the result column
    label: str  # how charts and tables name it
    unit: str  # "{unit}" is the model's own unit (images, sequences, tokens)
    higher_is_better: bool
    threshold: float  # the smallest relative change that counts (0.03 = 3%)
    scale: float = 1.0  # multiply the column by this for display in ``unit``
    short: str = ""  # a column heading in a run's summary (its label if empty)
    headline: bool = False  # one of the few figures a run shows first (the Run page's tiles, `run`'s summary)
    deterministic: bool = False  # the same for every trial of one program and stack: compared exactly
    follows: bool = False  # judged in every comparison whose rows have it, beside the metrics asked for
    per_series: bool = False  # which way is better is each series' own (an imported result's), not the metric's

    @property
    def heading(self) -> str:
        return self.short or self.label

    def shown(self, value: float | None, model_unit: str | None = None) -> str:
        """A value in its display unit ("12.3 ms", "1,234.5 images/s", "2.10 GiB"); "-" when there is none."""
        if value is None or value != value:
            return "-"
        unit = self.unit.replace("{unit}", model_unit or "examples")
        shown = value * self.scale
        if self.deterministic and not unit:  # a count
            return f"{round(shown):,}"
        digits = 2 if abs(shown) < 100 else 1
        return f"{shown:,.{digits}f} {unit}".rstrip()


IMPORTED_METRIC = "imported_value"  # what another tool measured, in its unit (collector/imports)
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("examples_per_sec", "Throughput", "examples/s", True, 0.03),
        Metric(
            "units_per_sec", "Throughput in the model's unit", "{unit}/s", True, 0.03, short="throughput", headline=True
        ),
        Metric("examples_per_sec_per_device", "Throughput per device", "examples/s", True, 0.03),
        # A result another tool measured (collector/imports), in its own unit: which way is better is the series'
        # own (``imported_better``), and timing microbenchmarks move more from run to run than a training step.
        Metric(IMPORTED_METRIC, "Imported result", "{unit}", True, 0.05, short="result", per_series=True),
        Metric("step_time_p50_s", "Step time (median)", "ms", False, 0.03, 1000.0, "step p50", True),
        Metric("step_time_p90_s", "Step time (p90)", "ms", False, 0.05, 1000.0),
        Metric("compile_s", "Compile / first step time", "s", False, 0.15, short="compile", headline=True),
        Metric("startup_s", "Startup time", "s", False, 0.15),
        # On CPU the peak anonymous memory (the program's own); on an accelerator the allocator's peak.
        Metric("peak_memory_bytes", "Peak memory", "GiB", False, 0.01, 1 / 2**30, "peak memory", True),
        # ru_maxrss: also counts the mapped shared libraries, which move with the page cache and the files'
        # layout on disk (two builds of the same packages differ by ~2%); CPU peak memory before schema 4.
        Metric("peak_rss_bytes", "Peak RSS (libraries included)", "GiB", False, 0.01, 1 / 2**30),
        Metric("mfu", "Model FLOPs utilisation", "%", True, 0.03, 100.0),
        Metric("max_per_device_batch", "Largest per-device batch (--find-max-batch)", "examples", True, 0.05),
        Metric("cost_usd", "Cost per run", "USD", False, 0.03),
        Metric("cost_per_1m_examples_usd", "Cost per 1M examples", "USD", False, 0.03),
        Metric("gpu_wh_per_1m_examples", "GPU energy per 1M examples", "Wh", False, 0.03),  # NVML's energy counter
        Metric("final_loss", "Final loss", "", False, 0.05),
        # A model with experts (collector.trial.routing): its busiest expert's tokens over an even share, in the worst
        # layer. A step waits on that expert, so a router that unbalances slows training without any kernel changing:
        # judged beside the speed wherever the rows have it.
        Metric("routing_max_load", "Busiest expert's load (x even)", "x", False, 0.05, short="max load", follows=True),
        # Time to a target quality, MLPerf's metric: the first step (compiling) left out, as MLPerf leaves out
        # initialisation; resolved to a timing window (collector.trial.measure.to_target).
        Metric("time_to_target_s", "Time to target", "s", False, 0.05, short="to target"),
        Metric("steps_to_target", "Steps to target", "steps", False, 0.05),
        # What the compiler emitted for one training step (collector.trial.counters), read after the timed steps.
        # Less is better for each (less work, fewer kernels); any change counts (threshold 0), exactly. XLA's cost
        # analysis sees only what XLA itself generates: the convolutions and matmuls it hands to a library as
        # custom calls (cuDNN and cuBLAS on a GPU: most of a ResNet-50 step) are not in its flops or bytes, and the
        # labels say so (the row's hlo_custom_calls counts them).
        *(
            Metric(name, label, unit, False, 0.0, scale, deterministic=True)
            for name, label, unit, scale in (
                ("compiled_flops", "FLOPs per step (XLA cost analysis, library calls left out)", "GFLOP", 1e-9),
                ("compiled_bytes_accessed", "Bytes accessed per step (XLA, library calls left out)", "MiB", 1 / 2**20),
                ("compiled_transcendentals", "Transcendentals per step (XLA cost analysis)", "", 1.0),
                ("compiled_memory_bytes", "Memory of the compiled step (XLA memory analysis)", "MiB", 1 / 2**20),
                ("step_compilations", "Compilations of the train step (JAX: its jit cache entries)", "", 1.0),
                ("hlo_instructions", "HLO instructions (optimized step)", "", 1.0),
                ("hlo_fusions", "XLA fusions (kernels of the optimized step)", "", 1.0),
                ("hlo_custom_calls", "XLA custom calls (library kernels)", "", 1.0),
                ("graph_ops", "TensorFlow graph ops per step (no XLA)", "", 1.0),
                ("compiled_graphs", "Graphs compiled (torch.compile)", "", 1.0),
                ("graph_breaks", "Graph breaks (torch.compile)", "", 1.0),
                ("generated_kernels", "Kernels generated (inductor)", "", 1.0),
            )
        ),
    )
}
# A series' noise is judged on its last this many ok trials: the store keeps them (``recent_values``), the analysis
# reads no more.
RECENT_TRIALS = 30
# Where a trial's startup goes (``startup_s``: from the process's start to the end of its first execution), in
# order: each phase is a column ``startup_<phase>_s`` (collector.schema); the first execution is ``compile_s``. A
# script's trial has the first two, then ``script``: what the script did before its first step ended, which
# stepwatch cannot see into; its ``compile_s`` is what the framework reports it compiled, where it reports that.
STARTUP_PHASES = {
    "python": "the interpreter and stepwatch's own imports",
    "environment": "reading the host, driver and git commit",
    "imports": "importing Keras and its framework",
    "device": "the devices, precision and distribution set up",
    "build": "building and compiling the model for fit",
    "data": "the synthetic batch made and placed on the device",
    "script": "a script's own start to the end of its first step: its imports, data, model and first step",
}


def startup_column(phase: str) -> str:
    return f"startup_{phase}_s"


# Where a trial's wall time went, in order (``trial_time``): what a check's report sums, and what sets how many steps
# its later trials measure (``collector.analysis.sequential``).
TIME_PARTS = ("start-up", "first step", "warm-up", "measured steps", "profile", "the rest")


def trial_time(row: Mapping[str, Any]) -> dict[str, float]:
    """A trial row's wall time in ``TIME_PARTS``: start-up to its first step, the first step (compiling), warm-up,
    measured steps, profile (``extras.profile_s``), and the rest of the process's wall time (reading counters,
    writing the result, exiting). A part the row lacks is 0; none is negative."""
    extras = row.get("extras") or {}
    extras = json.loads(extras) if isinstance(extras, str) else extras
    compile_s = row.get("compile_s") or 0.0
    parts = {"start-up": (row.get("startup_s") or 0.0) - compile_s, "first step": compile_s,
             "warm-up": row.get("warmup_s"), "measured steps": row.get("measured_s"),
             "profile": extras.get("profile_s")}  # fmt: skip
    found = {name: max(seconds or 0.0, 0.0) for name, seconds in parts.items()}
    found["the rest"] = max((row.get("wall_s") or 0.0) - sum(found.values()), 0.0)
    return found


DEFAULT_METRIC = "examples_per_sec"
HEADLINE = tuple(m for m in METRICS.values() if m.headline)  # in the table's order
COUNTERS = tuple(m.name for m in METRICS.values() if m.deterministic)
FOLLOWING = tuple(m for m in METRICS.values() if m.follows)
# What peak_memory_bytes measured (its peak_memory_kind): on a CPU the peak anonymous memory the parent samples
# (collector.trial.memory), or, on rows before schema 4, ru_maxrss (which the migration moves to peak_rss_bytes);
# on an accelerator the framework allocator's peak ("device").
ANON_KIND, RSS_KIND = "host_anon", "host_rss"
# A profiled trial's op table in its row: per op, its type, name, where it ran, time and count per step (typed in
# ``collector.schema``; named here, where a trial process reads them without pyarrow).
OP_COLUMNS = ("op_types", "op_names", "op_where", "op_time_s", "op_counts")


class MetricError(UsageError):
    """An unknown metric or a broken thresholds file, in one line."""


def get_metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        close = difflib.get_close_matches(name, METRICS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else f"; known: {', '.join(METRICS)}"
        raise MetricError(f"unknown metric {name!r}{hint}") from None
