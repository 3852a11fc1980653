"""A model of the user's own, named by where it lives (``path/file.py:function``): refused in one line before
anything runs when it is not there, run with the suite's defaults, its failures recorded as rows that name it
while the suite goes on, its source hashed into every row, and a comparison that says when its code changed.
An upgrade check of one (A/A, in two environments) is in test_upgrade; the examples run in the large job."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.conftest import REPO, SHORT, result_rows, rows_in, stepwatch, write_results, write_suite

MODELS = "tests/data/models"
HELD_OUT = f"{MODELS}/sentiment.py:sentiment"  # written from docs/reference.md alone


@pytest.mark.parametrize(
    ("model", "said"),
    [
        (f"{MODELS}/nope.py:model", f"model {MODELS}/nope.py:model: no file {MODELS}/nope.py"),
        (
            f"{MODELS}/sentiment.py:nothing",
            f"model {MODELS}/sentiment.py:nothing: sentiment.py defines no function nothing",
        ),  # fmt: skip
        (f"{MODELS}/unparsable.py:model", "unparsable.py at line 1: SyntaxError"),
        (f"{MODELS}/sentiment.py:", "name a model of yours as path/to/file.py:function or package.module:function"),
        ("stepwatch_no_such_package.models:build", "no module stepwatch_no_such_package.models on the Python path"),
    ],
    ids=["no-file", "no-function", "syntax-error", "no-function-name", "no-module"],
)
def test_a_model_of_yours_that_is_not_there_is_one_line_and_exit_2(model: str, said: str) -> None:
    done = stepwatch("run", "--models", model, "--dry-run")
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_model_of_yours_runs_with_the_suites_defaults_beside_the_bundled_ones() -> None:
    done = stepwatch("run", "--suite", "smoke", "--models", f"{HELD_OUT},bilstm", "--xla", "off,on", "--dry-run")
    assert done.returncode == 0, done.stderr
    labels = done.stdout.splitlines()[:-1]
    mine = [line for line in labels if line.startswith(HELD_OUT)]
    assert mine == [
        f"{HELD_OUT}/tiny cpu noxla fp32 b8 fit threads=1/2",
        f"{HELD_OUT}/tiny cpu xla fp32 b8 fit threads=1/2",
    ]
    assert len(labels) == 2 + 4  # bilstm: its smoke configs (fp32 and bf16), at both xla settings
    refused = stepwatch("run", "--models", HELD_OUT, "--loop", "ctl", "--dry-run")
    assert refused.returncode == 2 and "a model of yours trains with loop fit" in refused.stderr


@pytest.mark.large
def test_what_goes_wrong_in_a_model_of_yours_is_a_row_that_names_it_and_the_suite_goes_on(tmp_path: Path) -> None:
    broken = ("raises", "wrong_type", "misfit")
    torch_model = "tests/data/models/recommender.py:two_tower"  # imports torch, which a JAX trial hides
    configs = [f"{MODELS}/broken.py:{name}" for name in broken] + [f"{MODELS}/unimportable.py:model", torch_model]
    configs.append(HELD_OUT)
    suite = write_suite(
        tmp_path / "mine.toml",
        '[defaults]\nkeras_backend = "jax"\nxla = true\npreset = "tiny"\n\n'
        + "".join(f'[[configs]]\nmodel = "{model}"\n\n' for model in configs),
    )
    out = tmp_path / "out"
    done = stepwatch("run", "--suite", str(suite), *SHORT, "--out", str(out), cwd=REPO)
    assert done.returncode == 4, done.stderr
    assert "5 of 6 trials failed" in done.stderr
    rows = {row["model"]: row for row in rows_in(out)}
    said = {
        f"{MODELS}/broken.py:raises": "raises() raised RuntimeError: no weights for preset tiny",
        f"{MODELS}/broken.py:wrong_type": "wrong_type() returned list, not a dict with 'model'",
        f"{MODELS}/broken.py:misfit": "",  # Keras' own words on the shapes, after the model's name
        f"{MODELS}/unimportable.py:model": "importing unimportable.py failed: ModuleNotFoundError: No module named "
        "'stepwatch_no_such_package'",
        torch_model: "No module named 'torch' (torch is hidden in a keras_backend jax trial: run it with "
        "--keras-backend torch)",
    }
    for model, words in said.items():
        row = rows[model]
        assert row["status"] == "crash", (model, row["status"])
        message = row["error_message"]
        assert message.startswith(f"model {model}: ") and words in message and "\n" not in message, message
    assert "7" in rows[f"{MODELS}/broken.py:misfit"]["error_message"]  # the model's input width, named by Keras

    ok = rows[HELD_OUT]
    assert ok["status"] == "ok" and ok["examples_per_sec"] > 0 and ok["unit"] == "examples", ok["error_message"]
    source = (REPO / MODELS / "sentiment.py").read_bytes()
    assert all(row["model_hash"] for row in rows.values())
    assert ok["model_hash"] == hashlib.sha256(source).hexdigest()[:16]
    extras = json.loads(ok["extras"])
    assert ok["flops_per_example"] == 6.0 * (32 * 32 + 32 * 2) and extras["flops_source"].startswith("declared")
    assert extras["frameworks_loaded"] == ["jax"] and ok["compiler"] == "xla"


def test_compare_says_when_the_two_sides_ran_different_code_of_a_model(tmp_path: Path) -> None:
    """Rows of a store (the runs are real elsewhere): the same model, its source changed between the sides."""
    mine = {"model": "models/mine.py:build", "config_key": "0123456789abcdef"}
    results = tmp_path / "results"
    write_results(results / "a.parquet", result_rows(3, label="before", model_hash="aaaa", **mine))
    write_results(results / "b.parquet", result_rows(3, label="same", model_hash="aaaa", start=3, **mine))
    write_results(results / "c.parquet", result_rows(3, label="after", model_hash="bbbb", start=6, **mine))
    db = str(tmp_path / "store.duckdb")
    assert stepwatch("ingest", str(results), "--db", db).returncode == 0
    changed = stepwatch("compare", "--baseline", "label=before", "--candidate", "label=after", "--db", db)
    assert changed.returncode in (0, 3), changed.stderr
    assert "models/mine.py:build: the two sides ran different code of this model (source aaaa -> bbbb)" in (
        changed.stdout.replace("\n", " ")
    )
    report = tmp_path / "report.json"
    same = stepwatch("compare", "--baseline", "label=before", "--candidate", "label=same", "--db", db, "--format",
                     "json", "--out", str(report))  # fmt: skip
    assert same.returncode in (0, 3), same.stderr
    assert "different code" not in same.stdout
    assert json.loads(report.read_text())["model_code"]["candidate"] == {"models/mine.py:build": ["aaaa"]}


def test_a_function_that_returns_a_torch_module_trains_in_the_plain_pytorch_loop_unless_a_loop_is_set(
    tmp_path: Path,
) -> None:
    """What the function returns decides the loop on the torch backend (asked of a child process); a loop the user
    sets wins; a Keras model keeps fit, and a file that never imports torch is not asked at all."""
    from tests.test_publish import MODEL, NET

    (tmp_path / "net.py").write_text(NET)
    (tmp_path / "keras_net.py").write_text(MODEL)
    for model, loop, word in (("net.py:mlp", None, "pytorch"), ("net.py:mlp", "fit", "fit"),
                              ("keras_net.py:mlp", None, "fit")):  # fmt: skip
        done = stepwatch("run", "--models", model, "--keras-backend", "torch", *(["--loop", loop] if loop else []),
                         "--dry-run", cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"b8 {word} keras_backend=torch" in done.stdout, (model, loop, done.stdout)


@pytest.mark.parametrize(
    ("said", "refused"),
    [
        ('"unit": 3', "'unit' must be a unit's name, not 3"),
        ('"units_per_example": 0', "'units_per_example' must be a positive integer, not 0"),
        ('"attention": "yes"', "'attention' must be True or False, not 'yes'"),
        ('"experts": 1', "'experts' must be True or False, not 1"),
    ],
    ids=["unit", "units-per-example", "attention", "experts"],
)
def test_what_a_model_of_yours_says_it_counts_and_has_is_checked_in_one_line(
    tmp_path: Path, said: str, refused: str
) -> None:
    """A model's unit, units per example, attention and experts, where its function gives them: a spec as built
    takes them (so its rows read tokens/s and name its kernels); one of the wrong kind is one line naming it."""
    from stepwatch.trainers.user import Built, Reference, UserModelError, user_spec

    body = (
        '{"model": object(), "loss": "mse", "batch": lambda size, seed: ([], []), "unit": "tokens", '
        '"units_per_example": 64, '
    )
    (tmp_path / "decoder.py").write_text(f'def build(preset):\n    return {body}"attention": True}}\n')
    spec = user_spec(f"{tmp_path}/decoder.py:build")
    spec.synthetic_batch("tiny", 8, 0)  # its function runs once, when first needed (in a trial, by the build)
    built = spec.as_built()
    assert (built.unit, built.units_per_example("tiny"), built.attention, built.experts) == ("tokens", 64, True, False)
    assert user_spec(HELD_OUT).unit == "examples"  # before its function runs, and where it says nothing
    (tmp_path / "wrong.py").write_text(f"def build(preset):\n    return {{\"model\": object(), \"loss\": \"mse\", "
                                       f"\"batch\": None, {said}}}\n")  # fmt: skip
    with pytest.raises(UserModelError) as error:
        Built(Reference.parse(f"{tmp_path}/wrong.py:build")).get("tiny")
    assert str(error.value) == f"model {tmp_path}/wrong.py:build: {refused}"
