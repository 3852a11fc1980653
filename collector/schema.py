"""The result row: one per (config, trial), wide and typed. This module owns the column list."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

SCHEMA_VERSION = 1

_F64, _I64, _STR, _BOOL = pa.float64(), pa.int64(), pa.string(), pa.bool_()
_TS = pa.timestamp("us", tz="UTC")

# (column, type, group). Groups follow DESIGN.md: identity, status, config, metrics, cost, software, hardware.
COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("schema_version", _I64, "identity"),
    ("run_id", _STR, "identity"),
    ("suite_run_id", _STR, "identity"),
    ("suite", _STR, "identity"),
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
    ("backend", _STR, "config"),
    ("num_devices", _I64, "config"),
    ("strategy", _STR, "config"),
    ("xla_requested", _BOOL, "config"),
    ("xla_effective", _BOOL, "config"),
    ("precision", _STR, "config"),
    ("compute_dtype", _STR, "config"),
    ("variable_dtype", _STR, "config"),
    ("tf32_enabled", _BOOL, "config"),
    ("loss_scaling", _BOOL, "config"),
    ("per_device_batch", _I64, "config"),
    ("global_batch", _I64, "config"),
    ("replicas", _I64, "config"),
    ("steps_per_execution", _I64, "config"),
    ("loop", _STR, "config"),
    ("data", _STR, "config"),
    ("steps", _I64, "config"),
    ("warmup_steps", _I64, "config"),
    ("window_steps", _I64, "config"),
    ("learning_rate", _F64, "config"),
    ("timeout_s", _F64, "config"),
    ("seed", _I64, "config"),
    ("examples_per_sec", _F64, "metrics"),
    ("examples_per_sec_per_device", _F64, "metrics"),
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
    ("compile_s", _F64, "metrics"),
    ("warmup_s", _F64, "metrics"),
    ("wall_s", _F64, "metrics"),
    ("first_loss", _F64, "metrics"),
    ("final_loss", _F64, "metrics"),
    ("loss_finite", _BOOL, "metrics"),
    ("peak_memory_bytes", _I64, "metrics"),
    ("peak_memory_kind", _STR, "metrics"),
    ("flops_per_example", _F64, "metrics"),
    ("achieved_tflops", _F64, "metrics"),
    ("peak_tflops", _F64, "metrics"),
    ("peak_tflops_source", _STR, "metrics"),
    ("mfu", _F64, "metrics"),
    ("max_per_device_batch", _I64, "metrics"),
    ("window_step_times_s", pa.list_(_F64), "metrics"),
    ("window_losses", pa.list_(_F64), "metrics"),
    ("price_key", _STR, "cost"),
    ("price_per_device_hour", _F64, "cost"),
    ("price_source", _STR, "cost"),
    ("price_date", _STR, "cost"),
    ("cost_usd", _F64, "cost"),
    ("cost_per_1m_examples_usd", _F64, "cost"),
    ("tf_version", _STR, "software"),
    ("tf_git_version", _STR, "software"),
    ("keras_version", _STR, "software"),
    ("keras_hub_version", _STR, "software"),
    ("numpy_version", _STR, "software"),
    ("python_version", _STR, "software"),
    ("cuda_build_version", _STR, "software"),
    ("cudnn_build_version", _STR, "software"),
    ("cuda_runtime_version", _STR, "software"),
    ("driver_version", _STR, "software"),
    ("xla_flags", _STR, "software"),
    ("tf_env", _STR, "software"),
    ("container_image", _STR, "software"),
    ("stepwatch_version", _STR, "software"),
    ("stepwatch_git_sha", _STR, "software"),
    ("os", _STR, "hardware"),
    ("accelerator", _STR, "hardware"),
    ("accelerator_count", _I64, "hardware"),
    ("accelerator_memory_bytes", _I64, "hardware"),
    ("compute_capability", _STR, "hardware"),
    ("cpu_model", _STR, "hardware"),
    ("cpu_cores", _I64, "hardware"),
    ("host_memory_bytes", _I64, "hardware"),
    ("runner_label", _STR, "hardware"),
    ("extras", _STR, "extras"),
)

SCHEMA = pa.schema([pa.field(name, dtype) for name, dtype, _ in COLUMNS]).with_metadata(
    {"stepwatch_schema_version": str(SCHEMA_VERSION)}
)
COLUMN_NAMES = frozenset(SCHEMA.names)


def to_table(rows: list[Mapping[str, Any]]) -> pa.Table:
    """Rows to an Arrow table of SCHEMA; keys outside the schema are folded into ``extras`` (JSON)."""
    normalised = []
    for row in rows:
        extra = {k: v for k, v in row.items() if k not in COLUMN_NAMES}
        out = {name: row.get(name) for name in SCHEMA.names}
        if extra:
            merged = json.loads(out["extras"]) if out["extras"] else {}
            merged.update(extra)
            out["extras"] = json.dumps(merged, sort_keys=True, default=str)
        out["schema_version"] = SCHEMA_VERSION
        normalised.append(out)
    return pa.Table.from_pylist(normalised, schema=SCHEMA)
