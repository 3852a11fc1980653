"""Environment capture without TensorFlow: real values where the machine has them, None where not."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from stepwatch.collector.trial.host import REPO_ROOT, git_sha, host_environment


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


def test_the_commit_is_read_only_from_stepwatchs_own_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout recorded its own commit; a copy of the source inside another repository (no .git of its own)
    records none, not the enclosing repository's."""
    monkeypatch.delenv("STEPWATCH_GIT_SHA", raising=False)
    own = tmp_path / "stepwatch"
    shutil.copytree(REPO_ROOT / "collector", own / "collector", ignore=shutil.ignore_patterns("__pycache__"))

    def git(*args: str, cwd: Path) -> str:
        who = {f"GIT_{role}_{field}": value for role in ("AUTHOR", "COMMITTER") for field, value in
               (("NAME", "t"), ("EMAIL", "t@t"))}  # fmt: skip
        env = {**who, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env=env)
        return done.stdout.strip()

    git("init", "-q", cwd=tmp_path)
    git("add", ".", cwd=tmp_path)
    git("commit", "-q", "-m", "outer", cwd=tmp_path)
    assert git_sha(own) is None  # inside the outer repository, which is not stepwatch's
    assert git_sha(tmp_path) == git("rev-parse", "HEAD", cwd=tmp_path)
    git("init", "-q", cwd=own)
    git("add", ".", cwd=own)
    git("commit", "-q", "-m", "own", cwd=own)
    assert git_sha(own) == git("rev-parse", "HEAD", cwd=own) != git_sha(tmp_path)
    monkeypatch.setenv("STEPWATCH_GIT_SHA", "abc123")  # an install without .git says what it is
    assert git_sha(own) == "abc123"
