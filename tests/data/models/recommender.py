"""A held-out plain PyTorch model, written from docs/reference.md's "Your own model" contract alone: a two-tower
rating model whose inputs are a dict (a user id and an item id), trained on mean squared error with the default
optimizer (none declared)."""

import torch
from torch import nn

USERS, ITEMS = 1000, 5000


class TwoTower(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.users = nn.Sequential(nn.Embedding(USERS, width), nn.Linear(width, width), nn.ReLU())
        self.items = nn.Sequential(nn.Embedding(ITEMS, width), nn.Linear(width, width), nn.ReLU())

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        return (self.users(user) * self.items(item)).sum(dim=-1)


def rating_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(outputs, targets)


def two_tower(preset):
    return {
        "model": TwoTower(width={"tiny": 16}.get(preset, 64)),
        "loss": rating_loss,
        "inputs": {
            "user": {"shape": (), "dtype": "int64", "high": USERS},
            "item": {"shape": (), "dtype": "int64", "high": ITEMS},
        },
        "labels": {"shape": (), "dtype": "float32"},
        "flops_per_example": 6 * 2 * 16 * 16,
    }
