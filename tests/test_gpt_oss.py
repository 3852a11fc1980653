"""GPT-OSS's mixture of experts (trainers/gpt_oss.py): its total and active parameters against transformers' own
module and the published counts, its FLOPs per token counted from the active ones, and training in Keras on every
backend and in plain PyTorch, tokens/s and the attention kernel in every row."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stepwatch.collector.config import BenchmarkConfig, ConfigError, validate
from stepwatch.trainers import get_model, gpt_oss, llama
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
experts = ["auto", "eager"]

[[matrix]]
keras_backend = "tensorflow"
xla = "on"

[[matrix]]
keras_backend = "torch"
xla = "off"
"""


def test_an_experts_kernel_is_pinned_only_where_one_can_be_and_auto_keeps_every_series_key() -> None:
    with pytest.raises(ConfigError, match="model llama has no experts stepwatch can pin"):
        validate(BenchmarkConfig(model="llama", keras_backend="torch", loop="pytorch", experts="eager"))
    with pytest.raises(ConfigError, match="only the plain PyTorch loop"):
        validate(BenchmarkConfig(model="gpt_oss", keras_backend="jax", experts="grouped_mm"))
    validate(BenchmarkConfig(model="gpt_oss", keras_backend="torch", loop="pytorch", experts="batched_mm"))
    assert BenchmarkConfig(model="bert").key == BenchmarkConfig(model="bert", experts="auto").key


def test_the_experts_kernel_that_ran_is_read_from_a_profiled_step() -> None:
    """transformers' three experts kernels, each pinned on the tiny model, read back from torch's profiler: one
    grouped matmul (aten::_grouped_mm), batched matmuls (none of the others' operators) and the eager loop (its
    per-expert scatter, index_add_)."""
    import torch

    from stepwatch.collector.trial.runtime.plain_pytorch import experts_seen

    size = gpt_oss.PRESETS["tiny"]
    inputs, targets = llama.synthetic_batch(size, 2, 0)
    tokens, labels = torch.as_tensor(inputs["token_ids"]).long(), torch.as_tensor(targets).long()
    loss = llama.torch_loss()
    seen = {}
    for experts in ("grouped_mm", "batched_mm", "eager"):
        torch.manual_seed(0)
        module = gpt_oss.build_torch(size, experts)
        seen[experts] = experts_seen(lambda module=module: loss(module(tokens), labels).backward())
    assert {k: kernel for k, (kernel, _) in seen.items()} == {e: e for e in seen}, seen
    assert seen["grouped_mm"][1] == "aten::_grouped_mm" and seen["eager"][1] == "aten::index_add_"


@pytest.mark.large
def test_gpt_oss_tiny_trains_in_keras_on_every_backend_and_in_plain_pytorch(tmp_path: Path) -> None:
    """Every trial ok, its loss fallen, its throughput in tokens with the FLOPs of its active parameters, its
    attention kernel named (transformers runs GPT-OSS's attention eagerly, its sinks ruling out SDPA: math) and its
    experts kernel: dense in Keras (every expert for every token), grouped_mm in plain PyTorch by transformers' own
    choice, eager where pinned. A compare of the two plain PyTorch sides says first that the experts kernels
    differ; an A/A of one does not."""
    out, db = tmp_path / "out", tmp_path / "store.duckdb"
    done = stepwatch("run", "--suite", str(write_suite(tmp_path / "suite.toml", SUITE)), "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = pq.read_table(next(out.glob("*.parquet"))).to_pylist()
    assert len(rows) == 5 and {r["status"] for r in rows} == {"ok"}
    kernels = {(r["loop"], r["experts"]): r["experts_kernel"] for r in rows}
    assert kernels == {("fit", "auto"): "dense", ("pytorch", "auto"): "grouped_mm", ("pytorch", "eager"): "eager"}
    assert stepwatch("ingest", str(out), "--db", str(db)).returncode == 0
    plain = "loop=pytorch"
    shown = stepwatch("compare", "--baseline", f"{plain},experts=auto", "--candidate", f"{plain},experts=eager",
                      "--db", str(db))  # fmt: skip
    assert shown.returncode in (0, 1), shown.stderr
    first = shown.stdout.strip().splitlines()[0]
    assert first.startswith("experts kernel differs: the baseline ran grouped_mm (1 of 1 trials), the candidate eager")
    quiet = stepwatch("compare", "--baseline", f"{plain},experts=eager", "--candidate", f"{plain},experts=eager",
                      "--db", str(db))  # fmt: skip
    assert "kernel differs" not in quiet.stdout
    size = gpt_oss.PRESETS["tiny"]
    for r in rows:
        assert r["final_loss"] < r["first_loss"], r
        assert r["unit"] == "tokens" and r["units_per_example"] == size.sequence_length
        assert r["flops_per_example"] == gpt_oss.flops_per_example(size)
        assert r["attention_kernel"] in ("flash", "efficient", "cudnn", "math"), r
    assert [r["attention_kernel"] for r in rows if r["loop"] == "pytorch"] == ["math", "math"]
