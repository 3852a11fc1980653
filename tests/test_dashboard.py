"""The dashboard under Streamlit's AppTest, against a store of real tiny-config trials collected here, and
against an empty store: every page renders, the figures carry the store's numbers, and the URL selects
what it says (hostile values are ignored with a notice)."""

from __future__ import annotations

import base64
import json
import re
import shutil
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from streamlit.testing.v1 import AppTest

from stepwatch.collector.config import BenchmarkConfig, config_columns
from stepwatch.collector.metrics import METRICS
from stepwatch.collector.outcomes import VERDICT_ORDER
from stepwatch.collector.schema import to_table, write_parquet
from stepwatch.collector.store.database import StoreReader, delta_dir, update
from stepwatch.dashboard import charts
from stepwatch.dashboard.pages import PAGES, TITLES
from tests.conftest import REPO, result_rows, stepwatch

APP = str(REPO / "dashboard" / "app.py")


def render(db: Path, page: str, monkeypatch: pytest.MonkeyPatch, **params: str) -> AppTest:
    monkeypatch.setenv("STEPWATCH_DB", str(db))
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    if page != PAGES[0].key:  # opened directly, as a link to it is
        at.switch_page(f"views/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def opened(at: AppTest, *keys: str) -> AppTest:
    """The page again with the named on-demand expanders open (``state.on_demand``), as a click opens them."""
    for key in keys:
        at.session_state[key] = True
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def figures(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def series_lines(figure: dict) -> list[str]:
    """The names of a History figure's series lines (without the marks drawn over them)."""
    return [t["name"] for t in figure["data"] if t.get("name") not in charts.MARKS]


def values(array: list | dict) -> list:
    """A plotly array from the spec: a plain list, or plotly's typed-array form {dtype, bdata}."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def query(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = StoreReader(db).connection()
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("page", TITLES)
def test_every_page_renders_on_real_results(smoke_store: Path, page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    at = render(smoke_store, page, monkeypatch)
    assert [t.value for t in at.title] == [TITLES[page]]
    for chart in at.get("plotly_chart"):  # sent plain (charts.plain): drawn once in full by the browser
        spec = json.loads(chart.proto.spec)
        assert chart.proto.theme == "" and "template" not in spec["layout"] and spec["layout"]["datarevision"]
        assert '"bdata"' not in chart.proto.spec
    # The only error a page may show is a failed trial's own (the Run page opens on the latest, timed-out one).
    assert all(e.value.startswith("timeout: ") for e in at.error) and (page == "run") == bool(at.error)


def test_empty_store_shows_the_first_run_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = render(tmp_path / "none.duckdb", "overview", monkeypatch)
    assert [t.value for t in at.title] == ["stepwatch"]
    assert "make run" in [c.value for c in at.code]


def test_overview_counts_series_and_shows_the_failed_trial(smoke_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = render(smoke_store, "overview", monkeypatch)
    series = query(smoke_store, "SELECT count(*) FROM series")[0][0]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Series"] == str(series) == "5"  # four TensorFlow configs and one on torch
    assert metrics["Series with failures"] == "1"  # bilstm XLA fp32: its latest run is the timed-out one
    table = at.dataframe[0].value
    failed = table[table["failures"].notna()]
    assert list(failed["failures"]) == ["timeout"] and list(failed["passing"]) == ["0/1"]
    # The torch series ran once: nothing earlier to compare it with, said in words.
    [torch] = [row for _, row in table.iterrows() if "keras_backend=torch" in row["series"]]
    assert [list(torch[c]) for c in ("vs_previous", "vs_baseline", "verdict")] == [["nothing earlier"]] * 3


def test_history_plots_each_series_medians_and_the_url_narrows_it(
    smoke_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = render(smoke_store, "history", monkeypatch, precision="mixed_bfloat16", xla="off")
    [figure] = figures(at)
    traces = [t for t in figure["data"] if t.get("name") not in charts.MARKS]
    assert len(traces) == 1 and traces[0]["name"].startswith("bilstm/tiny cpu noxla mixed_bfloat16 b8 fit")
    expected = query(
        smoke_store,
        "SELECT median(examples_per_sec) FROM runs WHERE precision = 'mixed_bfloat16' AND NOT xla_requested "
        "AND status = 'ok' GROUP BY suite_run_id",
    )
    assert values(traces[0]["y"]) == pytest.approx([v for (v,) in expected])
    assert at.multiselect[2].value == ["mixed_bfloat16"]  # the filter shows what the URL chose


def test_history_goes_along_the_projects_commits(smoke_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trials ran in this repository: each row has its commit, and History can put the commits on the x axis."""
    at = render(smoke_store, "history", monkeypatch, x="project_commit", precision="fp32", xla="off")
    [figure] = figures(at)
    drawn = {x for t in figure["data"] if t.get("name") not in charts.MARKS for x in values(t["x"])}
    commits = {c for (c,) in query(smoke_store, "SELECT DISTINCT project_commit FROM runs WHERE status = 'ok'")}
    assert drawn and drawn <= commits and all(re.fullmatch(r"[0-9a-f]{40}", c) for c in drawn)


def test_history_and_versions_open_on_the_precision_that_ran_last_and_a_link_picks_more(
    smoke_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first screen of one precision's lines (a line costs the browser several ms to draw), the one the
    first model on the first accelerator ran last; the others are a pick (or a link) away."""
    first = "(SELECT min(model) FROM series) AND accelerator = (SELECT min(accelerator) FROM series)"
    [(last,)] = query(smoke_store, f"SELECT precision FROM series WHERE model = {first} ORDER BY last_at DESC LIMIT 1")
    counts = dict(query(smoke_store, f"SELECT precision, count(*) FROM series WHERE model = {first} GROUP BY ALL"))
    assert len(counts) >= 2 and last == "fp32"  # the candidate's fp32 trials ran after the baseline's bf16 ones
    for page in ("history", "versions"):
        at = render(smoke_store, page, monkeypatch)
        assert [m.value for m in at.multiselect if m.label == "Precision"] == [[last]], page
    lines = series_lines(figures(render(smoke_store, "history", monkeypatch))[0])
    every = render(smoke_store, "history", monkeypatch, precision=",".join(counts))
    assert len(lines) == counts[last] and len(series_lines(figures(every)[0])) == sum(counts.values())


@pytest.mark.parametrize(
    "params",
    [
        {"precision": "<script>alert(1)</script>"},
        {"metric": "examples_per_sec; DROP TABLE runs"},
        {"model": "bilstm,../../etc/passwd", "scale": "sideways"},
        {"baseline": "x" * 500},
    ],
)
def test_hostile_url_values_are_ignored_with_a_notice(
    smoke_store: Path, params: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    at = render(smoke_store, "history", monkeypatch, **params)
    assert any("Ignored from the link" in i.value for i in at.info)
    # Every hostile value fell back to its default, so the page draws exactly the default view.
    default = render(smoke_store, "history", monkeypatch)

    def drawn(page: AppTest) -> list[tuple[str, list]]:
        return [(t.get("name"), values(t["y"])) for figure in figures(page) for t in figure["data"]]

    assert drawn(at) == drawn(default) and len(drawn(at)) >= 2


def test_compare_shows_a_forest_plot_and_verdicts_for_two_labels(
    smoke_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = render(smoke_store, "compare", monkeypatch, baseline="label=baseline", candidate="label=candidate")
    [forest] = figures(at)
    assert not at.dataframe  # the table is drawn when its expander is opened
    opened(at, "verdict_table")
    points = [(x, y) for trace in forest["data"] for x, y in zip(values(trace["x"]), values(trace["y"]))]
    assert len(points) == 1 and points[0][1].startswith("bilstm/tiny cpu noxla fp32 b8 fit on ")
    table = at.dataframe[0].value
    both = table[table["n candidate"] > 0]
    assert list(both["n baseline"]) == [2] and list(both["n candidate"]) == [2]
    assert sorted(table[table["n candidate"] == 0]["n baseline"]) == [1, 1, 2]  # bf16 without and with XLA, fp32 XLA
    assert both["verdict"].iloc[0] in ("regression", "improvement", "no change", "inconclusive")
    assert points[0][0] == pytest.approx(float(both["change"].iloc[0].rstrip("%")), abs=0.051)
    assert sorted(table["verdict"]).count("missing") == 3  # run on the baseline only
    assert both["repro"].iloc[0].startswith("stepwatch run --suite smoke --trials 5 --models bilstm")
    assert at.get("download_button")


def test_an_aa_compare_says_what_would_resolve_each_inconclusive_row_once_asked_in_one_element(
    reference_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An A/A (one release's trials split in two) is inconclusive everywhere; the line a row that says what would
    resolve it (`stepwatch compare`'s) is one element, drawn when its expander is opened, not a caption a row."""
    sides = {"baseline": "tf_version=2.21.0,trial=0|1", "candidate": "tf_version=2.21.0,trial=2"}
    at = render(reference_store, "compare", monkeypatch, **sides)
    assert at.subheader[0].value == "8 inconclusive"
    assert not at.text and not [c for c in at.caption if "examples_per_sec:" in c.value]
    [text] = opened(at, "inconclusive").text
    lines = text.value.splitlines()
    assert len(lines) == 8 and all(" examples_per_sec: " in line for line in lines)
    assert len({line.split(" examples_per_sec: ")[0] for line in lines}) == 8  # a line per series


def test_compare_reports_a_bad_selection_as_one_error(smoke_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = render(smoke_store, "compare", monkeypatch, baseline="colour=red", candidate="label=candidate")
    assert [e.value for e in at.error] == ["unknown field 'colour' in selection"]


def test_speedups_are_ratios_of_the_stores_geometric_means(smoke_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = render(smoke_store, "speedups", monkeypatch)
    xla_chart = figures(at)[0]
    bars = {trace["name"]: values(trace["y"])[0] for trace in xla_chart["data"]}
    (on, off) = query(
        smoke_store,
        "SELECT exp(avg(ln(examples_per_sec)) FILTER (WHERE xla_requested)), exp(avg(ln(examples_per_sec)) FILTER "
        "(WHERE NOT xla_requested)) FROM runs WHERE precision = 'mixed_bfloat16' AND status = 'ok'",
    )[0]
    assert bars["mixed_bfloat16"] == pytest.approx(on / off)
    # One trial a side: no interval, so the bar is drawn as not shown to be a speedup.
    [bf16] = [trace for trace in xla_chart["data"] if trace["name"] == "mixed_bfloat16"]
    assert bf16["marker"]["opacity"] == [0.4] and "interval holds 1" in bf16["customdata"][0][3]


def test_speedups_compare_each_keras_backend_with_tensorflow(
    smoke_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = render(smoke_store, "speedups", monkeypatch, kind="Keras backends vs TensorFlow")
    [backend_chart] = figures(at)
    bars = {trace["name"]: values(trace["y"]) for trace in backend_chart["data"]}
    (torch, tf) = query(
        smoke_store,
        "SELECT exp(avg(ln(examples_per_sec)) FILTER (WHERE keras_backend = 'torch')), "
        "exp(avg(ln(examples_per_sec)) FILTER (WHERE keras_backend = 'tensorflow')) FROM runs "
        "WHERE precision = 'fp32' AND NOT xla_requested AND status = 'ok'",
    )[0]
    assert list(bars) == ["torch, jit_compile off"] and bars["torch, jit_compile off"] == [pytest.approx(torch / tf)]


def test_compare_pairs_series_across_keras_backends(smoke_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = render(
        smoke_store, "compare", monkeypatch, baseline="keras_backend=tensorflow", candidate="keras_backend=torch"
    )
    table = opened(at, "verdict_table").dataframe[0].value
    both = table[(table["n candidate"] > 0) & (table["n baseline"] > 0)]
    assert len(both) == 1 and list(both["n candidate"]) == [1] and list(both["n baseline"]) == [4]
    assert both["series"].iloc[0].startswith("bilstm/tiny cpu eager fp32 b8 fit keras_backend=torch")


def test_a_link_made_before_the_device_rename_still_filters(smoke_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = render(smoke_store, "overview", monkeypatch, backend="cpu")
    assert not any("Ignored from the link" in i.value for i in at.info)
    assert at.multiselect[0].label == "Device" and at.multiselect[0].value == ["cpu"]
    gone = render(smoke_store, "overview", monkeypatch, backend="gpu")
    assert any("device='gpu'" in i.value for i in gone.info)


def test_run_page_shows_a_failed_runs_error_from_the_url(smoke_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [(run_id,)] = query(smoke_store, "SELECT run_id FROM runs WHERE status <> 'ok'")
    at = opened(render(smoke_store, "run", monkeypatch, run=run_id), "environment")
    assert at.error[0].value.startswith("timeout: Timeout trial ran past its timeout of 2 s")
    environment = at.dataframe[0].value
    assert dict(zip(environment["field"], environment["value"]))["run_id"] == run_id
    # The picker is behind its button; the line under it names the run shown, as the picker does.
    assert at.caption[0].value == at.selectbox[0].format_func(run_id) and "(?) trial 1 [timeout]" in at.caption[0].value


def test_the_forest_plot_puts_the_worst_rows_on_top_named_whole(
    reference_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2.20.0 against 2.21.0 on the reference history: inconclusive rows before improvements, drawn from the top
    (a category axis starts at the bottom, where a tall forest's first rows were below the first screen), each
    named by its series alone (one metric)."""
    at = render(reference_store, "compare", monkeypatch, baseline="tf_version=2.20.0", candidate="tf_version=2.21.0")
    [forest] = figures(at)
    table = opened(at, "verdict_table").dataframe[-1].value
    verdict = dict(zip(table["series"], table["verdict"]))
    drawn = forest["layout"]["yaxis"]["categoryarray"]
    assert forest["layout"]["yaxis"]["autorange"] == "reversed"  # names whole: tests/test_dashboard_browser.py
    order = [verdict[label] for label in drawn]  # every label is a series' name, whole
    assert order == sorted(order, key=VERDICT_ORDER.index) and len(set(order)) >= 2, order
    assert [verdict[y] for trace in forest["data"] for y in values(trace["y"])] == [t["name"] for t in forest["data"]
                                                                                   for _ in values(t["y"])]  # fmt: skip


def test_versions_draws_a_box_per_series_and_release_from_the_stores_trials(
    reference_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = render(reference_store, "versions", monkeypatch, model="bert")
    throughput = figures(at)[0]
    expected = query(
        reference_store,
        "SELECT xla_requested, tf_version, median(examples_per_sec), min(examples_per_sec), count(*) FROM runs "
        "WHERE model = 'bert' AND status = 'ok' GROUP BY ALL",
    )
    drawn = {
        (trace["name"], version): (median, low)
        for trace in throughput["data"]
        for version, median, low in zip(values(trace["x"]), values(trace["median"]), values(trace["lowerfence"]))
    }
    assert drawn == {
        (f"xla {'on' if xla else 'off'}", version): (pytest.approx(median), pytest.approx(low))
        for xla, version, median, low, _ in expected
    }
    releases = sorted({version for _, version, *_ in expected}, key=lambda v: tuple(map(int, v.split("."))))
    assert throughput["layout"]["xaxis"]["categoryarray"] == releases and len(releases) >= 4
    assert all(n >= 3 for *_, n in expected)  # the spread of at least three trials per release


def test_versions_draws_one_panel_a_tab_and_the_last_ones_metric_is_picked_in_it(
    reference_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = render(reference_store, "versions", monkeypatch, model="bert")
    assert [f["layout"]["title"]["text"] for f in figures(first)] == [METRICS["examples_per_sec"].label]
    assert not [s for s in first.selectbox if s.label == "Metric"]  # the other tabs run only once picked
    other = render(
        reference_store, "versions", monkeypatch, model="bert", panel="Another metric", also="peak_rss_bytes"
    )
    assert [f["layout"]["title"]["text"] for f in figures(other)] == [METRICS["peak_rss_bytes"].label]
    assert [s.value for s in other.selectbox if s.label == "Metric"] == ["peak_rss_bytes"]


def test_history_chart_options_apply_from_the_link_with_their_expander_closed(
    reference_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = render(reference_store, "history", monkeypatch, model="bert", x="tf_version")
    assert not [s for s in at.selectbox if s.label == "X axis"]  # drawn when "Chart: ..." is opened
    [figure] = figures(at)
    releases = {version for (version,) in query(reference_store, "SELECT DISTINCT tf_version FROM runs")}
    drawn = {v for trace in figure["data"] for v in values(trace["x"])}
    assert drawn and drawn <= releases  # along TensorFlow versions, not nights
    opened(at, "chart_options")
    assert [s.value for s in at.selectbox if s.label == "X axis"] == ["tf_version"]


def test_history_lines_are_told_apart_without_hovering(reference_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Colour by precision, which does not vary here: the lines take their colour from the model instead, their
    dash from XLA, and each is named by both."""
    at = render(reference_store, "history", monkeypatch, model="bert,transformer")
    [figure] = figures(at)
    lines = [t for t in figure["data"] if t.get("name") not in charts.MARKS]
    looks = {(t["line"]["color"], t["line"]["dash"]) for t in lines}
    assert {t["name"] for t in lines} == {
        "bert, xla off",
        "bert, xla on",
        "transformer, xla off",
        "transformer, xla on",
    }
    assert len(lines) == len(looks) == 4
    assert figure["layout"]["legend"]["title"]["text"] == "model, xla"


def test_compare_shows_a_bisects_steps_and_compares_one(
    smoke_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store holding a bisect (its steps as ``stepwatch bisect`` records them, on the smoke store's labelled
    suite runs): the Compare page lists the steps, and a step's button compares its two sides."""
    db = tmp_path / "store.duckdb"
    shutil.copyfile(smoke_store, db)
    if delta_dir(smoke_store).exists():
        shutil.copytree(delta_dir(smoke_store), delta_dir(db))
    [(series_key, baseline_id)] = query(  # the baseline's fp32 suite run: bilstm fp32 without XLA in it
        db,
        "SELECT DISTINCT series_key, suite_run_id FROM runs WHERE label = 'baseline' AND precision = 'fp32' "
        "AND NOT xla_requested",
    )
    [(candidate_id,)] = query(db, "SELECT DISTINCT suite_run_id FROM runs WHERE label = 'candidate'")
    applied = json.dumps([["keras", "3.14.0", "3.15.1"], ["tensorboard", "2.20.0", None]])
    common = ["b1", datetime(2026, 11, 23, tzinfo=UTC), "keras==3.14.0", "keras==3.15.1"]
    with update(db) as con:
        con.executemany(
            "INSERT INTO bisect_steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [[*common[:1], 0, *common[1:], "the whole upgrade", applied, "reproduces", "", series_key,
              "examples_per_sec", "regression", 0.8, 0.75, 0.85, baseline_id, candidate_id],
             [*common[:1], 1, *common[1:], "the first 1 of 2 groups", applied, "skipped", "cannot install keras",
              None, None, None, None, None, None, None, None]],
        )  # fmt: skip
    at = render(db, "compare", monkeypatch)
    [steps] = [e for e in at.expander if e.label == "Bisects in this store: 1"]
    table = steps.dataframe[0].value
    assert list(table["step"]) == [0, 1] and list(table["outcome"]) == ["reproduces", "skipped (cannot install keras)"]
    assert table["measured"].iloc[1] == "the first 1 of 2 groups: keras 3.14.0 -> 3.15.1, tensorboard 2.20.0 (removed)"
    assert table["change"].iloc[0] == "-20.0%" and table["series"].iloc[0].startswith("bilstm/tiny cpu noxla fp32")
    steps.button[0].click().run()
    assert at.query_params["baseline"] == f"suite_run_id={baseline_id}"
    assert at.query_params["candidate"] == f"suite_run_id={candidate_id}"
    compared = opened(at, "verdict_table").dataframe[-1].value
    both = compared[compared["n candidate"] > 0]  # the suite run's XLA series is on its side only
    assert list(both["n baseline"]) == [2] and list(both["n candidate"]) == [2] and len(compared) == 2


GPU_ROWS = [REPO / "data" / "reference" / name for name in ("h100-2026-11-24", "h200-2026-11-26")]


@pytest.fixture(scope="module")
def gpu_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The GPU rows committed under data/reference/ (an H100 and an H200, JAX and torch: no TensorFlow), as
    `make demo-gpu` ingests them."""
    db = tmp_path_factory.mktemp("gpu") / "store.duckdb"
    done = stepwatch("ingest", *map(str, GPU_ROWS), "--recursive", "--db", str(db))  # as `make demo-gpu` does
    assert done.returncode == 0, done.stderr
    counts = "SELECT count(*), count(*) FILTER (WHERE status = 'ok'), count(tf_version) FROM runs"
    assert query(db, counts) == [(40, 36, 0)]
    return db


@pytest.mark.parametrize("page", TITLES)
def test_every_page_reads_well_on_the_gpu_rows(gpu_store: Path, page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    at = render(gpu_store, page, monkeypatch)
    assert [t.value for t in at.title] == [TITLES[page]]
    for figure in figures(at):  # no chart without a bar, line or box to show
        assert any(values(trace.get("y", [])) or values(trace.get("x", [])) for trace in figure["data"]), figure


def test_versions_of_a_store_without_tensorflow_go_along_its_backends_version(
    gpu_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JAX and torch trials only: Versions opens along the picked series' framework (JAX's for bert on the H100,
    whose JAX and torch series both ran), with its boxes drawn, not on TensorFlow's version, which no row has;
    the link still picks any version field."""
    at = render(gpu_store, "versions", monkeypatch)
    assert [s.value for s in at.selectbox if s.label == "Versions of"] == ["jax_version"]
    assert not at.info and [t["name"] for t in figures(at)[0]["data"]]
    link = {"model": "resnet50", "accelerator": "NVIDIA H200", "along": "torch_version"}
    torch = render(gpu_store, "versions", monkeypatch, **link)
    assert [s.value for s in torch.selectbox if s.label == "Versions of"] == ["torch_version"]
    assert [i.value for i in torch.info] == ["No successful runs with a torch_version for this selection."]


def test_speedups_say_there_is_no_pair_instead_of_an_empty_chart(
    gpu_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every GPU run compiled (XLA on JAX, inductor on torch) or ran eager only (two torch precisions, the plain
    PyTorch model and script), so no config ran with jit_compile both on and off: a line says so. Precisions and
    backends have their pairs."""
    captions, titles = [], []
    for kind in ("jit_compile on vs off", "Precision vs fp32", "Keras backends vs TensorFlow"):  # one tab each
        at = render(gpu_store, "speedups", monkeypatch, kind=kind)
        captions += [c.value for c in at.caption]
        titles += [figure["layout"]["title"]["text"] for figure in figures(at)]
    assert "jit_compile on vs off: no config in this selection ran both with and without it." in captions
    assert not any(title.startswith("jit_compile on vs off") for title in titles), titles
    assert any(title.startswith("Precision modes") for title in titles), titles


def test_cost_marks_every_bar_with_its_price_and_says_which_trials_have_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two accelerators costed at two catalog prices, one read this month and one more than a year ago, and a
    machine the catalog does not know: each bar carries its price's mark, the list under the chart gives each
    price's source, date and what it covers, the old price is said to be old, and the trials without a cost are
    counted with why."""
    priced = {"aws-p5.48xlarge-h100-sxm": ("NVIDIA H100 80GB HBM3", "AWS EC2 on-demand pricing, p5.48xlarge"),
              "aws-g6.xlarge-l4": ("NVIDIA L4", "AWS EC2 on-demand pricing, g6.xlarge")}  # fmt: skip
    today = date.today()
    dates = {"aws-p5.48xlarge-h100-sxm": f"{today.year - 2}-{today.month:02d}", "aws-g6.xlarge-l4": f"{today:%Y-%m}"}
    rows = []
    for i, (key, (accelerator, source)) in enumerate(priced.items()):
        rows += result_rows(2, start=10 * i, accelerator=accelerator, device="gpu", price_key=key,
                            price_source=source, price_covers="instance share", price_date=dates[key],
                            price_per_device_hour=1.0, cost_usd=0.01, cost_per_1m_examples_usd=0.5)  # fmt: skip
    note = "no price: AMD EPYC (cpu, 2 CPUs) matches no entry of the price catalog; give --price-per-hour"
    rows += result_rows(3, start=20, price_note=note)
    write_parquet(to_table(rows), tmp_path / "runs.parquet")
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(tmp_path / "runs.parquet"), "--db", str(db)).returncode == 0
    at = render(db, "cost", monkeypatch)
    marks = {key: i for i, key in enumerate(sorted(priced), start=1)}
    old = "aws-p5.48xlarge-h100-sxm"
    assert [w.value for w in at.warning] == [
        f"3 successful trial(s) have no cost: {note}",
        f"1 of these prices may not be what the hardware costs today: [{marks[old]}] {old}: read {dates[old]}, more "
        "than a year ago. Give your own (the project's `own-price` setting, or --price-per-hour).",
    ]
    (figure,) = figures(at)
    names = {x for trace in figure["data"] for x in trace["x"]}
    assert names == {f"{priced[key][0]} [{mark}]" for key, mark in marks.items()}  # every bar names its price
    listed = [m.value for m in at.markdown if "**aws-" in m.value]
    assert listed == [
        "\n".join(f"{marks[k]}. **{k}**, stepwatch's catalog (instance share, {dates[k]}"
                  f"{' ⚠️ read ' + dates[k] + ', more than a year ago' if k == old else ''}): {priced[k][1]}"
                  for k in sorted(priced))
    ]  # fmt: skip


def test_the_overviews_sparkline_is_text_scaled_to_its_own_nights() -> None:
    from stepwatch.dashboard.labels import spark_text

    assert spark_text([1.0, 2.0, 3.0]) == "▁▅█"
    assert spark_text([100.0, 90.0]) == "█▁"  # its own range: a 10% drop spans the whole height
    assert spark_text([5.0, 5.0]) == "▄▄" and spark_text([]) == ""


def test_a_plain_figure_holds_the_same_data_as_lists_and_its_revision_follows_the_data() -> None:
    import pandas as pd
    import plotly.graph_objects as go

    from stepwatch.dashboard.charts import epoch_ms, plain

    nights = pd.Series(pd.to_datetime(["2026-01-02 03:04:05", "2026-01-03 03:04:05"]))
    counts = np.array([[3, 3], [2, 3]], dtype=np.uint32)

    def figure(last: float) -> go.Figure:
        fig = go.Figure(go.Scatter(x=epoch_ms(nights), y=np.array([1.5, last]), customdata=counts, text=["a", "b"]))
        fig.add_trace(go.Scatter(x=nights, y=[1.0, 2.0]))  # dates sent as dates
        return fig.update_xaxes(type="date")

    sent = figure(2.5)
    packed = json.loads(sent.to_json())
    assert "template" in packed["layout"] and "bdata" in json.dumps(packed["data"])  # what plotly sends by itself
    spec = json.loads(plain(sent).to_json())
    [line, dated] = spec["data"]
    assert line["x"] == [1767323045000.0, 1767409445000.0] and line["y"] == [1.5, 2.5]
    assert line["customdata"] == [[3, 3], [2, 3]] and line["text"] == ["a", "b"]
    assert dated["x"] == ["2026-01-02T03:04:05.000000", "2026-01-03T03:04:05.000000"]
    assert "template" not in spec["layout"] and spec["layout"]["xaxis"]["type"] == "date"
    assert "bdata" not in json.dumps(spec) and sent.layout.template is not None  # the cached figure is untouched
    same, other = (json.loads(plain(figure(y)).to_json())["layout"]["datarevision"] for y in (2.5, 2.6))
    assert same == spec["layout"]["datarevision"] != other


def test_each_pages_address_is_answered_with_streamlits_page_told_where_its_server_is() -> None:
    """dashboard/server.py (in a browser: tests/test_dashboard_browser.py); under a base path, before any script."""
    from stepwatch.dashboard import server

    html = server.told_index("perf")
    told = html.index('window.__streamlit = {BACKEND_BASE_URL: window.location.origin + "/perf/"}')
    assert told < html.index('<script type="module"')  # set before Streamlit's own code reads it
    assert [route.path for route in server.routes()] == ["/", *(f"/{p.key}" for p in PAGES[1:])]


def test_the_dashboards_streamlit_settings_are_streamlits_own_and_spare_each_visit_the_developers_work() -> None:
    """dashboard/streamlit.toml, passed as options by ``stepwatch dashboard``: a misspelt or retired key would be
    ignored with a warning in the server's log, and the two settings that spare the server 0.2-0.3 s of CPU a
    visit (no source watcher, no forced collection after each run) would silently be lost."""
    from streamlit import config

    from stepwatch.dashboard.__main__ import settings_options

    known = config.get_config_options()
    given = dict(option.removeprefix("--").split("=", 1) for option in settings_options())
    for key, value in given.items():
        assert key in known and not known[key].deprecated, key
        if known[key].type is bool:
            assert value in ("true", "false"), (key, value)
    assert given["server.fileWatcherType"] == "none" and given["runner.postScriptGC"] == "false"


def test_cost_opens_on_one_config_and_a_link_by_model_opens_all_of_its_configs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first screen holds one config's panel: the page opens on the first config (model/preset) only; a link
    made when the page picked models (``?model=``) still opens every config of those models."""
    priced = dict(accelerator="NVIDIA L4", device="gpu", price_key="aws-g6.xlarge-l4", price_per_device_hour=1.0,
                  price_source="AWS", price_covers="instance share", price_date="2024-04", cost_usd=0.01,
                  cost_per_1m_examples_usd=0.5)  # fmt: skip
    configs = [BenchmarkConfig(model="bilstm", preset=preset) for preset in ("1024", "tiny")]
    rows = [
        row
        for i, config in enumerate(configs)
        for row in result_rows(2, start=10 * i, **{**config_columns(config), "config_key": config.key, **priced})
    ]
    write_parquet(to_table(rows), tmp_path / "runs.parquet")
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(tmp_path / "runs.parquet"), "--db", str(db)).returncode == 0

    def panels(at: AppTest) -> list[str]:
        (figure,) = figures(at)
        return [a["text"].split(":")[0] for a in figure["layout"]["annotations"]]

    at = render(db, "cost", monkeypatch)
    assert panels(at) == ["bilstm/1024"] and at.multiselect[0].value == ["bilstm/1024"]
    assert "Config: bilstm/1024" in [c.value for c in at.caption]
    at = render(db, "cost", monkeypatch, model="bilstm")
    assert panels(at) == ["bilstm/1024", "bilstm/tiny"]
    assert at.query_params["config"] == "bilstm/1024,bilstm/tiny" and "model" not in at.query_params


def test_cost_picks_a_config_whose_model_is_a_path(gpu_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model of yours is named by its file (``examples/torch_gpt.py:tiny_gpt``): its config is found whole, not
    cut at the path's first slash. It ran on the H200, which the price catalog does not know: said so."""
    at = render(gpu_store, "cost", monkeypatch, config="examples/torch_gpt.py:tiny_gpt/small")
    assert at.multiselect[0].value == ["examples/torch_gpt.py:tiny_gpt/small"]
    assert [w.value for w in at.warning] and all("have no cost" in w.value for w in at.warning)


def test_filters_say_what_they_pick_in_a_line() -> None:
    from stepwatch.dashboard.state import said

    accelerators = ["a", "b", "c", "d", "e"]
    assert said(("Model", ["bert"], ["bert", "bilstm"]), ("XLA", ["off", "on"], ["off", "on"])) == (
        "Model: bert · XLA: off, on"
    )
    assert said(("Accelerator", accelerators, accelerators)) == "Accelerator: all 5"
    assert said(("Accelerator", accelerators[:4], accelerators)) == "Accelerator: 4 of 5"
    assert said(("Model", [], ["bert"])) == "Model: none"


def test_speedups_opens_on_a_row_of_two_accelerators(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a store of ten accelerators, Speedups' first screen is one row of two panels (four in a 460 px figure
    were each too small to read, and drawn more slowly); the filters pick more."""
    db = tmp_path / "synthetic.duckdb"
    done = stepwatch("synthesize", "--rows", "10000", "--out", str(tmp_path / "files"), "--db", str(db))
    assert done.returncode == 0, done.stderr
    at = render(db, "speedups", monkeypatch)
    (figure,) = figures(at)
    titles = [a["text"] for a in figure["layout"]["annotations"] if a["text"].startswith("accelerator=")]
    picked = at.multiselect[0].value
    assert len(at.multiselect[0].options) == 10 and len(picked) == 2
    assert titles == [f"accelerator={name}" for name in picked]


def test_a_teams_own_price_in_its_settings_costs_its_runs_on_the_cost_page_and_in_a_reports_cost_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project whose stepwatch.toml sets its own price (its own hardware): a real trial is costed at it, its row
    says whose price it is, the Cost page lists it as the team's, and a check's cost line names it."""
    from stepwatch.collector.output.code_check import run_lines
    from stepwatch.collector.runner.catalog import costed_at

    (tmp_path / "stepwatch.toml").write_text('own-price = 0.5\nown-price-source = "our own 2-core box, amortised"\n')
    done = stepwatch("run", "--models", "teacher", "--xla", "off", "--precision", "fp32", "--trials", "1", "--steps",
                     "20", "--out", str(tmp_path / "out"), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    [row] = [r for f in (tmp_path / "out").glob("*.parquet") for r in pq.read_table(f).to_pylist()]
    assert (row["price_key"], row["price_whose"], row["price_per_device_hour"]) == ("own-price", "your own price", 0.5)
    assert row["cost_usd"] == pytest.approx(0.5 * row["wall_s"] / 3600)
    db = tmp_path / "store.duckdb"
    assert stepwatch("ingest", str(tmp_path / "out"), "--db", str(db)).returncode == 0
    at = render(db, "cost", monkeypatch)
    listed = [m.value for m in at.markdown if "**own-price**" in m.value]
    assert listed and listed[0].startswith("1. **own-price**, your own price (instance share, ")
    assert listed[0].endswith("): our own 2-core box, amortised"), listed
    seconds, usd, prices = row["wall_s"], row["cost_usd"], costed_at([row], date.today())
    line = run_lines(1, 1, "here", 0, 1, (seconds, usd, prices), 1.0)[2]
    assert "USD at own-price (your own price, 0.5 USD per device-hour: our own 2-core box, amortised)" in line, line
