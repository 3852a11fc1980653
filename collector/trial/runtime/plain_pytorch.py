"""Plain PyTorch training (loop ``pytorch``): a ``torch.nn.Module`` trained in the loop a PyTorch user writes
(forward and loss under autocast, backward, optimizer step; a GradScaler for float16), TF32 as the precision
asks, ``torch.compile`` (inductor) on the module for ``xla`` on. The same window clock, peak memory, counters,
profile and failure rows as a Keras trial, and no Keras: what ran is what a PyTorch user runs.

``TorchDevice`` is what this trial and Keras-on-torch (``collector.trial.runtime.keras_torch``) share: threads, TF32,
torch.compile's counters, torch's profiler, CUDA memory and devices. Only a trial process with
KERAS_BACKEND=torch imports this module; it imports neither Keras nor TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stepwatch.collector.config import ATTENTION_AUTO, FP8, BenchmarkConfig, ConfigError, thread_counts
from stepwatch.collector.trial import counters, profiles, routing
from stepwatch.collector.trial.measure import WindowClock
from stepwatch.collector.trial.runtime.trial_backend import Runtime, TrialBackend, cudnn_text
from stepwatch.trainers.spec import ModelSpec, batch_pool

# fp32 and tf32: no autocast; fp8: torchao's float8 matmuls, and bfloat16 for everything else.
AUTOCAST = {"mixed_float16": torch.float16, "mixed_bfloat16": torch.bfloat16, FP8: torch.bfloat16}
# SDPA's kernels as torch names them (``torch.backends.cuda.enable_*_sdp``) and as its profiler records them (the aten
# operator SDPA dispatched to): what a pinned ``attention`` enables, and what a trial says ran.
SDPA_FLAGS = {"flash": "flash", "efficient": "mem_efficient", "cudnn": "cudnn", "math": "math"}
SDPA_OPS = {
    "_scaled_dot_product_flash_attention": "flash",  # also its CPU kernel, ..._flash_attention_for_cpu
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_attention_math": "math",
}


def pin_sdpa(attention: str) -> None:
    """Allow SDPA only the kernel ``attention`` pins (all of them for auto): torch's global switches, which its CPU
    kernels obey as well."""
    for kernel, flag in SDPA_FLAGS.items():
        getattr(torch.backends.cuda, f"enable_{flag}_sdp")(attention in (ATTENTION_AUTO, kernel))


def sdpa_seen(run: Any) -> tuple[str, str]:
    """The attention kernel ``run()`` (a step) used, read from torch's profiler: the aten operator SDPA dispatched to
    (flash, efficient, cudnn or math), or math where no SDPA ran (attention as matmuls and a softmax); and what the
    profiler named."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as recorded:
        run()
    names = sorted({event.name for event in recorded.events() if "dot_product" in event.name})
    for name in names:
        for op, kernel in SDPA_OPS.items():
            if op in name:
                return kernel, name
    return "math", "no scaled_dot_product_attention operator ran (attention as matmuls and a softmax)"


# What each experts kernel leaves in torch's profiler (transformers' integrations/moe.py): its fallback where
# ``torch._grouped_mm`` cannot run (a loop over the experts, a custom op), the grouped matmul itself, or the eager
# loop's scatter of each expert's tokens back (``index_add_``); batched_mm leaves none of these, only bmm.
EXPERTS_OPS = (("grouped_mm_fallback", "grouped_mm_fallback"), ("aten::_grouped_mm", "grouped_mm"),
               ("aten::grouped_mm", "grouped_mm"), ("aten::index_add_", "eager"))  # fmt: skip


def experts_seen(run: Any) -> tuple[str, str]:
    """The experts kernel ``run()`` (a step) used, read from torch's profiler (``EXPERTS_OPS``, the first found), or
    batched_mm where none of them ran; and the operator the profiler named."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as recorded:
        run()
    names = {event.name for event in recorded.events()}
    for op, kernel in EXPERTS_OPS:
        found = sorted(name for name in names if op in name)
        if found:
            return kernel, found[0]
    return "batched_mm", "no grouped matmul and no per-expert scatter ran (batched matmuls)"


def float8_training(module: Any) -> Any:
    """torchao's float8 training on the module's linear layers (dynamic tensorwise scaling, torchao's default
    recipe), leaving out the output projection and any layer whose sizes are not multiples of 16, as torchtitan does."""
    from torchao.float8 import convert_to_float8_training

    def eligible(layer: Any, name: str) -> bool:
        return (isinstance(layer, torch.nn.Linear) and not name.endswith("lm_head")
                and layer.in_features % 16 == 0 and layer.out_features % 16 == 0)  # fmt: skip

    return convert_to_float8_training(module, module_filter_fn=eligible)


class TorchDevice:
    """What a torch trial sets and reads the same way whether Keras trains or the user's loop does."""

    compiled_by = "inductor"

    def set_up(self, config: BenchmarkConfig) -> dict[str, Any]:
        """Threads, and TF32: fp32 is true fp32 (TF32 off for matmuls and cuDNN); every other mode allows TF32, as
        TensorFlow does. What was set, read back."""
        if config.device == "gpu" and not torch.cuda.is_available():
            raise ConfigError("device gpu: torch sees no CUDA device")
        counts = thread_counts(config.threads)
        if counts:
            torch.set_num_threads(counts[0])
            torch.set_num_interop_threads(counts[1])  # before any inter-op work, or torch refuses
        pin_sdpa(config.attention)
        tf32 = config.precision != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        return {
            "replicas": 1,
            "tf32_enabled": bool(torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32),
            "matmul_precision": torch.get_float32_matmul_precision(),
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
        }

    def inductor_counters(self) -> dict[str, Any]:
        """torch.compile's own counts for this process (only the train step was compiled): graphs (a recompile
        is one more), graph breaks and why dynamo broke (per reason, in the row's extras), kernels inductor
        generated, and its bytes-accessed estimate where it makes one (0 on a CPU: not recorded)."""
        from torch._dynamo.utils import counters as dynamo
        from torch._inductor import metrics

        return {
            "compiled_graphs": dynamo["stats"]["unique_graphs"],
            "graph_breaks": sum(dynamo["graph_break"].values()),
            "graph_break_reasons": counters.graph_break_reasons(dynamo["graph_break"]),
            "generated_kernels": metrics.generated_kernel_count,
            "compiled_bytes_accessed": float(metrics.num_bytes_accessed) or None,
        }

    @contextlib.contextmanager
    def profiler(self, logdir: Path, config: BenchmarkConfig) -> Iterator[None]:
        """torch's profiler (operators on the host; on a GPU, CUDA kernels too); its trace is kept as Chrome
        trace JSON, which Perfetto opens and ``op_totals`` reads."""
        activities = [torch.profiler.ProfilerActivity.CPU]
        if config.device == "gpu":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as recorded:
            yield
        recorded.export_chrome_trace(str(logdir / profiles.TORCH_TRACE))

    def op_totals(self, logdir: Path) -> dict[tuple[str, str, str], tuple[float, int]]:
        """An operator's self time on the host and, on a device, each kernel's time under the operator that
        launched it, from the trace (``profiles.torch_spans``)."""
        return profiles.self_times(profiles.torch_spans(profiles.torch_trace(logdir)))

    def device_peak_memory(self, config: BenchmarkConfig) -> tuple[int | None, str | None]:
        """torch.cuda.max_memory_allocated, of this process's device."""
        try:
            return int(torch.cuda.max_memory_allocated(torch.cuda.current_device())), "device"
        except RuntimeError:
            return None, None

    def torch_environment(self) -> dict[str, Any]:
        """torch's version, the CUDA it was built with and the cuDNN it loads."""
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        return {
            "torch_version": torch.__version__,
            "cuda_build_version": torch.version.cuda,
            "cudnn_runtime_version": cudnn_text(cudnn),
        }

    def device_details(self, config: BenchmarkConfig) -> dict[str, Any]:
        """Product name and compute capability of the GPU, from torch."""
        major, minor = torch.cuda.get_device_capability(0)
        return {
            "accelerator": torch.cuda.get_device_name(0),
            "accelerator_count": config.num_devices,
            "compute_capability": f"{major}.{minor}",
        }

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, torch.OutOfMemoryError)

    def release(self) -> None:
        """What the last model held collected, and the caching allocator's free blocks given back to the device:
        after an out-of-memory, the next batch starts from an empty device."""
        super().release()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


@dataclass
class Trainee:
    """A module as the loop trains it: the module, what runs its forward (itself, or torch.compile's), its
    loss and optimizer, and the gradient scaler (enabled for float16)."""

    module: Any
    forward: Any
    loss: Any
    optimizer: Any
    scaler: Any
    autocast: Any  # () -> the autocast context of the precision


class Batches:
    """Batches on the device, handed out in turn."""

    def __init__(self, batches: list[Any]) -> None:
        self.batches, self.given = batches, 0

    def next(self) -> Any:
        batch = self.batches[self.given % len(self.batches)]
        self.given += 1
        return batch


class PlainTorchBackend(TorchDevice, TrialBackend):
    """The loop a PyTorch user writes, timed in windows like ``fit``: the loss of each step stays on the device
    until a window closes, where one synchronisation reads the window's losses."""

    def configure(self, config: BenchmarkConfig) -> Runtime:
        """Threads, TF32 and autocast; on several devices, this rank's process group (NCCL on GPUs, gloo on a CPU),
        from the environment torch's launcher gives each rank."""
        settings = self.set_up(config)
        if config.processes > 1:
            if config.device == "gpu":
                torch.cuda.set_device(self.device(config))
            torch.distributed.init_process_group("nccl" if config.device == "gpu" else "gloo")
            settings["replicas"] = torch.distributed.get_world_size()
        compute = {torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(AUTOCAST.get(config.precision))
        compute = "float8" if config.precision == FP8 else compute  # its matmuls; the rest in bfloat16
        return Runtime(compute_dtype=compute or "float32", variable_dtype="float32", **settings)

    def software_environment(self) -> dict[str, Any]:
        return self.torch_environment()

    def device(self, config: BenchmarkConfig) -> torch.device:
        """This rank's device: its own GPU (LOCAL_RANK, as torch's launcher sets it), or the CPU."""
        return torch.device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if config.device == "gpu" else "cpu")

    def build_model(self, spec: ModelSpec, config: BenchmarkConfig, runtime: Runtime) -> tuple[Any, Any]:
        """The spec's PyTorch module on the device, seeded, compiled by torch.compile for ``xla`` on; its
        optimizer and loss. (``config.validate`` has refused a model without a PyTorch build.)"""
        torch.manual_seed(config.seed)
        preset = spec.preset(config.preset, config.sequence_length)
        options = {"experts": config.experts} if spec.experts else {}  # a pinned experts kernel, or auto
        module = spec.torch.build(preset, **options).to(self.device(config))
        if config.precision == FP8:
            module = float8_training(module)
        module.train()
        if config.processes > 1:  # gradients averaged across ranks in backward, bucketed and overlapped
            gpu = config.device == "gpu"
            module = torch.nn.parallel.DistributedDataParallel(
                module, device_ids=[self.device(config)] if gpu else None
            )
        optimizer = spec.torch.optimizer(module.parameters(), spec.learning_rate(config.learning_rate))
        kind = self.device(config).type
        dtype = AUTOCAST.get(config.precision)
        forward = torch.compile(module) if config.xla else module
        scaler = torch.amp.GradScaler(kind, enabled=dtype is torch.float16)

        def autocast() -> Any:
            return torch.autocast(kind, dtype=dtype) if dtype is not None else contextlib.nullcontext()

        return Trainee(module, forward, spec.torch.loss(), optimizer, scaler, autocast), optimizer

    def make_data(self, spec: ModelSpec, config: BenchmarkConfig, runtime: Runtime) -> Any:
        """The trial's synthetic batches (``spec.batch_pool``, as for Keras), on the device once, one a step in
        turn."""
        rank = torch.distributed.get_rank() if config.processes > 1 else 0  # each rank its own examples
        seed = config.seed * config.processes + rank
        pool = batch_pool(spec, spec.preset(config.preset, config.sequence_length), config.per_device_batch, seed)
        device = self.device(config)

        def place(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: place(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return type(value)(place(v) for v in value)
            array = np.asarray(value)
            tensor = torch.from_numpy(array.astype(np.int64) if array.dtype.kind in "iu" else array)
            return tensor.to(device)

        return Batches([(place(x), place(y)) for x, y in pool])

    def step(self, model: Trainee, data: Batches) -> Any:
        """One training step on the next batch; its loss, left on the device."""
        x, y = data.next()
        model.optimizer.zero_grad(set_to_none=True)
        with model.autocast():
            out = model.forward(**x) if isinstance(x, dict) else model.forward(x)
            loss = model.loss(out.float(), y)
        model.scaler.scale(loss).backward()
        model.scaler.step(model.optimizer)
        model.scaler.update()
        return loss.detach()

    def train(self, model: Trainee, optimizer: Any, data: Any, clock: WindowClock, total_steps: int,
              config: BenchmarkConfig, runtime: Runtime) -> None:  # fmt: skip
        """``total_steps`` steps; a window closes every ``window_steps`` after the first step, reading the mean
        loss of its steps (which waits for the device)."""
        losses: list[Any] = []
        clock.begin()
        for done in range(total_steps):
            if done and clock.due(done):
                window, losses = losses, []
                clock.close(done, lambda window=window: torch.stack(window).float().mean().item())
            losses.append(self.step(model, data))
        clock.close(total_steps, lambda: torch.stack(losses).float().mean().item())

    def counters(self, model: Trainee, data: Any, config: BenchmarkConfig, runtime: Runtime) -> dict[str, Any]:
        return self.inductor_counters() if config.xla else {}

    def profile(self, model: Trainee, data: Any, config: BenchmarkConfig, logdir: Path) -> dict[str, Any]:
        """``profiles.PROFILE_STEPS`` more steps of the same loop under torch's profiler."""

        def run(steps: int) -> None:
            losses = [self.step(model, data) for _ in range(steps)]
            losses[-1].item()  # the last step has finished

        return self.profiled(run, config, logdir)

    def compiler(self, model: Any, config: BenchmarkConfig) -> str:
        return self.compiled_by if config.xla else "none"

    def attention_kernel(self, model: Trainee, data: Any, config: BenchmarkConfig) -> tuple[str, str]:
        """One more step under torch's profiler: the kernel SDPA ran; and the attention implementation a transformers
        model was configured with (its ``attn_implementation``: GPT-OSS's sinks rule out SDPA, so eager)."""
        kernel, reported = sdpa_seen(lambda: self.step(model, data).item())
        chosen = {getattr(getattr(m, "config", None), "_attn_implementation", None) for m in model.module.modules()}
        chosen = sorted(str(name) for name in chosen if name)
        return kernel, reported + (f"; transformers' attn_implementation {', '.join(chosen)}" if chosen else "")

    def experts_kernel(self, model: Trainee, data: Any, config: BenchmarkConfig) -> tuple[str, str]:
        """One more step under torch's profiler: the experts kernel that ran."""
        return experts_seen(lambda: self.step(model, data).item())

    def routed_tokens(self, model: Trainee, data: Batches, config: BenchmarkConfig) -> list[list[int]]:
        """Each of the trial's batches through the module (not torch.compile's: hooks would recompile it) under the
        step's autocast: the tokens its routers sent to each expert."""

        def forward(x: Any) -> Any:
            with model.autocast():
                return model.module(**x) if isinstance(x, dict) else model.module(x)

        return routing.torch_routed(model.module, data.batches, forward)

    def loss_scaling(self, model: Trainee, optimizer: Any) -> bool:
        return bool(model.scaler.is_enabled())


BACKEND = PlainTorchBackend()
