"""Environment capture without TensorFlow: real values where the machine has them, None where not."""

from __future__ import annotations

import json

import pytest

from collector.bench.environment import host_environment


def test_cpu_environment_is_read_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", "/not/tensorflow")  # another tool's TF_ variable
    monkeypatch.setenv("STEPWATCH_RUNNER_LABEL", "ubuntu-latest")
    env = host_environment("cpu")
    assert env["cpu_cores"] >= 1 and env["host_memory_bytes"] > 2**28
    assert env["accelerator"] == env["cpu_model"] and env["accelerator_count"] == 1
    assert env["xla_flags"] == "--xla_cpu_enable_fast_math=false"
    tf_env = json.loads(env["tf_env"])
    assert tf_env["XLA_FLAGS"] == "--xla_cpu_enable_fast_math=false" and "TF_CLI_CONFIG_FILE" not in tf_env
    assert env["runner_label"] == "ubuntu-latest"
    assert env["driver_version"] is None and env["accelerator_memory_bytes"] is None  # no GPU: None, not a guess
    assert env["python_version"].startswith("3.") and env["keras_hub_version"]
