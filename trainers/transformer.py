"""Encoder-decoder Transformer for translation (Vaswani et al. 2017) from keras-hub layers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepwatch.trainers.spec import Batch, ModelSpec, encoder_layer_macs, random_tokens, training_flops


@dataclass(frozen=True)
class TransformerSize:
    num_layers: int  # per stack: encoder and decoder each have this many
    model_dim: int
    num_heads: int
    ff_dim: int
    vocabulary_size: int  # shared source/target subword vocabulary
    sequence_length: int  # source and target length
    dropout: float


_VOCAB = 33708  # WMT14 en-de subword vocabulary of the Model Garden's Transformer

PRESETS = {
    "tiny": TransformerSize(1, 32, 2, 64, 512, 16, dropout=0.0),
    "base": TransformerSize(6, 512, 8, 2048, _VOCAB, 128, dropout=0.1),
    "big": TransformerSize(6, 1024, 16, 4096, _VOCAB, 128, dropout=0.3),
}


def build(size: TransformerSize) -> Any:
    """Encoder and decoder stacks with token+position embeddings and a vocabulary projection."""
    import keras
    import keras_hub

    length, vocab = size.sequence_length, size.vocabulary_size
    source = keras.Input(shape=(length,), dtype="int32", name="encoder_token_ids")
    target = keras.Input(shape=(length,), dtype="int32", name="decoder_token_ids")

    def embed(name: str) -> Any:
        return keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size=vocab, sequence_length=length, embedding_dim=size.model_dim, name=name
        )

    def block(layer_cls: Any) -> Any:
        return layer_cls(intermediate_dim=size.ff_dim, num_heads=size.num_heads, dropout=size.dropout)

    x = embed("encoder_embedding")(source)
    for _ in range(size.num_layers):
        x = block(keras_hub.layers.TransformerEncoder)(x)
    y = embed("decoder_embedding")(target)
    for _ in range(size.num_layers):
        y = block(keras_hub.layers.TransformerDecoder)(y, encoder_sequence=x)
    logits = keras.layers.Dense(vocab, name="logits")(y)
    return keras.Model({"encoder_token_ids": source, "decoder_token_ids": target}, logits, name="transformer")


def synthetic_batch(size: TransformerSize, batch: int, seed: int) -> Batch:
    """Random source and target sentences; labels are the target shifted left by one."""
    rng = np.random.default_rng(seed)
    shape = (batch, size.sequence_length)
    target = random_tokens(rng, (batch, size.sequence_length + 1), size.vocabulary_size)
    inputs = {
        "encoder_token_ids": random_tokens(rng, shape, size.vocabulary_size),
        "decoder_token_ids": target[:, :-1],
    }
    return inputs, np.ascontiguousarray(target[:, 1:])


def forward_macs(size: TransformerSize) -> float:
    """Encoder layers, decoder layers (causal self-attention counted in full, cross-attention), projection."""
    t, d, ff = size.sequence_length, size.model_dim, size.ff_dim
    encoder = size.num_layers * encoder_layer_macs(t, t, d, ff)
    cross = t * 2 * d * d + t * 2 * d * d + 2 * t * t * d  # Q/O on target, K/V on source, scores
    decoder = size.num_layers * (encoder_layer_macs(t, t, d, ff) + cross)
    return float(encoder + decoder + t * d * size.vocabulary_size)


def flops_per_example(size: TransformerSize) -> float:
    """Training FLOPs per sentence pair."""
    return training_flops(forward_macs(size))


def optimizer(learning_rate: float) -> Any:
    """Adam with beta2 0.98 and epsilon 1e-9, as in the paper (warm-up schedule left out)."""
    import keras

    return keras.optimizers.Adam(learning_rate=learning_rate, beta_1=0.9, beta_2=0.98, epsilon=1e-9)


SPEC = ModelSpec(
    name="transformer",
    unit="tokens",
    presets=PRESETS,
    build=build,
    synthetic_batch=synthetic_batch,
    flops_per_example=flops_per_example,
    units_per_example=lambda size: size.sequence_length,  # target tokens per sentence pair
    optimizer=optimizer,
    default_learning_rate=5e-4,
    description="Transformer encoder-decoder translation model (keras-hub layers, random weights)",
    attention=True,
)
