"""stepwatch as a new user adopts it: a wheel built from this repository, installed into a fresh environment that
already holds a framework at versions stepwatch did not choose, used from a git repository of the user's own
(a model file that imports the repository's own ``trainers`` package, and ``stepwatch init``'s settings), by the
commands a user types there, and by the run steps of the workflows init writes, with stepwatch's action
installing stepwatch as it would on a runner."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from playwright.sync_api import sync_playwright

from stepwatch.dashboard.browser_harness import CHROMIUM, served
from tests.conftest import REPO
from tests.github import action_steps

UV = Path(sys.executable).parent / "uv"
KERAS = "keras==3.14.0"  # not the Keras stepwatch's own environment has (3.15.1)
FAST = ("--steps", "20", "--warmup", "20", "--window", "10")
TRAINERS = '"""The team\'s own trainers package (a name stepwatch\'s own package had at the top)."""\n\nWIDTH = 4\n'


def sh(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def versions(python: Path, *names: str) -> dict[str, str]:
    probe = "import json, sys; from importlib import metadata as m; print(json.dumps({n: m.version(n) for n in "
    probe += "sys.argv[1:]}))"
    return json.loads(sh(str(python), "-c", probe, *names, cwd=python.parent).stdout)


class User:
    """A user's machine: a fresh virtual environment with stepwatch's wheel installed, and a git repository."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.venv = root / "venv"
        self.repo = root / "their-project"
        self.python = self.venv / "bin" / "python"
        self.env = {
            "PATH": f"{self.venv / 'bin'}:/usr/bin:/bin", "HOME": str(root), "STEPWATCH_CALIBRATION": "none",
            "STEPWATCH_ENV_CACHE": str(root / "envs"),
            **{k: v for k, v in os.environ.items() if k.startswith(("PIP_", "UV_"))},
        }  # fmt: skip

    def stepwatch(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return sh(str(self.venv / "bin" / "stepwatch"), *args, cwd=self.repo, env=self.env, timeout=timeout)

    def git(self, *args: str) -> str:
        who = {
            "GIT_AUTHOR_NAME": "u",
            "GIT_AUTHOR_EMAIL": "u@u",
            "GIT_COMMITTER_NAME": "u",
            "GIT_COMMITTER_EMAIL": "u@u",
        }
        done = sh("git", *args, cwd=self.repo, env={**self.env, **who})
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> User:
    root = tmp_path_factory.mktemp("adoption")
    me = User(root)
    built = sh(str(UV), "build", "--wheel", "--out-dir", str(root / "dist"), str(REPO), cwd=root, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = (root / "dist").glob("stepwatch-*.whl")
    assert sh(str(UV), "venv", "--seed", "--python", sys.executable, str(me.venv), cwd=root).returncode == 0
    # The team's environment before stepwatch: its framework, at versions stepwatch did not choose.
    jax = versions(Path(sys.executable), "jax")["jax"]
    install = [str(UV), "pip", "install", "--quiet", "--python", str(me.python)]
    done = sh(*install, KERAS, f"jax=={jax}", cwd=root, env={**os.environ})
    assert done.returncode == 0, done.stderr
    before = versions(me.python, "keras", "jax", "jaxlib", "numpy")
    done = sh(*install, str(wheel), cwd=root, env={**os.environ})
    assert done.returncode == 0, done.stderr
    assert versions(me.python, "keras", "jax", "jaxlib", "numpy") == before  # stepwatch changed none of them
    me.wheel = wheel

    me.repo.mkdir()
    (me.repo / "trainers").mkdir()
    (me.repo / "trainers" / "__init__.py").write_text(TRAINERS)
    model = (REPO / "examples" / "keras_cnn.py").read_text()
    model = model.replace("import keras\n", "import keras\n\nimport trainers\n", 1)
    model = model.replace('"tiny": (16, 32, 64)', '"tiny": (trainers.WIDTH, 8, 16)')
    (me.repo / "model.py").write_text(model)
    # Their training script, written from docs/reference.md ("Your own training script") alone.
    (me.repo / "train.py").write_text((REPO / "tests" / "data" / "scripts" / "from_docs.py").read_text())
    me.git("init", "-q", "-b", "main")
    me.git("remote", "add", "origin", "https://token:secret@github.com/their-org/their-project.git")
    return me


def initialised(user: User) -> str:
    """``stepwatch init`` in the user's repository, the settings edited as a user would, all committed; the
    commit. Once per repository (both tests start from it)."""
    if (user.repo / "stepwatch.toml").exists():
        return user.git("rev-parse", "HEAD")
    init = user.stepwatch("init", "--models", "model.py:cifar_cnn", "--keras-backend", "jax")
    assert init.returncode == 0, init.stderr
    assert "wrote stepwatch.toml" in init.stdout and "wrote .github/workflows/stepwatch-nightly.yml" in init.stdout
    config = (user.repo / "stepwatch.toml").read_text()
    assert 'models = ["model.py:cifar_cnn"]' in config and 'keras-backend = ["jax"]' in config
    # What a user edits: one compile mode, two trials.
    # (init writes the trial count commented out, at stepwatch's default: a user uncomments it and sets theirs)
    edited = re.sub(r"^# trials = \d+$", "trials = 2", config.replace('xla = ["off", "on"]', 'xla = ["off"]'), count=1,
                    flags=re.M)  # fmt: skip
    assert 'xla = ["off"]' in edited and "\ntrials = 2\n" in edited, edited
    (user.repo / "stepwatch.toml").write_text(edited)
    again = user.stepwatch("init")
    assert again.returncode == 0 and "wrote" not in again.stdout and "kept stepwatch.toml" in again.stdout
    (user.repo / ".gitignore").write_text("stepwatch-results/\n")
    user.git("add", ".")
    user.git("commit", "-q", "-m", "our model")
    return user.git("rev-parse", "HEAD")


# Two minutes and more of both cores (a wheel, an environment, real trials): the large tier, as is the team's repository
# from init to the dashboard and the page in test_publish, with stepwatch installed editable. The fast tier covers
# init's files and settings (test_project) and the nightly's publish into a bucket (test_objectstore).
@pytest.mark.large
def test_a_new_user_installs_the_wheel_inits_runs_compares_and_opens_the_dashboard_from_their_repository(
    user: User,
) -> None:
    size = user.wheel.stat().st_size
    assert size < 2_000_000, f"the wheel is {size:,} bytes"
    names = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(user.wheel)], capture_output=True, text=True)
    tops = {line.split()[0].split("/")[0] for line in names.stdout.splitlines()[1:] if line.strip()}
    assert tops == {"stepwatch", f"{user.wheel.name.split('-')[0]}-{user.wheel.name.split('-')[1]}.dist-info"}

    head = initialised(user)

    done = user.stepwatch("run", "--label", "aa", "--trials", "4", *FAST)  # an A/A: alternate trials, below
    assert done.returncode == 0, done.stderr[-3000:]
    files = sorted((user.repo / "stepwatch-results").glob("*.parquet"))
    rows = [row for path in files for row in pq.read_table(path).to_pylist()]
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}, [r["error_message"] for r in rows]
    assert {r["model"] for r in rows} == {"model.py:cifar_cnn"} and {r["keras_backend"] for r in rows} == {"jax"}
    assert {r["keras_version"] for r in rows} == {KERAS.split("==")[1]}  # the user's Keras was measured
    assert {(r["project_repository"], r["project_commit"], r["project_dirty"]) for r in rows} == {
        ("their-org/their-project", head, False)
    }  # never the remote's credentials

    # Their training script: on its own it trains; under stepwatch it is a benchmark (the project's models aside).
    bare = sh(str(user.python), "train.py", "--epochs", "2", cwd=user.repo, env=user.env)
    assert bare.returncode == 0 and "epoch 1: loss" in bare.stdout, bare.stderr[-2000:]
    done = user.stepwatch("run", "--script", "train.py", "--keras-backend", "jax", "--trials", "1", *FAST, "--",
                          "--epochs", "50")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [script_file] = set(sorted((user.repo / "stepwatch-results").glob("*.parquet"))) - set(files)
    scripted = pq.read_table(script_file).to_pylist()
    assert [(r["status"], r["model"], r["script_args"], r["project_commit"]) for r in scripted] == [
        ("ok", "train.py", "--epochs 50", head)]  # fmt: skip
    assert scripted[0]["jax_version"] and scripted[0]["per_device_batch"] == 32

    ingest = user.stepwatch("ingest")
    assert ingest.returncode == 0, ingest.stderr
    assert (user.repo / "stepwatch-results" / "stepwatch.duckdb").exists()
    # The same thing on both sides, interleaved in time (trials 0 and 2 against 1 and 3: two runs one after the
    # other on a shared machine differ by whatever else it ran meanwhile): no regression.
    compare = user.stepwatch("compare", "--baseline", "label=aa,trial=0|2", "--candidate", "label=aa,trial=1|3",
                             "--format", "json")  # fmt: skip
    assert compare.returncode == 0, compare.stdout + compare.stderr
    found = json.loads(compare.stdout)
    assert found["rows"] and all(row["n_baseline"] == row["n_candidate"] == 2 and row["verdict"] != "regression"
                                 for row in found["rows"]), found  # fmt: skip
    query = user.stepwatch("query", "SELECT project_commit, count(*) FROM runs GROUP BY 1", "--format", "csv")
    assert query.returncode == 0 and f'"{head}",5' in query.stdout, query.stdout + query.stderr

    command = [str(user.venv / "bin" / "stepwatch"), "dashboard", "--refresh", "0"]
    with served(lambda port: [*command, "--port", str(port)], user.repo, user.env) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(f"{url}/run", timeout=60_000)
        # The Run page of the latest trial, from the project's store.
        page.get_by_text("examples/s").first.wait_for(timeout=120_000)
        assert "store: stepwatch-results/stepwatch.duckdb" in page.inner_text("body")
        assert page.locator('[data-testid="stException"]').count() == 0
        # The Overview names the script's series beside the model's.
        page.goto(f"{url}/overview", timeout=60_000)
        cells = page.locator('td[role="gridcell"]')  # the table's cells (drawn on a canvas, kept in the DOM)
        cells.filter(has_text="train.py --epochs 50 cpu jax").first.wait_for(state="attached", timeout=120_000)
        assert cells.filter(has_text="model.py:cifar_cnn").count() > 0
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()


def expand(text: str, matrix: dict[str, str]) -> str:
    """A workflow value as GitHub expands it here, each ``${{ }}`` evaluated by the replay's expressions
    (tests/github.py): the matrix's values, and no secret or input set (a missing one is null)."""
    from tests.github import Expression, text_of

    contexts = {"matrix": matrix, "secrets": {}, "inputs": {}}
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: text_of(Expression(m.group(1), contexts, {}).value()), text)


@pytest.mark.large
def test_the_written_nightly_runs_through_the_action_and_an_aa_upgrade_check_stays_quiet(
    user: User, tmp_path: Path
) -> None:
    initialised(user)
    # The nightly's collect job, on this machine: its shell steps, and the action's for the run step.
    nightly = yaml.safe_load((user.repo / ".github" / "workflows" / "stepwatch-nightly.yml").read_text())
    collect = nightly["jobs"]["collect"]
    [job] = collect["strategy"]["matrix"]["include"]
    assert job == {"name": "cpu", "runner": "ubuntu-latest", "extras": "jax", "suite": "smoke", "shard": "1/1",
                   "args": ""}  # fmt: skip
    output, summary = tmp_path / "output", tmp_path / "summary.md"
    github = {"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "their-org/their-project", "GITHUB_SHA": "a" * 40,
              "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary), "RUNNER_NAME": "cpu"}  # fmt: skip

    def run(steps: list[dict], job_env: dict[str, str]) -> list[str]:
        """Each step as the runner runs it (a stepwatch action step as the action's own steps); the names run."""
        ran = []
        for step in steps:
            if step.get("uses", "").startswith("stepwatch/stepwatch@"):
                inner = action_steps({k: expand(str(v), job) for k, v in step["with"].items()})
            elif "run" in step and "python3 -m pip install --quiet --upgrade pip" not in step["run"]:
                inner = [step]  # (the project's own environment is the fixture's)
            else:
                continue  # checkout, setup-python, upload-artifact: what this machine already is
            for one in inner:
                env = {**user.env, **github, **job_env, **one.get("env", {})}
                done = sh("bash", "-e", "-c", one["run"], cwd=user.repo, env=env, timeout=900)
                assert done.returncode == 0, (one.get("name"), done.stdout[-2000:], done.stderr[-3000:])
                ran.append(one.get("name"))
        return ran

    assert run(collect["steps"], {}) == [
        "Name this job's results (a job that writes no row still says so)", "Install stepwatch",
        "stepwatch ${{ inputs.command }}",
    ]  # fmt: skip
    assert versions(user.python, "keras", "jax")["keras"] == KERAS.split("==")[1]  # the action changed no framework
    [path] = (user.repo / "stepwatch-nightly").glob("*.parquet")
    rows = pq.read_table(path).to_pylist()
    assert {(r["status"], r["label"], r["project_commit"]) for r in rows} == {("ok", "nightly", "a" * 40)}
    assert len(rows) == 2  # the project's settings: one model, xla off, two trials
    assert "exit-code=0" in output.read_text()

    # The publish job's publish, through the action, into the job's store and a new history branch (as the job
    # makes it when the branch does not exist yet; the whole workflow is replayed in test_publish).
    publish = nightly["jobs"]["publish"]
    sh("git", "init", "-q", "--bare", str(user.root / "github.git"), cwd=user.repo, env=user.env)
    sh("git", "init", "-q", "-b", "stepwatch-history", "history", cwd=user.repo, env=user.env)
    sh("git", "-C", "history", "remote", "add", "origin", str(user.root / "github.git"), cwd=user.repo, env=user.env)
    job_env = {k: expand(str(v), {}) for k, v in publish["env"].items()}
    [step] = [s for s in publish["steps"] if s.get("id") == "publish"]
    step = {**step, "with": {**step["with"], "args": step["with"]["args"].replace("${{ needs.collect.result }}",
                                                                                  "success")}}  # fmt: skip
    output.write_text("")
    nightly_store = user.repo / "stepwatch-results" / "stepwatch.duckdb"
    before = nightly_store.stat().st_mtime_ns if nightly_store.exists() else None
    assert run([step], {**job_env, "HOME": str(user.root)})[-1] == "stepwatch ${{ inputs.command }}"
    assert "exit-code=0" in output.read_text() and (user.repo / "report.md").exists()
    assert (user.repo / job_env["STEPWATCH_DB"]).exists()
    assert [p.name for p in (user.repo / "history" / "results").glob("*.parquet")] == [path.name]
    pushed = sh("git", "--git-dir", str(user.root / "github.git"), "ls-tree", "-r", "--name-only", "stepwatch-history",
                cwd=user.repo, env=user.env).stdout.split()  # fmt: skip
    assert f"results/{path.name}" in pushed and "site/index.html" in pushed

    # An A/A upgrade check of the user's Keras, its environments built from the installed stepwatch.
    check = user.stepwatch("upgrade-check", "--baseline", KERAS, "--candidate", KERAS, "--aa", *FAST,
                           "--max-trials", "3", "--reuse-site-packages", "--format", "json")  # fmt: skip
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    sides = {p.parent for p in (user.root / "envs").glob("*/lib/python*/site-packages/stepwatch/__init__.py")}
    assert len(sides) == 2  # the baseline's (and candidate's: the same packages) and the A/A copy's
    for side in sides:
        assert (side / "collector" / "trial" / "process.py").exists() and not (side / "dashboard").exists()
    report = json.loads(check.stdout)
    assert all(row["verdict"] != "regression" for row in report["rows"])
    # The check kept its own results (init's results and db settings are the nightly's): the nightly's store is
    # as it was, the check's parquet where its report says.
    after = nightly_store.stat().st_mtime_ns if nightly_store.exists() else None
    assert after == before and list((user.repo / "data" / "upgrade-check").rglob("*.parquet"))


@pytest.mark.large
def test_a_strangers_first_code_pull_request_installs_its_framework_and_gets_the_right_verdict(tmp_path: Path) -> None:
    """A stranger's repository: a Keras model on JAX and the helper it imports, `stepwatch init` run once (its
    settings edited as a team edits them: XLA on, batch 256), no requirements.txt and no repository variable. Their
    first pull request widens the helper's blocks 4x. The code-pr workflow, replayed with the action's install step
    run for real into a fresh environment (from the package index): it installs stepwatch and the framework the
    settings name (before, every trial failed "No module named 'jax'" and the verdict was error), and the check finds
    the regression with its A/A quiet."""
    from tests.github import GitHub, action_files
    from tests.test_code_check import CLASSIFIER, LAYERS, WHO, outputs_of

    venv, repo = tmp_path / "venv", tmp_path / "stranger"
    assert sh(str(UV), "venv", "--quiet", "--seed", "--python", sys.executable, str(venv), cwd=tmp_path).returncode == 0
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "STEPWATCH_CALIBRATION": "none", **WHO,
           **{k: v for k, v in os.environ.items() if k.startswith(("PIP_", "UV_"))}}  # fmt: skip
    (repo / "models").mkdir(parents=True)
    (repo / "models" / "layers.py").write_text(LAYERS)
    (repo / "models" / "classifier.py").write_text(CLASSIFIER)
    (repo / ".gitignore").write_text("data/\nstepwatch-results/\n")
    git = ["git", "-C", str(repo)]
    assert sh(*git, "init", "-q", "-b", "main", cwd=tmp_path, env=env).returncode == 0
    done = sh(sys.executable, "-m", "stepwatch", "init", "--models", "models/classifier.py:classifier",
              "--keras-backend", "jax", "--action", "stepwatch/stepwatch@" + "c" * 40, cwd=repo,
              env={**env, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = (repo / "stepwatch.toml").read_text()
    (repo / "stepwatch.toml").write_text(config.replace('xla = ["off", "on"]', 'xla = ["on"]').replace(
        "# batch = [32]", "batch = [256]"))  # fmt: skip
    sh(*git, "add", ".", cwd=tmp_path, env=env)
    sh(*git, "commit", "-q", "-m", "our model", cwd=tmp_path, env=env)
    base = sh(*git, "rev-parse", "HEAD", cwd=tmp_path, env=env).stdout.strip()
    sh(*git, "checkout", "-q", "-b", "pr", cwd=tmp_path, env=env)
    (repo / "models" / "layers.py").write_text(LAYERS.replace("WIDTH = 128", "WIDTH = 512"))
    sh(*git, "commit", "-q", "-am", "Wider blocks", cwd=tmp_path, env=env)
    head = sh(*git, "rev-parse", "HEAD", cwd=tmp_path, env=env).stdout.strip()

    gh = GitHub(tmp_path / "github", "stranger/project", env, action=action_files(tmp_path / "action"))
    gh.remote.parent.mkdir(parents=True)
    sh("git", "clone", "-q", "--bare", str(repo), str(gh.remote), cwd=tmp_path, env=env)
    payload = {"pull_request": {"number": 1, "base": {"sha": base}, "head": {"sha": head}}}
    code_pr = yaml.safe_load((repo / ".github" / "workflows" / "stepwatch-code-pr.yml").read_text())
    [run] = gh.run_workflow(code_pr, "pull_request", payload=payload)["check"]
    setup = next(step for step in run.steps if step.name == "Set up")
    assert setup.outcome == "success" and "stepwatch: installing the extras jax" in setup.stdout, setup.stderr[-3000:]
    assert versions(venv / "bin" / "python", "jax", "keras").keys() == {"jax", "keras"}
    pr = run.workspace / "pr"
    log = (pr / "check.log").read_text() if (pr / "check.log").exists() else ""
    assert outputs_of(run, "Code check") == {"checked": "true"}, log[-3000:]
    assert (pr / "verdict").read_text() == "regression\n", log[-3000:]
    comment = (pr / "comment.md").read_text()
    lead = comment.splitlines()[3]
    assert lead.startswith("**What changed for sure** (1 series): examples_per_sec -") and "(regression)" in lead
    [aa_line] = [line for line in comment.splitlines() if line.startswith("A/A (the merge base in a second checkout")]
    assert "No false alarm." in aa_line, aa_line


@pytest.mark.large
def test_an_upgrade_checks_sides_built_from_nothing_profile_and_explain_reads_them(user: User, tmp_path: Path) -> None:
    """Side environments of their own packages only (no --reuse-site-packages: the side's pins and stepwatch's trial
    dependencies, nothing the dashboard needs): every trial asked to profile records its op table (before, each
    recorded "No module named 'pyarrow'", and the report asked for --profile), and `stepwatch explain` reads them."""
    initialised(user)
    pins = f"{KERAS} jax=={versions(user.python, 'jax')['jax']} jaxlib=={versions(user.python, 'jaxlib')['jaxlib']}"
    report = tmp_path / "report.md"
    check = user.stepwatch("upgrade-check", "--baseline", pins, "--candidate", pins, "--trials", "2", "--max-trials",
                           "2", "--profile", "1", "--xla", "on", *FAST, "--format", "markdown", "--out",
                           str(report))  # fmt: skip
    assert check.returncode in (0, 3), check.stdout[-3000:] + check.stderr[-3000:]
    text = report.read_text()
    assert "profile_error" not in text and "no op table" not in text and "run with --profile" not in text, text
    assert "1 + 1 profiled trials" in text, text[-3000:]
    [db] = (user.repo / "data").glob("upgrade-check*.duckdb")
    explained = user.stepwatch("explain", "--baseline", "label=baseline", "--candidate", "label=candidate", "--db",
                               str(db))  # fmt: skip
    assert explained.returncode == 0 and "1 + 1 profiled trials" in explained.stdout, explained.stdout
