"""GPT-OSS's mixture of experts (trainers/gpt_oss.py): its total and active parameters against transformers' own
module and the published counts, its FLOPs per token counted from the active ones, and training in Keras on every
backend and in plain PyTorch, tokens/s and the attention kernel in every row."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stepwatch.collector.config import BenchmarkConfig, ConfigError, config_columns, validate
from stepwatch.collector.trial import routing
from stepwatch.trainers import get_model, gpt_oss, llama
from stepwatch.trainers.spec import POOL
from tests.conftest import result_rows, rows_in, stepwatch, write_results, write_suite
from tests.test_code_check import SUITE as TEAM_SUITE  # its defaults: tiny, 20 steps after 20 of warm-up


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
keras_backend = "torch"
loop = "pytorch"
xla = "on"
precision = "fp32"
experts = "grouped_mm"

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


def test_routing_balance_counts_every_routed_token_as_transformers_records_them_and_a_planted_bias_shows() -> None:
    """Tokens per expert read from the routers' forward hooks, against transformers' own record of each layer's router
    logits (``output_router_logits``) and their top 2: the same counts. Each layer routed every token twice (2 of 8
    experts). A bias planted on two experts' router logits sends every token to them: the busiest expert then holds
    4x an even share (8 experts / 2 a token) and the other 6 of each layer get none."""
    import torch

    size = gpt_oss.PRESETS["tiny"]
    torch.manual_seed(0)
    module = gpt_oss.build_torch(size)
    inputs, targets = llama.synthetic_batch(size, 4, 0)
    tokens = torch.as_tensor(inputs["token_ids"]).long()
    counts = routing.torch_routed(module, [({"token_ids": tokens}, targets)], lambda x: module(**x))
    with torch.no_grad():
        logits = module.model(input_ids=tokens, output_router_logits=True).router_logits
    expected = [torch.bincount(layer.topk(2, dim=-1).indices.reshape(-1), minlength=8).tolist() for layer in logits]
    assert counts == expected and [sum(layer) for layer in counts] == [4 * size.sequence_length * 2] * 2
    even = routing.balance(counts)
    assert 1.0 < even["routing_max_load"] < 2.0 and even["routing_idle_experts"] == 0, even
    with torch.no_grad():
        for router in routing.routers_of(module.modules()):
            router.bias[:2] += 10.0
    skewed = routing.balance(routing.torch_routed(module, [({"token_ids": tokens}, targets)], lambda x: module(**x)))
    assert (skewed["routing_max_load"], skewed["routing_idle_experts"]) == (4.0, 12), skewed
    assert routing.balance([[3, 1, 0, 0]]) == {"routing_max_load": 3.0, "routing_idle_experts": 2,
                                               "routing_tokens": [[3, 1, 0, 0]]}  # fmt: skip
    with pytest.raises(LookupError, match="no router found"):
        routing.torch_routed(torch.nn.Linear(2, 2), [], lambda x: x)


def test_a_compare_judges_routing_balance_beside_the_speed_where_the_rows_have_it(tmp_path: Path) -> None:
    """Rows of a store (the trials are real in the large test below): a model with experts beside a dense one. Its
    router unbalanced on the candidate (the busiest expert 1.5x -> 3x an even share, the speed the same) is a
    regression of routing_max_load, judged without being asked for; the dense model gets no routing row, an A/A none
    either, and a compare of dense rows alone does not name it."""
    moe = BenchmarkConfig(model="gpt_oss", keras_backend="torch", loop="pytorch")
    mine = {"config_key": moe.key, **config_columns(moe)}
    results = tmp_path / "results"
    for label, loads, start in (("before", (1.50, 1.52, 1.49), 0), ("same", (1.51, 1.49, 1.50), 3),
                                ("after", (3.01, 2.98, 3.02), 6)):  # fmt: skip
        rows = result_rows(3, label=label, start=start, **mine)
        for row, load in zip(rows, loads, strict=True):
            row.update(routing_max_load=load, routing_idle_experts=0)
        write_results(results / f"{label}.parquet", rows + result_rows(3, label=label, start=start))
    db = str(tmp_path / "store.duckdb")
    assert stepwatch("ingest", str(results), "--db", db).returncode == 0
    report = tmp_path / "report.json"
    shown = stepwatch("compare", "--baseline", "label=before", "--candidate", "label=after", "--db", db, "--format",
                      "json", "--out", str(report))  # fmt: skip
    assert shown.returncode == 1, shown.stdout + shown.stderr
    judged = {(r["series"]["model"], r["metric"]): r["verdict"] for r in json.loads(report.read_text())["rows"]}
    assert judged == {("gpt_oss", "examples_per_sec"): "no change", ("bilstm", "examples_per_sec"): "no change",
                      ("gpt_oss", "routing_max_load"): "regression"}, judged  # fmt: skip
    quiet = stepwatch("compare", "--baseline", "label=before", "--candidate", "label=same", "--db", db)
    assert quiet.returncode == 0 and "regression" not in quiet.stdout, quiet.stdout
    dense = stepwatch("compare", "--baseline", "label=before,model=bilstm", "--candidate", "label=after,model=bilstm",
                      "--db", db)  # fmt: skip
    assert dense.returncode == 0 and "routing_max_load" not in dense.stdout, dense.stdout


@pytest.mark.large
def test_gpt_oss_tiny_trains_in_keras_on_every_backend_and_in_plain_pytorch(tmp_path: Path) -> None:
    """Every trial ok, its loss fallen, its throughput in tokens with the FLOPs of its active parameters, its
    attention kernel named (transformers runs GPT-OSS's attention eagerly, its sinks ruling out SDPA: math) and its
    experts kernel: dense in Keras (every expert for every token), grouped_mm in plain PyTorch by transformers' own
    choice, eager where pinned, transformers' fallback where grouped_mm is pinned but cannot run (torch.compile in
    fp32). A compare of the two plain PyTorch sides says first that the experts kernels differ; an A/A of one does
    not. The routing balance is in every row."""
    out, db = tmp_path / "out", tmp_path / "store.duckdb"
    done = stepwatch("run", "--suite", str(write_suite(tmp_path / "suite.toml", SUITE)), "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = pq.read_table(next(out.glob("*.parquet"))).to_pylist()
    assert len(rows) == 6 and {r["status"] for r in rows} == {"ok"}
    kernels = {(r["loop"], r["experts"]): r["experts_kernel"] for r in rows}
    # grouped_mm asked where it cannot run (under torch.compile in fp32): transformers' fallback, as it ran
    assert kernels == {("fit", "auto"): "dense", ("pytorch", "auto"): "grouped_mm", ("pytorch", "eager"): "eager",
                       ("pytorch", "grouped_mm"): "grouped_mm_fallback"}  # fmt: skip
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
    assert [r["attention_kernel"] for r in rows if r["loop"] == "pytorch"] == ["math"] * 3
    for r in (r for r in rows if r["loop"] == "pytorch"):  # what transformers was asked to run: eager (no SDPA)
        assert json.loads(r["extras"])["attention_op"].endswith("transformers' attn_implementation eager"), r
    for r in rows:  # routing balance in every row, Keras' and plain PyTorch's: each layer routed every token 2 times
        tokens = json.loads(r["extras"])["routing_tokens"]
        assert [sum(layer) for layer in tokens] == [POOL * 8 * size.sequence_length * 2] * 2, r["extras"]
        assert 1.0 < r["routing_max_load"] <= 4.0 and r["routing_idle_experts"] >= 0, r


MOE = "tests/data/models/moe.py"
TORCH_TRIALS = ("--keras-backend", "torch", "--loop", "pytorch", "--xla", "off", "--steps", "20", "--warmup", "20",
                "--window", "10")  # fmt: skip


@pytest.mark.large
def test_a_model_of_yours_with_experts_says_its_unit_and_kernels_and_a_planted_router_bias_is_a_regression(
    tmp_path: Path,
) -> None:
    """A team's own MoE (tests/data/models/moe.py, its function saying tokens, attention and experts): tokens/s, both
    kernels and the routing balance in every row. Its planted router bias (``skewed``) sends most tokens to 2 of 8
    experts: a compare of the two says routing_max_load regressed, unasked, beside the speed and the numerics; the
    routing of two runs of the unbiased model stays quiet. The team's Keras decoder (examples/team_llm.py) reads
    tokens/s and names its attention kernel."""
    out, db = tmp_path / "out", str(tmp_path / "store.duckdb")
    for label, models in (("a", f"{MOE}:build,{MOE}:skewed"), ("b", f"{MOE}:build")):
        done = stepwatch("run", "--models", models, *TORCH_TRIALS, "--trials", "3", "--label", label, "--out",
                         str(out / label))  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    decoder = stepwatch("run", "--models", "examples/team_llm.py:build", "--keras-backend", "jax", "--xla", "on",
                        "--steps", "20", "--warmup", "20", "--window", "10", "--trials", "1", "--out",
                        str(out / "llm"))  # fmt: skip
    assert decoder.returncode == 0, decoder.stdout[-3000:] + decoder.stderr[-3000:]
    [llm] = rows_in(out / "llm")
    assert (llm["unit"], llm["units_per_example"], llm["attention_kernel"]) == ("tokens", 64, "math"), llm
    assert llm["units_per_sec"] == pytest.approx(llm["examples_per_sec"] * 64)
    rows = rows_in(out / "a") + rows_in(out / "b")
    assert len(rows) == 9 and {r["status"] for r in rows} == {"ok"}
    for r in rows:
        assert (r["unit"], r["units_per_example"], r["attention_kernel"], r["experts_kernel"]) == (
            "tokens", 64, "math", "grouped_mm"), r  # fmt: skip
    loads = {n: [r["routing_max_load"] for r in rows if r["model"] == f"{MOE}:{n}"] for n in ("build", "skewed")}
    assert max(loads["build"]) < 3.0 < min(loads["skewed"]), loads
    assert stepwatch("ingest", str(out / "a"), str(out / "b"), "--db", db).returncode == 0
    report = tmp_path / "report.json"
    plain, biased = f"label=a,model={MOE}:build", f"label=a,model={MOE}:skewed"
    shown = stepwatch("compare", "--baseline", plain, "--candidate", biased, "--db", db, "--format", "json", "--out",
                      str(report))  # fmt: skip
    assert shown.returncode == 1, shown.stdout + shown.stderr
    payload = json.loads(report.read_text())
    judged = {r["metric"]: r["verdict"] for r in payload["rows"]}
    assert judged["routing_max_load"] == "regression" and "examples_per_sec" in judged, judged
    [numerics] = payload["numerics"]  # the numerics verdict of the same trials, beside: 3 seeds a side
    assert numerics["seeds"] == 3 and numerics["verdict"], numerics
    # The A/A: the routing of two runs of the same model is quiet. (Their speed is not asserted: the two runs are not
    # interleaved, and on a machine another test loads, a run can be 20-30% slower than the other.)
    quiet = stepwatch("compare", "--baseline", plain, "--candidate", f"label=b,model={MOE}:build", "--db", db,
                      "--format", "json", "--out", str(report))  # fmt: skip
    assert quiet.returncode in (0, 1), quiet.stderr
    aa = {r["metric"]: r["verdict"] for r in json.loads(report.read_text())["rows"]}
    assert aa["routing_max_load"] in ("no change", "inconclusive"), aa


MOE_SUITE = (
    TEAM_SUITE.split("[[configs]]")[0]
    + """[[configs]]
model = "models/moe.py:build"
keras_backend = "torch"
loop = "pytorch"
xla = "off"
"""
)


@pytest.mark.large
def test_a_code_check_of_the_moe_workload_finds_a_planted_router_bias_and_its_aa_stays_quiet(tmp_path: Path) -> None:
    """The team's repository holds its MoE; the change in its working tree plants the router bias. The code check
    (its A/A: the merge base in a second checkout) says routing balance regressed, and its A/A calls nothing."""
    from tests.conftest import REPO, commit, git

    repo = tmp_path / "team"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "ci")
    source = (REPO / MOE).read_text()
    commit(repo, "the model", {"models/moe.py": source, "stepwatch-suite.toml": MOE_SUITE,
                               "stepwatch.toml": 'suite = "stepwatch-suite.toml"\ntrials = 3\nmax-trials = 3\n',
                               ".gitignore": "data/\nstepwatch-results/\n"})  # fmt: skip
    (repo / "models" / "moe.py").write_text(source.replace("ROUTER_BIAS = 0.0", "ROUTER_BIAS = 2.0"))
    report = tmp_path / "report.json"
    done = stepwatch("code-check", "--head", ".", "--aa", "--format", "json", "--out", str(report), cwd=repo,
                     timeout=900)  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    payload = json.loads(report.read_text())
    judged = {r["metric"]: r["verdict"] for r in payload["rows"]}
    assert judged["routing_max_load"] == "regression", judged
    aa = {r["metric"]: r["verdict"] for r in payload["aa"]["rows"]}
    assert "routing_max_load" in aa and "regression" not in aa.values() and "improvement" not in aa.values(), aa


@pytest.mark.large
def test_an_aa_upgrade_check_of_the_moe_workload_stays_quiet_and_judges_its_routing(tmp_path: Path) -> None:
    """Two pins of packages already installed (the same code on every side) and the baseline's A/A: the MoE's
    speed and routing balance each judged, nothing called."""
    from stepwatch.collector.environments import virtualenvs
    from tests.test_upgrade import PSUTIL, PYTZ

    report = tmp_path / "report.json"
    done = stepwatch("upgrade-check", "--baseline", PYTZ, "--candidate", PSUTIL, "--aa", "--models", f"{MOE}:build",
                     *TORCH_TRIALS, "--trials", "2", "--max-trials", "2", "--reuse-site-packages",
                     "--pip-arg=--no-index", "--db", str(tmp_path / "check.duckdb"), "--results",
                     str(tmp_path / "results"), "--format", "json", "--out", str(report),
                     env={virtualenvs.CACHE_ENV: str(tmp_path / "envs")}, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    judged = {r["metric"]: r["verdict"] for r in json.loads(report.read_text())["rows"]}
    assert set(judged) == {"examples_per_sec", "routing_max_load"}, judged
    assert not {"regression", "improvement"} & set(judged.values()), judged
