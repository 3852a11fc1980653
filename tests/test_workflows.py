"""The GitHub Actions workflows cannot run here, so they are checked: the workflow schema, zizmor's security
audit (offline), and every command they call: each `stepwatch ...` line parses with the real CLI, each
`make` target exists."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stepwatch.collector.cli import COMMANDS, build_parser
from tests.conftest import REPO

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent
# What the workflows' environment variables hold at run time (inputs, matrix values and secrets).
SAMPLE_ENV = {
    "SUITE": "smoke",
    "STEPWATCH_RESULTS_URI": "s3://bucket/stepwatch/results",
    "BASELINE": "tensorflow==2.20.0",
    "CANDIDATE": "tensorflow==2.21.0 keras==3.15.1",
    "TRIALS": "5",
    "MODE": "bisect",
    "METRIC": "examples_per_sec,peak_memory_bytes",
    "sources": "data/results",
    "ALERT_ACTION": "ack",
    "ALERT_ID": "3",
    "ALERT_NOTE": "expected with TF 2.21",
    "BASE_SHA": "1" * 40,
    "HEAD_SHA": "2" * 40,
    "ENV_ARGS": "--pip-arg=--extra-index-url=https://download.pytorch.org/whl/cu126",
    "CHECK_ARGS": "--models resnet50,bert --xla on",
}


def run_blocks(path: Path) -> list[str]:
    """The shell of every `run:` step, continuation lines joined."""
    workflow = yaml.safe_load(path.read_text())
    blocks = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    return [re.sub(r"\\\n\s*", " ", block) for block in blocks]


def commands(prefix: str) -> list[tuple[str, list[str]]]:
    found = []
    for path in WORKFLOWS:
        for block in run_blocks(path):
            for line in block.splitlines():
                line = re.split(r" # | \d?>", line)[0].strip()  # less a comment or a redirection
                if line.startswith(prefix):
                    for name, value in SAMPLE_ENV.items():
                        line = line.replace(f'"${name}"', shlex.quote(value))
                        line = re.sub(rf"\${name}\b", value, line)  # unquoted: several arguments
                    found.append((path.name, shlex.split(line)))
    return found


def test_there_are_the_six_workflows() -> None:
    assert [p.name for p in WORKFLOWS] == [
        "ci.yml", "stepwatch-code-pr.yml", "stepwatch-nightly.yml", "stepwatch-upgrade-pr-verdict.yml",
        "stepwatch-upgrade-pr.yml", "upgrade-check.yml",
    ]  # fmt: skip


def test_workflows_match_the_github_schema() -> None:
    done = subprocess.run(
        [str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_action_matches_the_github_schema_and_zizmor_finds_nothing_in_it() -> None:
    action = str(REPO / "action.yml")
    schema = subprocess.run([str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-actions", action],
                            capture_output=True, text=True)  # fmt: skip
    assert schema.returncode == 0, schema.stdout + schema.stderr
    audit = subprocess.run([str(BIN / "zizmor"), "--offline", "--min-severity", "medium", "--format", "plain", action],
                           capture_output=True, text=True)  # fmt: skip
    assert audit.returncode == 0 and "No findings to report" in audit.stdout + audit.stderr, audit.stdout


def test_actionlint_finds_nothing_here_nor_in_what_init_writes_for_every_runner(tmp_path: Path) -> None:
    """actionlint: expressions, the shell of every run step through shellcheck, the inputs of known actions. It
    guards syntax; what the steps do is replayed in test_publish and test_upgrade_pr."""
    assert shutil.which("shellcheck"), "actionlint skips the shell without shellcheck: make test installs it"
    done = subprocess.run([str(BIN / "actionlint"), *map(str, WORKFLOWS)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    runners = ["--gpu-runner", "self-hosted,gpu", "--tpu-runner", "tpu-v5e", "--keras-backend", "jax"]
    action = "stepwatch/stepwatch@" + "c" * 40
    init = subprocess.run([sys.executable, "-m", "stepwatch", "init", "--models", "resnet50", *runners, "--action",
                           action], capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert init.returncode == 0, init.stderr
    done = subprocess.run([str(BIN / "actionlint")], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_finds_nothing_of_medium_severity_or_higher() -> None:
    done = subprocess.run(
        [str(BIN / "zizmor"), "--offline", "--min-severity", "medium", "--format", "plain", str(REPO / ".github")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


def test_every_action_is_pinned_to_a_commit() -> None:
    for path in WORKFLOWS:
        for ref in re.findall(r"uses:\s*(\S+)", path.read_text()):
            if ref == "./":  # stepwatch's own action, from the checkout
                continue
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w.-]+)?@[0-9a-f]{40}", ref), f"{path.name}: {ref} is not pinned"


def test_no_expression_is_expanded_inside_a_run_line() -> None:
    for path in WORKFLOWS:
        for block in run_blocks(path):
            assert "${{" not in block, f"{path.name}: move the expression into env: {block[:80]}"


STEPWATCH = [(w, ["stepwatch", *args[3:]]) for w, args in commands("python3 -m stepwatch")]


def test_the_workflows_call_stepwatch() -> None:
    called = {args[1] for _, args in STEPWATCH}
    assert called == {"upgrade-check", "code-check", "bisect", "publish", "package-sets", "image-sides", "maintain"}
    # ... and the rest through stepwatch's action, whose commands are the CLI's
    action = (REPO / "action.yml").read_text()
    through_action = set(re.findall(r"(?:^\s+|&& )stepwatch ([a-z-]+) ", action, re.M))
    assert through_action == {"run", "upgrade-check", "package-sets", "publish"}
    assert through_action <= set(COMMANDS)


def test_this_repositorys_workflows_are_what_stepwatch_init_writes(tmp_path: Path) -> None:
    """One source: the nightly and upgrade pull request workflows here are init's, with the action from the
    checkout and a CPU runner only (this project has no accelerator runner)."""
    done = subprocess.run([sys.executable, "-m", "stepwatch", "init", "--dir", str(tmp_path), "--action", "./"],
                          capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = sorted((tmp_path / ".github" / "workflows").glob("*.yml"))
    assert [p.name for p in written] == ["stepwatch-code-pr.yml", "stepwatch-nightly.yml",
                                         "stepwatch-upgrade-pr-verdict.yml", "stepwatch-upgrade-pr.yml"]  # fmt: skip
    for path in written:
        assert path.read_text() == (REPO / ".github" / "workflows" / path.name).read_text(), path.name


@pytest.mark.parametrize(("workflow", "args"), STEPWATCH, ids=[f"{w}:{a[1]}" for w, a in STEPWATCH])
def test_every_stepwatch_line_parses_with_the_real_cli(workflow: str, args: list[str]) -> None:
    parsed = build_parser().parse_args(args[1:])
    assert parsed.command == args[1]


@pytest.mark.parametrize("target", sorted({a[1] for _, a in commands("make ")}))
def test_every_make_target_the_workflows_call_exists(target: str) -> None:
    done = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_tests_marked_large_run_in_a_ci_job_of_their_own() -> None:
    """A test marked large is skipped by `make test`; CI's `large` job runs them with `make test-large`."""
    assert ("ci.yml", ["make", "test-large"]) in commands("make ")
    done = subprocess.run(["make", "-n", "test-large"], cwd=REPO, capture_output=True, text=True)
    assert "--run-large -m large" in done.stdout


def test_ci_runs_both_tiers_on_every_change() -> None:
    """`.ci/run` (what runs on every change) calls the README's two test commands, the fast tier then the large one:
    a path only the large tier tests is still tested on every change."""
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert [line for line in lines if line.startswith("make ")] == ["make test", "make test-large"]
    readme = (REPO / "README.md").read_text()
    assert "make test " in readme and "make test-large" in readme


SLOW_TEST = """
import time

def test_slow():
    time.sleep(0.3)

def test_quick():
    pass
"""


def test_a_fast_tier_test_over_the_set_figure_is_named_at_the_end_and_fails_nothing(tmp_path: Path) -> None:
    """The fast tier's guard (tests/conftest.py SLOW_S): every run prints its tier and wall time, and names each test
    that took longer than the figure as one that belongs in the large tier or a shared fixture, without failing."""
    (tmp_path / "test_guarded.py").write_text(SLOW_TEST)
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")

    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "STEPWATCH_TEST_SLOW_S": "0.2"})  # fmt: skip
    # (the run's own process prints the summary: this test may run in a pytest-xdist worker, whose variables the
    # subprocess inherits, and conftest tells a worker by its config, not its environment)
    assert done.returncode == 0, done.stdout[-2000:]
    assert re.search(r"tier fast \(make test\): 2 tests ran in 0 min \d+ s of wall time", done.stdout), done.stdout
    named = [line for line in done.stdout.splitlines() if "belongs in the large tier" in line]
    # The slow test only: the quick one is under the figure.
    assert len(named) == 1 and named[0].endswith("test_guarded.py::test_slow"), named
    assert re.match(r"0\.\d s call over 0\.2 s: ", named[0]), named


def test_a_pull_request_restores_the_default_branchs_cache_never_another_pull_requests(tmp_path: Path) -> None:
    """The replay's cache scoping (tests/github.py CACHE_RULE), on which the compile cache's path from the nightly to
    every pull request rests: a pull request's own entry first, else the default branch's; never a sibling's."""
    from tests.github import Caches

    caches, prefix = Caches(), ["stepwatch-compile-Linux-X64-"]
    (tmp_path / "c").mkdir()
    for run, ref in (("1", "refs/heads/main"), ("2", "refs/pull/12/merge")):
        (tmp_path / "c" / "f").write_text(run)
        caches.save(tmp_path, f"stepwatch-compile-Linux-X64-{run}", ["c"], ref)
    assert caches.restore(tmp_path, "stepwatch-compile-Linux-X64-9", prefix, "refs/pull/13/merge").endswith("-1")
    assert (tmp_path / "c" / "f").read_text() == "1"  # the default branch's files, not pull request 12's
    assert caches.restore(tmp_path, "stepwatch-compile-Linux-X64-9", prefix, "refs/pull/12/merge").endswith("-2")
    assert caches.restore(tmp_path, "other-9", ["other-"], "refs/pull/12/merge") is None
