"""A team's own decoder in Keras, built from keras-hub's Qwen3 backbone with explicit sizes (random weights), that says
what it counts: its throughput in tokens (sequence length of them an example) and that it has attention, so its rows
read tokens/s and name the attention kernel that ran, as the bundled decoders' do. Benchmark it with

    stepwatch run --models examples/team_llm.py:build --keras-backend jax,torch --xla on

The function is the whole contract (docs/reference.md, "Your own model").
"""

import keras
import keras_hub
import numpy as np

SIZES = {
    "tiny": {"layers": 2, "width": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 1000, "length": 64},
    "small": {"layers": 8, "width": 512, "heads": 8, "kv_heads": 4, "ffn": 1536, "vocab": 32000, "length": 512},
}


def build(preset: str = "tiny") -> dict:
    size = SIZES[preset]
    backbone = keras_hub.models.Qwen3Backbone(
        vocabulary_size=size["vocab"],
        num_layers=size["layers"],
        num_query_heads=size["heads"],
        num_key_value_heads=size["kv_heads"],
        head_dim=size["width"] // size["heads"],
        hidden_dim=size["width"],
        intermediate_dim=size["ffn"],
        tie_word_embeddings=False,
    )
    logits = backbone.token_embedding(backbone.output, reverse=True)
    model = keras.Model(inputs=backbone.input, outputs=logits)
    length = size["length"]

    def batch(batch_size: int, seed: int) -> tuple:
        tokens = np.random.default_rng(seed).integers(1, size["vocab"], size=(batch_size, length + 1), dtype=np.int32)
        inputs = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((batch_size, length), dtype=bool)}
        return inputs, tokens[:, 1:]  # the next token at each position

    return {
        "model": model,
        "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        "batch": batch,
        "unit": "tokens",
        "units_per_example": length,
        "attention": True,
    }
