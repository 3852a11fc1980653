"""Routing balance of a model with experts: how many tokens each expert of each layer got, read after the timed steps
from a forward pass over the trial's batches (the ``POOL`` batches it trained on, the weights as training left them),
and summed up for the row.

A step of a mixture of experts waits on its busiest expert: with expert parallelism on its device's share of the
tokens, on one device on the largest of the per-expert matmuls. An unbalanced router (a changed initialisation, bias
update or loss) slows training without changing any kernel. The row keeps

- ``routing_max_load``: the busiest expert's tokens over an even share (the layer's routed tokens over its experts),
  in the worst layer: 1.0 is perfectly even, ``experts / experts_per_token`` is every token sent to one expert;
- ``routing_idle_experts``: experts, over all layers, that got no token;
- ``routing_tokens`` (in extras): the counts themselves, one list per layer.

A router is found by its class name, the convention transformers (``GptOssTopKRouter``, ``Qwen3MoeTopKRouter``,
``MixtralTopKRouter``, ...: they return the logits, the weights and the chosen experts' indices) and keras-hub
(``GptOssTopKRouter``: it returns each token's weights over all experts, zero where it was not routed) share.
This module imports no framework: each backend counts with its own (``torch_routed``, ``keras_routed``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

ROUTER_SUFFIX = "TopKRouter"
NO_ROUTER = f"no router found (a module or layer whose class name ends in {ROUTER_SUFFIX}, as transformers' do)"


def balance(counts: Sequence[Sequence[int]]) -> dict[str, Any]:
    """The row's routing fields from tokens per expert, one sequence per layer (``routing_max_load`` over the layers
    that routed any token)."""
    loads = [max(layer) * len(layer) / sum(layer) for layer in counts if sum(layer)]
    if not loads:
        raise ValueError("the routers routed no token")
    return {
        "routing_max_load": round(max(loads), 6),
        "routing_idle_experts": sum(1 for layer in counts for tokens in layer if tokens == 0),
        "routing_tokens": [[int(tokens) for tokens in layer] for layer in counts],
    }


def routers_of(layers: Iterable[Any]) -> list[Any]:
    """The routers among a model's modules or layers, in order (``ROUTER_SUFFIX``); LookupError where there is none."""
    found = [layer for layer in layers if type(layer).__name__.endswith(ROUTER_SUFFIX)]
    if not found:
        raise LookupError(NO_ROUTER)
    return found


def torch_routed(module: Any, batches: Iterable[Any], forward: Any) -> list[list[int]]:
    """Tokens per expert per router of a torch module, over ``forward(x)`` of each batch's inputs without gradients:
    each router's forward is hooked for the indices it returns last (transformers' routers)."""
    import torch

    routers = routers_of(module.modules())
    counts: list[Any] = [None] * len(routers)

    def counter(i: int) -> Any:
        def seen(router: Any, args: Any, out: Any) -> None:
            got = torch.bincount(out[-1].reshape(-1), minlength=out[0].shape[-1])
            counts[i] = got if counts[i] is None else counts[i] + got

        return seen

    handles = [router.register_forward_hook(counter(i)) for i, router in enumerate(routers)]
    try:
        with torch.no_grad():
            for x, _ in batches:
                forward(x)
    finally:
        for handle in handles:
            handle.remove()
    return [count.tolist() for count in counts if count is not None]


def keras_routed(model: Any, batches: Iterable[Any], count: int) -> list[list[int]]:
    """Tokens per expert per router of a Keras model, over ``model(x)`` of ``count`` of the batches (keras-hub's
    routers return each token's weights over every expert, zero where it was not routed): each router's ``call`` is
    wrapped for the pass, then restored."""
    import keras

    routers = routers_of(model._flatten_layers(include_self=False))
    counts: list[Any] = [None] * len(routers)

    def wrap(i: int, call: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            scores = call(*args, **kwargs)
            routed = keras.ops.sum(keras.ops.cast(keras.ops.greater(scores, 0), "int32"), axis=0)
            got = keras.ops.convert_to_numpy(routed)
            counts[i] = got if counts[i] is None else counts[i] + got
            return scores

        return counted

    for i, router in enumerate(routers):
        router.call = wrap(i, router.call)
    try:
        for x, _ in itertools.islice(iter(batches), count):
            model(x, training=False)
    finally:
        for router in routers:
            del router.call  # the class's own again
    return [[int(tokens) for tokens in got] for got in counts if got is not None]
