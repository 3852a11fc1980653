"""A metric is one row of the metric table plus one schema column (plus where it is measured): added to a copy
of the source, it is stored, summarized, compared by the CLI, offered by the Overview's picker and shown on
the Run page, with nothing else edited."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.conftest import edited_source, probe_edited

NEW_METRIC = '        Metric("energy_j", "Energy per run", "J", False, 0.03, headline=True),\n'
NEW_COLUMN = '    ("energy_j", _F64, "metrics"),\n'

PROBE = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from datetime import UTC, datetime
    from pathlib import Path

    import stepwatch.collector
    import pyarrow.parquet as pq
    from streamlit.testing.v1 import AppTest

    from stepwatch.collector.config import BenchmarkConfig, config_columns
    from stepwatch.collector.schema import to_table
    from stepwatch.collector.store.database import StoreReader
    from stepwatch.collector.store.ingest import ingest

    root = Path(sys.argv[1])
    rows = []
    for label, joules in (("before", 100.0), ("after", 120.0)):  # 20% more energy: a regression
        config = BenchmarkConfig(model="bilstm")
        for trial in range(4):
            rows.append({
                "run_id": f"{label}-{trial}", "suite_run_id": label, "suite": "smoke", "trial": trial,
                "started_at": datetime(2026, 11, 1 if label == "before" else 2, 0, trial, tzinfo=UTC),
                "status": "ok", "source": "real", "label": label, "config_key": config.key,
                **config_columns(config), "accelerator": "Test CPU", "examples_per_sec": 100.0 + trial,
                "units_per_sec": 100.0 + trial, "unit": "sequences", "energy_j": joules + trial,
                "tf_version": "2.21.0",
            })
    (root / "results").mkdir()
    pq.write_table(to_table(rows), root / "results" / "r.parquet")
    db = root / "store.duckdb"
    ingest([str(root / "results")], db)
    with StoreReader(db) as reader:
        con = reader.connection()
        stored = con.execute("SELECT count(energy_j) FROM runs").fetchall()[0][0]
        summarized = con.execute("SELECT sum(n_energy_j) FROM summaries").fetchall()[0][0]
    compare = subprocess.run(
        [sys.executable, "-m", "stepwatch", "compare", "--db", str(db), "--metric", "energy_j",
         "--baseline", "label=before", "--candidate", "label=after", "--format", "json"],
        capture_output=True, text=True,
    )
    os.environ["STEPWATCH_DB"] = str(db)
    app = str(Path(stepwatch.collector.__file__).parents[1] / "dashboard" / "app.py")
    overview = AppTest.from_file(app, default_timeout=60)
    overview.run()
    picker = next(box.options for box in overview.selectbox if box.label == "Metric")
    run = AppTest.from_file(app, default_timeout=60)
    run.switch_page("views/run.py").run()
    print(json.dumps({
        "source": stepwatch.collector.__file__,
        "stored": stored,
        "summarized": summarized,
        "compare_exit": compare.returncode,
        "compare": json.loads(compare.stdout)["rows"] if compare.stdout else compare.stderr,
        "picker": list(picker),
        "tiles": {m.label: m.value for m in run.metric},
        "errors": [str(e.value) for e in (*overview.exception, *run.exception)],
    }))
    """
)


def test_a_new_metric_is_one_row_and_one_column_and_shows_everywhere(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    env = edited_source(
        tree,
        (
            ("collector/metrics.py", '        Metric("final_loss",', NEW_METRIC),
            ("collector/schema.py", '    ("compile_s", _F64, "metrics"),\n', NEW_COLUMN),
        ),
    )
    found = probe_edited(tree, env, PROBE, str(tmp_path))
    assert found["stored"] == 8 and found["summarized"] == 8  # the store's column and its summaries
    assert found["compare_exit"] == 1, found["compare"]  # compare judges it: +20% energy is a regression
    assert [(r["metric"], r["verdict"]) for r in found["compare"]] == [("energy_j", "regression")]
    assert "Energy per run" in found["picker"]  # the Overview's metric picker
    assert found["tiles"]["Energy per run"] == "123.0 J"  # a tile of the Run page, on the latest run
