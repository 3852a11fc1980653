"""Every Keras backend on this CPU for real: trials on JAX and torch with what ran read back (TensorFlow's are
in the other tests), the same model giving the same loss on each from the same weights, combinations a backend
cannot run refused in one line, and the parent processes free of every framework."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stepwatch.collector.config import auto_threads, resolve, thread_counts, usable_cores
from tests.conftest import JAX_BILSTM, REPO, SHORT, shared_rows, stepwatch

# (keras_backend, model, precision, xla) -> what the trial must read back. What each reads back is its backend's and
# precision's setting, not its model's: the LSTM is the quickest to compile (JAX's bf16 step of the Transformer took
# 34 s of a loaded worker, the LSTM's 8 s); keras-hub's models train on JAX in the large tier (the parity test below,
# the smoke suite).
TRIALS = {
    ("jax", "bilstm", "fp32", True): dict(
        compiler="xla", tf32_enabled=False, matmul_precision="highest", compute_dtype="float32", loss_scaling=False
    ),
    ("jax", "bilstm", "mixed_bfloat16", True): dict(
        compiler="xla", tf32_enabled=True, matmul_precision="default", compute_dtype="bfloat16", loss_scaling=False
    ),
    ("torch", "bilstm", "fp32", False): dict(
        compiler="none", tf32_enabled=False, matmul_precision="highest", compute_dtype="float32", loss_scaling=False
    ),
    ("torch", "bilstm", "mixed_float16", False): dict(
        compiler="none", tf32_enabled=True, matmul_precision="high", compute_dtype="float16", loss_scaling=True
    ),
}
VERSION_OF = {"tensorflow": "tf_version", "jax": "jax_version", "torch": "torch_version"}


@pytest.fixture(scope="module")
def backend_rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """One trial of each of TRIALS (threads auto): JAX's fp32 bilstm is the first trial of the run test_counters and the
    dashboard's store read too (threads default: JAX has no setting of its own, so auto leaves it there)."""
    own = [
        ("--suite", "smoke", "--models", m, *SHORT, "--keras-backend", b, "--precision", p, "--xla", "on" if x else
         "off", "--threads", "auto", "--trials", "1")
        for b, m, p, x in TRIALS
        if (b, m, p, x) != ("jax", "bilstm", "fp32", True)
    ]  # fmt: skip
    return [row for row in shared_rows(tmp_path_factory, JAX_BILSTM, *own) if row["trial"] == 0]


def test_every_backend_trains_and_records_what_really_ran(backend_rows: list[dict]) -> None:
    assert len(backend_rows) == len(TRIALS)
    for row in backend_rows:
        key = (row["keras_backend"], row["model"], row["precision"], row["xla_requested"])
        expected = TRIALS[key]
        assert row["status"] == "ok", (key, row["error_message"])
        assert {name: row[name] for name in expected} == expected, key
        assert row["xla_effective"] is (row["compiler"] == "xla")
        assert row["variable_dtype"] == "float32" and row["device"] == "cpu"
        assert row["examples_per_sec"] > 0 and row["first_loss"] > 0 and row["peak_memory_kind"] == "host_anon"
        # The trial imported its own framework and no other: a JAX or torch trial never loads TensorFlow
        # (test_runner checks that a TensorFlow trial does not load the JAX TensorFlow imports when installed).
        assert json.loads(row["extras"])["frameworks_loaded"] == [row["keras_backend"]], key
        assert row[VERSION_OF[row["keras_backend"]]], key
        # Host threads: torch's are set and read back; JAX has no supported setting, so auto leaves its default.
        if row["keras_backend"] == "torch":
            assert row["threads"] == auto_threads("cpu", "torch", usable_cores()), key
            assert (row["intra_op_threads"], row["inter_op_threads"]) == thread_counts(row["threads"]), key
        else:
            assert (row["threads"], row["intra_op_threads"], row["inter_op_threads"]) == ("default", None, None)
        assert all(row[v] is None for b, v in VERSION_OF.items() if b != row["keras_backend"]), key


def test_a_backend_has_its_own_series_and_tensorflow_keeps_its_key(backend_rows: list[dict]) -> None:
    from stepwatch.collector.config import BenchmarkConfig

    by_backend = {(r["keras_backend"], r["model"], r["precision"]): r for r in backend_rows}
    torch = by_backend["torch", "bilstm", "fp32"]
    tf = BenchmarkConfig(model="bilstm")
    assert tf.key == "66ea00715b05e398"  # the key bilstm tiny's TensorFlow rows had before backends existed
    ran = resolve(BenchmarkConfig(model="bilstm", keras_backend="torch", threads="auto"))
    assert torch["config_key"] == ran.key != tf.key
    assert "keras_backend=torch" in BenchmarkConfig(model="bilstm", keras_backend="torch").label()


PARITY = textwrap.dedent(
    """
    import json, os, sys
    os.environ["KERAS_BACKEND"] = sys.argv[1]
    from stepwatch.collector.trial import runtime
    from stepwatch.collector.config import BenchmarkConfig
    runtime.prepare(BenchmarkConfig(model="bert", keras_backend=sys.argv[1]))
    backend = runtime.load(BenchmarkConfig(model="bert", keras_backend=sys.argv[1]))
    from stepwatch.collector.trial.runtime.trial_backend import TrialBackend
    own = [n for n in dir(TrialBackend) if getattr(type(backend), n) is not getattr(TrialBackend, n)]
    interface = {"is_backend": isinstance(backend, runtime.Backend), "own": own}
    import keras
    from stepwatch.trainers import get_model
    from stepwatch.trainers.spec import sparse_ce_loss

    weights, losses = sys.argv[2], {}
    for name in sys.argv[3].split(","):
        spec = get_model(name)
        keras.utils.set_random_seed(0)
        model = spec.build(spec.preset("tiny"))
        path = f"{weights}/{name}.weights.h5"
        if sys.argv[1] == "tensorflow":
            model.save_weights(path)
        else:
            model.load_weights(path)
        x, y = spec.synthetic_batch(spec.preset("tiny"), 8, 0)
        model.compile(jit_compile=sys.argv[1] == "jax")  # one compiled forward: op-by-op JAX is slow on a CPU
        losses[name] = float(sparse_ce_loss()(y, model.predict_on_batch(x)))

    # Whether Keras dispatches batch-end callbacks off the training thread with stepwatch's timing callback, and
    # with one that overrides on_train_batch_end (which makes every step wait for its logs).
    from stepwatch.collector.trial.measure import WindowClock
    from stepwatch.collector.trial.runtime.keras_backend import FitWindows

    class Blocking(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    dispatch = [keras.callbacks.CallbackList([c])._async_train for c in (FitWindows(WindowClock(1, 1), 2), Blocking())]
    print(json.dumps({"losses": losses, "async": dispatch, "interface": interface}))
    """
)


@pytest.mark.large
@pytest.mark.parametrize(
    "models",
    [
        "bilstm",  # an LSTM: recurrent kernels differ most across backends (13 s of both cores)
        # keras-hub's encoder layers and the other two: 25 s more, CI's large job (the same check on each)
        pytest.param("bert,transformer,resnet50", marks=pytest.mark.large),
    ],
)
def test_the_same_weights_give_the_same_first_loss_on_every_backend(tmp_path: Path, models: str) -> None:
    """Keras' initializers draw from each backend's own generator, so one seed gives different weights per
    backend; from the same weights (saved on TensorFlow, loaded on the others) each model's loss on the
    synthetic batch agrees: the four trainers are the same model on every backend (bilstm by default, the other
    three with --run-large). The timing callback keeps Keras' asynchronous batch-end dispatch on JAX and torch, and
    every backend implements the runtime's Backend interface."""
    losses = {}
    for backend in ("tensorflow", "jax", "torch"):  # TensorFlow first: it saves the weights the others load
        done = subprocess.run(
            [sys.executable, "-c", PARITY, backend, str(tmp_path), models], cwd=REPO, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        losses[backend] = out["losses"]
        # JAX and torch run batch-end callbacks on a worker thread: stepwatch's adds no sync per step, where a
        # callback overriding on_train_batch_end would. TensorFlow's Keras backend never dispatches them async.
        assert out["async"] == ([False, False] if backend == "tensorflow" else [True, False]), backend
        # Each backend is the runtime's Backend interface, and fills in what the shared skeleton cannot (itself
        # or from a part it shares with another backend, as torch's from plain PyTorch's TorchDevice).
        assert out["interface"]["is_backend"], backend
        assert {"configure", "software_environment", "device_peak_memory"} <= set(out["interface"]["own"]), backend
    for name, reference in losses["tensorflow"].items():
        for backend in ("jax", "torch"):
            assert losses[backend][name] == pytest.approx(reference, rel=1e-4), (name, backend)


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        (("--keras-backend", "torch", "--loop", "ctl"), "loop 'ctl' is a TensorFlow custom loop"),
        (("--keras-backend", "jax", "--data", "pipeline"), "data 'pipeline' is a tf.data host pipeline"),
        (
            ("--keras-backend", "torch", "--device", "gpu", "--devices", "2", "--strategy", "mirrored"),
            "keras_backend torch runs one CPU or GPU",
        ),
        (
            (
                "--keras-backend",
                "mxnet",
            ),
            "mxnet",
        ),
    ],
)
def test_what_a_backend_cannot_run_is_refused_in_one_line(flags: tuple[str, ...], why: str) -> None:
    done = stepwatch("run", "--suite", "smoke", "--models", "bilstm", *flags, "--dry-run")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0], done.stderr


def test_the_former_backend_flag_still_sets_the_device() -> None:
    done = stepwatch("run", "--suite", "smoke", "--models", "bilstm", "--backend", "cpu", "--xla", "off", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "bilstm/tiny cpu noxla" in done.stdout


def test_the_parent_store_analysis_and_dashboard_import_no_framework() -> None:
    probe = textwrap.dedent(
        """
        import sys
        import stepwatch.collector.cli, stepwatch.collector.runner.execution
        import stepwatch.collector.environments.virtualenvs
        import stepwatch.collector.trial.runtime, stepwatch.collector.store.ingest, stepwatch.collector.store.queries
        import stepwatch.collector.analysis.alerts, stepwatch.collector.output.comparison
        import stepwatch.collector.output.runs, stepwatch.collector.workflows.check
        import stepwatch.dashboard.data, stepwatch.dashboard.charts
        from stepwatch.collector.cli import build_parser
        build_parser()
        print(sorted(m for m in ("tensorflow", "jax", "torch", "keras", "keras_hub") if m in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


HIDDEN = textwrap.dedent(
    """
    import importlib.util, json, sys
    from stepwatch.collector.trial import runtime
    from stepwatch.collector.config import BenchmarkConfig
    backend = sys.argv[1]
    runtime.prepare(BenchmarkConfig(model="bilstm", keras_backend=backend))
    others = [name for name in ("tensorflow", "jax", "torch") if name != backend]
    found = {"specs": [importlib.util.find_spec(name) for name in others], "refused": []}
    for name in others:
        try:
            __import__(name)
        except ModuleNotFoundError as error:
            found["refused"].append(str(error))
    if backend == "jax":  # what scikit-learn imports (keras imports scikit-learn wherever it is installed)
        import numpy as np
        import scipy.stats
        from scipy._lib._array_api import array_namespace, xp_promote
        found["promoted"] = str(xp_promote(np.float32(1), np.float64(2), xp=array_namespace(np.float32(1)))[0].dtype)
        found["cdf"] = float(scipy.stats.norm.cdf(0.0))
    else:  # torch.compile's tracer asks importlib whether TensorFlow is there
        import torch._dynamo
        found["dynamo"] = torch._dynamo.__name__
    found["in_sys_modules"] = [name for name in others if name in sys.modules]
    print(json.dumps(found))
    """
)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_hidden_framework_looks_uninstalled_to_the_libraries_a_trial_imports(backend: str) -> None:
    """A trial hides the other frameworks as a host without them would look: ``import`` raises
    ModuleNotFoundError, ``importlib.util.find_spec`` answers None, ``sys.modules`` has no entry. scipy's
    array-API helpers (imported by scikit-learn, which Keras imports where it is installed) and torch.compile's
    tracer then work: a ``None`` in ``sys.modules`` crashed every JAX trial on a GPU host with scikit-learn."""
    done = subprocess.run([sys.executable, "-c", HIDDEN, backend], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    others = [name for name in ("tensorflow", "jax", "torch") if name != backend]
    assert found["specs"] == [None, None] and found["in_sys_modules"] == []
    assert found["refused"] == [f"No module named '{name}'" for name in others]
    if backend == "jax":
        assert found["promoted"] == "float64" and found["cdf"] == 0.5
    else:
        assert found["dynamo"] == "torch._dynamo"
