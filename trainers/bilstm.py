"""Bidirectional LSTM text classifier with 1024 units, as in the published TPU v2 / P100 / V100 comparison.

The comparison names the unit count; the vocabulary, embedding width and sequence length here are
this project's choices for a sentence-classification setting and are recorded with every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepwatch.trainers.spec import Batch, ModelSpec, adam, random_tokens, training_flops


@dataclass(frozen=True)
class BiLstmSize:
    vocabulary_size: int
    embedding_dim: int
    units: int  # per direction
    sequence_length: int
    num_classes: int


PRESETS = {
    "tiny": BiLstmSize(vocabulary_size=512, embedding_dim=16, units=32, sequence_length=16, num_classes=2),
    "1024": BiLstmSize(vocabulary_size=20000, embedding_dim=300, units=1024, sequence_length=128, num_classes=2),
}


def build(size: BiLstmSize) -> Any:
    """Embedding -> Bidirectional(LSTM) -> Dense logits."""
    import keras

    tokens = keras.Input(shape=(size.sequence_length,), dtype="int32", name="token_ids")
    x = keras.layers.Embedding(size.vocabulary_size, size.embedding_dim)(tokens)
    x = keras.layers.Bidirectional(keras.layers.LSTM(size.units))(x)
    logits = keras.layers.Dense(size.num_classes, name="logits")(x)
    return keras.Model(tokens, logits, name="bilstm")


def synthetic_batch(size: BiLstmSize, batch: int, seed: int) -> Batch:
    """Random token sequences and class labels."""
    rng = np.random.default_rng(seed)
    tokens = random_tokens(rng, (batch, size.sequence_length), size.vocabulary_size)
    return tokens, rng.integers(0, size.num_classes, size=(batch,), dtype=np.int32)


def forward_macs(size: BiLstmSize) -> float:
    """Four gates a step, each (input + recurrent) x units, both directions, plus the classifier."""
    per_step = 4 * (size.embedding_dim + size.units) * size.units
    return float(2 * size.sequence_length * per_step + 2 * size.units * size.num_classes)


def flops_per_example(size: BiLstmSize) -> float:
    """Training FLOPs per sentence."""
    return training_flops(forward_macs(size))


SPEC = ModelSpec(
    name="bilstm",
    unit="sequences",
    presets=PRESETS,
    build=build,
    synthetic_batch=synthetic_batch,
    flops_per_example=flops_per_example,
    units_per_example=lambda size: 1,
    optimizer=adam,
    default_learning_rate=1e-3,
    description="Bidirectional LSTM text classifier, 1024 units",
)
