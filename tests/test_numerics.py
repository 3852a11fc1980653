"""The numerics verdict beside every speed verdict: seeds paired by trial, the verdict's statistics, time to a
target, a script's quality, and planted changes in real trials (the learning rate x10 in a model's code, a
comment, an A/A, mixed_bfloat16 against fp32)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from stepwatch.collector.analysis import numerics
from stepwatch.collector.analysis.numerics import Trial, judge
from stepwatch.collector.outcomes import CHANGED, IDENTICAL, TOO_FEW_SEEDS, WITHIN_SEED_SPREAD
from stepwatch.collector.trial import steps
from stepwatch.collector.trial.measure import WindowClock, to_target
from stepwatch.trainers import get_model
from stepwatch.trainers.spec import POOL, batch_pool
from tests.conftest import REPO, stepwatch


def curve(seed: int, rate: float = 0.05, noise: float = 0.0, rng: np.random.Generator | None = None) -> Trial:
    """A loss falling from a seed's own start at ``rate`` a window, with relative noise per window."""
    start = 1.0 + 0.3 * seed
    values = start * np.exp(-rate * np.arange(40))
    if rng is not None:
        values = values * np.exp(rng.normal(0, noise, values.size))
    return Trial(seed, tuple(float(v) for v in values), start=20, every=10)


def test_the_same_losses_are_identical_and_one_seed_cannot_tell_more() -> None:
    base = [curve(s) for s in range(3)]
    assert judge(base, list(base)).verdict == IDENTICAL
    moved = [Trial(0, tuple(v * 1.001 for v in base[0].values))]
    assert judge(base[:1], moved).verdict == TOO_FEW_SEEDS
    assert judge([], base) is None


def test_a_consistent_change_is_changed_with_how_much_later_the_loss_is_reached() -> None:
    rng = np.random.default_rng(1)
    base = [curve(s, 0.05, 0.01, rng) for s in range(4)]
    slower = [curve(s, 0.04, 0.01, rng) for s in range(4)]  # learns a fifth slower: a higher best loss
    found = judge(base, slower)
    assert found.verdict == CHANGED and found.best.low > 1, found.text()
    assert found.to_level is not None and found.to_level.ratio > 1.1, found.text()
    assert "steps to the same loss +" in found.text() and found.text().startswith("changed: best loss +")


def test_an_a_a_with_nondeterministic_kernels_stays_quiet() -> None:
    """Simulated A/As whose two sides differ by run-to-run noise (nondeterministic kernels) of 2% and of 5% a window,
    3 to 12 seeds: the verdict's two tests at half the level each keep its false alarms under the 5% one test alone
    would allow (1 of 999 and 24 of 2,000 with these seeds)."""
    rng = np.random.default_rng(7)
    small = [
        judge([curve(s, 0.05, 0.02, rng) for s in range(n)], [curve(s, 0.05, 0.02, rng) for s in range(n)]).verdict
        for n in (2, 3, 5)
        for _ in range(333)
    ]
    assert small.count(CHANGED) <= 3 and small.count(CHANGED) + small.count(WITHIN_SEED_SPREAD) == len(small)
    rng = np.random.default_rng(11)
    large = [
        judge([curve(s, 0.05, 0.05, rng) for s in range(n)], [curve(s, 0.05, 0.05, rng) for s in range(n)]).verdict
        for n in (3, 5, 8, 12)
        for _ in range(500)
    ]
    assert large.count(CHANGED) <= 0.025 * len(large), large.count(CHANGED)


def test_a_loss_below_what_a_window_resolves_is_read_at_the_resolution() -> None:
    """fit's window loss is the difference of two running means: near zero it is noise, even negative."""
    trial = Trial(0, (0.5, 1e-3, -2e-8, 3e-9))
    assert trial.best == pytest.approx(0.5 * numerics.RESOLUTION)


def test_trials_pair_by_seed_and_each_has_its_own_batches() -> None:
    spec = get_model("teacher")
    preset = spec.preset("tiny")
    first, again, other = (batch_pool(spec, preset, 8, seed) for seed in (0, 0, 1))
    assert len(first) == POOL and all(np.array_equal(a[0], b[0]) for a, b in zip(first, again))
    assert not np.array_equal(first[0][0], other[0][0]) and not np.array_equal(first[0][0], first[1][0])
    # The teacher's labels have unit variance (the target means the same at every size).
    x, y = spec.synthetic_batch(preset, 4096, 3)
    assert 0.9 < float(y.std()) < 1.1 and x.dtype == y.dtype == np.float32


def test_time_to_target_is_from_the_first_step_to_the_first_value_at_it() -> None:
    marks = [(1, 10.0, 2.0), (11, 10.5, 0.5), (21, 11.0, 0.09), (31, 11.5, 0.05)]
    assert to_target(marks, 0.1) == {"target": 0.1, "steps_to_target": 21, "time_to_target_s": 1.0}
    assert to_target(marks, 0.01)["steps_to_target"] is None
    assert to_target([(1, 0.0, 0.1), (2, 1.0, 0.95)], 0.9, higher_is_better=True)["steps_to_target"] == 2


def test_a_script_reports_its_quality_and_reads_its_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    import stepwatch as api

    assert api.seed(5) == 5 and api.quality(0.3) is None  # outside a trial: nothing happens
    clock = WindowClock(first_steps=1, window_steps=2)
    clock.begin()
    session = steps.Session(clock, total_steps=7)
    steps.start(session)
    try:
        monkeypatch.setenv(steps.SEED_ENV, "4")
        assert api.seed() == 4
        for accuracy in (0.2, 0.5, 0.8, 0.9, 0.95, 0.97):
            api.step(8)
            time.sleep(0.001)
            api.quality(accuracy, name="val_acc", target=0.85, higher_is_better=True)
        with pytest.raises(steps.StepsMisuse, match="one quality"):
            api.quality(0.1, name="val_loss")
    finally:
        steps.start(None)
    found = session.quality_fields()
    assert found["quality_name"] == "val_acc" and found["quality"] == 0.97 and found["steps_to_target"] == 4
    assert found["time_to_target_s"] > 0 and found["quality_values"][:2] == [0.2, 0.5]
    [trial] = numerics.trials_of([{**found, "seed": 4, "extras": json.dumps({"quality_higher_is_better": True})}])
    assert trial.higher_is_better and trial.best == 0.97


MODEL = '''\
"""A teacher-student regression of the team's own, its learning rate in its code."""
import keras

from stepwatch.trainers import teacher

SIZE = teacher.PRESETS["tiny"]
LEARNING_RATE = 1e-3


def build():
    return {
        "model": teacher.build(SIZE),
        "loss": "mse",
        "batch": lambda size, seed: teacher.synthetic_batch(SIZE, size, seed),
        "optimizer": keras.optimizers.Adam(LEARNING_RATE),
    }
'''


@pytest.mark.large
def test_planted_changes_in_a_models_code_give_the_right_numerics_verdict(tmp_path: Path) -> None:
    """One model's code run four ways, each a run of its own (on JAX, whose trials start in half the time
    TensorFlow's do): as it is, again (an A/A), with a comment added, and with its learning rate x10. Trial i of
    each trains from seed i, so compare pairs them."""
    model = tmp_path / "model.py"
    versions = {
        "base": (MODEL, 3),
        "aa": (MODEL, 2),
        "comment": (MODEL.replace("def build():", "# the same model, a comment added\ndef build():"), 2),
        "lr": (MODEL.replace("LEARNING_RATE = 1e-3", "LEARNING_RATE = 1e-2"), 3),
    }
    db = tmp_path / "store.duckdb"
    for label, (code, trials) in versions.items():
        model.write_text(code)
        out = tmp_path / label
        done = stepwatch("run", "--models", f"{model}:build", "--label", label, "--trials", str(trials),
                         "--keras-backend", "jax", "--xla", "on", "--out", str(out), cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        rows = pq.read_table(next(out.glob("*.parquet"))).to_pylist()
        assert [r["seed"] for r in rows] == list(range(trials)) and all(r["window_losses"] for r in rows)
    assert stepwatch("ingest", *(str(tmp_path / label) for label in versions), "--db", str(db)).returncode == 0
    found = {}
    for label in ("aa", "comment", "lr"):
        done = stepwatch("compare", "--baseline", "label=base", "--candidate", f"label={label}", "--format", "json",
                         "--db", str(db))  # fmt: skip
        payload = json.loads(done.stdout)
        [row] = payload["numerics"]
        [speed] = [r for r in payload["rows"] if r["metric"] == "examples_per_sec"]  # the speed verdict beside it
        found[label] = (row["verdict"], speed["verdict"])
    assert found["aa"][0] == IDENTICAL and found["comment"][0] == IDENTICAL, found
    assert found["lr"][0] == CHANGED, found
    # The exit code: shown by default, a failure when asked (the compiled step's instructions: the same program).
    codes = [
        stepwatch(
            "compare",
            "--baseline",
            "label=base",
            "--candidate",
            "label=lr",
            "--metric",
            "hlo_instructions",
            "--numerics",
            numerics_flag,
            "--db",
            str(db),
        ).returncode  # fmt: skip
        for numerics_flag in ("show", "fail")
    ]
    assert codes == [0, 1]
    shown = stepwatch("compare", "--baseline", "label=base", "--candidate", "label=lr", "--format", "markdown",
                      "--db", str(db))  # fmt: skip
    assert shown.returncode == 0 and "but its training changed: best loss" in shown.stdout, shown.stdout[:2000]
    assert "**Numerics: 1 changed**" in shown.stdout


@pytest.mark.large
def test_mixed_bfloat16_against_fp32_changes_the_training_beside_its_speed_verdict(tmp_path: Path) -> None:
    """Trained far enough for precision to show (the teacher's loss falls to 1e-7 in fp32 within 3,000 steps),
    mixed_bfloat16's best loss stays orders of magnitude above fp32's on every seed."""
    out, db = tmp_path / "out", tmp_path / "store.duckdb"
    done = stepwatch("run", "--models", "teacher", "--keras-backend", "jax", "--xla", "on", "--precision",
                     "fp32,mixed_bfloat16", "--trials", "3", "--steps", "3000", "--window", "50", "--warmup", "100",
                     "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert stepwatch("ingest", str(out), "--db", str(db)).returncode == 0
    done = stepwatch("compare", "--baseline", "precision=fp32", "--candidate", "precision=mixed_bfloat16", "--format",
                     "json", "--db", str(db))  # fmt: skip
    payload = json.loads(done.stdout)
    [row] = payload["numerics"]
    assert row["verdict"] == CHANGED and row["best_loss"]["ci_low"] > 10, row
    assert [r["verdict"] for r in payload["rows"]]  # the speed verdict, beside it
    same = stepwatch("compare", "--baseline", "precision=fp32", "--candidate", "precision=fp32", "--format", "json",
                     "--db", str(db))  # fmt: skip
    assert [r["verdict"] for r in json.loads(same.stdout)["numerics"]] == [IDENTICAL]


def test_the_nightly_page_leads_with_a_training_that_changed(tmp_path: Path) -> None:
    """The committed teacher-student runs (200 steps, then 3,000): each series' latest run trains to a far lower loss
    than the run before it, which the night's page says before its table."""
    from stepwatch.dashboard import page

    db, trials = tmp_path / "store.duckdb", REPO / "data" / "reference" / "cpu-2026-11-27-numerics"
    assert (
        stepwatch("ingest", str(trials / "precision-200"), str(trials / "precision-3000"), "--db", str(db)).returncode
        == 0
    )
    html, series = page.render(db)
    lead = html.split("<table>")[0]
    assert series == 2 and "<h2>Trainings that changed (2)</h2>" in lead, lead[-3000:]
    assert "but its training changed: best loss" in lead and "numerics vs previous run" in html


def test_the_nightly_page_of_a_first_night_leaves_numerics_empty_and_says_what_the_night_cost(tmp_path: Path) -> None:
    """A series' first night has no run before it: its numerics cell is empty (it read "nan"), and the page says
    what the night cost, here that its rows have no price (made on a machine the catalog does not know) and why."""
    from stepwatch.dashboard import page

    db, trials = tmp_path / "store.duckdb", REPO / "data" / "reference" / "cpu-2026-11-27-numerics"
    assert stepwatch("ingest", str(trials / "precision-200"), "--db", str(db)).returncode == 0
    html, series = page.render(db)
    assert series == 2 and "nan" not in html.split("<table>")[1].split("</table>")[0], html[:3000]
    assert "What the night cost: Cost unknown: none of its 6 trial(s) has a price (no price: " in html, html[:3000]


SCRIPT = '''\
"""A numpy regression of the team's own: seeded by the trial, its validation loss reported with a target."""
import numpy as np

import stepwatch

rng = np.random.default_rng(stepwatch.seed())
truth = np.linspace(-1.0, 1.0, 8)
weights = rng.standard_normal(8) * 0.1
held_out = rng.standard_normal((256, 8))


def batches():
    while True:
        x = rng.standard_normal((32, 8))
        yield x, x @ truth


for step, (x, y) in enumerate(stepwatch.steps(batches(), examples_per_step=32)):
    weights -= 0.05 * 2 * x.T @ (x @ weights - y) / len(x)
    if step % 10 == 9:
        stepwatch.quality(float(np.mean((held_out @ (weights - truth)) ** 2)), name="val_loss", target=0.01)
'''


def test_a_scripts_reported_quality_gives_its_time_to_target_and_its_numerics(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    db = tmp_path / "store.duckdb"
    for label in ("a", "b"):
        out = tmp_path / label
        done = stepwatch("run", "--script", "train.py", "--trials", "2", "--label", label, "--out", str(out),
                         cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        rows = pq.read_table(next(out.glob("*.parquet"))).to_pylist()
        assert [r["seed"] for r in rows] == [0, 1] and {r["quality_name"] for r in rows} == {"val_loss"}
        assert all(r["steps_to_target"] and r["time_to_target_s"] > 0 and r["target"] == 0.01 for r in rows), rows
        assert all(len(r["quality_values"]) >= 10 and r["quality"] == r["quality_values"][-1] for r in rows)
        assert rows[0]["quality_values"] != rows[1]["quality_values"]  # each seed its own data and start
        assert stepwatch("ingest", str(out), "--db", str(db), cwd=tmp_path).returncode == 0
    done = stepwatch("compare", "--baseline", "label=a", "--candidate", "label=b", "--format", "json", "--db", str(db))
    assert [r["verdict"] for r in json.loads(done.stdout)["numerics"]] == [IDENTICAL], done.stdout[-2000:]


@pytest.mark.large
def test_deterministic_kernels_are_a_dimension_the_row_states(tmp_path: Path) -> None:
    done = stepwatch("run", "--models", "teacher", "--xla", "off", "--precision", "fp32", "--deterministic", "on",
                     "--trials", "1", "--steps", "20", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [row] = pq.read_table(next(tmp_path.glob("*.parquet"))).to_pylist()
    assert row["status"] == "ok" and row["deterministic"] is True
    assert json.loads(row["extras"])["determinism"] == "tf.config.experimental.enable_op_determinism()"
    assert "deterministic=True" in done.stdout + done.stderr  # its own series, labelled
