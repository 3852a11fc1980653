"""PyTorch's benchmark records, the ``oss_ci_benchmark_v3`` format vLLM, torchao and PyTorch's own benchmarks upload
(https://github.com/pytorch/pytorch/wiki/How-to-integrate-with-PyTorch-OSS-benchmark-database): a list of records, one
record, or JSON lines. Each record is one benchmark's model and metric, its ``metric.benchmark_values`` the repeats;
``head_sha``, ``head_branch`` and ``repo`` the commit, ``runners`` the machine, ``dependencies`` the versions, and
``timestamp`` when it ran. Records without a timestamp (the CI fills it in on upload) take the file's time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepwatch.collector.imports.rows import ImportRefused, Result, Run, digest, implied_better
from stepwatch.collector.imports.source import file_digest, modified, number, when

NAME = "pytorch-v3"
# Dependencies whose version has a column of its own.
VERSION_COLUMNS = {"pytorch": "torch_version", "torch": "torch_version", "jax": "jax_version",
                   "tensorflow": "tf_version", "cuda": "cuda_runtime_version", "python": "python_version"}  # fmt: skip


def detect(data: Any) -> bool:
    first = data[0] if isinstance(data, list) and data else data
    return isinstance(first, dict) and isinstance(first.get("metric"), dict) and "benchmark" in first


def records(data: Any) -> list[dict]:
    found = data if isinstance(data, list) else [data]
    if not all(isinstance(r, dict) for r in found):
        raise ImportRefused("a record that is not an object")
    return found


def read(path: Path, data: Any) -> list[Run]:
    key = file_digest(path)
    runs: dict[tuple, Run] = {}
    for number_, record in enumerate(records(data), 1):
        benchmark, model, metric = (record.get(k) or {} for k in ("benchmark", "model", "metric"))
        if not isinstance(metric, dict) or "benchmark_values" not in metric:
            raise ImportRefused(f"record {number_}: a record without a value (no metric.benchmark_values)")
        values = metric["benchmark_values"]
        if not isinstance(values, list):
            raise ImportRefused(f"record {number_}: metric.benchmark_values is not a list")
        runner = (record.get("runners") or [{}])[0] if isinstance(record.get("runners"), list) else {}
        extra = benchmark.get("extra_info") or {}
        started = when(record.get("timestamp"))
        run_key = (record.get("head_sha"), record.get("workflow_id"), record.get("job_id"), record.get("timestamp"),
                   runner.get("name"))  # fmt: skip
        run = runs.get(run_key)
        if run is None:
            deps = record.get("dependencies") or {}
            versions = {column: str((deps.get(name) or {}).get("version")) for name, column in VERSION_COLUMNS.items()
                        if isinstance(deps.get(name), dict) and (deps.get(name) or {}).get("version")}  # fmt: skip
            gpu = runner.get("gpu_info")
            run = runs[run_key] = Run(
                NAME, digest(key, *run_key), started or modified(path), commit=record.get("head_sha"),
                branch=record.get("head_branch"), repository=record.get("repo"), host=runner.get("name"),
                runner=runner.get("type"), cpu_model=runner.get("cpu_info"), cpu_cores=runner.get("cpu_count"),
                accelerator=gpu or runner.get("cpu_info"), accelerator_count=runner.get("gpu_count"),
                device="gpu" if gpu else None, versions=versions,
                packages={n: str(d.get("version")) for n, d in deps.items() if isinstance(d, dict) and d.get("version")}
                or None,
                extras={"time_from": "file mtime"} if started is None else {},
            )  # fmt: skip
        name, model_name = str(metric.get("name") or ""), str(model.get("name") or "")
        device = extra.get("device")
        # Its parameters: the mode and the settings of extra_info (a float there is a measurement, as torchao's
        # min_sqnr: no part of the series).
        settings = [f"{k}={v}" for k, v in sorted(extra.items()) if k != "device" and isinstance(v, str | bool | int)]
        params = " ".join(filter(None, (str(benchmark.get("mode") or ""), *settings)))
        run.results.append(Result(
            " / ".join(filter(None, (str(benchmark.get("name") or ""), model_name))), name,
            _unit(name), [number(v) if number(v) is not None else v for v in values], implied_better(name, ""),
            params, device=("gpu" if device in ("cuda", "rocm", "gpu") else "cpu" if device == "cpu" else None),
            dtype=benchmark.get("dtype"),
        ))  # fmt: skip
    return list(runs.values())


def _unit(metric: str) -> str:
    """The unit a v3 metric's name carries in parentheses (``compilation_time(s)``, ``memory_bandwidth(GB/s)``), else
    the name's own words (``tokens_per_second`` is tokens/s); "value" where it says none."""
    if metric.endswith(")") and "(" in metric:
        return metric[metric.rindex("(") + 1 : -1]
    if "_per_second" in metric or "_per_sec" in metric:
        return metric.split("_per_sec")[0] + "/s"
    return "value"
