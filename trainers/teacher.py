"""A teacher-student regression: a fixed random teacher network labels synthetic inputs and a wider student
learns its function, to a target loss. MLPerf measures time to a target quality; this is that metric at a scale a
CI runner trains in seconds, with nothing downloaded: the task is defined by the teacher's seed alone.

The teacher (one tanh hidden layer, ``TEACHER_SEED``) is the same in every trial and on every backend; its outputs
are scaled to unit variance, so a student that predicts nothing has a loss of about 1, and the target (0.1: nine
tenths of the variance explained) means the same in every preset. Inputs are fresh Gaussian draws for every
example: the student learns the teacher's function, it cannot memorise its batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepwatch.trainers.spec import Batch, ModelSpec, adam, training_flops

TEACHER_SEED = 20260601
TARGET_LOSS = 0.1  # mean squared error against unit-variance labels: 90% of the variance explained


@dataclass(frozen=True)
class TeacherSize:
    inputs: int
    teacher_hidden: int
    student_hidden: int  # the student's two hidden layers
    outputs: int


PRESETS = {
    "tiny": TeacherSize(inputs=16, teacher_hidden=16, student_hidden=64, outputs=4),
    "base": TeacherSize(inputs=256, teacher_hidden=256, student_hidden=2048, outputs=64),
    "large": TeacherSize(inputs=1024, teacher_hidden=1024, student_hidden=8192, outputs=256),
}


def teacher(size: TeacherSize) -> tuple[np.ndarray, np.ndarray, float]:
    """The teacher's two weight matrices and the scale that gives its outputs unit variance."""
    rng = np.random.default_rng(TEACHER_SEED)
    w1 = rng.standard_normal((size.inputs, size.teacher_hidden)) * np.sqrt(2.0 / size.inputs)
    w2 = rng.standard_normal((size.teacher_hidden, size.outputs)) / np.sqrt(size.teacher_hidden)
    probe = np.tanh(rng.standard_normal((4096, size.inputs)) @ w1) @ w2
    return w1, w2, float(1.0 / probe.std())


def synthetic_batch(size: TeacherSize, batch: int, seed: int) -> Batch:
    """Gaussian inputs and the teacher's outputs for them (float32)."""
    w1, w2, scale = teacher(size)
    x = np.random.default_rng(seed).standard_normal((batch, size.inputs))
    y = np.tanh(x @ w1) @ w2 * scale
    return x.astype(np.float32), y.astype(np.float32)


def build(size: TeacherSize) -> Any:
    """The student: two GELU hidden layers and a linear output."""
    import keras

    inputs = keras.Input(shape=(size.inputs,), name="inputs")
    x = keras.layers.Dense(size.student_hidden, activation="gelu")(inputs)
    x = keras.layers.Dense(size.student_hidden, activation="gelu")(x)
    outputs = keras.layers.Dense(size.outputs, name="outputs", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="student")


def mse_loss(**options: Any) -> Any:
    import keras

    return keras.losses.MeanSquaredError(**options)


def flops_per_example(size: TeacherSize) -> float:
    h = size.student_hidden
    return training_flops(size.inputs * h + h * h + h * size.outputs)


SPEC = ModelSpec(
    name="teacher",
    unit="examples",
    presets=PRESETS,
    build=build,
    synthetic_batch=synthetic_batch,
    flops_per_example=flops_per_example,
    units_per_example=lambda size: 1,
    optimizer=adam,
    default_learning_rate=1e-3,
    description="Teacher-student regression to a target loss (time to target)",
    loss=mse_loss,
    target_loss=lambda size: TARGET_LOSS,
)
