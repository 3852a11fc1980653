"""A small GPT-style language model in plain PyTorch, as a PyTorch user writes one: token and position
embeddings, pre-norm causal transformer blocks (torch.nn's own), a linear head, AdamW. Benchmark its training
step, in the loop PyTorch users write (no Keras), with

    stepwatch run --models examples/torch_gpt.py:tiny_gpt --keras-backend torch --loop pytorch --xla off,on

(`--xla on` is torch.compile). The function is the whole contract (docs/reference.md, "Your own model"): it
builds the module with random weights, its loss and optimizer, and says what one example and its target are.
"""

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {
    "tiny": {"vocab": 512, "width": 64, "heads": 4, "layers": 2, "length": 64},
    "small": {"vocab": 8192, "width": 384, "heads": 6, "layers": 6, "length": 256},
}


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int, length: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(length, width))
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(length), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position
        return self.head(self.blocks(x, mask=self.mask, is_causal=True))


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def tiny_gpt(preset: str = "tiny") -> dict:
    size = SIZES[preset]
    model = TinyGPT(**size)
    tokens = {"shape": (size["length"],), "dtype": "int64", "high": size["vocab"]}
    return {
        "model": model,
        "loss": next_token_loss,
        "optimizer": torch.optim.AdamW(model.parameters(), lr=3e-4),
        "inputs": tokens,
        "labels": tokens,  # the next token at each position (random here: the speed does not depend on it)
    }
