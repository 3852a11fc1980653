"""An asv results folder (``results/``, the version 2 layout): ``benchmarks.json`` for each benchmark's type, unit
and parameters, and per machine (``<machine>/machine.json``) one file per commit and environment
(``<commit>-<env>.json``). Each file is one run: its commit, date, machine and environment (Python, requirements);
each benchmark and combination of parameters a result, whose ``samples`` (``asv run --record-samples``) are its
trials, else its one value. A benchmark that failed (a null result) is a failed trial. asv judges every benchmark
lower-is-better (``asv compare`` calls an increase a regression): a ``track_`` benchmark's direction is asked for
(``--better``) unless its unit implies one."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from stepwatch.collector.imports.rows import ImportRefused, Result, Run, implied_better
from stepwatch.collector.imports.source import file_digest, load_json, number, when

NAME = "asv"
UNITS = {"seconds": "s", "bytes": "bytes"}


def is_results(path: Path) -> bool:
    """An asv results folder: benchmarks.json beside machine folders."""
    return path.is_dir() and (path / "benchmarks.json").is_file() and any(path.glob("*/machine.json"))


def result_files(path: Path) -> list[Path]:
    return sorted(f for f in path.glob("*/*.json") if f.name != "machine.json")


def read(path: Path, data: Any) -> list[Run]:
    """One result file (``path``: results/<machine>/<commit>-<env>.json, ``data`` its JSON)."""
    folder = path.parent.parent
    if not (folder / "benchmarks.json").is_file():
        raise ImportRefused("no benchmarks.json two folders up: import the asv results folder")
    benchmarks = load_json(folder / "benchmarks.json")
    machine = load_json(path.parent / "machine.json") if (path.parent / "machine.json").is_file() else {}
    if not isinstance(data, dict) or data.get("version") != 2 or not isinstance(data.get("results"), dict):
        raise ImportRefused("not an asv result file of the version 2 layout")
    started = when(data.get("date"))
    if started is None:
        raise ImportRefused("no date: asv writes the commit's date")
    params = data.get("params") or {}
    requirements = data.get("requirements") or {}
    run = Run(
        NAME, file_digest(path), started, commit=data.get("commit_hash"),
        host=machine.get("machine") or params.get("machine"), runner=machine.get("machine") or params.get("machine"),
        cpu_model=machine.get("cpu"), cpu_cores=int(machine["num_cpu"]) if str(machine.get("num_cpu", "")).isdigit()
        else None, os=machine.get("os"), device="cpu", accelerator=machine.get("cpu") or None,
        versions={"python_version": str(params["python"])} if "python" in params and len(str(params["python"])) < 12
        else {},
        packages={str(k): str(v) for k, v in requirements.items()} or None,
        extras={"asv_env": data.get("env_name")},
    )  # fmt: skip
    columns = data.get("result_columns") or ["result", "params"]
    for name, entry in sorted(data["results"].items()):
        meta = benchmarks.get(name) or {}
        found = dict(zip(columns, entry if isinstance(entry, list) else [entry]))
        kind, unit = meta.get("type", name.rsplit(".", 1)[-1].split("_", 1)[0]), meta.get("unit", "unit")
        unit = UNITS.get(unit, unit)
        better = "lower" if kind in ("time", "mem", "peakmem") else implied_better(name, unit)
        combos = list(itertools.product(*(found.get("params") or meta.get("params") or [])))
        results = found.get("result")
        if not isinstance(results, list):
            results = [results]
        if not combos:
            combos = [()]
        if len(results) != len(combos):
            raise ImportRefused(f"{name}: {len(results)} result(s) for {len(combos)} combination(s) of parameters")
        samples = found.get("samples") or [None] * len(combos)
        names = meta.get("param_names") or []
        for combo, value, sample in zip(combos, results, samples):
            text = ", ".join(f"{n}={v}" for n, v in zip(names, combo)) if names else ", ".join(map(str, combo))
            result = Result(name, kind, unit, [], better, text)
            if value is None or (isinstance(value, float) and value != value):  # asv's null and NaN: it failed
                result.failed.append("asv recorded no result (the benchmark failed or was skipped)")
            elif isinstance(sample, list) and sample:
                result.values = [number(v) if number(v) is not None else v for v in sample]
            else:
                result.values = [number(value) if number(value) is not None else value]
            run.results.append(result)
    return [run]
