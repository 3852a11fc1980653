"""The TensorFlow runtime: both training loops train the same thing; precision and XLA are read back."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.trial.measure import WindowClock
from stepwatch.collector.trial.runtime import keras_backend
from stepwatch.collector.trial.runtime import keras_tensorflow as tfruntime
from stepwatch.trainers import get_model

STEPS = 6


def losses_of(loop: str, model_name: str) -> tuple[list[float], list[np.ndarray]]:
    """Per-step losses of ``STEPS`` steps with one-step windows, and the initial weights."""
    config = BenchmarkConfig(model=model_name, loop=loop, precision="fp32", window_steps=1, warmup_steps=2, steps=1)
    spec = get_model(model_name)
    runtime = tfruntime.BACKEND.configure(config)
    model, optimizer = tfruntime.BACKEND.build_model(spec, config, runtime)
    initial = [np.array(w) for w in model.get_weights()]
    dataset = tfruntime.BACKEND.make_data(spec, config, runtime)
    clock = WindowClock(first_steps=1, window_steps=1)
    if loop == "fit":
        keras_backend.train_fit(model, dataset, clock, STEPS)
    else:
        tfruntime.train_ctl(model, optimizer, dataset, clock, STEPS, config, runtime)
    return [m.loss for m in clock.marks], initial


# BERT through both loops takes about 25 s here: opt-in (--run-large); ResNet-50 runs by default.
@pytest.mark.large
@pytest.mark.parametrize("model_name", ["resnet50", pytest.param("bert", marks=pytest.mark.large)])
def test_fit_and_ctl_train_the_same_thing(model_name: str) -> None:
    fit_losses, fit_weights = losses_of("fit", model_name)
    ctl_losses, ctl_weights = losses_of("ctl", model_name)
    assert all(np.array_equal(a, b) for a, b in zip(fit_weights, ctl_weights)), "same seed, same initial weights"
    assert len(fit_losses) == len(ctl_losses) == STEPS
    assert ctl_losses[0] == pytest.approx(fit_losses[0], rel=1e-5)
    np.testing.assert_allclose(ctl_losses, fit_losses, rtol=2e-3)
    assert fit_losses[-1] < fit_losses[0]


def test_fp32_turns_tf32_off_and_tf32_turns_it_on() -> None:
    fp32 = tfruntime.BACKEND.configure(BenchmarkConfig(model="bilstm", precision="fp32"))
    assert fp32.tf32_enabled is False and fp32.compute_dtype == "float32"
    tf32 = tfruntime.BACKEND.configure(BenchmarkConfig(model="bilstm", precision="tf32"))
    assert tf32.tf32_enabled is True
    bf16 = tfruntime.BACKEND.configure(BenchmarkConfig(model="bilstm", precision="mixed_bfloat16"))
    assert (bf16.compute_dtype, bf16.variable_dtype) == ("bfloat16", "float32")
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("xla", [False, True])
def test_the_compiler_is_read_from_the_models_jit_compile(xla: bool) -> None:
    config = BenchmarkConfig(model="bilstm", xla=xla)
    runtime = tfruntime.BACKEND.configure(config)
    model, _ = tfruntime.BACKEND.build_model(get_model("bilstm"), config, runtime)
    assert tfruntime.BACKEND.compiler(model, config) == ("xla" if xla else "none")


@pytest.mark.large
@pytest.mark.parametrize("loop", ["fit", pytest.param("ctl", marks=pytest.mark.large)])
def test_windows_close_on_execution_boundaries_with_a_pipeline(loop: str) -> None:
    config = BenchmarkConfig(
        model="resnet50", loop=loop, data="pipeline", steps_per_execution=5, window_steps=10, warmup_steps=20, steps=20
    )
    spec = get_model(config.model)
    runtime = tfruntime.BACKEND.configure(config)
    model, optimizer = tfruntime.BACKEND.build_model(spec, config, runtime)
    dataset = tfruntime.BACKEND.make_data(spec, config, runtime)
    images, labels = next(iter(dataset))
    assert images.shape == (8, 32, 32, 3) and float(images.numpy().min()) >= -1.0  # decoded, cropped, scaled
    clock = WindowClock(first_steps=5, window_steps=10)
    total = 5 + 20 + 20
    tfruntime.BACKEND.train(model, optimizer, dataset, clock, total, config, runtime)
    assert [m.steps for m in clock.marks] == [5, 15, 25, 35, 45]
    assert all(b.time > a.time for a, b in zip(clock.marks, clock.marks[1:]))
