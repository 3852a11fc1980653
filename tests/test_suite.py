"""Suite files: the bundled suites load; broken ones are refused with one line naming the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepwatch.collector.config import BenchmarkConfig, ConfigError, auto_threads, usable_cores, validate
from stepwatch.collector.runner.suite import SuiteError, load_suite, narrow
from tests.conftest import stepwatch, write_suite


def test_smoke_crosses_all_models_xla_and_two_precisions() -> None:
    suite = load_suite("smoke")
    assert len(suite.configs) == 22
    assert {c.model for c in suite.configs} == {"resnet50", "bert", "transformer", "bilstm", "teacher", "llama"}
    llama = {(c.xla, c.precision) for c in suite.configs if c.model == "llama"}
    assert llama == {(True, "fp32"), (True, "mixed_bfloat16")}
    assert {c.xla for c in suite.configs} == {False, True}
    assert {c.precision for c in suite.configs} == {"fp32", "mixed_bfloat16"}
    assert {(c.device, c.preset) for c in suite.configs} == {("cpu", "tiny")}


def test_gpu_and_tpu_nightly_use_published_sizes_and_all_precisions() -> None:
    gpu = load_suite("gpu-nightly")
    assert {c.precision for c in gpu.configs} == {"fp32", "tf32", "mixed_float16", "mixed_bfloat16", "fp8"}
    llama = {(c.preset, c.loop, c.precision, c.attention) for c in gpu.configs if c.model == "llama"}
    assert llama == {("8b-4l", "pytorch", p, a) for p in ("mixed_bfloat16", "fp8") for a in ("auto", "math")}
    assert "tiny" not in {c.preset for c in gpu.configs}
    assert {c.device for c in gpu.configs} == {"gpu"}
    tpu = load_suite("tpu-nightly")
    assert {(c.device, c.strategy, c.xla) for c in tpu.configs} == {("tpu", "tpu", True)}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[[matrix]]\nmodel = ["resnet50", "resnet5"]\n', "unknown model 'resnet5'"),
        ('[[matrix]]\nmodel = "bert"\nprecison = ["fp32"]\n', "unknown field 'precison' (did you mean 'precision'?)"),
        ('[[configs]]\nmodel = "bert"\nprecision = "fp4"\n', "precision 'fp4' is not one of"),
        ('[[configs]]\nmodel = "bert"\npreset = "huge"\n', "model 'bert' has no preset 'huge'"),
        ('[[configs]]\nmodel = "bert"\nxla = "maybe"\n', "xla 'maybe' is not one of off, on"),
        ("[[configs]]\nmodel = bert\n", "not valid TOML"),
        ("[defaultz]\nmodel = 'bert'\n", "unknown top-level key 'defaultz' (did you mean 'defaults'?)"),
        ("name = 'empty'\n", "no configs"),
    ],
)
def test_broken_suite_is_refused_naming_the_problem(tmp_path: Path, body: str, message: str) -> None:
    path = write_suite(tmp_path / "broken.toml", body)
    with pytest.raises(SuiteError) as error:
        load_suite(str(path))
    assert message in str(error.value)
    assert str(path) in str(error.value)


def test_cli_refuses_unknown_model_with_one_line_and_exit_2(tmp_path: Path) -> None:
    path = write_suite(tmp_path / "typo.toml", '[[matrix]]\nmodel = ["bertt"]\n')
    result = stepwatch("run", "--suite", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "unknown model 'bertt'" in lines[0] and "typo.toml" in lines[0]
    assert not (tmp_path / "out").exists()


def test_cli_refuses_unknown_suite_name() -> None:
    result = stepwatch("run", "--suite", "smok")
    assert result.returncode == 2
    assert "unknown suite 'smok' (did you mean 'smoke'?)" in result.stderr


def test_narrow_keeps_models_and_sets_other_dimensions() -> None:
    configs = load_suite("smoke").configs
    narrowed = narrow(configs, {"model": ["bert"], "xla": [True], "loop": ["ctl"], "per_device_batch": [4]})
    assert {(c.model, c.xla, c.loop, c.per_device_batch) for c in narrowed} == {("bert", True, "ctl", 4)}
    assert len(narrowed) == 2  # fp32 and mixed_bfloat16 remain
    with pytest.raises(SuiteError, match="--models: vgg16 not in this suite"):
        narrow(configs, {"model": ["vgg16"]})


def test_warmup_must_cover_two_windows_and_windows_divide_steps() -> None:
    with pytest.raises(ConfigError, match="at least 2 windows"):
        validate(BenchmarkConfig(model="bert", warmup_steps=10, window_steps=10))
    with pytest.raises(ConfigError, match="multiple of window_steps"):
        validate(BenchmarkConfig(model="bert", steps=25, window_steps=10))
    with pytest.raises(ConfigError, match="multiple of steps_per_execution"):
        validate(BenchmarkConfig(model="bert", steps_per_execution=3, window_steps=10))


def test_series_key_ignores_measurement_length_but_not_dimensions() -> None:
    base = BenchmarkConfig(model="bert")
    assert base.key == base.with_changes(steps=200, timeout_s=5).key
    assert base.key != base.with_changes(xla=True).key
    assert base.key != base.with_changes(precision="mixed_bfloat16").key


def test_accelerators_need_ten_warmup_steps() -> None:
    with pytest.raises(ConfigError, match="at least 10 on gpu"):
        validate(BenchmarkConfig(model="bert", device="gpu", warmup_steps=4, window_steps=2))
    validate(BenchmarkConfig(model="bert", device="cpu", warmup_steps=4, window_steps=2))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch", "abc"], "argument --batch: invalid literal for int()"),
        (["--precision", "fp64"], "'fp64' is not one of fp32, tf32, mixed_float16, mixed_bfloat16"),
        (["--xla", "maybe"], "'maybe' is not one of off, on"),
        (["--out", "/proc/stepwatch-results"], "cannot create the results folder /proc/stepwatch-results"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = stepwatch("run", "--models", "bilstm", *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr


def test_threads_auto_is_resolved_for_the_host_and_is_part_of_the_series() -> None:
    smoke = load_suite("smoke")
    assert {c.threads for c in smoke.configs} == {"auto"}  # the suite file asks for auto ...
    ran = narrow(smoke.configs, {})
    picked = auto_threads("cpu", "tensorflow", usable_cores())
    assert {c.threads for c in ran} == {picked}  # ... and what runs (and is keyed and recorded) is its pick
    assert auto_threads("cpu", "tensorflow", 2) == "1/2" and auto_threads("cpu", "torch", 16) == "8/2"
    assert auto_threads("cpu", "tensorflow", 1) == "1/1"
    assert auto_threads("gpu", "tensorflow", 16) == auto_threads("cpu", "jax", 2) == "default"
    bilstm = BenchmarkConfig(model="bilstm")
    assert bilstm.key == bilstm.with_changes(threads="default").key == "66ea00715b05e398"  # history keeps its key
    assert bilstm.with_changes(threads="1/1").key != bilstm.key
    assert "threads=1/1" in bilstm.with_changes(threads="1/1").label()
    for bad, why in (("2", "not default, auto or INTRA/INTER"), ("0/1", "not default, auto or INTRA/INTER")):
        with pytest.raises(ConfigError, match=why):
            validate(bilstm.with_changes(threads=bad))
    with pytest.raises(ConfigError, match="JAX has no supported setting"):
        validate(bilstm.with_changes(keras_backend="jax", threads="1/1"))
