"""A Llama 3.1 decoder pre-trained with the causal-LM loss on synthetic tokens, random weights: RMSNorm, RoPE with
Llama 3.1's frequency scaling, grouped-query attention, SwiGLU, untied input and output embeddings.

In Keras on every backend through keras-hub's ``Llama3Backbone`` (its output projection is the embedding's untied
reverse, as keras-hub's ``Llama3CausalLM`` builds it), and in plain PyTorch through Hugging Face transformers'
``LlamaForCausalLM`` from a ``LlamaConfig``, what teams train in torch: the same sizes, so that the plain loop against
Keras-on-torch is the Keras overhead, as for ResNet-50. Nothing is downloaded: both are built from explicit sizes.

FLOPs are the standard count (PaLM's appendix B; torchtitan's ``get_num_flop_per_token``): 6 x the parameters a
token's matmuls use (all but the input embedding, a lookup) plus the attention's 12 x layers x hidden x sequence,
per token, the causal mask not halved. ``8b`` keeps Llama 3.1 8B's 32 layers (8.03B parameters); ``8b-4l`` and
``8b-8l`` keep its exact widths and 4 or 8 of its layers, which a single GPU holds at sequence 8192.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepwatch.trainers.spec import Batch, ModelSpec, TorchParts, random_tokens


@dataclass(frozen=True)
class LlamaSize:
    num_layers: int
    hidden_dim: int
    num_query_heads: int
    num_key_value_heads: int
    intermediate_dim: int  # SwiGLU's width (gate and up projections)
    vocabulary_size: int
    sequence_length: int
    rope_max_wavelength: float = 500_000.0  # RoPE theta
    # Llama 3.1's RoPE scaling ("llama3" in transformers): wavelengths beyond the pre-training length are stretched by
    # the factor, those under length / high_freq_factor kept, the band between blended.
    rope_factor: float = 8.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_pretraining_sequence_length: int = 8192
    norm_epsilon: float = 1e-5
    full_layers: int = 0  # the layers of the model this preset is cut from (0: all of them)

    @property
    def head_dim(self) -> int:
        return self.hidden_dim // self.num_query_heads


# Llama 3.1 8B (its config.json): hidden 4096, 32 query and 8 key-value heads, FFN 14336, vocabulary 128256,
# RoPE theta 500000, at MLPerf Training v5.1's and torchtitan's sequence 8192.
_8B = dict(hidden_dim=4096, num_query_heads=32, num_key_value_heads=8, intermediate_dim=14336,
           vocabulary_size=128_256, sequence_length=8192)  # fmt: skip

LLAMA31_POSITIONS = 131_072  # Llama 3.1's context (max_position_embeddings), 16 x its pre-training length

PRESETS = {
    "tiny": LlamaSize(2, 64, 4, 2, 128, 1000, 64),
    "8b": LlamaSize(32, **_8B),
    "8b-8l": LlamaSize(8, **_8B, full_layers=32),
    "8b-4l": LlamaSize(4, **_8B, full_layers=32),
}


def build(size: LlamaSize) -> Any:
    """keras-hub's Llama3Backbone of explicit sizes and the untied output projection, logits for every position."""
    import keras_hub

    backbone = keras_hub.models.Llama3Backbone(
        vocabulary_size=size.vocabulary_size,
        num_layers=size.num_layers,
        num_query_heads=size.num_query_heads,
        hidden_dim=size.hidden_dim,
        intermediate_dim=size.intermediate_dim,
        num_key_value_heads=size.num_key_value_heads,
        rope_max_wavelength=size.rope_max_wavelength,
        rope_frequency_adjustment_factor=size.rope_factor,
        rope_low_freq_factor=size.rope_low_freq_factor,
        rope_high_freq_factor=size.rope_high_freq_factor,
        rope_pretraining_sequence_length=size.rope_pretraining_sequence_length,
        layer_norm_epsilon=size.norm_epsilon,
        tie_word_embeddings=False,
    )
    return causal_lm(backbone, "llama_causal_lm")  # as Llama3CausalLM: the untied projection


def causal_lm(backbone: Any, name: str) -> Any:
    """A keras-hub decoder backbone and its embedding's untied reverse (the output projection its CausalLM task
    applies): logits for every position."""
    import keras

    logits = backbone.token_embedding(backbone.output, reverse=True)
    return keras.Model(inputs=backbone.input, outputs=logits, name=name)


def torch_config(size: LlamaSize) -> Any:
    """The same sizes as a transformers ``LlamaConfig``, attention through torch's SDPA."""
    import transformers
    from transformers import LlamaConfig

    scaling = {"rope_type": "llama3", "factor": size.rope_factor, "low_freq_factor": size.rope_low_freq_factor,
               "high_freq_factor": size.rope_high_freq_factor,
               "original_max_position_embeddings": size.rope_pretraining_sequence_length}  # fmt: skip
    if int(transformers.__version__.split(".")[0]) >= 5:  # one dict since transformers 5
        rope = {"rope_parameters": {**scaling, "rope_theta": size.rope_max_wavelength}}
    else:
        rope = {"rope_scaling": scaling, "rope_theta": size.rope_max_wavelength}
    return LlamaConfig(
        vocab_size=size.vocabulary_size,
        hidden_size=size.hidden_dim,
        intermediate_size=size.intermediate_dim,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_query_heads,
        num_key_value_heads=size.num_key_value_heads,
        max_position_embeddings=max(size.sequence_length, LLAMA31_POSITIONS),
        rms_norm_eps=size.norm_epsilon,
        **rope,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        use_cache=False,
        attn_implementation="sdpa",
    )


def build_torch(size: LlamaSize) -> Any:
    """``LlamaForCausalLM`` from its config, random weights, taking the synthetic batch's inputs and returning the
    logits. The padding mask (all ones) is not passed on: given one, transformers builds a dense 4-D mask, and SDPA
    with an explicit mask cannot run the flash kernel; without it the mask is causal, as in pre-training."""
    from transformers import LlamaForCausalLM

    return TorchCausalLM(LlamaForCausalLM(torch_config(size)))


def TorchCausalLM(model: Any) -> Any:  # noqa: N802 (builds an nn.Module, which torch is imported for only here)
    """A transformers causal LM that takes the synthetic batch's inputs and returns the logits; the padding mask (all
    ones) is not passed on."""
    from torch import nn

    class CausalLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, token_ids: Any, padding_mask: Any = None) -> Any:
            return self.model(input_ids=token_ids).logits

    return CausalLM()


def torch_loss() -> Any:
    """Cross-entropy over every position's logits against the next token (torchtitan's, in float32)."""
    import torch

    def loss(logits: Any, targets: Any) -> Any:
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

    return loss


def torch_optimizer(parameters: Any, learning_rate: float) -> Any:
    """AdamW, betas (0.9, 0.95) and weight decay 0.1, as Llama 3 pre-trained (and torchtitan's Llama 3.1 8B)."""
    import torch

    return torch.optim.AdamW(parameters, lr=learning_rate, betas=(0.9, 0.95), weight_decay=0.1)


def optimizer(learning_rate: float) -> Any:
    """The same AdamW in Keras."""
    import keras

    return keras.optimizers.AdamW(learning_rate=learning_rate, beta_1=0.9, beta_2=0.95, weight_decay=0.1)


# Every synthetic sequence repeats a random motif of this many tokens: past its first motif, each next token is the
# one PERIOD positions back, which attention finds by relative position (RoPE's job). The loss then falls by learning
# (to about a motif's share of ln(vocabulary)), not only by memorising the batches, and a change to the positional
# encoding changes the training (the numerics verdict). Speed does not depend on the tokens' values.
PERIOD = 16


def synthetic_batch(size: LlamaSize, batch: int, seed: int) -> Batch:
    """Sequences of a random motif repeated (``PERIOD``), full length; labels are the next token of each position."""
    rng = np.random.default_rng(seed)
    motif = random_tokens(rng, (batch, PERIOD), size.vocabulary_size)
    tokens = np.tile(motif, (1, -(-(size.sequence_length + 1) // PERIOD)))[:, : size.sequence_length + 1]
    inputs = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((batch, size.sequence_length), dtype=np.int32)}
    return inputs, np.ascontiguousarray(tokens[:, 1:])


def parameters(size: LlamaSize) -> int:
    """Every weight: the input embedding, per layer the Q, K, V and output projections, SwiGLU's three matrices and
    two RMSNorm scales, the final norm and the untied output projection."""
    d, kv = size.hidden_dim, size.num_key_value_heads * size.head_dim
    layer = 2 * d * d + 2 * d * kv + 3 * d * size.intermediate_dim + 2 * d
    return size.vocabulary_size * d + size.num_layers * layer + d + d * size.vocabulary_size


def flops_per_token(size: LlamaSize) -> float:
    """6 x the parameters a token multiplies by (every one but the input embedding's lookup) + 12 x layers x hidden x
    sequence for the attention scores and their weighted sum, forward and backward."""
    dense = parameters(size) - size.vocabulary_size * size.hidden_dim
    return float(6 * dense + 12 * size.num_layers * size.hidden_dim * size.sequence_length)


def flops_per_example(size: LlamaSize) -> float:
    """Training FLOPs per sequence."""
    return flops_per_token(size) * size.sequence_length


SPEC = ModelSpec(
    name="llama",
    unit="tokens",
    presets=PRESETS,
    build=build,
    synthetic_batch=synthetic_batch,
    flops_per_example=flops_per_example,
    units_per_example=lambda size: size.sequence_length,
    optimizer=optimizer,
    default_learning_rate=3e-4,
    description="Llama 3.1 decoder, causal-LM pre-training (keras-hub Llama3Backbone; transformers LlamaForCausalLM "
    "for the plain PyTorch loop), random weights",
    torch=TorchParts(build=build_torch, optimizer=torch_optimizer, loss=torch_loss),
    attention=True,
)
