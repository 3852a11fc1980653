"""The Llama 3.1 decoder (trainers/llama.py): its counts against independent ones, training in Keras on every backend
and in plain PyTorch, the attention kernel in every row and a kernel change said first in a comparison, fp8 refused
where it cannot train, and Keras' float8 training path run for real (on a CPU, where stepwatch itself refuses it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stepwatch.collector.config import BenchmarkConfig, ConfigError, fp8_refusal, validate
from stepwatch.collector.runner import catalog
from stepwatch.trainers import get_model, llama
from tests.conftest import REPO, stepwatch, write_suite


def torch_module(preset: str) -> object:
    """transformers' LlamaForCausalLM of a preset, on torch's meta device: its shapes, no memory."""
    import torch

    with torch.device("meta"):
        return llama.build_torch(llama.PRESETS[preset])


@pytest.mark.parametrize("preset", ["tiny", "8b"])
def test_parameters_and_flops_match_an_independent_count(preset: str) -> None:
    """Parameters counted on transformers' own module; FLOPs per token as torchtitan counts them on it (6 x the
    weights a token multiplies by, forward and backward, plus the attention's 12 x layers x hidden x sequence); 8b is
    Llama 3.1 8B's published 8.03B."""
    import torch

    size = llama.PRESETS[preset]
    module = torch_module(preset)
    counted = sum(p.numel() for p in module.parameters())
    assert llama.parameters(size) == counted
    # torchtitan's count: 6 x every parameter but the input embedding's (a lookup), the RMSNorm scales included.
    lookup = module.model.model.embed_tokens.weight.numel()
    linear = sum(m.in_features * m.out_features for m in module.modules() if isinstance(m, torch.nn.Linear))
    norms = sum(p.numel() for name, p in module.named_parameters() if "norm" in name)
    assert counted == lookup + linear + norms  # nothing else holds weights
    attention = 12 * size.num_layers * size.hidden_dim * size.sequence_length
    assert llama.flops_per_token(size) == 6 * (counted - lookup) + attention
    assert get_model("llama").flops_per_example(size) == (6 * (counted - lookup) + attention) * size.sequence_length
    if preset == "8b":
        assert round(counted / 1e9, 2) == 8.03 and size.sequence_length == 8192
        assert (size.hidden_dim, size.num_query_heads, size.num_key_value_heads) == (4096, 32, 8)
        assert (size.intermediate_dim, size.vocabulary_size, size.rope_max_wavelength) == (14336, 128256, 500000)


@pytest.mark.large
def test_keras_builds_the_same_parameters_and_float8_training_runs(tmp_path: Path) -> None:
    """The Keras build (keras-hub's Llama3Backbone, JAX) holds as many weights as transformers' module. Then
    stepwatch's own fp8 build (``keras_backend.build_model``: every Dense and EinsumDense quantized for float8
    training) trains 3 steps on a CPU, where fp8 only runs emulated: the path a GPU takes, run."""
    probe = """
import json, os
from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.trial.runtime import keras_backend
from stepwatch.trainers import get_model, llama
spec = get_model("llama")
built = spec.build(llama.PRESETS["tiny"])
config = BenchmarkConfig(model="llama", precision="fp8", keras_backend="jax", device="gpu", xla=True)
keras_backend.set_policy(config.precision)
model, _ = keras_backend.build_model(spec, config)
x, y = spec.synthetic_batch(llama.PRESETS["tiny"], 4, 0)
history = model.fit(x, y, epochs=3, verbose=0)
modes = sorted({getattr(layer, "quantization_mode", None) or "-" for layer in model._flatten_layers()} - {"-"})
print(json.dumps({"weights": built.count_params(), "modes": modes, "losses": history.history["loss"]}))
"""
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["weights"] == llama.parameters(llama.PRESETS["tiny"])
    assert found["modes"] == ["float8"], found
    assert all(loss == loss for loss in found["losses"]) and found["losses"][-1] < found["losses"][0], found


def test_fp8_a_pinned_kernel_and_a_sequence_are_refused_where_they_cannot_run() -> None:
    with pytest.raises(ConfigError, match="precision fp8 needs a GPU with fp8 tensor cores"):
        validate(BenchmarkConfig(model="llama", precision="fp8"))
    with pytest.raises(ConfigError, match="keras_backend jax .* or loop pytorch"):
        validate(BenchmarkConfig(model="llama", precision="fp8", device="gpu", warmup_steps=20))
    gpu = BenchmarkConfig(model="llama", precision="fp8", device="gpu", keras_backend="jax", warmup_steps=20)
    assert validate(gpu) is gpu
    line = fp8_refusal((8, 0), "NVIDIA A100-SXM4-80GB")
    assert line and "NVIDIA A100-SXM4-80GB is 8.0" in line and "\n" not in line
    assert fp8_refusal((9, 0), "NVIDIA H100 80GB HBM3") is None
    assert fp8_refusal(None, None) is None  # unread: the trial says what happened
    with pytest.raises(ConfigError, match="tensorflow can pin math"):
        validate(BenchmarkConfig(model="llama", attention="flash"))
    with pytest.raises(ConfigError, match="has no attention"):
        validate(BenchmarkConfig(model="resnet50", attention="math"))
    with pytest.raises(ConfigError, match="has no sequence"):
        validate(BenchmarkConfig(model="resnet50", sequence_length=128))
    longer = validate(BenchmarkConfig(model="llama", sequence_length=128))
    assert "sequence_length=128" in longer.label()
    # Added dimensions at their defaults leave every earlier series' key as it was.
    assert BenchmarkConfig(model="bert").key == BenchmarkConfig(model="bert", attention="auto", sequence_length=0).key


def test_fp8_mfu_is_stated_against_the_bf16_peak() -> None:
    peaks = catalog.load_peaks()
    bf16, _ = catalog.peak_tflops(peaks, "NVIDIA H100 80GB HBM3", "mixed_bfloat16", 1)
    fp8, source = catalog.peak_tflops(peaks, "NVIDIA H100 80GB HBM3", "fp8", 1)
    assert fp8 == bf16 == 989.4 and "fp8 MFU is against the bf16 peak" in source


def test_fp8_on_a_cpu_is_one_line_before_any_trial(tmp_path: Path) -> None:
    done = stepwatch("run", "--suite", "smoke", "--models", "llama", "--precision", "fp8", "--out", str(tmp_path))
    assert done.returncode == 2 and not list(tmp_path.glob("*.parquet"))
    [line] = done.stderr.strip().splitlines()
    assert "precision fp8 needs a GPU with fp8 tensor cores" in line and "runs on a cpu" in line


SUITE = """name = "llama-backends"
[defaults]
device = "cpu"
model = "llama"
preset = "tiny"
per_device_batch = 8
threads = "auto"
steps = 40
warmup_steps = 20
window_steps = 10

[[matrix]]
keras_backend = "jax"
xla = "on"
sequence_length = 32

[[matrix]]
keras_backend = "torch"
loop = "pytorch"
attention = ["auto", "math"]
"""
# Keras on TensorFlow (XLA) and on torch: the slower starts, in the large test below.
MORE = """
[[matrix]]
keras_backend = "tensorflow"
xla = "on"

[[matrix]]
keras_backend = "torch"
xla = "off"
"""


def trained(tmp_path: Path, suite: str) -> list[dict]:
    """The suite's rows, every trial ok, its loss fallen and its attention kernel named."""
    out = tmp_path / "out"
    done = stepwatch("run", "--suite", str(write_suite(tmp_path / "suite.toml", suite)), "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = pq.read_table(next(out.glob("*.parquet"))).to_pylist()
    assert {r["status"] for r in rows} == {"ok"}
    for r in rows:
        assert r["final_loss"] < r["first_loss"], r
        assert r["attention_kernel"] in ("flash", "efficient", "cudnn", "math"), r
        length = r["sequence_length"] or llama.PRESETS["tiny"].sequence_length
        assert r["unit"] == "tokens" and r["units_per_example"] == length
        assert r["flops_per_example"] == llama.flops_per_example(get_model("llama").preset("tiny", length))
    return rows


@pytest.mark.large
def test_llama_trains_in_keras_on_tensorflow_and_torch(tmp_path: Path) -> None:
    """TensorFlow runs attention as its ops (math); Keras on torch calls SDPA, whose kernel its profiler names."""
    rows = trained(tmp_path, SUITE.split("[[matrix]]")[0] + MORE)
    assert len(rows) == 2
    assert [r["attention_kernel"] for r in rows if r["keras_backend"] == "tensorflow"] == ["math"]


@pytest.mark.large
def test_llama_trains_and_a_kernel_change_is_said_first(tmp_path: Path) -> None:
    """llama tiny in Keras on JAX (at sequence 32; the kernel read from its compiled step) and in plain PyTorch with
    attention auto and pinned to the math: every trial's loss falls and its row names the kernel. A compare of auto
    against math says first that the kernels differ; an A/A does not."""
    rows, db = trained(tmp_path, SUITE), tmp_path / "store.duckdb"
    assert len(rows) == 3
    kernel = {(r["keras_backend"], r["loop"], r["attention"]): r["attention_kernel"] for r in rows}
    assert kernel["jax", "fit", "auto"] == "math"
    assert kernel["torch", "pytorch", "math"] == "math"
    fused = kernel["torch", "pytorch", "auto"]
    assert fused != "math"  # torch's SDPA picks a fused kernel on a CPU too (its flash kernel for CPUs)
    assert stepwatch("ingest", str(tmp_path / "out"), "--db", str(db)).returncode == 0
    assert [r["sequence_length"] for r in rows if r["keras_backend"] == "jax"] == [32]
    plain = "loop=pytorch"
    shown = stepwatch("compare", "--baseline", f"{plain},attention=auto", "--candidate", f"{plain},attention=math",
                      "--db", str(db))  # fmt: skip
    assert shown.returncode in (0, 1), shown.stderr
    first = shown.stdout.strip().splitlines()[0]
    assert first.startswith(f"attention kernel differs: the baseline ran {fused} (1 of 1 trials), the candidate math")
    report = stepwatch("compare", "--baseline", f"{plain},attention=auto", "--candidate", f"{plain},attention=math",
                       "--format", "markdown", "--db", str(db))  # fmt: skip
    assert report.stdout.splitlines()[2].startswith("**⚠️ attention kernel differs")
    quiet = stepwatch("compare", "--baseline", f"{plain},attention=math", "--candidate", f"{plain},attention=math",
                      "--format", "json", "--db", str(db))  # fmt: skip
    payload = json.loads(quiet.stdout)
    assert payload["attention"] == {"baseline": {"math": 1}, "candidate": {"math": 1}, "differs": False}
    assert (
        "attention kernel differs"
        not in stepwatch(
            "compare",
            "--baseline",
            f"{plain},attention=math",
            "--candidate",
            f"{plain},attention=math",
            "--db",
            str(db),
        ).stdout
    )
