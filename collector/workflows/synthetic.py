"""Synthetic nightly history, for load tests of the store and the dashboard only.

Every row says ``source='synthetic-test-data'`` and the files go into a store of their own
(data/stepwatch-synthetic.duckdb), which refuses real results, as a real store refuses these.
The shape follows a real deployment: the bundled suites on a set of accelerator hosts, one file per
host per night, 3 trials a config, software versions that change over time, planted step changes at
some upgrades, 2% trial noise, rare outlier nights and rare failed trials.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from stepwatch.collector.config import config_columns
from stepwatch.collector.metrics import METRICS
from stepwatch.collector.runner.suite import load_suite
from stepwatch.collector.schema import SCHEMA, SCHEMA_VERSION, SYNTHETIC_SOURCE, series_key, write_parquet
from stepwatch.trainers import get_model

WINDOWS = 10
NOT_SYNTHESIZED = ("max_per_device_batch",)  # measured only with --find-max-batch
TF_VERSIONS = ("2.16.2", "2.17.1", "2.18.1", "2.19.0", "2.20.0", "2.21.0")
KERAS_VERSIONS = ("3.4.1", "3.6.0", "3.8.0", "3.10.0", "3.12.0", "3.15.1")
CUDA_VERSIONS = ("12.3", "12.3", "12.5.1", "12.5.1", "12.5.1", "12.8")


@dataclass(frozen=True)
class Host:
    accelerator: str
    device: str
    suite: str
    price_per_device_hour: float
    relative_speed: float  # throughput relative to an A100 on the same config


HOSTS = (
    Host("NVIDIA A100-SXM4-80GB", "gpu", "gpu-nightly", 4.10, 1.0),
    Host("NVIDIA H100 80GB HBM3", "gpu", "gpu-nightly", 12.29, 2.3),
    Host("NVIDIA H200", "gpu", "gpu-nightly", 13.0, 2.6),
    Host("Tesla V100-SXM2-16GB", "gpu", "gpu-nightly", 3.06, 0.45),
    Host("NVIDIA L4", "gpu", "gpu-nightly", 0.80, 0.3),
    Host("Tesla T4", "gpu", "gpu-nightly", 0.53, 0.15),
    Host("NVIDIA A10G", "gpu", "gpu-nightly", 1.01, 0.35),
    Host("TPU v4", "tpu", "tpu-nightly", 3.22, 1.4),
    Host("TPU v5 lite", "tpu", "tpu-nightly", 1.20, 1.0),
    Host("Synthetic Xeon 8-core", "cpu", "smoke", 0.48, 0.01),
)


def _list_array(values: np.ndarray) -> pa.ListArray:
    rows, width = values.shape
    return pa.ListArray.from_arrays(pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32)), values.ravel())


def generate(rows: int, out_dir: Path, seed: int = 0, end: datetime | None = None) -> list[Path]:
    """Write at least ``rows`` synthetic rows, one parquet file per host per night; returns the files."""
    rng = np.random.default_rng(seed)
    end = end or datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
    plans = []
    for host in HOSTS:
        suite = load_suite(host.suite)
        for config in suite.configs:
            spec = get_model(config.model)
            preset = spec.preset(config.preset, config.sequence_length)
            base = 2e13 * host.relative_speed / spec.flops_per_example(preset) * config.num_devices
            base *= {"fp32": 0.5, "tf32": 0.8}.get(config.precision, 1.0) * (1.3 if config.xla else 1.0)
            units, flops = spec.units_per_example(preset), spec.flops_per_example(preset)
            plans.append((host, config, units, flops, base, config.key, series_key(config.key, host.accelerator)))
    trials = 3
    per_night = len(plans) * trials
    nights = -(-rows // per_night)
    # One multiplicative effect per (series, version): most upgrades change nothing, some 3-10% either way.
    effects = np.where(
        rng.random((len(plans), len(TF_VERSIONS))) < 0.1, rng.choice([0.9, 0.95, 0.97, 1.03, 1.05], (len(plans), 6)), 1
    )
    effects = np.cumprod(effects, axis=1)
    out_dir.mkdir(parents=True, exist_ok=True)
    written, remaining = [], rows
    for night in range(nights):
        started = end - timedelta(days=nights - 1 - night)
        version = min(night * len(TF_VERSIONS) // nights, len(TF_VERSIONS) - 1)
        outlier_night = rng.random() < 0.02
        for host in HOSTS:
            chosen = [(i, p) for i, p in enumerate(plans) if p[0] is host]
            if remaining <= 0:
                break
            n = min(len(chosen) * trials, remaining)
            remaining -= n
            written.append(_night_file(rng, out_dir, host, chosen, trials, n, started, version, effects, outlier_night))
    return written


def _night_file(rng, out_dir, host, chosen, trials, n, started, version, effects, outlier_night) -> Path:
    suite_run_id = str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | int(rng.integers(0, 2**63))))
    index = [i for _ in range(trials) for i, _p in chosen][:n]
    plan = [p for _ in range(trials) for _i, p in chosen][:n]
    trial = [t for t in range(trials) for _ in chosen][:n]
    configs = [p[1] for p in plan]
    noise = rng.lognormal(0.0, 0.02, n) * (0.85 if outlier_night else 1.0)
    eps = np.array([p[4] for p in plan]) * effects[index, version] * noise
    failed = rng.random(n) < 0.01
    status = np.where(failed, "crash", "ok")
    batch = np.array([c.per_device_batch * c.num_devices for c in configs], dtype=np.float64)
    step = batch / eps
    windows = step[:, None] * rng.lognormal(0.0, 0.01, (n, WINDOWS))
    losses = 7.0 * np.exp(-np.linspace(0, 1, WINDOWS))[None, :] + rng.normal(0, 0.05, (n, WINDOWS))
    measured_s = step * np.array([c.steps for c in configs])
    wall = measured_s + rng.uniform(20, 60, n)
    price = host.price_per_device_hour * np.array([c.num_devices for c in configs])
    cost = price * wall / 3600
    moment = started + timedelta(minutes=float(rng.uniform(0, 30)))
    eps_ok = np.where(failed, np.nan, eps)
    columns = {
        "schema_version": np.full(n, SCHEMA_VERSION),
        "run_id": [str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i)) for i in range(n)],
        "suite_run_id": [suite_run_id] * n,
        "suite": [host.suite] * n,
        "series_key": [p[6] for p in plan],
        "trial": trial,
        "started_at": pa.array([moment] * n, pa.timestamp("us", tz="UTC")),
        "finished_at": pa.array([moment + timedelta(seconds=float(w)) for w in wall], pa.timestamp("us", tz="UTC")),
        "host": [f"synthetic-{host.device}-{host.accelerator.split()[-1].lower()}"] * n,
        "label": ["nightly"] * n,
        "source": [SYNTHETIC_SOURCE] * n,
        "status": status,
        "error_type": np.where(failed, "ProcessExit", None),
        "config_key": [p[5] for p in plan],
        "xla_effective": [c.xla for c in configs],
        "global_batch": batch.astype(np.int64),
        "replicas": [c.num_devices for c in configs],
        "examples_per_sec": eps_ok,
        "examples_per_sec_per_device": eps_ok / np.array([c.num_devices for c in configs]),
        "unit": [get_model(c.model).unit for c in configs],
        "units_per_example": [p[2] for p in plan],
        "units_per_sec": eps_ok * np.array([p[2] for p in plan]),
        "step_time_mean_s": step,
        "step_time_p10_s": np.percentile(windows, 10, axis=1),
        "step_time_p50_s": np.median(windows, axis=1),
        "step_time_p90_s": np.percentile(windows, 90, axis=1),
        "measured_s": measured_s,
        "compile_s": rng.uniform(5, 40, n),
        "startup_s": rng.uniform(8, 20, n),
        "wall_s": wall,
        "final_loss": losses[:, -1],
        "loss_finite": ~failed,
        "peak_memory_bytes": (batch * 2e7 * rng.lognormal(0, 0.005, n)).astype(np.int64),
        "flops_per_example": [p[3] for p in plan],
        "window_step_times_s": _list_array(windows),
        "window_losses": _list_array(losses),
        "price_per_device_hour": np.full(n, host.price_per_device_hour),
        "price_key": [f"synthetic-{host.accelerator.split()[-1].lower()}"] * n,
        "price_source": ["synthetic"] * n,
        "price_covers": ["instance share"] * n,
        "price_date": ["synthetic"] * n,
        "cost_usd": cost,
        "cost_per_1m_examples_usd": cost / (eps * measured_s) * 1e6,
        "tf_version": [TF_VERSIONS[version]] * n,
        "keras_version": [KERAS_VERSIONS[version]] * n,
        "cuda_build_version": [CUDA_VERSIONS[version]] * n,
        "python_version": ["3.11.9"] * n,
        "accelerator": [host.accelerator] * n,
        "accelerator_count": [c.num_devices for c in configs],
    }
    relative = eps / np.median(eps)
    for metric in METRICS.values():  # every other metric: a level that moves with the series and the version
        if metric.name not in columns and metric.name not in NOT_SYNTHESIZED:
            level = (relative if metric.higher_is_better else 1.0 / relative) / metric.scale  # about 1 unit shown
            values = level * rng.lognormal(0.0, 0.01, n)
            if pa.types.is_integer(SCHEMA.field(metric.name).type):
                values = np.round(values)
            columns[metric.name] = np.where(failed, np.nan, values)
    as_columns = [config_columns(c) for c in configs]
    for name in as_columns[0]:
        columns[name] = [row[name] for row in as_columns]
    arrays = [
        pa.array(columns[f.name], f.type, from_pandas=True) if f.name in columns else pa.nulls(n, f.type)
        for f in SCHEMA
    ]
    path = out_dir / f"{host.suite}-{started:%Y%m%d}-{host.accelerator.replace(' ', '_')}-{suite_run_id[:8]}.parquet"
    write_parquet(pa.Table.from_arrays(arrays, schema=SCHEMA), path)
    return path
