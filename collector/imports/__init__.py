"""Results stepwatch did not run: another tool's benchmark output, read into result rows (``rows``) that the
store takes as its own (``stepwatch ingest``, collector/cli/ingest.py).

Each format is known by its content (``detect``) or named (``--format``); ``FORMATS`` lists them with what they
read. A source is a file, an asv results folder, a TensorBoard log folder, or a folder of such files. Each file
becomes one parquet file of result rows, named by what it was made from, so importing it again writes nothing new
and the store's ingest skips it; a file that cannot be imported is refused with its reason, and the rest goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from stepwatch.collector.imports import asv, custom, google_benchmark, mlperf, pytest_benchmark, pytorch, tensorboard
from stepwatch.collector.imports.rows import ImportRefused, Run, digest, result_rows
from stepwatch.collector.imports.source import file_digest, head, json_lines, load_json
from stepwatch.collector.schema import SchemaError, conform, write_parquet


@dataclass(frozen=True)
class Format:
    name: str
    what: str  # what of it is read, for --help and the docs
    read: Callable[[Path, Any], list[Run]]
    json: bool = True  # its files are JSON (read whole, or as JSON lines)


FORMATS = {f.name: f for f in (
    Format(pytorch.NAME, "PyTorch benchmark records (oss_ci_benchmark_v3), a list, one object or JSON lines",
           pytorch.read),
    Format(pytest_benchmark.NAME, "pytest-benchmark --benchmark-json", pytest_benchmark.read),
    Format(google_benchmark.NAME, "Google Benchmark JSON", google_benchmark.read),
    Format(asv.NAME, "an asv results folder (version 2)", asv.read),
    Format(tensorboard.NAME, "torchtitan's metrics in a TensorBoard log folder", tensorboard.read, json=False),
    Format(mlperf.NAME, "MLPerf :::MLLOG training logs", mlperf.read, json=False),
    Format(custom.GITHUB_ACTION, "github-action-benchmark's custom JSON", custom.read_github_action),
    Format(custom.BENCHER, "Bencher Metric Format JSON", custom.read_bencher),
)}  # fmt: skip
# How a JSON document shows its format, in the order asked (the first that matches).
_JSON_SHAPES = (
    (pytest_benchmark.NAME, pytest_benchmark.detect),
    (google_benchmark.NAME, google_benchmark.detect),
    (pytorch.NAME, pytorch.detect),
    (asv.NAME, lambda data: isinstance(data, dict) and "result_columns" in data and "commit_hash" in data),
    (custom.GITHUB_ACTION, custom.is_github_action),
    (custom.BENCHER, custom.is_bencher),
)
FOREIGN_SUFFIXES = (".json", ".jsonl", ".log", ".txt")


def known() -> str:
    return ", ".join(FORMATS)


def is_foreign(path: Path) -> bool:
    """Whether a local source holds another tool's output rather than stepwatch's parquet: a file that is not
    parquet, an asv results folder, a TensorBoard log folder, or a folder of such files and no parquet."""
    if path.is_file():
        return path.suffix != ".parquet"
    if not path.is_dir():
        return False
    if asv.is_results(path) or tensorboard.event_files(path):
        return True
    return not any(path.glob("*.parquet")) and any(p.suffix in FOREIGN_SUFFIXES for p in path.iterdir())


def files_of(path: Path, named: str | None) -> list[tuple[Path, str | None]]:
    """The files a source holds, each with its format where the source decides it (an asv folder's result files,
    a log folder's event files), else ``named`` (the --format given, or None: each file's own)."""
    if path.is_dir():
        if asv.is_results(path):
            return [(f, asv.NAME) for f in asv.result_files(path)]
        events = tensorboard.event_files(path)
        if events:
            return [(f, tensorboard.NAME) for f in events]
        return [(f, named) for f in sorted(path.iterdir()) if f.is_file() and f.suffix in FOREIGN_SUFFIXES]
    return [(path, named)]


def _document(path: Path) -> Any:
    """A JSON file's content: a JSON document read whole, or a JSON lines file's values, streamed."""
    start = head(path).lstrip()
    if start[:1] == b"{":
        first = start.split(b"\n", 1)[0].strip()
        if first.endswith(b"}") and b"\n" in start.strip():  # one object a line: JSON lines
            return [value for _, value in json_lines(path)]
    return load_json(path)


def detect(path: Path) -> tuple[str, Any]:
    """The format of a file, and its JSON content where it is JSON; refused where it is none stepwatch knows."""
    if path.name.startswith("events.out.tfevents."):
        return tensorboard.NAME, None
    start = head(path)
    if mlperf.detect(start):
        return mlperf.NAME, None
    if start.lstrip()[:1] not in (b"{", b"["):
        raise ImportRefused(f"not a format stepwatch knows (it reads {known()}); name one with --format")
    data = _document(path)
    for name, matches in _JSON_SHAPES:
        if matches(data):
            return name, data
    raise ImportRefused(f"JSON of no format stepwatch knows (it reads {known()}); name one with --format")


def table_of(rows: list[dict[str, Any]]) -> pa.Table:
    """Result rows as a table of the schema: the columns they hold, typed and filled out by ``conform`` (an imported
    row holds about 40 of the 250 columns: making each whole first, then a table, took most of an import's time)."""
    names = list(dict.fromkeys(name for row in rows for name in row))  # every row's (from_pylist reads the first's)
    return conform(pa.Table.from_pylist([{name: row.get(name) for name in names} for row in rows]))


@dataclass
class Converted:
    """What importing the foreign sources made: the parquet files to ingest, and the files refused, with why."""

    files: list[Path] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    read: list[tuple[str, str, int]] = field(default_factory=list)  # (file, format, rows)


def convert(
    sources: list[Path], out: Path, named: str | None = None, better: str | None = None, commit: str | None = None
) -> Converted:
    """Each file of ``sources`` as a parquet file of result rows in ``out`` (one per file, named by its format, its
    content and the answers given: made again only when one of them changed). ``named``: the format of every file
    (--format); ``better``: the direction of results whose format gives none; ``commit``: the commit of runs that
    record none."""
    done = Converted()
    out.mkdir(parents=True, exist_ok=True)
    for source in sources:
        for path, fmt in files_of(source, named):
            found = fmt or "import"
            try:
                found, data = (fmt, None) if fmt else detect(path)
                spec = FORMATS[found]
                if spec.json and data is None:
                    data = _document(path)
                target = out / f"{found}-{digest(file_digest(path), better, commit, path.name)}.parquet"
                made, undirected = [], []
                for run in spec.read(path, data):
                    run.commit = run.commit or commit
                    some, left = result_rows(run, better)
                    made += some
                    undirected += left
                if undirected:
                    more = f" and {len(undirected) - 3} more" if len(undirected) > 3 else ""
                    why = f"{len(undirected)} result(s) with no direction left out ({', '.join(undirected[:3])}{more})"
                    done.refused.append((str(path), f"{why}: pass --better higher or --better lower"))
                if not made:
                    if not undirected:
                        done.refused.append((str(path), "no result in it"))
                    continue
            except ImportRefused as error:
                done.refused.append((str(path), f"{found}: {error}"))
                continue
            except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:  # a file of the right shape
                why = " ".join(str(error).split())[:200]  # but values of the wrong kind
                done.refused.append((str(path), f"{found}: cannot be read ({type(error).__name__}: {why})"))
                continue
            done.files.append(target)
            if target.exists():  # imported before, from the same content and answers
                done.read.append((str(path), found, 0))
                continue
            partial = target.with_name(f".{target.name}.partial")
            try:
                write_parquet(table_of(made), partial)
                partial.replace(target)  # whole or not at all
            except SchemaError as error:  # a value of the wrong kind (a count written as text)
                done.files.remove(target)
                done.refused.append((str(path), f"{found}: {error}"))
                continue
            except OSError as error:  # a full disk: this file is not imported, and nothing recorded is lost
                partial.unlink(missing_ok=True)
                done.files.remove(target)
                done.refused.append((str(path), f"cannot write {target}: {error.strerror or error}"))
                continue
            done.read.append((str(path), found, len(made)))
    return done
