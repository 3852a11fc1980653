"""A project of the user's (``collector.project``): its settings as every command's defaults, found from any
directory below it, with flags winning; the repository and commit it runs in; ``stepwatch init`` and what it
writes (and the nightly it writes for a PyTorch team, replayed); ``run --shard``; and ``stepwatch dashboard``'s
history-branch source."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from stepwatch.collector.cli.dashboard import branch_folder
from stepwatch.collector.config import TRIALS
from stepwatch.collector.project import Project, identity
from tests.conftest import REPO, stepwatch
from tests.test_publish import FAST, MODEL, NET, nightly, query, team_repository

BIN = Path(sys.executable).parent
WHO = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@u", "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@u"}
CLEAN = {"GITHUB_ACTIONS": "", "GITHUB_SHA": "", "GITHUB_REPOSITORY": "", "STEPWATCH_DB": ""}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **WHO})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def configs(cwd: Path, *args: str) -> list[str]:
    done = stepwatch("run", "--dry-run", *args, cwd=cwd, env=CLEAN)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_settings_are_the_defaults_of_every_command_below_the_project_and_a_flag_wins(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "theirs"\n\n[tool.stepwatch]\nmodels = ["bilstm"]\nxla = false\nprecision = ["fp32"]\n'
        'trials = 4\nresults = "bench/results"\n'
    )
    below = tmp_path / "src" / "deep"
    below.mkdir(parents=True)
    for where in (tmp_path, below):  # found from the project's directory and below it
        assert configs(where) == ["bilstm/tiny cpu noxla fp32 b8 fit threads=1/2", "1 configs x 4 trials"]
    assert configs(below, "--xla", "on,off", "--trials", "2")[-1] == "2 configs x 2 trials"  # flags win
    project = Project.find(below)
    assert project.root == tmp_path and project.resolved("results", "bench/results") == str(tmp_path / "bench/results")
    # a stepwatch.toml is the project's settings in place of the table: two models, the suite's matrix, and the one
    # default trial count (the smoke suite names none)
    (tmp_path / "stepwatch.toml").write_text('models = "resnet50,bilstm"\n')
    assert configs(below)[-1] == f"8 configs x {TRIALS} trials"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("modles = ['bilstm']\n", "stepwatch.toml: unknown setting 'modles'; settings are the long options"),
        ("out = 'x'\n", "stepwatch.toml: 'out' is no setting; did you mean 'results'?"),
        ("xla = 'sometimes'\n", "stepwatch.toml: xla: 'sometimes' is not one of off, on"),
        ("trials = \n", "stepwatch.toml: not valid TOML"),
        ("[matrix]\nxla = true\n", "stepwatch.toml: 'matrix' is a table; settings are plain values or lists"),
    ],
)
def test_a_bad_settings_file_is_one_line_and_exit_2(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "stepwatch.toml").write_text(text)
    done = stepwatch("run", "--dry-run", cwd=tmp_path, env=CLEAN)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr


def test_the_environments_store_wins_over_the_projects(tmp_path: Path) -> None:
    (tmp_path / "stepwatch.toml").write_text('db = "stores/project.duckdb"\n')
    below = tmp_path / "below"
    below.mkdir()
    mine = tmp_path / "mine.duckdb"
    sql = "SELECT count(*) FROM runs"
    done = stepwatch("query", sql, cwd=below, env={**CLEAN, "STEPWATCH_DB": str(mine)})
    assert done.returncode == 2 and f"no store at {mine}:" in done.stderr
    done = stepwatch("query", sql, cwd=below, env=CLEAN)  # the project's, relative to its settings file
    assert done.returncode == 2 and f"no store at {tmp_path / 'stores' / 'project.duckdb'}:" in done.stderr
    done = stepwatch("query", sql, "--db", "here.duckdb", cwd=below, env=CLEAN)  # a flag: relative to where it runs
    assert done.returncode == 2 and "no store at here.duckdb:" in done.stderr


def test_the_repository_and_commit_a_command_runs_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GITHUB_ACTIONS", "GITHUB_SHA", "GITHUB_REPOSITORY"):
        monkeypatch.delenv(name, raising=False)
    assert identity(tmp_path) == {"project_repository": None, "project_commit": None, "project_dirty": None}
    git(tmp_path, "init", "-q")
    (tmp_path / "model.py").write_text("x = 1\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "one")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert identity(tmp_path) == {"project_repository": tmp_path.name, "project_commit": head, "project_dirty": False}
    git(tmp_path, "remote", "add", "origin", "https://someone:ghp_token@github.com/org/their-repo.git")
    (tmp_path / "model.py").write_text("x = 2\n")
    found = identity(tmp_path / ".")
    assert found == {"project_repository": "org/their-repo", "project_commit": head, "project_dirty": True}
    git(tmp_path, "remote", "set-url", "origin", "git@github.com:org/other.git")
    assert identity(tmp_path)["project_repository"] == "org/other"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_SHA", "b" * 40)
    monkeypatch.setenv("GITHUB_REPOSITORY", "org/from-actions")
    assert identity(tmp_path) == {"project_repository": "org/from-actions", "project_commit": "b" * 40,
                                  "project_dirty": True}  # fmt: skip


def test_init_writes_the_settings_and_workflows_once_and_keeps_what_exists(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "theirs"\n')
    args = ("init", "--models", "model.py:build", "--keras-backend", "torch", "--gpu-runner", "self-hosted,gpu",
            "--shards", "3", "--action", "stepwatch/stepwatch@" + "c" * 40)  # fmt: skip
    first = stepwatch(*args, cwd=tmp_path, env=CLEAN)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("wrote ") == 6 and (tmp_path / "pyproject.toml").read_text().count("\n") == 2
    settings = Project.find(tmp_path).settings
    assert settings["models"] == ["model.py:build"] and settings["keras_backend"] == ["torch"]
    nightly = yaml.safe_load((tmp_path / ".github/workflows/stepwatch-nightly.yml").read_text())
    jobs = nightly["jobs"]["collect"]["strategy"]["matrix"]["include"]
    assert [(j["name"], j["shard"], j["extras"]) for j in jobs] == [
        ("cpu", "1/1", "torch"), ("gpu", "1/3", "torch"), ("gpu", "2/3", "torch"), ("gpu", "3/3", "torch"),
    ]  # fmt: skip
    # The model's file is not written yet: its configs cannot be planned, so the shards are the ones asked for.
    assert jobs[1]["runner"] == ["self-hosted", "gpu"] and jobs[1]["args"] == "--device gpu --batch 32"
    ignored = (tmp_path / ".gitignore").read_text().splitlines()[1:]
    assert ignored == ["stepwatch-results/", "stepwatch-nightly/", "data/upgrade-check/", "data/upgrade-check.duckdb*",
                       "data/code-check/", "data/code-check.duckdb*"]  # fmt: skip
    assert {job["name"] for job in jobs} == {"cpu", "gpu"}  # no job for hardware nobody named
    workflows = sorted((tmp_path / ".github/workflows").glob("*.yml"))
    for check in (
        [str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, workflows)],
        [str(BIN / "zizmor"), "--offline", "--min-severity", "medium", str(tmp_path / ".github")],
    ):
        done = subprocess.run(check, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / "stepwatch.toml").write_text("# mine\n")
    second = stepwatch(*args, cwd=tmp_path, env=CLEAN)
    assert second.returncode == 0 and "wrote" not in second.stdout and second.stdout.count("kept ") == 6
    assert (tmp_path / "stepwatch.toml").read_text() == "# mine\n"


def test_init_never_writes_more_shards_than_configs_and_writes_the_loop(tmp_path: Path) -> None:
    """The starter settings narrow gpu-nightly to two configs (one model, XLA off/on, fp32): two GPU jobs, not the
    four asked for, each at the batch init gives GPU jobs; the TPU job installs JAX with libtpu."""
    done = stepwatch("init", "--models", "resnet50", "--gpu-runner", "gpu", "--tpu-runner", "tpu", "--loop", "fit",
                     "--gpu-batch", "64", "--action", "./", cwd=tmp_path, env=CLEAN)  # fmt: skip
    assert done.returncode == 0, done.stderr
    nightly = yaml.safe_load((tmp_path / ".github/workflows/stepwatch-nightly.yml").read_text())
    jobs = nightly["jobs"]["collect"]["strategy"]["matrix"]["include"]
    assert [(j["name"], j["shard"], j["args"], j["extras"]) for j in jobs if j["name"] != "cpu"] == [
        ("gpu", "1/2", "--device gpu --batch 64", "tensorflow-cuda"),
        ("gpu", "2/2", "--device gpu --batch 64", "tensorflow-cuda"),
        ("tpu", "1/2", "--device tpu --batch 64", "jax-tpu"),
        ("tpu", "2/2", "--device tpu --batch 64", "jax-tpu"),
    ]  # fmt: skip
    assert Project.find(tmp_path).settings["loop"] == ["fit"]
    assert configs(tmp_path, "--suite", "gpu-nightly", "--device", "gpu", "--batch", "64")[-1] == "2 configs x 3 trials"
    again = stepwatch("init", "--action", "./", cwd=tmp_path, env=CLEAN)
    assert "to .gitignore" not in again.stdout  # its lines are there once


def test_an_empty_shard_runs_nothing_and_passes(tmp_path: Path) -> None:
    (tmp_path / "stepwatch.toml").write_text('models = ["bilstm"]\nxla = ["off", "on"]\nprecision = ["fp32"]\n')
    done = stepwatch("run", "--shard", "3/4", cwd=tmp_path, env=CLEAN)
    assert done.returncode == 0, done.stderr
    assert "--shard 3/4: this share of the suite's 2 configs is empty; nothing to run" in done.stdout
    assert not (tmp_path / "data" / "results").exists()


def test_init_keeps_a_pyproject_table_and_refuses_no_runner(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.stepwatch]\nmodels = ["bilstm"]\n')
    done = stepwatch("init", "--action", "./", cwd=tmp_path, env=CLEAN)
    assert done.returncode == 0 and "kept pyproject.toml" in done.stdout and not (tmp_path / "stepwatch.toml").exists()
    done = stepwatch("init", "--cpu-runner", "none", cwd=tmp_path, env=CLEAN)
    assert done.returncode == 2 and "no runner for the nightly" in done.stderr


def test_shards_split_the_configs_and_together_are_the_suite(tmp_path: Path) -> None:
    whole = configs(tmp_path)[:-1]
    parts = [configs(tmp_path, "--shard", f"{k}/3")[:-1] for k in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(whole) and max(map(len, parts)) - min(map(len, parts)) <= 1
    done = stepwatch("run", "--dry-run", "--shard", "4/3", cwd=tmp_path, env=CLEAN)
    assert done.returncode == 2 and "K must be between 1 and N" in done.stderr


def test_the_dashboard_reads_a_history_branch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "model.py").write_text("x = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "main")
    git(repo, "checkout", "-q", "--orphan", "stepwatch-history")
    git(repo, "rm", "-q", "-rf", ".")
    (repo / "results").mkdir()
    (repo / "results" / "night.parquet").write_bytes(b"PAR1 not really")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "night")
    git(repo, "checkout", "-q", "main")
    folder = branch_folder("stepwatch-history", repo)  # no origin here: the local branch
    assert (folder / "results" / "night.parquet").read_bytes() == b"PAR1 not really"
    with pytest.raises(Exception, match="cannot read the branch 'nope'"):
        branch_folder("nope", repo)


@pytest.mark.parametrize("command", ["upgrade-check", "bisect", "calibrate"])
def test_a_check_keeps_its_own_results_whatever_the_projects_results_and_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """The project's results and db (the nightly's history) are never a check's: with init's settings, the checks
    write their parquet and store where they always do, and say so in their report."""
    from stepwatch.collector.cli import apply_project, build_parser

    (tmp_path / "stepwatch.toml").write_text('results = "stepwatch-results"\ndb = "stepwatch-results/s.duckdb"\n')
    sides = {"upgrade-check": ["--baseline", "a==1", "--candidate", "a==2"], "bisect": ["--good", "a==1", "--bad",
             "a==2"], "calibrate": []}[command]  # fmt: skip
    argv = [command, *sides]
    parser = build_parser(argv)
    apply_project(parser, argv, Project.find(tmp_path))
    args = parser.parse_args(argv)
    assert "stepwatch-results" not in str(args.results) and "stepwatch-results" not in str(args.db or "")
    assert str(args.results).startswith("data/upgrade-check")
    # ... while the nightly's commands take them.
    parser = build_parser(["run"])
    apply_project(parser, ["run"], Project.find(tmp_path))
    assert parser.parse_args(["run"]).out == str(tmp_path / "stepwatch-results")


# The nightly replayed end to end with torch trials, 26 s of both cores: CI's `large` job. Each defect it guards has a
# faster test in every run: a torch.nn.Module trains in the plain PyTorch loop
# (test_user_models::test_a_function_that_returns_a_torch_module_...), init plans no more shards than configs and an
# empty shard passes (test_init_never_writes_more_shards_than_configs_..., test_an_empty_shard_runs_nothing_...).
@pytest.mark.large
def test_a_pytorch_team_gets_ok_rows_and_shards_that_fit_their_suite(tmp_path: Path) -> None:
    """The nightly init writes, replayed as GitHub runs it (tests.github): init's defaults for a torch.nn.Module
    train it in the plain PyTorch loop; init never writes more GPU shards than the settings give configs; a suite
    split in more shards than configs (as init wrote them before) has jobs that run nothing, say so and pass, and
    the night keeps the others' rows."""
    gh = team_repository(tmp_path, {"net.py": NET}, ["--models", "net.py:mlp", "--keras-backend", "torch",
                                                     "--gpu-runner", "self-hosted,gpu"],
                         'xla = ["off"]\nprecision = ["fp32", "mixed_bfloat16"]\ntrials = 1\n' + FAST)  # fmt: skip
    workflow = nightly(gh)
    jobs = workflow["jobs"]["collect"]["strategy"]["matrix"]["include"]
    gpu = [j for j in jobs if j["name"] == "gpu"]
    # init planned the GPU shards from its starter settings (one model, XLA off/on, fp32: two configs), not 4.
    assert [j["shard"] for j in gpu] == ["1/2", "2/2"] and gpu[0]["args"] == "--device gpu --batch 32"
    # The GPU jobs cannot run here: the team's suite (two configs too) split in 4 on this CPU stands for them.
    cpu = [j for j in jobs if j["name"] == "cpu"][0]
    workflow["jobs"]["collect"]["strategy"]["matrix"]["include"] = [{**cpu, "shard": f"{k}/4"} for k in range(1, 5)]
    night = gh.run_workflow(workflow)
    for job in night["collect"]:
        assert job.result == "success", [(s.name, s.outcome, s.stdout[-800:], s.stderr[-1500:]) for s in job.steps]
    [ran] = [s for s in night["collect"][3].steps if s.name == "Run the suite"]
    assert "this share of the suite's 2 configs is empty; nothing to run" in ran.stdout
    [publish] = night["publish"]
    assert publish.result == "success", [(s.name, s.stdout[-1500:], s.stderr[-1500:]) for s in publish.steps]
    assert "wrote no row: cpu 3/4, cpu 4/4" in publish.summary, publish.summary
    db = publish.workspace / "stepwatch-store" / "stepwatch.duckdb"
    assert query(db, "SELECT loop, status, precision FROM runs ORDER BY precision", publish.workspace) == [
        '"pytorch","ok","fp32"', '"pytorch","ok","mixed_bfloat16"']  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "suite", "printed"),
    [
        ('keras-backend = ["jax"]\n', None, "jax"),  # what `init --keras-backend jax` writes
        ('keras-backend = ["jax", "torch"]\ndevice = ["gpu"]\n', None, "jax-cuda12,torch"),
        ('suite = "suite.toml"\n', '[[configs]]\nmodel = "train.py"\nkeras_backend = "torch"\n', "torch"),
        ('keras-backend = ["jax"]\nextras = "jax-cuda13"\n', None, "jax-cuda13"),  # said outright
        ("trials = 3\n", None, ""),  # no framework named: the job's own, as before
    ],
    ids=["init-jax", "gpu", "suite-only", "extras-setting", "none"],
)
def test_the_extras_every_workflow_installs_come_from_the_projects_settings(
    tmp_path: Path, settings: str, suite: str | None, printed: str
) -> None:
    """What stepwatch's action installs where a workflow names no extras (a team that set no STEPWATCH_EXTRAS): the
    code and upgrade checks of a JAX team then install JAX as its nightly does, instead of failing every trial."""
    (tmp_path / "stepwatch.toml").write_text(settings)
    if suite:
        (tmp_path / "suite.toml").write_text(suite)
        (tmp_path / "train.py").write_text("import stepwatch\n")
    done = stepwatch("extras", cwd=tmp_path, env=CLEAN)
    assert done.returncode == 0 and done.stdout == printed + "\n", done.stderr
    wrong = stepwatch("extras", "--keras-backend", "jaxx", cwd=tmp_path, env=CLEAN)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
    assert "--keras-backend: 'jaxx' is not one of tensorflow, jax, torch" in wrong.stderr


# A fresh environment and two builds of stepwatch's wheel by pip (about 40 s): CI's large job. The step's choice of
# extras is `stepwatch extras`, tested above.
@pytest.mark.large
def test_the_actions_install_step_installs_the_frameworks_the_settings_name(tmp_path: Path) -> None:
    """The action's install step as the runner runs it (``tests/github.py:action_steps``), no extras given, in a JAX
    team's repository: stepwatch and its jax extra land in the job's Python (a virtual environment here)."""
    from tests.github import action_steps

    team, venv, action = tmp_path / "team", tmp_path / "venv", tmp_path / "action"
    team.mkdir()
    action.mkdir()  # the action's files as a runner fetches them (pip builds in the folder it is given)
    archive = subprocess.run(f"git -C {REPO} archive HEAD | tar -x -C {action}", shell=True, capture_output=True)
    assert archive.returncode == 0, archive.stderr
    (team / "stepwatch.toml").write_text('keras-backend = ["jax"]\n')
    assert subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)]).returncode == 0
    [install] = [step for step in action_steps({"command": "install"}) if step["name"] == "Install stepwatch"]
    env = {**install["env"], "ACTION_PATH": str(action), "PYTHON": str(venv / "bin" / "python"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # fmt: skip
    done = subprocess.run(["bash", "-e", "-c", install["run"]], cwd=team, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stepwatch: installing the extras jax" in done.stdout and "stepwatch 0.1.0" in done.stdout
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import stepwatch, jax; print(stepwatch.__file__)"],
                           cwd=team, capture_output=True, text=True)  # fmt: skip
    assert where.stdout.startswith(str(venv)), where.stderr  # its own install, not this checkout's


def test_init_names_a_training_script_as_it_names_a_model(tmp_path: Path) -> None:
    """``init --models model.py:mlp,train.py``: the script is a workload of the nightly and of the code checks."""
    (tmp_path / "model.py").write_text(MODEL)
    loop = "import stepwatch\n\nfor _ in stepwatch.steps(range(100), examples_per_step=4):\n    pass\n"
    (tmp_path / "train.py").write_text(loop)
    git(tmp_path, "init", "-q")
    done = stepwatch("init", "--models", "model.py:mlp,train.py", "--keras-backend", "jax", cwd=tmp_path, env=CLEAN)
    assert done.returncode == 0, done.stderr
    assert 'models = ["model.py:mlp", "train.py"]' in (tmp_path / "stepwatch.toml").read_text()
    planned = {line.split()[0] for line in configs(tmp_path, "--xla", "off")[:-1]}
    assert planned == {"model.py:mlp/tiny", "train.py"}, planned


def test_a_wheel_built_from_a_checkout_pins_the_action_to_its_commit_and_one_that_cannot_says_how(
    tmp_path: Path,
) -> None:
    """A wheel built from a clean checkout carries its commit (``setup.py``), and ``init`` from that wheel pins
    stepwatch's action to it (a tag is what zizmor reports as an unpinned use); where no commit is known, init names
    the tag and says how to pin it."""
    source, target, team = tmp_path / "source", tmp_path / "target", tmp_path / "team"
    git(tmp_path, "clone", "-q", str(REPO), str(source))
    head = git(source, "rev-parse", "HEAD")
    uv = Path(sys.executable).parent / "uv"
    built = subprocess.run([str(uv), "build", "--wheel", "--out-dir", str(tmp_path / "dist"), str(source)],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = (tmp_path / "dist").glob("stepwatch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("stepwatch/collector/data/source-commit").decode().strip() == head
    # Installed from the wheel (its files first on the path, this environment's packages beneath them).
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                                str(wheel)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-2000:]
    team.mkdir()
    git(team, "init", "-q")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(target)}
    python = sys.executable
    done = subprocess.run([python, "-m", "stepwatch", "init"], cwd=team, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    nightly = (team / ".github" / "workflows" / "stepwatch-nightly.yml").read_text()
    assert f"uses: stepwatch/stepwatch@{head} # v0.1.0" in nightly and "note: the workflows name" not in done.stdout
    # The same wheel without its commit (built from an export, not a checkout): the tag, and how to pin it.
    (target / "stepwatch" / "collector" / "data" / "source-commit").unlink()
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    done = subprocess.run([python, "-m", "stepwatch", "init"], cwd=other, capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "uses: stepwatch/stepwatch@v0.1.0" in (
        other / ".github" / "workflows" / "stepwatch-nightly.yml").read_text()  # fmt: skip
    assert "git ls-remote https://github.com/stepwatch/stepwatch refs/tags/v0.1.0" in done.stdout, done.stdout
