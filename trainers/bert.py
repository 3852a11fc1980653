"""BERT pre-training with the masked-LM objective: keras-hub BertBackbone + its masked-LM head."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepwatch.trainers.spec import Batch, ModelSpec, encoder_layer_macs, random_tokens, training_flops


@dataclass(frozen=True)
class BertSize:
    num_layers: int
    hidden_dim: int
    num_heads: int
    intermediate_dim: int
    vocabulary_size: int
    sequence_length: int
    masked_per_sequence: int  # max_predictions_per_seq of the reference pre-training scripts
    dropout: float


_BASE = dict(num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072)
_LARGE = dict(num_layers=24, hidden_dim=1024, num_heads=16, intermediate_dim=4096)
_VOCAB = 30522  # uncased WordPiece vocabulary of the original release

PRESETS = {
    "tiny": BertSize(2, 64, 2, 128, 1000, 32, 4, dropout=0.0),
    "base-128": BertSize(**_BASE, vocabulary_size=_VOCAB, sequence_length=128, masked_per_sequence=20, dropout=0.1),
    "base-512": BertSize(**_BASE, vocabulary_size=_VOCAB, sequence_length=512, masked_per_sequence=80, dropout=0.1),
    "large-128": BertSize(**_LARGE, vocabulary_size=_VOCAB, sequence_length=128, masked_per_sequence=20, dropout=0.1),
    "large-512": BertSize(**_LARGE, vocabulary_size=_VOCAB, sequence_length=512, masked_per_sequence=80, dropout=0.1),
}


def build(size: BertSize) -> Any:
    """A BertBackbone of explicit sizes and a masked-LM head tied to its token embedding, random weights, logits
    for the masked positions: keras-hub's BertMaskedLM graph, built as a plain Keras model so that ``fit`` trains
    it on every backend (the keras-hub task's own input handling needs TensorFlow or grain)."""
    import keras
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=size.vocabulary_size,
        num_layers=size.num_layers,
        num_heads=size.num_heads,
        hidden_dim=size.hidden_dim,
        intermediate_dim=size.intermediate_dim,
        dropout=size.dropout,
        max_sequence_length=size.sequence_length,
    )
    # The same layers, in the same order, as BertMaskedLM builds (so weights from one seed are the same).
    head = keras_hub.layers.MaskedLMHead(
        vocabulary_size=backbone.vocabulary_size,
        token_embedding=backbone.token_embedding,
        intermediate_activation="gelu",
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        dtype=backbone.dtype_policy,
        name="mlm_head",
    )
    mask_positions = keras.Input(shape=(None,), dtype="int32", name="mask_positions")
    inputs = {**backbone.input, "mask_positions": mask_positions}
    outputs = head(backbone(backbone.input)["sequence_output"], mask_positions)
    return keras.Model(inputs=inputs, outputs=outputs, name="bert_masked_lm")


def synthetic_batch(size: BertSize, batch: int, seed: int) -> Batch:
    """Full-length sequences, two segments, distinct sorted mask positions, random target tokens."""
    rng = np.random.default_rng(seed)
    t, p = size.sequence_length, size.masked_per_sequence
    segment_ids = np.zeros((batch, t), dtype=np.int32)
    segment_ids[:, t // 2 :] = 1
    positions = np.sort(np.stack([rng.choice(t, size=p, replace=False) for _ in range(batch)]), axis=1)
    inputs = {
        "token_ids": random_tokens(rng, (batch, t), size.vocabulary_size),
        "segment_ids": segment_ids,
        "padding_mask": np.ones((batch, t), dtype=np.int32),
        "mask_positions": positions.astype(np.int32),
    }
    return inputs, random_tokens(rng, (batch, p), size.vocabulary_size)


def forward_macs(size: BertSize) -> float:
    """Encoder stack over the full sequence plus the MLM head on the masked positions."""
    t, d = size.sequence_length, size.hidden_dim
    encoder = size.num_layers * encoder_layer_macs(t, t, d, size.intermediate_dim)
    head = size.masked_per_sequence * (d * d + d * size.vocabulary_size)
    return float(encoder + head)


def flops_per_example(size: BertSize) -> float:
    """Training FLOPs per sequence (~6 N + 12 L d T per token for the encoder)."""
    return training_flops(forward_macs(size))


def optimizer(learning_rate: float) -> Any:
    """AdamW with weight decay 0.01, as in BERT pre-training."""
    import keras

    return keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=0.01, epsilon=1e-6)


SPEC = ModelSpec(
    name="bert",
    unit="sequences",
    presets=PRESETS,
    build=build,
    synthetic_batch=synthetic_batch,
    flops_per_example=flops_per_example,
    units_per_example=lambda size: 1,
    optimizer=optimizer,
    default_learning_rate=1e-4,
    description="BERT masked-LM pre-training (keras-hub BertBackbone, random weights)",
    attention=True,
)
