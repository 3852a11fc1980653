"""The TensorFlow backend: devices, tf.distribute strategies, precision and TF32, XLA, tf.data, and the
custom training loop (TensorFlow only) beside the shared ``fit``.

Only a trial process with KERAS_BACKEND=tensorflow imports this module; the parent stays free of TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from stepwatch.collector.config import BenchmarkConfig, ConfigError, thread_counts
from stepwatch.collector.trial import counters, profiles
from stepwatch.collector.trial.measure import WindowClock
from stepwatch.collector.trial.runtime import keras_backend
from stepwatch.collector.trial.runtime.keras_backend import Runtime
from stepwatch.trainers import get_model
from stepwatch.trainers.spec import ModelSpec, batch_pool

PIPELINE_EXAMPLES = 256  # distinct host examples a data=pipeline run cycles through


def make_strategy(config: BenchmarkConfig) -> Any:
    """default: the current device; mirrored: one replica per visible GPU; multi-worker: one replica per worker
    process (and its devices) in TF_CONFIG; tpu: TPUStrategy over the slice."""
    if config.strategy == "mirrored":
        devices = [f"/gpu:{i}" for i in range(config.num_devices)] if config.device == "gpu" else None
        return tf.distribute.MirroredStrategy(devices=devices)
    if config.strategy == "multi-worker":
        # The cluster comes from TF_CONFIG (one entry per worker process, on one host or many).
        return tf.distribute.MultiWorkerMirroredStrategy()
    if config.strategy == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=os.environ.get("TPU_NAME", ""))
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    return tf.distribute.get_strategy()


def constant_dataset(batch: Any) -> tf.data.Dataset:
    """One batch repeated forever, with tf.data's autotuner off. A constant batch has nothing to tune, and the
    tuner costs a trial seconds: in about a third of the processes the iterator's teardown at the end of fit
    waits for the tuner's next wake-up (its period doubles from 10 ms, so fit returns 2.55 s, 5.11 s,
    10.23 s ... after the iterator was made; measured with benchmarks/step_floor.py, docs/reference.md "Threads")."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return tf.data.Dataset.from_tensors(batch).repeat().with_options(options)


def cycled_dataset(batches: list[Any]) -> tf.data.Dataset:
    """Several batches in turn, repeated forever, as ``constant_dataset`` (the autotuner off)."""
    options = tf.data.Options()
    options.autotune.enabled = False
    stacked = tf.nest.map_structure(lambda *arrays: np.stack(arrays), *batches)
    return tf.data.Dataset.from_tensor_slices(stacked).repeat().with_options(options)


def train_ctl(
    model: Any,
    optimizer: Any,
    dataset: Any,
    clock: WindowClock,
    total_steps: int,
    config: BenchmarkConfig,
    runtime: Runtime,
) -> None:
    """A custom loop: a tf.function over strategy.run, as in the Model Garden's CTL benchmarks."""
    strategy, global_batch = runtime.strategy, config.per_device_batch * runtime.replicas
    loss_fn = get_model(config.model).loss(reduction=None)  # per example: averaged over the global batch below
    variables = model.trainable_variables

    def compute_loss(inputs: Any, labels: Any) -> Any:
        logits = tf.cast(model(inputs, training=True), tf.float32)
        per_example = loss_fn(labels, logits)
        if per_example.shape.rank > 1:  # e.g. masked-LM: mean over the predictions of one sequence
            per_example = tf.reduce_mean(per_example, axis=list(range(1, per_example.shape.rank)))
        return tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)

    def gradients(inputs: Any, labels: Any) -> tuple[Any, list[Any]]:
        with tf.GradientTape() as tape:
            loss = compute_loss(inputs, labels)
            scaled = optimizer.scale_loss(loss)
        return loss, tape.gradient(scaled, variables)

    def apply(grads: list[Any]) -> None:
        optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])

    if runtime.replicas == 1:
        # One replica: XLA compiles the whole step, optimizer update included, as fit does.
        @tf.function(jit_compile=config.xla)
        def replica_step(inputs: Any, labels: Any) -> Any:
            loss, grads = gradients(inputs, labels)
            apply(grads)
            return loss
    else:
        # Several replicas: the gradient all-reduce happens in apply, outside the XLA cluster.
        xla_gradients = tf.function(gradients, jit_compile=config.xla)

        def replica_step(inputs: Any, labels: Any) -> Any:
            loss, grads = xla_gradients(inputs, labels)
            apply(grads)
            return loss

    @tf.function
    def run_steps(iterator: Any) -> Any:
        total = tf.constant(0.0)
        for _ in tf.range(config.steps_per_execution):
            inputs, labels = next(iterator)
            per_replica = strategy.run(replica_step, args=(inputs, labels))
            total += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        return total / config.steps_per_execution

    options = tf.data.Options()
    # Every worker reads the same synthetic batches and takes its share of each one (file sharding does
    # not apply to in-memory data).
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    iterator = iter(strategy.experimental_distribute_dataset(dataset.with_options(options)))
    clock.begin()
    steps_done, window_losses = 0, []
    while steps_done < total_steps:
        window_losses.append(run_steps(iterator))
        steps_done += config.steps_per_execution
        if clock.due(steps_done):
            clock.close(steps_done, lambda losses=window_losses: float(np.mean([float(v) for v in losses])))
            window_losses = []


class TensorFlowBackend(keras_backend.KerasBackend):
    """XLA through jit_compile; tf.distribute strategies; tf.data; the custom training loop beside ``fit``."""

    def configure(self, config: BenchmarkConfig) -> Runtime:
        """Set host threads, pick devices, build the strategy, set TF32 and the Keras dtype policy (before any model
        is built)."""
        counts = thread_counts(config.threads)
        if counts:  # before TensorFlow's runtime starts: it sizes its pools once
            tf.config.threading.set_intra_op_parallelism_threads(counts[0])
            tf.config.threading.set_inter_op_parallelism_threads(counts[1])
        gpus = tf.config.list_physical_devices("GPU")
        if config.device == "gpu":
            if len(gpus) < config.num_devices:
                raise ConfigError(f"device gpu asks for {config.num_devices} GPU(s), {len(gpus)} visible")
            tf.config.set_visible_devices(gpus[: config.num_devices], "GPU")
        elif gpus:
            tf.config.set_visible_devices([], "GPU")
        # fp32 means true fp32: TF32 tensor-core math is off unless asked for. Mixed modes keep TF's default.
        tf.config.experimental.enable_tensor_float_32_execution(config.precision not in ("fp32",))
        compute_dtype, variable_dtype = keras_backend.set_policy(config.precision)
        strategy = make_strategy(config)
        return Runtime(
            replicas=strategy.num_replicas_in_sync,
            tf32_enabled=bool(tf.config.experimental.tensor_float_32_execution_enabled()),
            matmul_precision=None,  # TensorFlow's one switch is tf32_enabled
            compute_dtype=compute_dtype,
            variable_dtype=variable_dtype,
            strategy=strategy,
            intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
            inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads(),
        )

    step: Any = None  # the tf.function of one training step that fit runs (recorded while Keras makes it)

    def scope(self, runtime: Runtime) -> Any:
        """Model and optimizer under the strategy scope."""
        return runtime.strategy.scope()

    def recording(self) -> contextlib.AbstractContextManager[None]:
        """Keras makes one step's tf.function (``jit_compile`` as the model's) inside the train function's; keep
        it. (``tf.function`` is swapped only while Keras makes the train function.)"""

        def keeping(original: Any) -> Any:
            def function(*args: Any, **kwargs: Any) -> Any:
                made = original(*args, **kwargs)
                if "jit_compile" in kwargs and self.step is None:
                    self.step = made
                return made

            return function

        return keras_backend.wrapped(tf, "function", keeping)

    def counters(self, model: Any, data: Any, config: BenchmarkConfig, runtime: Runtime) -> dict[str, Any]:
        """With XLA the optimized HLO of the step (as XLA compiles it for one batch); without, the ops of its
        traced graph. One replica's fit step only: the custom loop and several replicas read nothing."""
        if self.step is None or runtime.replicas != 1 or config.loop != "fit":
            return {}
        batch = next(iter(data))
        if model.jit_compile:
            self.hlo_text = self.step.experimental_get_compiler_ir(batch)(stage="optimized_hlo")
            return counters.hlo_counts(self.hlo_text)
        graph = self.step.get_concrete_function(batch).graph.as_graph_def()
        return {"graph_ops": counters.graph_op_count(graph)}

    def profile(self, model: Any, data: Any, config: BenchmarkConfig, logdir: Path) -> dict[str, Any]:
        """One replica's fit step: its tf.function called directly, ``profiles.PROFILE_STEPS`` times, on one batch
        of the data: the step's ops, and none of ``fit``'s own work between steps (callbacks, logs, the iterator).
        Several replicas, or the custom loop: ``fit`` (or nothing) as before."""
        if self.step is None or config.loop != "fit" or model.distribute_strategy.num_replicas_in_sync != 1:
            return super().profile(model, data, config, logdir)
        batch = next(iter(data))

        def run(steps: int) -> None:
            for _ in range(steps):
                logs = self.step(batch)
            tf.nest.map_structure(lambda value: value.numpy(), logs)  # the last step has finished

        return self.profiled(run, config, logdir)

    @contextlib.contextmanager
    def profiler(self, logdir: Path, config: BenchmarkConfig) -> Iterator[None]:
        """TensorFlow's profiler (host ops and, on a GPU, device kernels; no Python tracing). Host tracer level 3:
        the executor traces an op it deems expensive at level 2 and a cheap one at level 3, and which it deems
        cheap it decides from the op's measured run time, so at level 2 a small MatMul or convolution is in
        one profile and missing from the next."""
        options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=3, python_tracer_level=0)
        tf.profiler.experimental.start(str(logdir), options=options)
        try:
            yield
        finally:
            tf.profiler.experimental.stop()

    def xspace_planes(self, path: Path) -> profiles.Planes:
        """Through the XSpace protobuf TensorFlow ships."""
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        space = xplane_pb2.XSpace()
        space.ParseFromString(path.read_bytes())
        return profiles.proto_planes(space)

    def attention_kernel(self, model: Any, data: Any, config: BenchmarkConfig) -> tuple[str, str]:
        """TensorFlow has no fused attention kernel: Keras runs attention on it as its ops (math)."""
        return "math", "TensorFlow runs attention as its own ops (it has no fused attention kernel)"

    def make_data(self, spec: ModelSpec, config: BenchmarkConfig, runtime: Runtime) -> Any:
        """synthetic: the trial's batches (``spec.batch_pool``) in turn; pipeline: a host tf.data pipeline (JPEG
        decode + augment for images)."""
        preset = spec.preset(config.preset, config.sequence_length)
        global_batch = config.per_device_batch * runtime.replicas
        if config.data == "synthetic":
            return cycled_dataset(batch_pool(spec, preset, global_batch, config.seed))
        x, y = spec.synthetic_batch(preset, PIPELINE_EXAMPLES, config.seed)
        autotune = tf.data.AUTOTUNE
        if spec.unit == "images":
            size = x.shape[1]
            pixels = np.clip(x * 64 + 128, 0, 255).astype(np.uint8)
            jpegs = [tf.io.encode_jpeg(image).numpy() for image in pixels]

            def decode(jpeg: Any, label: Any) -> Any:
                image = tf.io.decode_jpeg(jpeg, channels=3)
                image = tf.image.resize_with_crop_or_pad(image, size + size // 8, size + size // 8)
                image = tf.image.random_crop(image, (size, size, 3))
                image = tf.image.random_flip_left_right(image)
                return tf.cast(image, tf.float32) / 127.5 - 1.0, label

            dataset = tf.data.Dataset.from_tensor_slices((jpegs, y)).repeat().shuffle(PIPELINE_EXAMPLES)
            dataset = dataset.map(decode, num_parallel_calls=autotune)
        else:
            dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(PIPELINE_EXAMPLES)
        return dataset.batch(global_batch, drop_remainder=True).prefetch(autotune)

    def train(
        self,
        model: Any,
        optimizer: Any,
        data: Any,
        clock: WindowClock,
        total_steps: int,
        config: BenchmarkConfig,
        runtime: Runtime,
    ) -> None:
        """fit (shared by every backend) or the TensorFlow custom loop."""
        if config.loop == "fit":
            super().train(model, optimizer, data, clock, total_steps, config, runtime)
        else:
            train_ctl(model, optimizer, data, clock, total_steps, config, runtime)

    def device_peak_memory(self, config: BenchmarkConfig) -> tuple[int | None, str | None]:
        """Peak device memory summed over the devices used."""
        kind = "GPU" if config.device == "gpu" else "TPU"
        try:
            total = sum(
                tf.config.experimental.get_memory_info(f"{kind}:{i}")["peak"] for i in range(config.num_devices)
            )
        except (ValueError, tf.errors.OpError):
            return None, None
        return int(total), "device"

    def software_environment(self) -> dict[str, Any]:
        """TensorFlow's own view: versions and the CUDA/cuDNN it was built against."""
        build = tf.sysconfig.get_build_info()
        return {
            "tf_version": tf.__version__,
            "tf_git_version": tf.version.GIT_VERSION,
            "keras_version": keras.__version__,
            "cuda_build_version": build.get("cuda_version") if build.get("is_cuda_build") else None,
            "cudnn_build_version": build.get("cudnn_version") if build.get("is_cuda_build") else None,
        }

    def device_details(self, config: BenchmarkConfig) -> dict[str, Any]:
        """Product name, count and compute capability of the devices the trial runs on (GPU/TPU)."""
        if config.device == "gpu":
            gpus = tf.config.list_physical_devices("GPU")
            details = tf.config.experimental.get_device_details(gpus[0]) if gpus else {}
            capability = details.get("compute_capability")
            return {
                "accelerator": details.get("device_name"),
                "accelerator_count": config.num_devices,
                "compute_capability": ".".join(map(str, capability)) if capability else None,
            }
        if config.device == "tpu":
            name = os.environ.get("TPU_ACCELERATOR_TYPE") or os.environ.get("ACCELERATOR_TYPE")
            return {"accelerator": f"TPU {name}" if name else None, "accelerator_count": config.num_devices}
        return {}

    def is_out_of_memory(self, error: BaseException) -> bool:
        """TensorFlow's way of saying a device ran out of memory."""
        return isinstance(error, tf.errors.ResourceExhaustedError)


BACKEND = TensorFlowBackend()
