"""The rows of one run against the rows the same commands wrote before (another commit, another machine), column by
column with tests/test_rows.py's comparison: the same columns, each filled where it was filled before, equal values
for everything the configuration and the code decide, the same extras keys. Rows are paired by their label past its
first word (``h200-jax`` with ``h100-jax``: the machine's name first) and their trial.

    .venv/bin/python benchmarks/rows_match.py data/reference/h200-2026-11-26 data/reference/h100-2026-11-26

Prints each pair's differences; a ``series_key`` is checked as its own row's config key and accelerator (it differs
between two accelerators by design). Exit 1 if anything differs."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.test_rows import differences  # noqa: E402


def rows(folder: str) -> list[dict]:
    return [row for path in sorted(Path(folder).glob("*.parquet")) for row in pq.read_table(path).to_pylist()]


def main(before: str, after: str) -> int:
    old = {(row["label"].split("-", 1)[1], row["trial"]): row for row in rows(before)}
    unexpected = 0
    for row in rows(after):
        pair = (row["label"].split("-", 1)[1], row["trial"])
        was = old.get(pair)
        if was is None:
            print(f"{pair}: no row of the same commands in {before}")
            unexpected += 1
            continue
        found = differences(was, {**row, "label": was["label"]})
        unexpected += len(found)
        print(f"{pair[0]} trial {pair[1]} ({row['model']}, {row['status']}): differences {found or 'none'}")
    print(f"{len(rows(after))} rows compared; {unexpected} difference(s)")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
