"""A mixture-of-experts decoder with GPT-OSS 20B's architecture, pre-trained with the causal-LM loss on synthetic
tokens, random weights: MLPerf Training v6.0's GPT-OSS 20B benchmark, as one GPU holds a few of its layers.

Per layer: grouped-query attention (64 query and 8 key-value heads of 64, biased projections, a learned sink logit
per head), on alternating layers a 128-token sliding window (the others attend to the whole sequence), and a routed
feed-forward: a linear router picks 4 of 32 experts per token (softmax over the chosen 4), each expert a clamped
SwiGLU of width 2880 with biases. RMSNorm, YaRN RoPE (theta 150000, factor 32), untied input and output embeddings.

In plain PyTorch through Hugging Face transformers' ``GptOssForCausalLM`` from an explicit ``GptOssConfig`` (its
defaults are the 120B shape), its experts run by ``experts_implementation`` (``grouped_mm``, transformers' default
where ``torch._grouped_mm`` can dispatch, else ``eager``: a loop over the experts that got tokens), its attention
``eager`` (the sinks rule out SDPA). In Keras on every backend through keras-hub's ``GptOssBackbone`` at the same
sizes, which computes every expert for every token and weights them by the router (8x the routed FLOPs at 4 of 32):
its MFU counts the model's FLOPs, not those that implementation spends. keras-hub's backbone has no attention sinks
and no YaRN parameters beyond a scaling factor; it is the same model otherwise.

FLOPs per token are counted from the active parameters, as torchtitan's ``get_moe_model_nparams_and_flops`` does:
6 x the parameters a token multiplies by (attention, router, the shared norms, its 4 experts' share of the experts,
the output projection; not the input embedding, a lookup) plus the attention scores and their weighted sum,
12 x heads x head width x the keys each query sees, forward and backward: the whole sequence on a full layer (the
causal mask not halved, as for ``llama``), the window's 128 tokens on a sliding one. MLPerf v6.0 trains GPT-OSS 20B
with the Llama 3.1 tokenizer (vocabulary 128256) at sequence 8192, micro-batch 2, bf16, no auxiliary loss and no
token dropping: ``20b`` is that shape, ``20b-4l`` and ``20b-2l`` its exact widths at 4 and 2 of its 24 layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepwatch.trainers import llama
from stepwatch.trainers.spec import ModelSpec, TorchParts

EXPERTS_IMPLEMENTATIONS = ("grouped_mm", "batched_mm", "eager")  # transformers' (integrations/moe.py), CPU-capable


@dataclass(frozen=True)
class GptOssSize:
    num_layers: int
    hidden_dim: int
    num_query_heads: int
    num_key_value_heads: int
    head_dim: int
    num_experts: int
    experts_per_token: int
    intermediate_dim: int  # each expert's SwiGLU width
    vocabulary_size: int
    sequence_length: int
    sliding_window: int = 128  # on alternating layers (the first, third, ...), the others full attention
    rope_max_wavelength: float = 150_000.0
    rope_factor: float = 32.0  # YaRN
    rope_pretraining_sequence_length: int = 4096
    norm_epsilon: float = 1e-5
    full_layers: int = 0  # the layers of the model this preset is cut from (0: all of them)

    @property
    def sliding_layers(self) -> int:
        return (self.num_layers + 1) // 2


# GPT-OSS 20B (its config.json): hidden 2880, 24 layers, 64 query and 8 key-value heads of 64, 32 experts of width
# 2880 with 4 a token, a 128-token window on alternating layers; at MLPerf v6.0's vocabulary and sequence.
_20B = dict(hidden_dim=2880, num_query_heads=64, num_key_value_heads=8, head_dim=64, num_experts=32,
            experts_per_token=4, intermediate_dim=2880, vocabulary_size=128_256, sequence_length=8192)  # fmt: skip
GPT_OSS_VOCABULARY = 201_088  # its own tokenizer's (o200k_harmony), for the published total
GPT_OSS_POSITIONS = 131_072

PRESETS = {
    "tiny": GptOssSize(2, 64, 4, 2, 16, 8, 2, 64, 1000, 64, sliding_window=16),
    "20b": GptOssSize(24, **_20B),
    "20b-4l": GptOssSize(4, **_20B, full_layers=24),
    "20b-2l": GptOssSize(2, **_20B, full_layers=24),
}


def _attention_parameters(size: GptOssSize) -> int:
    """Q, K, V and output projections with their biases, and a sink logit per head."""
    d, q, kv = size.hidden_dim, size.num_query_heads * size.head_dim, size.num_key_value_heads * size.head_dim
    return d * q + q + 2 * (d * kv + kv) + q * d + d + size.num_query_heads


def _expert_parameters(size: GptOssSize) -> int:
    """One expert: the fused gate-and-up projection (2 x width) and the down projection, with biases."""
    d, f = size.hidden_dim, size.intermediate_dim
    return d * 2 * f + 2 * f + f * d + d


def parameters(size: GptOssSize) -> int:
    """Every weight: the input embedding, per layer attention, the router (with its bias), every expert and two
    RMSNorm scales, the final norm and the untied output projection."""
    d = size.hidden_dim
    router = d * size.num_experts + size.num_experts
    layer = _attention_parameters(size) + router + size.num_experts * _expert_parameters(size) + 2 * d
    return size.vocabulary_size * d + size.num_layers * layer + d + d * size.vocabulary_size


def active_parameters(size: GptOssSize) -> int:
    """The weights one token multiplies by: all but the input embedding (a lookup) and the experts it was not
    routed to (``experts_per_token`` of ``num_experts``)."""
    idle = size.num_layers * (size.num_experts - size.experts_per_token) * _expert_parameters(size)
    return parameters(size) - size.vocabulary_size * size.hidden_dim - idle


def flops_per_token(size: GptOssSize) -> float:
    """6 x the active parameters + the attention's 12 x heads x head width x the keys a query sees, per layer: the
    sequence on a full layer, the window on a sliding one."""
    width = size.num_query_heads * size.head_dim
    window = min(size.sliding_window, size.sequence_length)
    full = size.num_layers - size.sliding_layers
    attention = 12 * width * (full * size.sequence_length + size.sliding_layers * window)
    return float(6 * active_parameters(size) + attention)


def flops_per_example(size: GptOssSize) -> float:
    """Training FLOPs per sequence."""
    return flops_per_token(size) * size.sequence_length


def build(size: GptOssSize) -> Any:
    """keras-hub's GptOssBackbone of explicit sizes and its untied output projection, logits for every position."""
    import keras_hub

    backbone = keras_hub.models.GptOssBackbone(
        vocabulary_size=size.vocabulary_size,
        num_layers=size.num_layers,
        num_query_heads=size.num_query_heads,
        hidden_dim=size.hidden_dim,
        intermediate_dim=size.intermediate_dim,
        num_key_value_heads=size.num_key_value_heads,
        num_experts=size.num_experts,
        top_k=size.experts_per_token,
        rope_max_wavelength=size.rope_max_wavelength,
        rope_scaling_factor=size.rope_factor,
        layer_norm_epsilon=size.norm_epsilon,
        sliding_window=size.sliding_window,
        head_dim=size.head_dim,
    )
    return llama.causal_lm(backbone, "gpt_oss_causal_lm")  # as GptOssCausalLM


def torch_config(size: GptOssSize, experts: str | None = None) -> Any:
    """The same sizes as a transformers ``GptOssConfig``: attention ``eager``, experts ``experts`` (None or auto:
    transformers' own choice), no auxiliary loss (MLPerf v6.0 trains without one)."""
    from transformers import GptOssConfig

    rope = {"rope_type": "yarn", "rope_theta": size.rope_max_wavelength, "factor": size.rope_factor,
            "original_max_position_embeddings": size.rope_pretraining_sequence_length,
            "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}  # fmt: skip
    kinds = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(size.num_layers)]
    options = {} if experts in (None, "auto") else {"experts_implementation": experts}
    return GptOssConfig(
        num_hidden_layers=size.num_layers,
        num_local_experts=size.num_experts,
        num_experts_per_tok=size.experts_per_token,
        vocab_size=size.vocabulary_size,
        hidden_size=size.hidden_dim,
        intermediate_size=size.intermediate_dim,
        head_dim=size.head_dim,
        num_attention_heads=size.num_query_heads,
        num_key_value_heads=size.num_key_value_heads,
        sliding_window=size.sliding_window,
        layer_types=kinds,
        max_position_embeddings=max(size.sequence_length, GPT_OSS_POSITIONS),
        rms_norm_eps=size.norm_epsilon,
        rope_parameters=rope,
        tie_word_embeddings=False,
        router_aux_loss_coef=0.0,
        output_router_logits=False,
        use_cache=False,
        attn_implementation="eager",
        **options,
    )


def build_torch(size: GptOssSize, experts: str | None = None) -> Any:
    """``GptOssForCausalLM`` from its config, random weights, taking the synthetic batch's inputs and returning the
    logits (the padding mask, all ones, not passed on: the mask is causal, and sliding on its sliding layers)."""
    from transformers import GptOssForCausalLM

    return llama.TorchCausalLM(GptOssForCausalLM(torch_config(size, experts)))


SPEC = ModelSpec(
    name="gpt_oss",
    unit="tokens",
    presets=PRESETS,
    build=build,
    synthetic_batch=llama.synthetic_batch,
    flops_per_example=flops_per_example,
    units_per_example=lambda size: size.sequence_length,
    optimizer=llama.optimizer,
    default_learning_rate=3e-4,
    description="GPT-OSS 20B's mixture of experts, causal-LM pre-training (keras-hub GptOssBackbone; transformers "
    "GptOssForCausalLM for the plain PyTorch loop), random weights",
    torch=TorchParts(build=build_torch, optimizer=llama.torch_optimizer, loss=llama.torch_loss),
    attention=True,
    experts=True,
)
