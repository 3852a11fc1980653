"""A container image as a side (collector.environments.containers): ``upgrade-check --baseline image=REF --candidate
image=REF``, each trial a fresh container of its side's image. The large tests build two images here with no registry
(root filesystems from Debian's packages by mmdebstrap, imported into podman) that differ in one package: numpy on
OpenBLAS, and numpy on the reference BLAS, a planted slowdown of a numpy training script's matmuls."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stepwatch.collector.environments import containers, virtualenvs
from tests.conftest import REPO, rows_in, stepwatch

SCRIPT = str(REPO / "tests" / "data" / "scripts" / "numpy_mlp.py")
FAST, SLOW, BARE = (f"localhost/stepwatch-test:{tag}" for tag in ("openblas", "refblas", "nopython"))
PACKAGES = "python3,python3-numpy,python3-psutil"  # what a numpy script's trial needs in an image
MIRROR = "http://deb.debian.org/debian"
# Measured steps of a second or so on the reference BLAS (a few ms a step): trials long enough that a neighbour's
# burst does not decide them, three a side so that the A/A's variation rests on more than one degree of freedom.
TRIALS = ("--script", SCRIPT, "--steps", "200", "--warmup", "40", "--trials", "3", "--max-trials", "3")


def test_an_image_side_is_one_reference_and_its_container_gets_what_a_trial_reads_and_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's command line for a trial: the trial code read-only, its result folder and working folder at their
    own paths, a script named by an absolute path read-only, the harness's variables passed and the host's others
    not (the image's environment is its own), the host's GPUs where it has NVIDIA's."""
    assert virtualenvs.parse_side(" image=nvcr.io/nvidia/pytorch:25.11-py3 ", "baseline") == (
        "image=nvcr.io/nvidia/pytorch:25.11-py3",)  # fmt: skip
    for bad in ("image=", "image=a b"):
        with pytest.raises(ValueError, match="an image side is image=REF, one reference"):
            virtualenvs.parse_side(bad, "candidate")
    script = tmp_path / "scripts" / "train.py"
    script.parent.mkdir()
    script.write_text("")
    spec = {"engine": "/usr/bin/podman", "ref": "img:1", "code": "/cache/code", "recorded": "img:1@sha256:ab"}
    args = ["-m", "stepwatch.collector.trial.process", "--config", json.dumps({"model": str(script)}), "--result",
            "/work/trial/result.json"]  # fmt: skip
    environ = {"STEPWATCH_RUNNER_PID": "7", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PATH": "/host/bin"}
    monkeypatch.setattr(containers.shutil, "which", lambda name: None)  # a host without NVIDIA's GPUs
    command = containers.run_command(spec, args, environ, "/here", "stepwatch-trial-1")
    pairs = set(zip(command, command[1:], strict=False))
    assert command[:5] == ["/usr/bin/podman", "run", "--rm", "--name", "stepwatch-trial-1"]
    assert {("-v", "/cache/code:/opt/stepwatch-trial:ro"), ("-v", "/work/trial:/work/trial"), ("-v", "/here:/here"),
            ("-v", f"{script.parent}:{script.parent}:ro"), ("-w", "/here"), ("--network", "none")} <= pairs  # fmt: skip
    assert {b for a, b in pairs if a == "-e"} == {
        "STEPWATCH_RUNNER_PID=7", "PYTHONUNBUFFERED=1", "STEPWATCH_IN_CONTAINER=1",
        "STEPWATCH_CONTAINER_IMAGE=img:1@sha256:ab", "PYTHONPATH=/opt/stepwatch-trial",
    }  # fmt: skip
    assert command[-len(args) - 2 :] == ["img:1", "python3", *args] and "--gpus" not in command
    monkeypatch.setattr(containers.shutil, "which", lambda name: f"/usr/bin/{name}")  # one with them
    assert containers.gpu_flags("/usr/bin/podman") == ["--device", "nvidia.com/gpu=all"]
    assert containers.gpu_flags("/usr/bin/docker") == ["--gpus", "all"]
    held = {"python": "3.12.3", "packages": {"torch": "2.9.0a0"}, "system": {"libnccl2": "2.27.3-1+cuda13.0"},
            "said": {"CUDA_VERSION": "13.0.1"}}  # fmt: skip
    assert containers.freeze_lines(held) == (
        "CUDA_VERSION==13.0.1\ndeb-libnccl2==2.27.3-1+cuda13.0\npython==3.12.3\ntorch==2.9.0a0\n"
    )


def engine_here() -> dict[str, str]:
    """podman's environment for the image tests (tests/data/containers.conf), or a skip where it is not installed."""
    missing = [name for name in ("podman", "runc", "mmdebstrap") if not shutil.which(name)]
    if missing:
        pytest.skip(f"no {', '.join(missing)} (make test-large installs them)")
    return {"CONTAINERS_CONF": str(REPO / "tests" / "data" / "containers.conf")}


def podman(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env={**os.environ, **env}, capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The three images in podman's store, made once: numpy on OpenBLAS, numpy on the reference BLAS (the same
    packages less libopenblas0-pthread), and one with no Python. podman's environment for them."""
    env = engine_here()
    work = tmp_path_factory.mktemp("images")
    for ref, extra in ((FAST, ",libopenblas0-pthread"), (SLOW, "")):
        if podman(env, "image", "exists", ref, check=False).returncode != 0:
            rootfs = work / f"{ref.rpartition(':')[2]}.tar"
            subprocess.run(["mmdebstrap", "--variant=apt", f"--include={PACKAGES}{extra}", "--quiet", "bookworm",
                            str(rootfs), MIRROR], check=True, capture_output=True)  # fmt: skip
            podman(env, "import", "-q", str(rootfs), ref)
    if podman(env, "image", "exists", BARE, check=False).returncode != 0:
        (work / "empty").mkdir()
        subprocess.run(["tar", "-C", str(work / "empty"), "-cf", str(work / "empty.tar"), "."], check=True)
        podman(env, "import", "-q", str(work / "empty.tar"), BARE)
    return env


@pytest.mark.large
def test_an_image_upgrade_check_finds_the_slower_image_names_what_differs_and_its_aa_stays_quiet(
    images: dict[str, str], tmp_path: Path
) -> None:
    """OpenBLAS -> the reference BLAS, a numpy script, three trials a side and an A/A (a second container set of the
    baseline's image): a regression (the matmuls are 5-15x slower on the reference BLAS on any x86 CPU), the A/A
    quiet, the report naming the packages that differ, each row its image and digest and the Python it ran."""
    env = {**images, virtualenvs.CACHE_ENV: str(tmp_path / "envs")}
    report, results = tmp_path / "report.json", tmp_path / "results"
    done = stepwatch("upgrade-check", "--baseline", f"image={FAST}", "--candidate", f"image={SLOW}", "--aa", *TRIALS,
                     "--db", str(tmp_path / "check.duckdb"), "--results", str(results), "--format", "json", "--out",
                     str(report), env=env, timeout=600)  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    payload = json.loads(report.read_text())
    [row] = payload["rows"]
    assert (row["metric"], row["verdict"]) == ("examples_per_sec", "regression") and row["ratio"] < 0.5, row
    [aa] = payload["aa"]["rows"]
    assert aa["verdict"] in ("no change", "inconclusive"), aa
    [check_dir] = results.iterdir()
    text = (check_dir / "report.md").read_text()
    assert "Packages that differ between the two environments: deb-libblas3 - -> " in text, text[:2000]
    assert "deb-libopenblas0-pthread 0." in text and " -> -." in text
    rows = rows_in(check_dir)
    assert len(rows) == 9 and {r["status"] for r in rows} == {"ok"}, [r.get("error_message") for r in rows]
    images_ran = {r["label"]: r["container_image"] for r in rows}
    assert images_ran["baseline"].startswith(f"{FAST}@sha256:") and images_ran["baseline-aa"] == images_ran["baseline"]
    assert images_ran["candidate"].startswith(f"{SLOW}@sha256:")
    for r in rows:  # the image's own Python, and a peak memory the trial read itself
        extras = json.loads(r["extras"])
        assert r["python_version"].startswith("3.11.") and extras["in_container"] is True, r
        assert r["peak_memory_bytes"] > 0 and extras["peak_memory_note"].startswith("in a container"), r


@pytest.mark.large
def test_an_image_that_cannot_be_found_or_has_no_python_is_one_line_before_any_trial(
    images: dict[str, str], tmp_path: Path
) -> None:
    env = {**images, virtualenvs.CACHE_ENV: str(tmp_path / "envs")}
    results = tmp_path / "results"
    for baseline, said in ((f"image={BARE}", f"image {BARE}: cannot start python3 in it: "),
                           ("image=localhost/stepwatch-test:missing", "image localhost/stepwatch-test:missing: not "
                            "found here and cannot be pulled: ")):  # fmt: skip
        done = stepwatch("upgrade-check", "--baseline", baseline, "--candidate", f"image={FAST}", *TRIALS,
                         "--db", str(tmp_path / "check.duckdb"), "--results", str(results), env=env)  # fmt: skip
        errors = [line for line in done.stderr.splitlines() if line.startswith("stepwatch: error:")]
        assert done.returncode == 4 and len(errors) == 1 and said in errors[0], done.stderr[-2000:]
    assert not results.exists() or not any(results.rglob("*.parquet"))


@pytest.mark.large
def test_a_trial_killed_at_its_timeout_takes_its_container_with_it(images: dict[str, str], tmp_path: Path) -> None:
    hang = tmp_path / "hang.py"
    hang.write_text("import time\n\nimport stepwatch\n\nfor _ in stepwatch.steps(iter(int, 1), examples_per_step=1):"
                    "\n    time.sleep(600)\n")  # fmt: skip
    env = {**images, virtualenvs.CACHE_ENV: str(tmp_path / "envs")}
    done = stepwatch("upgrade-check", "--baseline", f"image={FAST}", "--candidate", f"image={FAST}", "--script",
                     str(hang), "--steps", "20", "--warmup", "20", "--trials", "2", "--max-trials", "2", "--timeout",
                     "8", "--db", str(tmp_path / "check.duckdb"), "--results", str(tmp_path / "results"), env=env,
                     timeout=300)  # fmt: skip
    assert done.returncode != 0, done.stdout[-2000:]
    rows = rows_in(next((tmp_path / "results").iterdir()))
    assert {r["status"] for r in rows} == {"timeout"}, [r["status"] for r in rows]
    for _ in range(50):  # the reaper removes it once the launcher is gone
        if "stepwatch-trial-" not in podman(images, "ps", "-a", "--format", "{{.Names}}").stdout:
            break
        subprocess.run(["sleep", "0.2"], check=True)
    assert "stepwatch-trial-" not in podman(images, "ps", "-a", "--format", "{{.Names}}").stdout


@pytest.mark.large
def test_a_pull_request_that_changes_its_dockerfiles_from_line_gets_an_image_check_and_one_comment(
    images: dict[str, str], tmp_path: Path
) -> None:
    """The upgrade-pr workflow's steps, replayed as GitHub runs them, on a team's repository whose image is built from
    its Dockerfile: the pull request moves its FROM line from the OpenBLAS image to the reference BLAS one. Both
    commits' images are built, checked against each other (each trial a fresh container), and the verdict workflow
    posts one comment naming the images and what differs between them; the package sets are not derived."""
    from tests.conftest import commit, git
    from tests.test_upgrade_pr import job, posts_one_comment, run_steps

    repo = tmp_path / "team"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "ci")
    script = Path(SCRIPT).read_text()
    base = commit(repo, "the image and the script", {"Dockerfile": f"FROM {FAST}\nENV TEAM=1\n", "train.py": script})
    git(repo, "checkout", "-q", "-b", "blas")
    head = commit(repo, "another base image", {"Dockerfile": f"FROM {SLOW}\nENV TEAM=1\n"})
    check = job("stepwatch-upgrade-pr.yml")
    env = {
        "PR": "12", "BASE_SHA": base, "HEAD_SHA": head, "SUITE": "smoke", "TRIALS": "3", "METRIC": "examples_per_sec",
        "CHECK_ARGS": f"{' '.join(TRIALS[2:6])} --script train.py --max-trials 3", "ENV_ARGS": "",
        "RUN_URL": "https://github.com/o/r/actions/runs/12", virtualenvs.CACHE_ENV: str(tmp_path / "envs"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **images,
    }  # fmt: skip
    outputs = run_steps(check["steps"], repo, env, tmp_path / "summary.md")
    pr = repo / "pr"
    built = {
        "baseline": f"image=localhost/stepwatch-pr:{base[:12]}",
        "candidate": f"image=localhost/stepwatch-pr:{head[:12]}",
    }
    assert outputs["images"] == {"changed": "true", **built}, (pr / "images.log").read_text()
    assert not outputs.get("sets") and not (pr / "sets.md").exists()  # the image's check is the pull request's
    verdict = (pr / "verdict").read_text().strip()
    comment = (pr / "comment.md").read_text()
    assert verdict == "regression", comment[-3000:]
    assert comment.startswith(f"<!-- stepwatch upgrade-pr -->\n## stepwatch upgrade check: {built['baseline']} -> ")
    assert f"**Images**: the merge base {base[:12]} runs in Dockerfile (FROM {FAST})" in comment
    assert f"the head {head[:12]} in Dockerfile (FROM {SLOW})" in comment
    assert "deb-libopenblas0-pthread" in comment and "Verdict: **regression**" in comment
    assert check["steps"][-1]["result"].returncode == 1  # a regression fails the job, as its check run does
    posts_one_comment(tmp_path, pr, head, verdict, comment)


def test_image_sides_reads_each_commits_image_setting_and_says_when_nothing_changed(tmp_path: Path) -> None:
    """stepwatch.toml's image at the merge base and at the head (no engine needed: nothing to build); the same image,
    or no image on either side, is nothing to check; a side that loses its image is one line."""
    from tests.conftest import commit, git

    repo = tmp_path / "team"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "ci")
    nothing = commit(repo, "no image", {"train.py": "print(1)\n"})
    base = commit(repo, "runs in an image", {"stepwatch.toml": 'image = "nvcr.io/nvidia/pytorch:25.10-py3"\n'})
    git(repo, "checkout", "-q", "-b", "bump")
    head = commit(repo, "a newer image", {"stepwatch.toml": 'image = "nvcr.io/nvidia/pytorch:25.11-py3"\n'})
    out = tmp_path / "outputs"

    def sides(a: str, b: str) -> tuple[subprocess.CompletedProcess, str]:
        out.write_text("")
        done = stepwatch("image-sides", "--base", a, "--head", b, "--github-output", str(out), cwd=repo)
        return done, out.read_text()

    done, said = sides(base, head)
    assert done.returncode == 0, done.stderr
    assert said == ("changed=true\nbaseline=image=nvcr.io/nvidia/pytorch:25.10-py3\n"
                    "candidate=image=nvcr.io/nvidia/pytorch:25.11-py3\n")  # fmt: skip
    assert f"the merge base {base[:12]} runs in stepwatch.toml's image nvcr.io/nvidia/pytorch:25.10-py3" in done.stdout
    for a, b in ((base, base), (nothing, nothing)):
        done, said = sides(a, b)
        assert done.returncode == 0 and said == "changed=false\nbaseline=\ncandidate=\n", done.stderr
    git(repo, "checkout", "-q", "main")
    lost = commit(repo, "no image again", {"stepwatch.toml": "trials = 3\n"})
    done, said = sides(base, lost)
    assert done.returncode == 4 and said == "", done.stdout
    assert done.stderr.strip().splitlines() == [
        f"stepwatch: error: the head ({lost[:12]}) names no image: no image setting in stepwatch.toml and no "
        "Dockerfile"]  # fmt: skip
