"""Config fields and their roles: every list of series dimensions is derived from the dataclass, so a new
dimension is one field (plus its schema column). The test adds one to a copy of the source, as a developer
would, and finds it in the CLI flags, the series key and table, the selection language, the repro command
and the dashboard's dimension pickers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stepwatch.collector.config import (
    FIELD_NAMES,
    ROLES,
    SERIES_DIMENSIONS,
    SERIES_FIELDS,
    BenchmarkConfig,
    ConfigError,
    config_columns,
    config_from_row,
    parse_bool,
    repro_flags,
)
from stepwatch.collector.schema import COLUMN_NAMES
from tests.conftest import edited_source, probe_edited

NEW_FIELD = '    zone: str = _field("a", series=True, flag="--zone", choices=("a", "b"), help="test-only")\n'
NEW_COLUMN = '    ("zone", _STR, "config"),\n'

PROBE = textwrap.dedent(
    """
    import json, sys
    from datetime import UTC, datetime
    from pathlib import Path

    import stepwatch.collector
    from streamlit.testing.v1 import AppTest

    from stepwatch.collector.analysis import comparison
    from stepwatch.collector.output.text import repro_command
    from stepwatch.collector.config import BenchmarkConfig, SERIES_DIMENSIONS, config_columns
    from stepwatch.collector.schema import to_table
    from stepwatch.collector.store.database import StoreReader
    from stepwatch.collector.store.ingest import ingest
    from stepwatch.collector.store.selection import Selection
    import pyarrow.parquet as pq

    root = Path(sys.argv[1])
    rows = []
    for label, rate in (("before", 100.0), ("after", 90.0)):
        config = BenchmarkConfig(model="bilstm", zone="b")
        for trial in range(3):
            rows.append({
                "run_id": f"{label}-{trial}", "suite_run_id": label, "suite": "smoke", "trial": trial,
                "started_at": datetime(2026, 11, 1 if label == "before" else 2, tzinfo=UTC), "status": "ok",
                "source": "real", "label": label, "config_key": config.key, **config_columns(config),
                "accelerator": "Test CPU", "examples_per_sec": rate + trial, "tf_version": "2.21.0",
            })
    (root / "results").mkdir()
    pq.write_table(to_table(rows), root / "results" / "r.parquet")
    db = root / "store.duckdb"
    ingest([str(root / "results")], db)
    with StoreReader(db) as reader:
        con = reader.connection()
        series = con.execute("SELECT zone FROM series").fetchall()
        where, params = Selection.parse("zone=b").where()
        picked = con.execute(f"SELECT count(*) FROM runs WHERE {where}", params).fetchall()[0][0]
        built = comparison.build(con, Selection.of(label="before"), Selection.of(label="after"),
                                 ["examples_per_sec"], [])
    import os
    os.environ["STEPWATCH_DB"] = str(db)
    app = Path(stepwatch.collector.__file__).parents[1] / "dashboard" / "app.py"
    at = AppTest.from_file(str(app), default_timeout=60)
    at.run()
    at.switch_page("views/history.py").run()
    at.session_state["chart_options"] = True  # the chart's options, drawn once their expander is opened
    at.run()
    colours = next(box.options for box in at.selectbox if box.label == "Series colour")
    print(json.dumps({
        "source": stepwatch.collector.__file__,
        "dimensions": list(SERIES_DIMENSIONS),
        "series_table": [s for (s,) in series],
        "selected": picked,
        "repro": repro_command(built.rows[0].series),
        "keys": [BenchmarkConfig(model="bilstm", zone=s).key for s in ("a", "b")],
        "colours": list(colours),
        "errors": [str(e.value) for e in at.exception],
    }))
    """
)


def test_field_roles_derive_the_dimension_lists() -> None:
    assert SERIES_FIELDS == tuple(name for name in FIELD_NAMES if ROLES[name].series)
    assert SERIES_DIMENSIONS == (*SERIES_FIELDS, "accelerator")
    assert "steps" not in SERIES_FIELDS and "xla" in SERIES_FIELDS
    config = BenchmarkConfig(model="bert", xla=True, per_device_batch=4)
    columns = config_columns(config)
    assert columns["xla_requested"] is True and "xla" not in columns
    assert set(columns) <= COLUMN_NAMES  # every config field has its result column
    assert config_from_row(columns) == config == config_from_row({**columns, "xla": True})
    flags = repro_flags(config)
    assert flags[:2] == ["--models", "bert"] and flags[flags.index("--xla") + 1] == "on"
    assert "--timeout" not in flags and "--learning-rate" not in flags  # how long, not what


def test_labels_tell_every_series_apart() -> None:
    plain = BenchmarkConfig(model="bert")
    assert plain.label() == "bert/tiny cpu noxla fp32 b8 fit"
    variants = [
        plain.with_changes(strategy="multi-worker", loop="ctl"),
        plain.with_changes(loop="ctl"),
        plain.with_changes(data="pipeline"),
        plain.with_changes(steps_per_execution=2),
        plain.with_changes(steps=200),  # not a series field: the same series, the same label
    ]
    labels = [c.label() for c in variants]
    assert labels[0] == "bert/tiny cpu noxla fp32 b8 ctl strategy=multi-worker"
    assert len({plain.label(), *labels[:4]}) == 5 and labels[4] == plain.label()


@pytest.mark.parametrize(("word", "value"), [("on", True), ("OFF", False), ("yes", True), ("0", False)])
def test_one_set_of_boolean_words(word: str, value: bool) -> None:
    assert parse_bool(word) is value


def test_a_boolean_that_is_not_one_names_the_field() -> None:
    with pytest.raises(ConfigError, match="xla 'maybe' is not one of off, on"):
        parse_bool("maybe", "xla")


def test_a_new_dimension_is_one_field_and_shows_everywhere(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    env = edited_source(
        tree,
        (
            ("collector/config.py", "    steps: int = _field(", NEW_FIELD),
            ("collector/schema.py", '    ("steps", _I64, "config"),\n', NEW_COLUMN),
        ),
    )

    def cli(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "stepwatch", *args]
        return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=300)

    # The CLI flag: crossed like any other, checked against the field's choices.
    one, two = (
        cli("run", "--models", "bilstm", "--dry-run"),
        cli("run", "--models", "bilstm", "--zone", "a,b", "--dry-run"),
    )
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    count = int(one.stdout.splitlines()[-1].split()[0])
    assert two.stdout.splitlines()[-1].startswith(f"{2 * count} configs")
    bad = cli("run", "--zone", "c", "--dry-run")
    assert bad.returncode == 2 and "'c' is not one of a, b" in bad.stderr

    found = probe_edited(tree, env, PROBE, str(tmp_path))
    assert "zone" in found["dimensions"] and "zone" in found["colours"]  # the dashboard's pickers
    assert found["series_table"] == ["b"] and found["selected"] == 6  # the series table and the selections
    assert found["keys"][0] != found["keys"][1]  # part of the series key
    assert "--zone b" in found["repro"]
