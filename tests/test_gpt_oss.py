"""GPT-OSS's mixture of experts (trainers/gpt_oss.py): its total and active parameters against transformers' own
module and the published counts, its FLOPs per token counted from the active ones, and training in Keras on every
backend and in plain PyTorch, tokens/s and the attention kernel in every row."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stepwatch.trainers import get_model, gpt_oss
from tests.conftest import stepwatch, write_suite


def torch_module(size: gpt_oss.GptOssSize) -> object:
    """transformers' GptOssForCausalLM of a size, on torch's meta device: its shapes, no memory."""
    import torch

    with torch.device("meta"):
        return gpt_oss.build_torch(size)


@pytest.mark.parametrize("preset", ["tiny", "20b"])
def test_total_and_active_parameters_and_flops_match_an_independent_count(preset: str) -> None:
    """Counted on transformers' module: every parameter, and the active ones as torchtitan's
    get_moe_model_nparams_and_flops counts them (all but the input embedding and the experts a token was not routed
    to). 20b is GPT-OSS 20B's published shape: 20.915B total with its own 201,088-token vocabulary and 3.608B active
    (input embedding excluded), 20.495B total with MLPerf v6.0's Llama 3.1 vocabulary of 128,256."""
    size = gpt_oss.PRESETS[preset]
    module = torch_module(size)
    named = dict(module.named_parameters())
    counted = sum(p.numel() for p in named.values())
    assert gpt_oss.parameters(size) == counted
    lookup = named["model.model.embed_tokens.weight"].numel()
    experts = sum(p.numel() for name, p in named.items() if ".mlp.experts." in name)
    idle = experts * (size.num_experts - size.experts_per_token) // size.num_experts
    assert gpt_oss.active_parameters(size) == counted - lookup - idle
    kinds = module.model.config.layer_types
    keys = [size.sequence_length if k == "full_attention" else min(size.sliding_window, size.sequence_length)
            for k in kinds]  # fmt: skip
    attention = sum(12 * size.num_query_heads * size.head_dim * k for k in keys)
    assert gpt_oss.flops_per_token(size) == 6 * (counted - lookup - idle) + attention
    assert get_model("gpt_oss").flops_per_example(size) == gpt_oss.flops_per_token(size) * size.sequence_length
    if preset == "20b":
        assert round(counted / 1e9, 3) == 20.495 and size.sequence_length == 8192
        own = dataclasses.replace(size, vocabulary_size=gpt_oss.GPT_OSS_VOCABULARY)
        assert round(gpt_oss.parameters(own) / 1e9, 3) == 20.915
        assert round(gpt_oss.active_parameters(own) / 1e9, 3) == 3.608
        assert kinds.count("sliding_attention") == 12 and module.model.config.sliding_window == 128
        config = module.model.config
        assert (config.num_local_experts, config.num_experts_per_tok, config.router_aux_loss_coef) == (32, 4, 0.0)


SUITE = """name = "gpt-oss-backends"
[defaults]
device = "cpu"
model = "gpt_oss"
preset = "tiny"
per_device_batch = 8
threads = "auto"
steps = 40
warmup_steps = 20
window_steps = 10

[[matrix]]
keras_backend = "jax"
xla = "on"

[[matrix]]
keras_backend = "torch"
loop = "pytorch"

[[matrix]]
keras_backend = "tensorflow"
xla = "on"

[[matrix]]
keras_backend = "torch"
xla = "off"
"""


@pytest.mark.large
def test_gpt_oss_tiny_trains_in_keras_on_every_backend_and_in_plain_pytorch(tmp_path: Path) -> None:
    """Every trial ok, its loss fallen, its throughput in tokens with the FLOPs of its active parameters, and its
    attention kernel named (transformers runs GPT-OSS's attention eagerly, its sinks ruling out SDPA: math)."""
    out = tmp_path / "out"
    done = stepwatch("run", "--suite", str(write_suite(tmp_path / "suite.toml", SUITE)), "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = pq.read_table(next(out.glob("*.parquet"))).to_pylist()
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}
    size = gpt_oss.PRESETS["tiny"]
    for r in rows:
        assert r["final_loss"] < r["first_loss"], r
        assert r["unit"] == "tokens" and r["units_per_example"] == size.sequence_length
        assert r["flops_per_example"] == gpt_oss.flops_per_example(size)
        assert r["attention_kernel"] in ("flash", "efficient", "cudnn", "math"), r
    assert [r["attention_kernel"] for r in rows if r["loop"] == "pytorch"] == ["math"]
