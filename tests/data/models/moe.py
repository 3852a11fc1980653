"""A team's own mixture of experts in plain PyTorch, written from docs/reference.md ("Your own model"): a tiny
transformers GptOssForCausalLM (8 experts, 2 a token) that says it counts tokens and has attention and experts.
``skewed`` is the same model with a planted router bias: the first two experts favoured in every layer, which sends
most tokens to them while every kernel stays the same."""

import torch
import torch.nn.functional as F
from transformers import GptOssConfig, GptOssForCausalLM

ROUTER_BIAS = 0.0
LENGTH, VOCABULARY = 64, 1000


class Decoder(torch.nn.Module):
    def __init__(self, router_bias: float) -> None:
        super().__init__()
        config = GptOssConfig(
            num_hidden_layers=2, num_local_experts=8, num_experts_per_tok=2, vocab_size=VOCABULARY, hidden_size=64,
            intermediate_size=64, head_dim=16, num_attention_heads=4, num_key_value_heads=2, sliding_window=16,
            layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256,
            tie_word_embeddings=False, router_aux_loss_coef=0.0, use_cache=False, attn_implementation="eager",
        )  # fmt: skip
        self.lm = GptOssForCausalLM(config)
        with torch.no_grad():
            for layer in self.lm.model.layers:
                layer.mlp.router.bias[:2] += router_bias

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=tokens).logits


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def build(preset: str = "tiny", router_bias: float = ROUTER_BIAS) -> dict:
    model = Decoder(router_bias)
    tokens = {"shape": (LENGTH,), "dtype": "int64", "high": VOCABULARY}
    return {
        "model": model,
        "loss": next_token_loss,
        "optimizer": torch.optim.AdamW(model.parameters(), lr=3e-3),
        "inputs": tokens,
        "labels": tokens,
        "unit": "tokens",
        "units_per_example": LENGTH,
        "attention": True,
        "experts": True,
    }


def skewed(preset: str = "tiny") -> dict:
    return build(preset, router_bias=2.0)
