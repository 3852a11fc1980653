"""A plain PyTorch decoder trial (``llama``, or ``gpt_oss`` with ``--model``) against a bare training loop of the same
transformers module, side by side: what stepwatch's harness costs on the workloads teams train today, and its MFU
beside torchtitan's.

Both sides train the same module (the model's ``torch.build``: transformers' LlamaForCausalLM or GptOssForCausalLM
from an explicit config, GPT-OSS's experts kernel pinned by ``--experts``) on the same synthetic batches with the
same AdamW, in fresh processes, alternating which goes first each round. The bare side is the loop a PyTorch user
writes (autocast, forward, float32 cross-entropy, backward, step), timed with perf_counter around ``--steps`` steps
after ``--warmup`` steps, a device sync at each end. MFU is the model's own count (trainers/llama.py,
trainers/gpt_oss.py) against the peak in collector/data/accelerators.toml.

    .venv/bin/python benchmarks/decoder_harness.py                                 # CPU: tiny, fp32, 3 rounds
    python benchmarks/decoder_harness.py --device gpu --preset 8b-4l --batch 2 --precision mixed_bfloat16 \\
        --steps 30 --warmup 20 --rounds 2                                        # an H100 or H200
    python benchmarks/decoder_harness.py --model gpt_oss --device gpu --preset 20b-2l --seq-len 4096 --batch 1 \\
        --precision mixed_bfloat16 --experts grouped_mm --steps 20 --warmup 10 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwatch.collector.config import BenchmarkConfig  # noqa: E402
from stepwatch.collector.runner import execution  # noqa: E402
from stepwatch.collector.runner.results import ResultFile  # noqa: E402


def bare_loop(model: str, device: str, preset: str, sequence: int, experts: str, batch: int, precision: str,
              warmup: int, steps: int) -> float:  # fmt: skip
    """Tokens/s of a bare loop (child process)."""
    import torch

    from stepwatch.trainers import get_model
    from stepwatch.trainers.spec import batch_pool

    on = torch.device("cuda" if device == "gpu" else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision != "fp32"
    torch.manual_seed(0)
    spec = get_model(model)
    size = spec.preset(preset, sequence)
    module = spec.torch.build(size, **({"experts": experts} if spec.experts else {})).to(on)
    optimizer = spec.torch.optimizer(module.parameters(), 3e-4)
    loss_of = spec.torch.loss()
    dtype = {"mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}.get(precision)

    def place(array: object) -> torch.Tensor:
        return torch.from_numpy(array.astype("int64")).to(on)

    pool = [({k: place(v) for k, v in x.items()}, place(y)) for x, y in batch_pool(spec, size, batch, 0)]

    def step(i: int) -> torch.Tensor:
        x, y = pool[i % len(pool)]
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(on.type, dtype=dtype, enabled=dtype is not None):
            loss = loss_of(module(**x).float(), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def sync() -> None:
        if on.type == "cuda":
            torch.cuda.synchronize()

    for i in range(warmup):
        step(i)
    sync()
    start = time.perf_counter()
    losses = [step(i) for i in range(steps)]
    torch.stack(losses).mean().item()
    sync()
    return steps * batch * size.sequence_length / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama", choices=("llama", "gpt_oss"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--seq-len", type=int, default=0, help="tokens a sequence (0: the preset's)")
    parser.add_argument("--experts", default="auto", help="gpt_oss: the experts kernel both sides pin")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    shape = (args.model, args.device, args.preset, args.seq_len, args.experts, args.batch, args.precision, args.warmup,
             args.steps)  # fmt: skip
    if args.bare:
        print(json.dumps(bare_loop(*shape)))
        return
    experts = {"experts": args.experts} if args.model == "gpt_oss" else {}
    config = BenchmarkConfig(model=args.model, preset=args.preset, keras_backend="torch", loop="pytorch",
                             device=args.device, precision=args.precision, per_device_batch=args.batch,
                             sequence_length=args.seq_len, steps=args.steps, warmup_steps=args.warmup,
                             window_steps=10, timeout_s=1800, **experts)  # fmt: skip
    flags = ["--model", args.model, "--device", args.device, "--preset", args.preset, "--seq-len", str(args.seq_len),
             "--experts", args.experts, "--batch", str(args.batch), "--precision", args.precision, "--steps",
             str(args.steps), "--warmup", str(args.warmup)]  # fmt: skip
    ours: list[float] = []
    bare: list[float] = []
    mfu: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        results = ResultFile(Path(tmp) / "llama.parquet")
        for i in range(args.rounds):
            for side in ("stepwatch", "bare") if i % 2 == 0 else ("bare", "stepwatch"):
                if side == "stepwatch":
                    [outcome] = execution.run_plan([(config, i)], results, "llama-harness", str(uuid.uuid4()),
                                                   execution.RunOptions())  # fmt: skip
                    row = outcome.row
                    assert row["status"] == "ok", row.get("error_message")
                    ours.append(row["units_per_sec"])
                    if row.get("mfu"):
                        mfu.append(row["mfu"])
                    kernel = row.get("attention_kernel")
                    if row.get("experts_kernel"):
                        load = row.get("routing_max_load")
                        kernel += f", experts kernel {row['experts_kernel']}, busiest expert " + (
                            f"{load:.2f}x an even share" if load else "not read"
                        )
                else:
                    done = subprocess.run([sys.executable, __file__, "--bare", *flags], capture_output=True,
                                          text=True, check=True)  # fmt: skip
                    bare.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {i + 1}: stepwatch {ours[-1]:,.0f} tokens/s   bare loop {bare[-1]:,.0f} tokens/s   "
                  f"ratio {ours[-1] / bare[-1]:.3f}", flush=True)  # fmt: skip
    ratio = statistics.median(ours) / statistics.median(bare)
    print(f"{args.model}/{args.preset} {args.device} {args.precision} b{args.batch}: median stepwatch / bare = "
          f"{ratio:.3f} ({len(ours)} rounds), attention kernel {kernel}")  # fmt: skip
    if mfu:
        beside = {"llama": "torchtitan's Llama 3.1 8B on 8 H100s, bf16, FSDP: 33-39%",
                  "gpt_oss": "torchtitan counts the sliding layers' attention over the whole sequence: its MFU of "
                             "the same run is 1.05x this at 20b-2l and sequence 4096"}[args.model]  # fmt: skip
        print(f"MFU {statistics.median(mfu):.1%} ({beside})")


if __name__ == "__main__":
    main()
