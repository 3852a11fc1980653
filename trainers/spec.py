"""What every trainer module provides: sizes, a model builder, synthetic batches and analytic FLOPs.

The bundled models are Keras 3 (``keras.layers``, ``keras.ops``, ``keras_hub``), so each runs on every Keras
backend, and ResNet-50 also has a plain PyTorch build (``TorchParts``: ``torch_resnet50.py``), for the loop without
Keras. Keras and torch are imported inside the builders only, so that the
collector's parent process can validate suites and compute FLOPs without starting TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

# One synthetic batch: model inputs (an array or a dict of arrays) and labels (integer classes, or the teacher's
# outputs for a regression).
Batch = tuple[Any, np.ndarray]


def sparse_ce_loss(**options: Any) -> Any:
    """Mean sparse categorical cross-entropy on logits, the loss of the classifiers here (``options``: the loss's
    own, e.g. ``reduction=None`` for a custom loop's per-example losses)."""
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, **options)


def torch_ce_loss() -> Any:
    """Cross-entropy from logits against integer labels, in torch (the bundled models' loss, as ``sparse_ce_loss``)."""
    import torch

    return torch.nn.CrossEntropyLoss()


@dataclass(frozen=True)
class TorchParts:
    """A model in plain PyTorch: the module (from the preset), its optimizer and its loss, as a PyTorch user
    writes them. Batches are the spec's own ``synthetic_batch``, converted to tensors."""

    build: Callable[[Any], Any]  # preset -> torch.nn.Module (random weights)
    optimizer: Callable[[Any, float], Any]  # (parameters, learning rate) -> torch.optim.Optimizer
    loss: Callable[[], Any] = torch_ce_loss  # () -> loss(outputs, targets)


@dataclass(frozen=True)
class ModelSpec:
    """A benchmarkable model: named presets and the functions that build and feed it."""

    name: str
    unit: str  # what one throughput unit is: images, sequences or tokens
    presets: Mapping[str, Any]  # preset name -> frozen dataclass of explicit sizes
    build: Callable[[Any], Any]  # preset -> keras.Model (random weights, uncompiled)
    synthetic_batch: Callable[[Any, int, int], Batch]  # (preset, batch, seed) -> batch
    flops_per_example: Callable[[Any], float]  # analytic training FLOPs (forward + backward)
    units_per_example: Callable[[Any], int]  # e.g. target tokens per sequence
    optimizer: Callable[[float], Any]  # learning rate -> keras optimizer
    default_learning_rate: float
    description: str = ""
    loss: Callable[..., Any] = sparse_ce_loss  # (**options) -> the Keras loss ``fit`` trains with
    # preset -> the training loss a run's steps should reach (time to target); None: the model has no target.
    target_loss: Callable[[Any], float | None] = lambda preset: None
    torch: TorchParts | None = None  # the same model in plain PyTorch (loop "pytorch"), where there is one
    attention: bool = False  # the model has attention: its rows record the kernel that ran (``attention_kernel``)
    experts: bool = False  # it routes tokens to experts: its rows record the kernel that ran and the routing balance
    # What a model of yours said of itself once its function ran (its unit, attention, experts): ``as_built``.
    said: Callable[[], Mapping[str, Any]] = dict

    def as_built(self) -> ModelSpec:
        """This spec as the model says it is once built: a model of yours may give its unit, and say that it has
        attention or experts (``trainers.user.SAYS``); a bundled model is what its spec says."""
        said = self.said()
        return replace(self, **said) if said else self

    def learning_rate(self, override: float | None) -> float:
        """The learning rate a run uses: the config's when it sets one, else this model's default."""
        return self.default_learning_rate if override is None else override

    def preset(self, name: str, sequence_length: int = 0) -> Any:
        """Return the preset called ``name``, at ``sequence_length`` tokens where that is set (0: the preset's own),
        or raise KeyError naming the known presets, or saying the model has no sequence."""
        if name not in self.presets:
            known = ", ".join(sorted(self.presets))
            raise KeyError(f"model {self.name!r} has no preset {name!r} (known: {known})")
        size = self.presets[name]
        if not sequence_length:
            return size
        if not hasattr(size, "sequence_length"):
            raise KeyError(f"model {self.name!r} has no sequence: sequence_length {sequence_length} cannot be set")
        return replace(size, sequence_length=sequence_length)


# The synthetic batches a trial trains on in turn, all placed on the device before the first step: enough distinct
# examples that a loss still moves after a few hundred steps (one batch repeated is learned away within them), and
# none copied during the timed steps.
POOL = 8


def batch_pool(spec: ModelSpec, preset: Any, batch: int, seed: int) -> list[Batch]:
    """The ``POOL`` batches of a trial whose seed is ``seed``: each seed its own, so trials differ in their data as in
    their initial weights, and trial i of one side of a check trains on what trial i of the other does."""
    return [spec.synthetic_batch(preset, batch, seed * POOL + i) for i in range(POOL)]


def adam(learning_rate: float) -> Any:
    """Adam at Keras' defaults: the bilstm's and the teacher's student's optimizer, and a model of yours' default."""
    import keras

    return keras.optimizers.Adam(learning_rate=learning_rate)


def training_flops(forward_macs: float) -> float:
    """Training FLOPs from forward multiply-accumulates: 2 FLOPs a MAC, backward ~ 2x forward."""
    return 3.0 * 2.0 * forward_macs


def random_tokens(rng: np.random.Generator, shape: tuple[int, ...], vocab: int) -> np.ndarray:
    """Token ids drawn uniformly, skipping id 0 (padding)."""
    return rng.integers(1, vocab, size=shape, dtype=np.int32)


def encoder_layer_macs(tokens: int, keys: int, d: int, intermediate: int) -> float:
    """One transformer encoder layer: Q/K/V/output projections, attention over ``keys``, feed-forward."""
    return tokens * (4 * d * d + 2 * d * intermediate) + 2 * tokens * keys * d
