"""The result row: one per (config, trial), wide and typed. This module owns the column list, the series
key, and how a file of any schema version (or from any writer) is checked and brought to the current one."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stepwatch.collector.config import ADDED_DIMENSIONS
from stepwatch.collector.metrics import METRICS, OP_COLUMNS, RSS_KIND, STARTUP_PHASES, startup_column

SYNTHETIC_SOURCE = "synthetic-test-data"  # the ``source`` of generated rows, which never mix with real ones

# 1: first release. 2: adds series_key (config_key + accelerator product), computed once here for every tool.
# 3: Keras backends: ``backend`` (cpu/gpu/tpu) becomes ``device``; adds keras_backend (earlier rows are
# TensorFlow rows), compiler (what jit_compile ran: xla, inductor or none), matmul_precision and the JAX and
# torch versions; threads (the host thread setting, a series dimension) and the intra-/inter-op threads read
# back. Series keys are unchanged (see collector.config.Role). 4: a CPU trial's peak_memory_bytes is its peak
# anonymous memory (peak_memory_kind host_anon), no longer ru_maxrss (host_rss), which counts the mapped files of
# the shared libraries and moves with the page cache; adds peak_rss_bytes (ru_maxrss, on every row) and
# peak_file_bytes (the file-backed part at the anonymous peak). Earlier CPU rows move their ru_maxrss to
# peak_rss_bytes, and their peak_memory_bytes becomes empty: the two kinds are never compared as one metric.
# 5: the project a command ran in (collector.project.PROJECT_COLUMNS): its repository, commit and whether the
# work tree had uncommitted changes; earlier rows have none (stepwatch_git_sha was stepwatch's own commit).
# 6: the user's training script as a benchmark: script_args and nproc, two series dimensions (every earlier row
# had none and one process; series keys are unchanged).
# 7: the machine's state during the measured steps (collector.trial.machine): throttled and shared flags with why,
# the CPU's frequency, quota throttling, steal and other processes' load; the GPUs' clocks, power, temperature,
# clock event reasons, ECC and MIG mode, other compute processes and energy. Earlier rows have none. And what a
# price covers (price_covers), or why a run has none (price_note).
# 8: a script's time to its first step is its own start-up (startup_script_s), no longer compile_s, which holds what
# the framework reports it compiled (torch.compile's account) or nothing; the machine's flags are empty where they
# were not read. Earlier script rows move compile_s to startup_script_s; earlier rows whose GPU state was not read
# (extras.gpu_state_missing) or whose host load was not (no host_other_cpu) have the flags they could not have set
# emptied, unless their note says they were set.
# 9: numerics beside speed: the deterministic dimension (every earlier row ran the frameworks' default kernels:
# off; series keys are unchanged), and time to a target quality (steps_to_target, time_to_target_s, target_loss)
# with the quality a script reports (quality, quality_name); whose price a row was costed at (price_whose) and how far
# it is trusted (price_confidence). Earlier rows have none.
# 10: sequence_length and attention, two series dimensions (earlier rows ran 0, the preset's, and auto; series keys are
# unchanged), the attention kernel that ran (attention_kernel; earlier rows have none), and precision fp8. 11: experts,
# a series dimension (earlier rows ran auto; keys unchanged), and the experts kernel that ran (or none). 12: routing
# balance of a model with experts (collector.trial.routing): routing_max_load, routing_idle_experts; earlier rows none.
# 13: results another tool measured (collector/imports): imported_from, imported_metric and imported_better, series
# dimensions (earlier rows are stepwatch's own: empty; keys unchanged), and imported_value.
SCHEMA_VERSION = 13
KERNELS = {"attention": "attention_kernel", "experts": "experts_kernel"}  # the kernels a row records, by kind
_F64, _I64, _STR, _BOOL = pa.float64(), pa.int64(), pa.string(), pa.bool_()
_TS = pa.timestamp("us", tz="UTC")

# A profiled trial's op table, one list each with one entry per op (collector.trial.profiles): its type, name,
# where it ran (host or device), self time per step and occurrences per step.
OP_LISTS = tuple(zip(OP_COLUMNS, (_STR, _STR, _STR, _F64, _F64), strict=True))

# (column, type, group). Groups: identity, status, config, metrics, profile, cost, software, hardware, machine,
# extras.
COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("schema_version", _I64, "identity"),
    ("run_id", _STR, "identity"),
    ("suite_run_id", _STR, "identity"),
    ("suite", _STR, "identity"),
    ("series_key", _STR, "identity"),
    ("trial", _I64, "identity"),
    ("started_at", _TS, "identity"),
    ("finished_at", _TS, "identity"),
    ("host", _STR, "identity"),
    ("label", _STR, "identity"),
    ("source", _STR, "identity"),
    ("status", _STR, "status"),
    ("error_type", _STR, "status"),
    ("error_message", _STR, "status"),
    ("log_tail", _STR, "status"),
    ("exit_code", _I64, "status"),
    ("config_key", _STR, "config"),
    ("model", _STR, "config"),
    ("preset", _STR, "config"),
    ("keras_backend", _STR, "config"),
    ("device", _STR, "config"),
    ("num_devices", _I64, "config"),
    ("strategy", _STR, "config"),
    ("xla_requested", _BOOL, "config"),
    ("xla_effective", _BOOL, "config"),
    ("compiler", _STR, "config"),
    ("matmul_precision", _STR, "config"),
    ("precision", _STR, "config"),
    ("compute_dtype", _STR, "config"),
    ("variable_dtype", _STR, "config"),
    ("tf32_enabled", _BOOL, "config"),
    ("loss_scaling", _BOOL, "config"),
    ("script_args", _STR, "config"),
    ("nproc", _I64, "config"),
    ("deterministic", _BOOL, "config"),
    ("per_device_batch", _I64, "config"),
    ("global_batch", _I64, "config"),
    ("replicas", _I64, "config"),
    ("steps_per_execution", _I64, "config"),
    ("sequence_length", _I64, "config"),
    ("attention", _STR, "config"),
    ("attention_kernel", _STR, "config"),  # what ran: flash, efficient, cudnn or math (a model with attention)
    ("experts", _STR, "config"),
    ("experts_kernel", _STR, "config"),  # what ran: grouped_mm, batched_mm, eager or dense (a model with experts)
    ("loop", _STR, "config"),
    ("data", _STR, "config"),
    ("threads", _STR, "config"),
    ("intra_op_threads", _I64, "config"),
    ("inter_op_threads", _I64, "config"),
    ("steps", _I64, "config"),
    ("warmup_steps", _I64, "config"),
    ("window_steps", _I64, "config"),
    ("learning_rate", _F64, "config"),
    ("timeout_s", _F64, "config"),
    ("seed", _I64, "config"),
    *((name, _STR, "config") for name in ("imported_from", "imported_metric", "imported_better")),  # another tool's
    ("examples_per_sec", _F64, "metrics"),
    ("examples_per_sec_per_device", _F64, "metrics"),
    ("imported_value", _F64, "metrics"),  # an imported result's value of its own metric, in its unit (``unit``)
    ("unit", _STR, "metrics"),
    ("units_per_example", _I64, "metrics"),
    ("units_per_sec", _F64, "metrics"),
    ("step_time_mean_s", _F64, "metrics"),
    ("step_time_p10_s", _F64, "metrics"),
    ("step_time_p50_s", _F64, "metrics"),
    ("step_time_p90_s", _F64, "metrics"),
    ("step_time_stderr_s", _F64, "metrics"),
    ("step_time_jitter_s", _F64, "metrics"),
    ("measured_steps", _I64, "metrics"),
    ("measured_s", _F64, "metrics"),
    ("startup_s", _F64, "metrics"),
    *((startup_column(phase), _F64, "metrics") for phase in STARTUP_PHASES),
    ("compile_s", _F64, "metrics"),
    ("compile_cache", _STR, "metrics"),  # with --compile-cache: cold (it compiled) or warm (it found its step)
    ("warmup_s", _F64, "metrics"),
    ("wall_s", _F64, "metrics"),
    ("first_loss", _F64, "metrics"),
    ("final_loss", _F64, "metrics"),
    ("loss_finite", _BOOL, "metrics"),
    # Time to a target quality (collector.trial.measure.to_target): the training loss of a model with a target, or
    # the quality a script reports (stepwatch.quality): its name, values in order, the last, and the target.
    ("quality_name", _STR, "metrics"),
    ("quality_values", pa.list_(_F64), "metrics"),
    ("quality", _F64, "metrics"),
    ("target", _F64, "metrics"),
    ("steps_to_target", _I64, "metrics"),
    ("time_to_target_s", _F64, "metrics"),
    ("peak_memory_bytes", _I64, "metrics"),
    ("peak_memory_kind", _STR, "metrics"),
    ("peak_rss_bytes", _I64, "metrics"),
    ("peak_file_bytes", _I64, "metrics"),
    ("routing_max_load", _F64, "metrics"),  # the busiest expert's tokens over an even share, worst layer
    ("routing_idle_experts", _I64, "metrics"),  # experts, over all layers, that got no token
    ("flops_per_example", _F64, "metrics"),
    ("achieved_tflops", _F64, "metrics"),
    ("peak_tflops", _F64, "metrics"),
    ("peak_tflops_source", _STR, "metrics"),
    ("mfu", _F64, "metrics"),
    ("max_per_device_batch", _I64, "metrics"),
    ("max_batch_ended", _STR, "metrics"),  # how --find-max-batch ended: "out of memory at batch 1536", ...
    ("compiled_flops", _F64, "metrics"),
    ("compiled_bytes_accessed", _F64, "metrics"),
    ("compiled_transcendentals", _F64, "metrics"),
    ("compiled_memory_bytes", _I64, "metrics"),
    ("step_compilations", _I64, "metrics"),
    ("hlo_instructions", _I64, "metrics"),
    ("hlo_fusions", _I64, "metrics"),
    ("hlo_custom_calls", _I64, "metrics"),
    ("graph_ops", _I64, "metrics"),
    ("compiled_graphs", _I64, "metrics"),
    ("graph_breaks", _I64, "metrics"),
    ("generated_kernels", _I64, "metrics"),
    ("window_step_times_s", pa.list_(_F64), "metrics"),
    ("window_losses", pa.list_(_F64), "metrics"),
    # A profiled trial (``stepwatch run --profile``): its op table (OP_LISTS, one entry per op), the steps recorded,
    # the wall time of one of them under the profiler, and where its raw profile is.
    *((name, pa.list_(dtype), "profile") for name, dtype in OP_LISTS),
    ("profile_steps", _I64, "profile"),
    ("profile_step_time_s", _F64, "profile"),
    ("profile_uri", _STR, "profile"),
    ("price_key", _STR, "cost"),
    ("price_per_device_hour", _F64, "cost"),
    ("price_source", _STR, "cost"),
    ("price_date", _STR, "cost"),
    ("price_covers", _STR, "cost"),  # what the price pays for: instance, instance share, device only
    ("price_note", _STR, "cost"),  # why a run has no cost (its hardware matches no entry of the catalog)
    ("price_whose", _STR, "cost"),  # stepwatch's catalog, your catalog, your own price, --price-per-hour
    ("price_confidence", _STR, "cost"),  # the entry's confidence (high, medium, low), and "provisional"
    ("cost_usd", _F64, "cost"),
    ("cost_per_1m_examples_usd", _F64, "cost"),
    ("gpu_wh_per_1m_examples", _F64, "cost"),
    ("tf_version", _STR, "software"),
    ("tf_git_version", _STR, "software"),
    ("keras_version", _STR, "software"),
    ("keras_hub_version", _STR, "software"),
    ("jax_version", _STR, "software"),
    ("jaxlib_version", _STR, "software"),
    ("torch_version", _STR, "software"),
    ("numpy_version", _STR, "software"),
    ("python_version", _STR, "software"),
    ("cuda_build_version", _STR, "software"),
    ("cudnn_build_version", _STR, "software"),
    ("cuda_runtime_version", _STR, "software"),
    ("cudnn_runtime_version", _STR, "software"),
    ("driver_version", _STR, "software"),
    ("xla_flags", _STR, "software"),
    ("tf_env", _STR, "software"),
    ("container_image", _STR, "software"),
    ("package_set", _STR, "software"),  # every distribution installed, JSON name -> version (alerts verify)
    ("stepwatch_version", _STR, "software"),
    ("stepwatch_git_sha", _STR, "software"),
    ("model_hash", _STR, "software"),
    ("project_repository", _STR, "software"),
    ("project_commit", _STR, "software"),
    ("project_dirty", _BOOL, "software"),  # a user's model: SHA-256 (16 hex digits) of its source file
    ("os", _STR, "hardware"),
    ("accelerator", _STR, "hardware"),
    ("accelerator_count", _I64, "hardware"),
    ("accelerator_memory_bytes", _I64, "hardware"),
    ("compute_capability", _STR, "hardware"),
    ("cpu_model", _STR, "hardware"),
    ("cpu_cores", _I64, "hardware"),
    ("host_memory_bytes", _I64, "hardware"),
    ("runner_label", _STR, "hardware"),
    # The machine during the measured steps (collector.trial.machine): empty where it was not read.
    ("throttled", _BOOL, "machine"),
    ("shared", _BOOL, "machine"),
    ("machine_note", _STR, "machine"),
    ("cpu_freq_mhz", _F64, "machine"),
    ("cpu_governor", _STR, "machine"),
    ("cpu_throttled_s", _F64, "machine"),
    ("host_other_cpu", _F64, "machine"),  # cores other processes kept busy, on average
    ("host_steal_cpu", _F64, "machine"),  # cores the hypervisor took (steal), on average
    ("gpu_sm_clock_mhz", _F64, "machine"),
    ("gpu_max_sm_clock_mhz", _F64, "machine"),
    ("gpu_mem_clock_mhz", _F64, "machine"),
    ("gpu_power_limit_w", _F64, "machine"),
    ("gpu_power_w", _F64, "machine"),
    ("gpu_temp_c", _F64, "machine"),
    ("gpu_clock_reasons", _STR, "machine"),
    ("gpu_thermal_held_s", _F64, "machine"),
    ("gpu_power_held_s", _F64, "machine"),
    ("gpu_ecc", _BOOL, "machine"),
    ("gpu_mig", _BOOL, "machine"),
    ("gpu_other_processes", _I64, "machine"),
    ("gpu_energy_j", _F64, "machine"),
    ("extras", _STR, "extras"),
)

SCHEMA = pa.schema([pa.field(name, dtype) for name, dtype, _ in COLUMNS]).with_metadata(
    {"stepwatch_schema_version": str(SCHEMA_VERSION)}
)
COLUMN_NAMES = frozenset(SCHEMA.names)
# The software a run was measured with: the axes versions are compared along (never part of the series key).
VERSION_COLUMNS = ("tf_version", "keras_version", "keras_hub_version", "jax_version", "torch_version", "python_version",
                   "cuda_build_version", "cudnn_build_version", "cuda_runtime_version", "cudnn_runtime_version",
                   "driver_version", "container_image", "stepwatch_git_sha", "project_commit")  # fmt: skip


# A file missing one of these (or with a null in the first five) is not a stepwatch results file.
REQUIRED = ("run_id", "suite_run_id", "config_key", "status", "model", "trial", "started_at", "device")
NOT_NULL = REQUIRED[:5]
# Columns renamed by a migration: former name -> (name, the first schema version with the new name).
RENAMED = {"backend": ("device", 3)}


class SchemaError(ValueError):
    """A results table that cannot be brought to the current schema, in one line."""


def series_key(config_key: str, accelerator: str | None) -> str:
    """What must match for two rows to be comparable: the config plus the accelerator product name."""
    return hashlib.sha256(f"{config_key}|{accelerator or ''}".encode()).hexdigest()[:16]


def _merge_extras(current: str | None, extra: Mapping[str, Any]) -> str | None:
    if not extra:
        return current
    merged = json.loads(current) if current else {}
    merged.update(extra)
    return json.dumps(merged, sort_keys=True, default=str)


def to_table(rows: list[Mapping[str, Any]]) -> pa.Table:
    """Rows to an Arrow table of SCHEMA; keys outside the schema are folded into ``extras`` (JSON)."""
    normalised = []
    for row in rows:
        out = {name: row.get(name) for name in SCHEMA.names}
        out["extras"] = _merge_extras(out["extras"], {k: v for k, v in row.items() if k not in COLUMN_NAMES})
        out["schema_version"] = SCHEMA_VERSION
        if out["config_key"] and not out["series_key"]:
            out["series_key"] = series_key(out["config_key"], out["accelerator"])
        normalised.append(out)
    return pa.Table.from_pylist(normalised, schema=SCHEMA)


def _add_series_key(table: pa.Table) -> pa.Table:
    accelerators = table.column("accelerator").to_pylist() if "accelerator" in table.column_names else None
    keys = table.column("config_key").to_pylist()
    values = [series_key(k, accelerators[i] if accelerators else None) for i, k in enumerate(keys)]
    if "series_key" in table.column_names:
        table = table.drop_columns(["series_key"])
    return table.append_column("series_key", pa.array(values, _STR))


def _keras_backends(table: pa.Table) -> pa.Table:
    """Before Keras backends every run was a TensorFlow run on a ``backend`` (now ``device``), and jit_compile
    was XLA when it took effect."""
    table = table.rename_columns([RENAMED[n][0] if n in RENAMED else n for n in table.column_names])
    # keras_backend (tensorflow) is filled in conform, like every added dimension (config.ADDED_DIMENSIONS).
    if "compiler" not in table.column_names and "xla_effective" in table.column_names:
        effective = table.column("xla_effective").cast(_BOOL)
        table = table.append_column("compiler", pc.if_else(effective, "xla", "none"))
    return table


def _anonymous_memory(table: pa.Table) -> pa.Table:
    """A CPU row's peak memory was ru_maxrss before schema 4: it moves to peak_rss_bytes, where it keeps its
    meaning, and peak_memory_bytes (now the peak anonymous memory) is left empty for it."""
    if "peak_memory_bytes" not in table.column_names:
        return table
    n = table.num_rows
    kind = table.column("peak_memory_kind") if "peak_memory_kind" in table.column_names else pa.nulls(n, _STR)
    device = table.column("device") if "device" in table.column_names else pa.nulls(n, _STR)
    # A row that does not say its kind was measured the only way there was: ru_maxrss on a CPU.
    rss = pc.or_kleene(pc.equal(kind, RSS_KIND), pc.and_kleene(pc.is_null(kind), pc.equal(device, "cpu")))
    rss = pc.fill_null(rss, False)
    peak = table.column("peak_memory_bytes").cast(_I64)
    moved = pc.if_else(rss, peak, pa.nulls(n, _I64))
    kept = pc.if_else(rss, pa.nulls(n, _I64), peak)
    table = table.set_column(table.column_names.index("peak_memory_bytes"), "peak_memory_bytes", kept)
    if "peak_rss_bytes" in table.column_names:
        moved = pc.coalesce(table.column("peak_rss_bytes").cast(_I64), moved)
        table = table.drop_columns(["peak_rss_bytes"])
    return table.append_column("peak_rss_bytes", moved)


def _script_startup_and_unread_flags(table: pa.Table) -> pa.Table:
    """Schema 7 to 8 (see SCHEMA_VERSION): a script row's compile_s was its time to its first step; a flag that was
    not read was written false."""
    n = table.num_rows
    column = {name: table.column(name) for name in table.column_names}
    if "compile_s" in column and "loop" in column:
        script = pc.fill_null(pc.equal(column["loop"], "script"), False)
        first = column["compile_s"].cast(_F64)
        table = table.set_column(table.column_names.index("compile_s"), "compile_s",
                                 pc.if_else(script, pa.nulls(n, _F64), first))  # fmt: skip
        table = table.append_column(startup_column("script"), pc.if_else(script, first, pa.nulls(n, _F64)))
    note = column.get("machine_note", pa.nulls(n, _STR)).cast(_STR)
    extras = column.get("extras", pa.nulls(n, _STR)).cast(_STR)
    gpu_unread = pc.fill_null(pc.match_substring(extras, '"gpu_state_missing"'), False)
    host_unread = pc.is_null(column["host_other_cpu"]) if "host_other_cpu" in column else pa.array([True] * n, _BOOL)
    unread = {"throttled": gpu_unread, "shared": pc.or_(gpu_unread, host_unread)}
    for flag, not_read in unread.items():
        if flag not in table.column_names:
            continue
        said = pc.fill_null(pc.match_substring(note, f"{flag}: "), False)
        values = table.column(flag).cast(_BOOL)
        emptied = pc.if_else(pc.and_(not_read, pc.invert(said)), pa.nulls(n, _BOOL), values)
        table = table.set_column(table.column_names.index(flag), flag, emptied)
    return table


# MIGRATIONS[v] turns a table of schema version v into version v + 1. A version that only added columns has none: they
# are added empty, an added dimension with its default (``conform``).
MIGRATIONS: dict[int, Callable[[pa.Table], pa.Table]] = {
    1: _add_series_key, 2: _keras_backends, 3: _anonymous_memory, 7: _script_startup_and_unread_flags}  # fmt: skip


def _compatible(actual: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether a column of type ``actual`` can be cast to ``wanted`` without reinterpreting its values."""
    if pa.types.is_null(actual) or actual == wanted:
        return True
    if pa.types.is_list(wanted):
        return (pa.types.is_list(actual) or pa.types.is_large_list(actual)) and _compatible(
            actual.value_type, wanted.value_type
        )
    if pa.types.is_floating(wanted):
        return pa.types.is_floating(actual) or pa.types.is_integer(actual)
    if pa.types.is_integer(wanted):
        return pa.types.is_integer(actual)
    if pa.types.is_string(wanted):
        return pa.types.is_string(actual) or pa.types.is_large_string(actual) or pa.types.is_dictionary(actual)
    if pa.types.is_timestamp(wanted):
        return pa.types.is_timestamp(actual)
    return False


def _file_version(table: pa.Table) -> int:
    versions = pc.unique(table.column("schema_version").drop_null()).to_pylist()
    if len(versions) > 1:
        raise SchemaError(f"rows of several schema versions in one file ({', '.join(map(str, sorted(versions)))})")
    if not versions:
        raise SchemaError("schema_version is empty")
    return int(versions[0])


def conform(table: pa.Table) -> pa.Table:
    """Check a results table and bring it to SCHEMA: migrate older versions, cast compatible types, fill
    absent optional columns with nulls and fold unknown columns into ``extras``. Raises SchemaError."""
    if "schema_version" not in table.column_names:
        raise SchemaError("not a stepwatch results file (no schema_version column)")
    if not pa.types.is_integer(table.schema.field("schema_version").type):
        raise SchemaError(f"column schema_version has type {table.schema.field('schema_version').type}, expected int64")
    written = (table.schema.metadata or {}).get(b"stepwatch_schema_version", str(SCHEMA_VERSION).encode())
    version = _file_version(table) if table.num_rows else int(written)
    former = {new: old for old, (new, since) in RENAMED.items() if version < since}
    missing = [former.get(name, name) for name in REQUIRED if former.get(name, name) not in table.column_names]
    if missing:
        raise SchemaError(f"required column(s) missing: {', '.join(missing)}")
    if version > SCHEMA_VERSION:
        raise SchemaError(f"written by a newer stepwatch (schema {version}, this one reads up to {SCHEMA_VERSION})")
    if version < 1:
        raise SchemaError(f"schema_version {version} does not exist")
    types = {name: dtype for name, dtype, _ in COLUMNS}
    for field in table.schema:
        if field.name in types and not _compatible(field.type, types[field.name]):
            raise SchemaError(f"column {field.name} has type {field.type}, expected {types[field.name]}")
    for name in NOT_NULL:
        nulls = table.column(name).null_count
        if nulls:
            raise SchemaError(f"column {name} has {nulls} empty value(s)")
    for step in range(version, SCHEMA_VERSION):
        table = MIGRATIONS[step](table) if step in MIGRATIONS else table
    for name, default in ADDED_DIMENSIONS.items():  # rows from before a dimension existed had its default
        if name in table.column_names:
            filled = pc.fill_null(table.column(name).cast(types[name]), default)
            table = table.set_column(table.column_names.index(name), name, filled)
        else:
            table = table.append_column(name, pa.array([default] * table.num_rows, types[name]))
    present = {name: i for i, name in enumerate(table.column_names)}
    unknown = [name for name in present if name not in types]
    columns = []
    for name in SCHEMA.names:
        if name == "schema_version":
            columns.append(pa.array(np.full(table.num_rows, SCHEMA_VERSION), _I64))
        elif name in present:
            columns.append(table.column(present[name]))
        else:
            columns.append(pa.nulls(table.num_rows, types[name]))
    try:
        columns = [c if c.type == types[name] else c.cast(types[name]) for c, name in zip(columns, SCHEMA.names)]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise SchemaError(f"values that do not fit the schema: {str(error).splitlines()[0]}") from None
    out = pa.Table.from_arrays(columns, schema=SCHEMA)
    if unknown:
        extra_rows = table.select(unknown).to_pylist()
        extras = [_merge_extras(current, extra) for current, extra in zip(out.column("extras").to_pylist(), extra_rows)]
        out = out.set_column(SCHEMA.get_field_index("extras"), "extras", pa.array(extras, _STR))
    return out


# What an "ok" row must hold: these throughput, step-time and duration columns positive and finite (a null is
# allowed where the measurement does not exist), one of PRESENT_WHEN_OK (what stepwatch measured, or what another
# tool did), every judged metric finite.
POSITIVE_WHEN_OK = (
    "examples_per_sec",
    "imported_value",
    "wall_s",
    "examples_per_sec_per_device",
    "units_per_sec",
    "step_time_mean_s",
    "step_time_p10_s",
    "step_time_p50_s",
    "step_time_p90_s",
    "compile_s",
    "startup_s",
)
PRESENT_WHEN_OK = POSITIVE_WHEN_OK[:2]
# Two rows with one run_id are the same measurement when these agree; anything else about a run (extras, derived
# and environment columns) may be filled differently by a migration and is not compared.
IDENTITY_COLUMNS = (
    "suite_run_id", "config_key", "trial", "label", "status", "started_at", "finished_at", "wall_s",
    "examples_per_sec", "step_time_p50_s", "first_loss", "final_loss", "peak_memory_bytes", "imported_value",
)  # fmt: skip


def hostile_values(table: pa.Table) -> list[str | None]:
    """Per row of a conformed table: why its values cannot be a measurement (an ok row with a non-finite, zero,
    negative or missing throughput, step time or duration, or a non-finite metric), or None."""
    ok = pc.fill_null(pc.equal(table.column("status"), "ok"), False)
    judged = [m for m in METRICS if pa.types.is_floating(SCHEMA.field(m).type)]
    bad_any = pa.array(np.zeros(table.num_rows, dtype=bool))
    checks = {}
    for name in dict.fromkeys((*POSITIVE_WHEN_OK, *judged)):
        values = table.column(name)
        bad = pc.invert(pc.fill_null(pc.is_finite(values), True))
        if name in POSITIVE_WHEN_OK:
            bad = pc.or_(bad, pc.fill_null(pc.less_equal(values, 0), False))
        checks[name] = pc.and_(ok, bad)
        bad_any = pc.or_(bad_any, checks[name])
    absent = pc.and_(ok, functools.reduce(pc.and_, (pc.is_null(table.column(n)) for n in PRESENT_WHEN_OK)))
    checks[" or ".join(PRESENT_WHEN_OK)] = absent
    bad_any = pc.or_(bad_any, absent)
    reasons: list[str | None] = [None] * table.num_rows
    for i in np.flatnonzero(bad_any.to_numpy(zero_copy_only=False)):
        found = [name for name, bad in checks.items() if bad[i].as_py()]
        reasons[i] = "; ".join(
            f"{name} is {table.column(name)[i].as_py()!r}" if name in table.column_names else f"{name} is missing"
            for name in found
        ).replace("is None", "is missing")
    return reasons


def hostile_sql() -> str:
    """``hostile_values`` as a SQL predicate over the same columns: true for a row that cannot be a measurement
    (the bulk path of an ingest sends a file with such a row to the per-file path, which names the reason)."""
    judged = [m for m in METRICS if pa.types.is_floating(SCHEMA.field(m).type)]
    terms = []
    for name in dict.fromkeys((*POSITIVE_WHEN_OK, *judged)):
        bad = [f'NOT isfinite(CAST("{name}" AS DOUBLE))'] + ([f'"{name}" <= 0'] if name in POSITIVE_WHEN_OK else [])
        terms.append(f"coalesce({' OR '.join(bad)}, false)")
    terms.append("(" + " AND ".join(f'"{name}" IS NULL' for name in PRESENT_WHEN_OK) + ")")
    return f"(coalesce(status = 'ok', false) AND ({' OR '.join(terms)}))"


def write_parquet(table: pa.Table, sink: str | os.PathLike | BinaryIO) -> None:
    """How stepwatch writes a results file (the collector, synthetic history, exports)."""
    pq.write_table(table, sink, compression="zstd")


def _footer(data: bytes) -> bytes:
    size = int.from_bytes(data[-8:-4], "little") if len(data) >= 12 else 0
    return data[-8 - size : -8] if data[-4:] == b"PAR1" and 0 < size <= len(data) - 12 else b""


@functools.cache
def schema_fingerprint() -> bytes:
    """The start of the footer of a parquet file that holds exactly SCHEMA as ``write_parquet`` writes it: the
    file's format version and its encoded schema, up to the row count that follows them. Two files with the
    same start have the same columns, types and nesting."""
    footers = []
    for rows in (1, 2):
        sink = pa.BufferOutputStream()
        write_parquet(pa.Table.from_arrays([pa.nulls(rows, f.type) for f in SCHEMA], schema=SCHEMA), sink)
        footers.append(_footer(sink.getvalue().to_pybytes()))
    return os.path.commonprefix(footers)


def has_current_schema(data: bytes) -> bool:
    """Whether a file's footer says it holds exactly this stepwatch's SCHEMA (read from the file's last bytes,
    without decoding it); its rows' schema_version and values are still to be checked."""
    return _footer(data).startswith(schema_fingerprint())
