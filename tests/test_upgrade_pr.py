"""Upgrade pull requests: the pin files a side is read from, ``stepwatch package-sets`` on a real git repository,
and the upgrade-pr workflows' shell steps run here against one.

The repositories are made in the tests: a base branch and a pull request branch that bumps a pinned package,
with the base branch moving on after the branch point (so the merge base, not the base's tip, is the
baseline). The packages are small local wheels: pip's resolver and the side environments are real
(``--no-index``, built on this interpreter's packages). GitHub's API cannot be reached from here, so the
verdict workflow's ``gh`` calls go to a stand-in that answers from JSON (through the real ``jq``) and records
what was posted; everything else in its shell runs as written.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stepwatch.collector.environments import pinfiles
from stepwatch.collector.environments.pinfiles import PinFileError, Source
from tests.conftest import REPO, commit, git, stepwatch
from tests.wheels import wheel

WORKFLOWS = REPO / ".github" / "workflows"
SMALL = "--models bilstm --xla off --precision fp32 --steps 20 --warmup 20"


def build_wheels(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, version in (("swt-alpha", "1.0"), ("swt-alpha", "2.0"), ("swt-gamma", "1.0"), ("swt-gamma", "1.1")):
        wheel(folder, name, version)
    wheel(folder, "swt-beta", "1.0", requires=("swt-gamma",))
    wheel(folder, "swt-beta", "1.1", requires=("swt-gamma",))
    return folder


PYPROJECT = '[project]\nname = "app"\nversion = "1"\ndependencies = ["swt-beta"]\n'


def pr_repo(root: Path) -> tuple[Path, str, str]:
    """main pins swt-alpha 1.0 and swt-beta 1.0; the PR branch bumps swt-alpha to 2.0; main then moves swt-beta
    to 1.1 (not part of the PR). Returns the repository, main's tip and the PR's head."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "ci")
    requirements = "# the training stack\nswt-alpha==1.0\nswt-beta==1.0  # and what it needs\n"
    commit(repo, "base", {"requirements.txt": requirements, "pyproject.toml": PYPROJECT, "train.py": "print(1)\n"})
    git(repo, "checkout", "-q", "-b", "bump")
    head = commit(
        repo, "Bump swt-alpha from 1.0 to 2.0", {"requirements.txt": requirements.replace("1.0\n", "2.0\n", 1)}
    )
    git(repo, "checkout", "-q", "main")
    tip = commit(repo, "main moves on", {"requirements.txt": requirements.replace("swt-beta==1.0", "swt-beta==1.1")})
    return repo, tip, head


def env_args(wheels: Path) -> list[str]:
    return ["--reuse-site-packages", "--pip-arg=--no-index", f"--pip-arg=--find-links={wheels}"]


# --- Pin files ------------------------------------------------------------------------------------------------


def source(files: dict[str, str]) -> Source:
    return Source("test", tuple(files), files.get)


def test_github_path_filters_match_as_github_does() -> None:
    assert pinfiles.matches("requirements.txt", "requirements*.txt")
    assert pinfiles.matches("requirements-gpu.txt", "requirements*.txt")
    assert not pinfiles.matches("sub/requirements.txt", "requirements*.txt")  # * stays in its folder
    assert pinfiles.matches("requirements/cuda.txt", "requirements/*.txt")
    assert pinfiles.matches("a/b/uv.lock", "**/uv.lock") and pinfiles.matches("uv.lock", "**/uv.lock")
    assert pinfiles.matching(["pyproject.toml", "src/x.py", "poetry.lock"], pinfiles.PIN_FILES) == [
        "poetry.lock",
        "pyproject.toml",
    ]


def test_the_workflow_runs_on_every_pull_request_so_its_check_always_reports() -> None:
    """A required check that only some pull requests start leaves the others waiting on it forever: no paths filter
    (package-sets says at once when no pin file changed)."""
    workflow = yaml.safe_load((WORKFLOWS / "stepwatch-upgrade-pr.yml").read_text())
    assert workflow[True] == {"pull_request": None}  # yaml reads `on:` as True


def test_requirement_files_with_comments_hashes_includes_markers_and_constraints() -> None:
    found = pinfiles.read_set(
        source({
            "requirements.txt": "# stack\n-r requirements/base.txt\n-c constraints.txt\n--extra-index-url https://x\n"
            "tensorflow==2.20.0 \\\n    --hash=sha256:abc\nKeras_Hub>=0.20  # comment\n"
            'pywin32==306; sys_platform == "win32"\n-e .\n',
            "requirements/base.txt": "numpy>=1.26\nkeras-hub<0.30\n",
            "constraints.txt": "numpy==2.1.3\nh5py==3.12.1\n",
        })
    )  # fmt: skip
    assert pinfiles.side_text(found.requirements.values()) == (
        "keras-hub<0.30,>=0.20",
        "numpy>=1.26",
        "tensorflow==2.20.0",
    )
    assert pinfiles.side_text(found.constraints.values()) == ("h5py==3.12.1", "numpy==2.1.3")
    assert found.files == ["requirements.txt", "requirements/base.txt", "constraints.txt"]


def test_pyproject_and_lock_files_give_requirements_and_pins() -> None:
    uv_lock = (
        'version = 1\n[[package]]\nname = "app"\nversion = "1"\nsource = { editable = "." }\n'
        '[[package]]\nname = "swt-beta"\nversion = "1.0"\nsource = { registry = "https://pypi.org/simple" }\n'
        '[[package]]\nname = "pywin32"\nversion = "306"\nsource = { registry = "https://pypi.org/simple" }\n'
    )
    found = pinfiles.read_set(source({"pyproject.toml": PYPROJECT, "uv.lock": uv_lock}))
    assert list(found.requirements) == ["swt-beta"]
    assert pinfiles.side_text(found.constraints.values()) == ("pywin32==306", "swt-beta==1.0")  # not the project
    pipfile = json.dumps({"default": {"swt-gamma": {"version": "==1.1"}}, "develop": {"pytest": {"version": "==8"}}})
    poetry = '[tool.poetry.dependencies]\npython = "^3.11"\nswt-gamma = "^1.0"\n'
    found = pinfiles.read_set(source({"pyproject.toml": poetry, "Pipfile.lock": pipfile}))
    assert list(found.requirements) == ["swt-gamma"] and list(found.constraints) == ["swt-gamma"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"requirements.txt": "torch @ https://example.com/torch.whl\n"}, "installs from a URL"),
        ({"requirements.txt": "tensorflow=>2\n"}, "'tensorflow=>2' is not a pip requirement"),
        ({"requirements.txt": "-r missing.txt\n"}, "requirements.txt includes missing.txt, which does not exist"),
        ({"pyproject.toml": "[project\n"}, "pyproject.toml is not valid TOML"),
        ({"Pipfile.lock": "[]"}, "Pipfile.lock is not a Pipfile.lock"),
    ],
)
def test_a_broken_pin_file_is_one_line_naming_it(files: dict[str, str], message: str) -> None:
    with pytest.raises(PinFileError, match=re.escape(message)):
        pinfiles.read_set(source(files))


# --- stepwatch package-sets on a real repository --------------------------------------------------------------


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheels(tmp_path_factory.mktemp("wheels"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One environment cache for the module: the resolver's environment is built once (its answers are keyed
    by their pins and pip arguments, and only exact pins are kept), the sides' environments by content."""
    return tmp_path_factory.mktemp("envs")


def test_package_sets_of_a_pull_request_are_its_merge_base_and_head(tmp_path: Path, wheels: Path, cache: Path) -> None:
    repo, tip, head = pr_repo(tmp_path)
    outputs = tmp_path / "outputs"
    done = stepwatch(
        "package-sets", "--repo", str(repo), "--base", "main", "--head", "bump", *env_args(wheels),
        "--format", "json", "--github-output", str(outputs), env={"STEPWATCH_ENV_CACHE": str(cache)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    base = git(repo, "merge-base", tip, head)
    assert found["baseline"]["origin"] == f"merge base {base[:12]}" and base != tip
    assert found["baseline"]["files"] == ["pyproject.toml", "requirements.txt"]
    assert found["baseline"]["requirements"] == ["swt-alpha==1.0", "swt-beta==1.0"]
    assert found["candidate"]["requirements"] == ["swt-alpha==2.0", "swt-beta==1.0"]
    # Everything pip resolves, swt-gamma (which swt-beta needs) included; main's own swt-beta 1.1 is not the PR's.
    assert found["baseline"]["resolved"] == {"swt-alpha": "1.0", "swt-beta": "1.0", "swt-gamma": "1.1"}
    assert found["changes"] == [{"name": "swt-alpha", "baseline": "1.0", "candidate": "2.0"}]
    assert (
        outputs.read_text()
        == "changed=true\nbaseline=swt-alpha==1.0 swt-beta==1.0\ncandidate=swt-alpha==2.0 swt-beta==1.0\n"
    )

    # A later push that only edits a comment: nothing resolved changes between it and the push before, and
    # it says so.
    git(repo, "checkout", "-q", "bump")
    text = (repo / "requirements.txt").read_text()
    commit(repo, "comment", {"requirements.txt": text.replace("# the training stack", "# the stack")})
    same = stepwatch("package-sets", "--repo", str(repo), "--base", "bump~1", "--head", "bump", *env_args(wheels),
                     "--github-output", str(outputs), env={"STEPWATCH_ENV_CACHE": str(cache)})  # fmt: skip
    assert same.returncode == 0, same.stderr
    assert "Nothing that the two package sets resolve to changes (3 package(s) each)" in same.stdout
    assert outputs.read_text().splitlines()[3] == "changed=false"


def test_a_lock_file_pins_only_what_the_requirements_install(tmp_path: Path, wheels: Path, cache: Path) -> None:
    sides = {}
    for side, gamma in (("base", "1.0"), ("head", "1.1")):
        folder = tmp_path / side
        folder.mkdir()
        (folder / "pyproject.toml").write_text(PYPROJECT)
        lock = "".join(f'[[package]]\nname = "{n}"\nversion = "{v}"\n' for n, v in
                       (("swt-beta", "1.0"), ("swt-gamma", gamma), ("pywin32", "306")))  # fmt: skip
        (folder / "uv.lock").write_text(lock)
        sides[side] = [str(folder / "pyproject.toml"), str(folder / "uv.lock")]
    done = stepwatch(
        "package-sets", "--baseline-file", *sides["base"], "--candidate-file", *sides["head"], *env_args(wheels),
        env={"STEPWATCH_ENV_CACHE": str(cache)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "swt-beta==1.0 swt-gamma==1.1" in done.stdout  # the transitive pin, applied as pip's -c would
    assert "2 pin(s) of constraint and lock files applied, 1 for packages it does not install" in done.stdout
    assert re.search(r"1 package\(s\) change .*\n  swt-gamma 1.0 -> 1.1\n$", done.stdout)


def test_package_sets_that_cannot_be_derived_are_one_line(tmp_path: Path, wheels: Path, cache: Path) -> None:
    repo, _, _ = pr_repo(tmp_path)
    envs = {"STEPWATCH_ENV_CACHE": str(cache)}
    unknown = stepwatch("package-sets", "--repo", str(repo), "--base", "main", "--head", "nope", env=envs)
    assert unknown.returncode == 2 and unknown.stderr.strip() == (
        f"stepwatch: error: 'nope' is not a commit of the git repository {repo}"
    )
    half = stepwatch("package-sets", "--base", "main", "--candidate-file", "x.txt")
    assert half.returncode == 2 and "give --base and --head (git refs), or --baseline-file and" in half.stderr
    git(repo, "checkout", "-q", "-b", "impossible")
    commit(repo, "pin what does not exist", {"requirements.txt": "swt-alpha==9.9\n"})
    done = stepwatch("package-sets", "--repo", str(repo), "--base", "main", "--head", "impossible",
                     *env_args(wheels), env=envs)  # fmt: skip
    assert done.returncode == 4
    [line] = done.stderr.strip().splitlines()[-1:]
    assert line.startswith("stepwatch: error: the candidate's requirements do not resolve (head ")
    assert "swt-alpha==9.9" in line


# --- The workflows' shell steps, run here ---------------------------------------------------------------------


def job(name: str) -> dict:
    workflow = yaml.safe_load((WORKFLOWS / name).read_text())
    [only] = workflow["jobs"].values()
    return only


def expression(text: str, outputs: dict[str, dict[str, str]]) -> str:
    """The one kind of expression the steps' env and if use: a step's output."""
    match = re.fullmatch(r"\$\{\{\s*steps\.(\w+)\.outputs\.(\w+)\s*\}\}", text)
    assert match, f"not a step output: {text}"
    return outputs.get(match.group(1), {}).get(match.group(2), "")


# The set-up steps: the project's own requirements and stepwatch's action installing stepwatch (run for real in
# test_adoption, in a fresh environment); here the test's own environment is the job's.
SET_UP = ("The project's own environment", "Set up")


def run_steps(steps: list[dict], cwd: Path, env: dict[str, str], summary: Path) -> dict[str, dict[str, str]]:
    """Each ``run:`` step in bash -e as Actions runs it, with $GITHUB_OUTPUT read back as the step's outputs and
    ``if: steps.X.outputs.Y == 'true'`` honoured (and ``!cancelled()``, always true here); ``uses:`` steps and the
    set-up are what the test did itself."""
    outputs: dict[str, dict[str, str]] = {}
    for step in steps:
        if "run" not in step or step.get("name") in SET_UP:
            continue
        if step.get("if") == "!cancelled()":
            pass  # nothing is cancelled here
        elif "if" in step:
            match = re.fullmatch(r"steps\.(\w+)\.outputs\.(\w+) == 'true'", step["if"])
            assert match, step["if"]
            if expression(f"${{{{ steps.{match.group(1)}.outputs.{match.group(2)} }}}}", outputs) != "true":
                continue
        output = cwd / ".github-output"
        output.write_text("")
        step_env = {k: expression(v, outputs) for k, v in step.get("env", {}).items() if "steps." in v}
        assert set(step.get("env", {})) - set(step_env) <= set(env), "the test gives every other value"
        done = subprocess.run(
            ["bash", "-e", "-c", step["run"]], cwd=cwd, capture_output=True, text=True, timeout=900,
            env={**os.environ, **env, **step_env, "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)},
        )  # fmt: skip
        step["result"] = done
        if "id" in step:
            outputs[step["id"]] = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return outputs


def check_env(pr: str, base: str, head: str, wheels: Path, cache: Path) -> dict[str, str]:
    """What the upgrade-pr job's env holds on GitHub for a pull request, with this test's small check and local
    wheels; plus the environment cache and this interpreter's bin on PATH."""
    return {
        "PR": pr, "BASE_SHA": base, "HEAD_SHA": head, "SUITE": "smoke", "TRIALS": "2", "METRIC": "examples_per_sec",
        "CHECK_ARGS": f"{SMALL} --max-trials 2", "ENV_ARGS": " ".join(env_args(wheels)),
        "RUN_URL": f"https://github.com/o/r/actions/runs/{pr}",
        "STEPWATCH_ENV_CACHE": str(cache), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }  # fmt: skip


STAND_IN_GH = r"""#!/usr/bin/env bash
# gh, as far as the verdict workflow uses it: answers from $GH_STATE/*.json through the real jq, records calls.
printf '%s\n' "$*" >> "$GH_STATE/calls"
args=("$@"); jq_filter=""; method=""; body=""; path=""; fields=0
for ((i = 1; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --jq) jq_filter="${args[i+1]}"; i=$((i + 1)) ;;
    -X) method="${args[i+1]}"; i=$((i + 1)) ;;
    -f|-F) fields=1; case "${args[i+1]}" in body=@*) body="${args[i+1]#body=@}" ;; esac; i=$((i + 1)) ;;
    --paginate) ;;
    *) [ -z "$path" ] && path="${args[i]}" ;;
  esac
done
if [ -z "$method" ]; then if [ "$fields" = 1 ]; then method=POST; else method=GET; fi; fi
if [ -n "$body" ]; then cp "$body" "$GH_STATE/posted-$method.md"; fi
answer=/dev/null
case "$method $path" in
  "GET "*/pulls/*) answer="$GH_STATE/pull.json" ;;
  "GET "*/issues/*/comments) answer="$GH_STATE/comments.json" ;;
esac
if [ -n "$jq_filter" ]; then jq -r "$jq_filter" "$answer"; fi
"""


def verdict_workflow(
    tmp_path: Path, pr: Path, head: str, workflow: str = "upgrade-pr"
) -> tuple[dict, Path, Path, dict[str, str]]:
    """The verdict workflow's job, with the artifact ``pr`` (of the run of ``workflow``) where it downloads it and a
    stand-in gh (its state folder) for a pull request at ``head``; its environment."""
    post = job("stepwatch-upgrade-pr-verdict.yml")
    number = (pr / "number").read_text().strip()  # the pull request the upgrade-pr job checked
    state, artifact = tmp_path / "gh", tmp_path / "post"
    state.mkdir()
    (artifact / "artifact").mkdir(parents=True)
    (artifact / "artifact" / "pr").symlink_to(pr)
    gh = tmp_path / "bin" / "gh"
    gh.parent.mkdir()
    gh.write_text(STAND_IN_GH)
    gh.chmod(gh.stat().st_mode | stat.S_IEXEC)
    post_env = {"PATH": f"{gh.parent}:{os.environ['PATH']}", "GH_STATE": str(state), "GH_REPO": "o/r",
                "HEAD_SHA": head, "RUN_URL": f"https://github.com/o/r/actions/runs/{number}",
                "GH_TOKEN": "unused", "WORKFLOW": workflow}  # fmt: skip
    assert set(post["steps"][1]["env"]) == set(post_env) - {"PATH", "GH_STATE"}
    (state / "pull.json").write_text(json.dumps({"head": {"sha": head}}))
    return post, state, artifact, post_env


CHECKS = {"upgrade-pr": ("stepwatch upgrade", "upgrade check"), "code-pr": ("stepwatch code", "code check")}


def posts_one_comment(
    tmp_path: Path, pr: Path, head: str, verdict: str, comment: str, workflow: str = "upgrade-pr"
) -> None:
    """The verdict workflow on the artifact ``pr`` (what the ``workflow`` job uploaded): its first run creates the
    comment and the check run, a later one edits the comment, a run of a head the pull request has moved on from
    posts nothing, and a forged verdict is refused."""
    post, state, artifact, post_env = verdict_workflow(tmp_path, pr, head, workflow)
    number = (pr / "number").read_text().strip()
    others = [{"id": 11, "user": {"login": "someone"}, "body": f"<!-- stepwatch {workflow} --> quoted by a person"}]
    (state / "comments.json").write_text(json.dumps(others))

    def posted() -> tuple[subprocess.CompletedProcess, list[str]]:
        (state / "calls").write_text("")
        for old in state.glob("posted-*"):
            old.unlink()
        run_steps(post["steps"], artifact, post_env, tmp_path / "summary-post.md")
        return post["steps"][1]["result"], (state / "calls").read_text().splitlines()

    done, calls = posted()
    conclusion = {"pass": "success", "unchanged": "success", "inconclusive": "neutral", "regression": "failure"}[
        verdict
    ]
    name, what = CHECKS[workflow]
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls[2] == f"api repos/o/r/issues/{number}/comments -F body=@artifact/pr/comment.md"  # created
    assert (state / "posted-POST.md").read_text() == comment
    assert f"-f conclusion={conclusion}" in calls[3] and f"-f head_sha={head}" in calls[3]
    assert f"-f name={name} " in calls[3] and f"output[title]={what}: {verdict}" in calls[3]

    mine = {"id": 42, "user": {"login": "github-actions[bot]"}, "body": comment}
    (state / "comments.json").write_text(json.dumps([*others, mine]))
    done, calls = posted()
    assert calls[2] == "api -X PATCH repos/o/r/issues/comments/42 -F body=@artifact/pr/comment.md"  # edited
    assert (state / "posted-PATCH.md").read_text() == comment

    # A run of a head the pull request has moved on from posts nothing; a forged verdict is refused.
    (state / "pull.json").write_text(json.dumps({"head": {"sha": "f" * 40}}))
    done, calls = posted()
    assert done.returncode == 0 and "has moved on" in done.stdout and len(calls) == 1
    (state / "pull.json").write_text(json.dumps({"head": {"sha": head}}))
    (pr / "verdict").write_text("pass; rm -rf /\n")
    done, calls = posted()
    assert done.returncode == 1 and "not one stepwatch writes" in done.stdout and calls == []


def pull_request(
    tmp_path: Path, wheels: Path, cache: Path, number: str, branch: str, message: str, files: dict[str, str]
) -> tuple[Path, str, dict, dict[str, str], dict[str, dict[str, str]]]:
    """A pull request of one commit (``files``) on the branch ``branch`` from the base's tip, and the upgrade-pr
    job's steps run on it: the repository, the head, the job, its environment and its steps' outputs."""
    repo, tip, _ = pr_repo(tmp_path)
    git(repo, "checkout", "-q", "-b", branch, tip)
    head = commit(repo, message, files)
    check = job("stepwatch-upgrade-pr.yml")
    env = check_env(number, tip, head, wheels, cache)
    return repo, head, check, env, run_steps(check["steps"], repo, env, tmp_path / "summary.md")


# Six trials and three environments, a minute and a half of both cores: opt-in (--run-large; CI's `large` job). The
# default suite runs the same steps on a pull request without a change (below), and the upgrade check for real
# (test_upgrade).
@pytest.mark.large
def test_the_upgrade_pr_workflow_checks_a_bump_and_the_verdict_workflow_posts_one_comment(
    tmp_path: Path, wheels: Path, cache: Path
) -> None:
    repo, tip, head = pr_repo(tmp_path)
    check = job("stepwatch-upgrade-pr.yml")
    summary = tmp_path / "summary.md"
    env = check_env("7", tip, head, wheels, cache)
    assert set(check["env"]) == set(env) - {"STEPWATCH_ENV_CACHE", "PATH"}
    outputs = run_steps(check["steps"], repo, env, summary)
    pr = repo / "pr"
    assert outputs["sets"] == {
        "changed": "true", "baseline": "swt-alpha==1.0 swt-beta==1.0", "candidate": "swt-alpha==2.0 swt-beta==1.0",
    }  # fmt: skip
    code = int((pr / "exit-code").read_text())
    report = (pr / "report.md").read_text()
    assert report.startswith("## stepwatch upgrade check: swt-alpha==1.0 swt-beta==1.0 -> swt-alpha==2.0 swt-beta==1.0")
    assert "Packages that differ between the two environments: swt-alpha 1.0 -> 2.0." in report
    assert "A/A" in report and "Where the time went" in report
    verdict = (pr / "verdict").read_text().strip()
    # Identical code on both sides: no regression can be real, and 2 trials rarely decide (exit 3).
    assert (code, verdict) in ((0, "pass"), (3, "inconclusive")), report
    comment = (pr / "comment.md").read_text()
    assert comment.startswith("<!-- stepwatch upgrade-pr -->\n## stepwatch upgrade check: ")
    assert "| swt-alpha | 1.0 | 2.0 |" in comment and f"Verdict: **{verdict}**" in comment
    assert summary.read_text() == comment
    last = check["steps"][-1]["result"]
    assert last.returncode == 0  # pass and inconclusive (neutral) do not fail the job; a regression would
    # The artifact holds what the verdict workflow reads.
    [upload] = [s for s in check["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert "pr/" in upload["with"]["path"].split()

    # The verdict workflow, on that artifact.
    posts_one_comment(tmp_path, pr, head, verdict, comment)


def test_a_pull_request_whose_package_sets_cannot_be_derived_gets_an_error_verdict_saying_why(
    tmp_path: Path, wheels: Path, cache: Path
) -> None:
    repo, head, check, env, outputs = pull_request(tmp_path, wheels, cache, "8", "impossible",
                                                   "pin a release that does not exist",
                                                   {"requirements.txt": "swt-alpha==9.9\n"})  # fmt: skip
    assert outputs["sets"] == {}  # no changed=true: the upgrade check did not run
    assert not (repo / "pr" / "report.md").exists() and (repo / "pr" / "verdict").read_text() == "error\n"
    comment = (repo / "pr" / "comment.md").read_text()
    assert "the package sets could not be derived" in comment
    assert "the candidate's requirements do not resolve (head " in comment and "Verdict: **error**" in comment
    assert check["steps"][-1]["result"].returncode == 1
    # A job that failed before it could derive them (its set-up, say) still tells the pull request.
    subprocess.run(["rm", "-r", str(repo / "pr")], check=True)
    [verdict_step] = [s for s in check["steps"] if s.get("name") == "Verdict and comment"]
    run_steps([verdict_step], repo, env, tmp_path / "summary.md")
    assert (repo / "pr" / "verdict").read_text() == "error\n" and (repo / "pr" / "number").read_text() == "8\n"
    assert "the job failed before it could derive them: see the run" in (repo / "pr" / "comment.md").read_text()


def test_a_pull_request_that_changes_no_pin_file_passes_its_check_at_once_without_a_comment(
    tmp_path: Path, wheels: Path, cache: Path
) -> None:
    repo, head, check, _, outputs = pull_request(tmp_path, wheels, cache, "10", "model", "a wider layer",
                                                 {"model.py": "WIDTH = 64\n"})  # fmt: skip
    assert outputs["sets"] == {"changed": "false", "baseline": "", "candidate": "", "pins": "unchanged"}
    assert (repo / "pr" / "verdict").read_text() == "no-package-change\n" and not (repo / "pr" / "report.md").exists()
    assert "no package change: no pin file changed between the merge base and the head" in (
        repo / "pr" / "comment.md").read_text()  # fmt: skip
    assert check["steps"][-1]["result"].returncode == 0
    # The verdict workflow: a passing check run, and no comment on a pull request about something else.
    post, state, artifact, post_env = verdict_workflow(tmp_path, repo / "pr", head)
    (state / "comments.json").write_text("[]")
    (state / "calls").write_text("")
    run_steps(post["steps"], artifact, post_env, tmp_path / "summary-post.md")
    assert post["steps"][1]["result"].returncode == 0, post["steps"][1]["result"].stderr
    calls = (state / "calls").read_text().splitlines()
    assert not any("/comments -F" in call for call in calls)
    assert "-f conclusion=success" in calls[-1] and "output[title]=upgrade check: no-package-change" in calls[-1]


def test_a_pull_request_that_changes_nothing_resolved_is_told_so_without_a_check(
    tmp_path: Path, wheels: Path, cache: Path
) -> None:
    repo, tip, _ = pr_repo(tmp_path)
    git(repo, "checkout", "-q", "-b", "reword", tip)
    text = (repo / "requirements.txt").read_text().replace("# the training stack", "# what we train with")
    head = commit(repo, "reword a comment", {"requirements.txt": text})
    check = job("stepwatch-upgrade-pr.yml")
    env = check_env("9", tip, head, wheels, cache)
    outputs = run_steps(check["steps"], repo, env, tmp_path / "summary.md")
    assert outputs["sets"]["changed"] == "false" and not (repo / "pr" / "report.md").exists()
    comment = (repo / "pr" / "comment.md").read_text()
    assert comment.startswith("<!-- stepwatch upgrade-pr -->\n## stepwatch upgrade check: nothing to check\n")
    assert "Nothing that the two package sets resolve to changes" in comment and "Verdict: **unchanged**" in comment
    assert check["steps"][-1]["result"].returncode == 0
    # The verdict workflow posts it (test_the_upgrade_pr_workflow_checks_a_bump..., in the large job, on a real check).
    posts_one_comment(tmp_path, repo / "pr", head, "unchanged", comment)


@pytest.mark.parametrize(
    ("variable", "runs_on"),
    [(None, "ubuntu-latest"), ("gpu-box", "gpu-box"), ('["self-hosted", "gpu"]', ["self-hosted", "gpu"])],
)
def test_the_runner_variable_takes_a_label_or_a_list_of_them(variable: str | None, runs_on: object) -> None:
    """``runs-on`` evaluated as GitHub evaluates expressions (tests.github): one label as the nightly's matrix
    takes it, or several as a JSON list."""
    from tests.github import Expression

    text = job("stepwatch-upgrade-pr.yml")["runs-on"].strip()[3:-2]
    functions = {"startsWith": lambda a, b: str(a or "").lower().startswith(str(b).lower()), "fromJSON": json.loads}
    assert Expression(text, {"vars": {"STEPWATCH_RUNNER": variable}}, functions).value() == runs_on
