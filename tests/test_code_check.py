"""stepwatch code-check on a repository made here, as a team's would be: a Keras model (on JAX, compiled) whose
layers live in a file beside it, and a plain PyTorch training script, each commit checked out in a folder of its own
and measured interleaved."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml

from stepwatch.collector.environments import virtualenvs
from stepwatch.collector.store.database import StoreReader
from tests.conftest import REPO, commit, git, stepwatch
from tests.github import GitHub, JobRun
from tests.test_dashboard import render
from tests.test_upgrade_pr import STAND_IN_GH, build_wheels, env_args, posts_one_comment

LAYERS = '''"""Blocks the team's models share."""

import keras

WIDTH = 128


def block(x, width=WIDTH):
    x = keras.layers.Dense(width, activation="relu")(x)
    return keras.layers.Dense(width, activation="relu")(x)
'''
CLASSIFIER = '''"""The team's classifier: dense blocks over 64 features."""

import keras

from models.layers import block


def classifier(preset):
    inputs = keras.Input((64,), name="features")
    outputs = keras.layers.Dense(2, activation="softmax", dtype="float32")(block(inputs))
    return {
        "model": keras.Model(inputs, outputs),
        "loss": "sparse_categorical_crossentropy",
        "inputs": {"shape": (64,), "dtype": "float32"},
        "labels": {"shape": (), "dtype": "int32", "high": 2},
    }
'''
TRAIN = '''"""The team's plain PyTorch training loop."""

import torch

import stepwatch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
features, labels = torch.randn(256, 64), torch.randint(0, 2, (256,))


def batches():
    while True:
        yield features, labels


for x, y in stepwatch.steps(batches(), examples_per_step=256):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
'''
SUITE = """[defaults]
preset = "tiny"
steps = 20
warmup_steps = 20
window_steps = 10
timeout_s = 300

[[configs]]
model = "models/classifier.py:classifier"
keras_backend = "jax"
xla = "on"
per_device_batch = 256

[[configs]]
model = "train.py"
keras_backend = "torch"
"""
CLASSIFIER_NAME = "models/classifier.py:classifier"


@pytest.fixture
def team(tmp_path: Path) -> Path:
    """The team's repository: main with the model, the script and their settings, and a branch ``pr`` from it."""
    repo = tmp_path / "team"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "ci")
    commit(repo, "the model and the loop", {
        "models/layers.py": LAYERS, "models/classifier.py": CLASSIFIER, "train.py": TRAIN,
        "stepwatch-suite.toml": SUITE, "stepwatch.toml": 'suite = "stepwatch-suite.toml"\ntrials = 3\nmax-trials = 5\n',
        ".gitignore": "data/\nstepwatch-results/\n",
    })  # fmt: skip
    git(repo, "checkout", "-q", "-b", "pr")
    return repo


def worktrees_of(repo: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in git(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]  # fmt: skip


def test_a_commit_that_edits_comments_and_docstrings_has_nothing_to_check_and_runs_nothing(team: Path) -> None:
    commit(team, "Words", {
        "models/layers.py": LAYERS.replace("share.", "share (reworded).") + "# a comment\n",
        "train.py": TRAIN.replace("loop.", "loop, reworded.").replace("optimizer.step()", "optimizer.step()  # note"),
    })  # fmt: skip
    done = stepwatch("code-check", cwd=team)
    assert done.returncode == 0, done.stderr
    assert "nothing to check: no workload's code differs between the two commits and no pin file changed" in done.stdout
    assert f"Same code on both commits, not run: `{CLASSIFIER_NAME}`, `train.py`." in done.stdout
    assert not (team / "data").exists() and worktrees_of(team) == [str(team)]  # no trial, no store, no checkout left

    # The working tree's own edits (--head .): a comment is still nothing; a check of HEAD refuses to leave them out.
    (team / "models" / "layers.py").write_text(LAYERS + "# another comment\n")
    done = stepwatch("code-check", "--head", ".", cwd=team)
    assert done.returncode == 0 and "nothing to check" in done.stdout, done.stderr
    assert "candidate: the working tree (1 edited file(s) over" in done.stdout
    done = stepwatch("code-check", cwd=team)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "uncommitted changes to 1 tracked file(s) (models/layers.py)" in done.stderr and "--head ." in done.stderr


WHO = {"GIT_AUTHOR_NAME": "ci", "GIT_AUTHOR_EMAIL": "ci@example.com", "GIT_COMMITTER_NAME": "ci",
       "GIT_COMMITTER_EMAIL": "ci@example.com"}  # fmt: skip
WORKFLOWS = REPO / ".github" / "workflows"


def on_github(team: Path, tmp_path: Path, **variables: str) -> GitHub:
    """The team's repository on "GitHub" (a bare remote: main and the pull request's branch), its variables as a team
    sets them (three trials a side, and ``variables``), replayed as GitHub documents it runs workflows
    (``tests/github.py``)."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path), **WHO,
           "STEPWATCH_CALIBRATION": "none"}  # fmt: skip
    gh = GitHub(tmp_path / "github", "o/r", env, variables={"STEPWATCH_TRIALS": "3", **variables})
    gh.remote.parent.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(team), str(gh.remote)], check=True)
    return gh


def pull_request(gh: GitHub, team: Path, head: str) -> tuple[JobRun, str]:
    """code-pr.yml on the pull_request event of a pull request from main to ``head``: its job and its run's id."""
    payload = {"pull_request": {"number": 12, "base": {"sha": git(team, "rev-parse", "main")}, "head": {"sha": head}}}
    workflow = yaml.safe_load((WORKFLOWS / "stepwatch-code-pr.yml").read_text())
    [run] = gh.run_workflow(workflow, "pull_request", payload=payload)["check"]
    return run, gh._github("pull_request")["run_id"]


def verdict_posted(gh: GitHub, tmp_path: Path, run_id: str, head: str, conclusion: str) -> list[str]:
    """The verdict workflow on the workflow_run event of that run (its artifact downloaded by run id), with the
    stand-in gh of test_upgrade_pr: the calls it made."""
    state, bin_dir = tmp_path / "gh-state", tmp_path / "gh-bin"
    state.mkdir()
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(STAND_IN_GH)
    (bin_dir / "gh").chmod(0o755)
    (state / "pull.json").write_text(json.dumps({"head": {"sha": head}}))
    (state / "comments.json").write_text("[]")
    (state / "calls").write_text("")
    gh.env = {**gh.env, "PATH": f"{bin_dir}:{gh.env['PATH']}", "GH_STATE": str(state)}
    event = {"workflow_run": {"event": "pull_request", "conclusion": conclusion, "id": run_id, "name": "code-pr",
                              "head_repository": {"full_name": "o/r"}, "head_branch": "pr", "head_sha": head,
                              "html_url": f"https://github.com/o/r/actions/runs/{run_id}"}}  # fmt: skip
    workflow = yaml.safe_load((WORKFLOWS / "stepwatch-upgrade-pr-verdict.yml").read_text())
    [post] = gh.run_workflow(workflow, "workflow_run", payload=event)["post"]
    assert post.result == "success", [(step.name, step.stdout, step.stderr) for step in post.steps]
    return (state / "calls").read_text().splitlines()


def outputs_of(run: JobRun, name: str) -> dict[str, str]:
    return next(step.outputs for step in run.steps if step.name == name)


def test_a_pull_request_that_changes_no_code_passes_at_once_without_a_comment(team: Path, tmp_path: Path) -> None:
    head = commit(team, "Words", {"models/layers.py": LAYERS + "# a comment\n"})
    gh = on_github(team, tmp_path)
    run, run_id = pull_request(gh, team, head)
    assert outputs_of(run, "Code check") == {"checked": "false"} and run.result == "success"
    assert (run.workspace / "pr" / "verdict").read_text() == "no-code-change\n"
    assert not gh.caches.entries  # nothing compiled, nothing kept
    calls = verdict_posted(gh, tmp_path, run_id, head, "success")
    assert not any("/comments -F" in call for call in calls)
    assert "-f name=stepwatch code " in calls[-1] and "output[title]=code check: no-code-change" in calls[-1]


@pytest.mark.large
def test_a_pull_request_with_a_layer_four_times_wider_fails_its_check_saying_by_how_much_and_the_aa_stays_quiet(
    team: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change is in the file the model imports, not in the model's own file. Its counters are exact on any
    machine; the slowdown is far past this runner's noise; the A/A (the merge base checked out twice) calls nothing.

    Why every x86 CPU resolves the slowdown the same way: at 256 examples a step, the step is the blocks' matmuls, and
    4x the width is 12x their FLOPs (64x128 + 128x128 -> 64x512 + 512x512 per example), work no fusion removes
    (on a 2-core AMD EPYC, 0.8 -> 4.4 ms a step: 5x to 9x slower with XLA's YNNPACK fusions of dots on or off). At 8
    a step the step was overhead: one EPYC's XLA ran the wider step in 0.9 ms where the narrow one took 1.0, and this
    test read peak memory as the lead."""
    base = git(team, "rev-parse", "HEAD")
    head = commit(team, "Wider blocks", {"models/layers.py": LAYERS.replace("WIDTH = 128", "WIDTH = 512")})
    gh = on_github(team, tmp_path)
    # The nightly's compile-cache job, on the default branch (a schedule's run): the cache pull requests start from.
    nightly = yaml.safe_load((WORKFLOWS / "stepwatch-nightly.yml").read_text())
    [warm] = gh.run_workflow({"jobs": {"compile-cache": nightly["jobs"]["compile-cache"]}})["compile-cache"]
    assert warm.result == "success", [(step.name, step.stdout[-1000:], step.stderr[-2000:]) for step in warm.steps]
    [(main_key, main_files, main_ref)] = gh.caches.entries
    assert main_ref == "refs/heads/main"
    assert any(name.startswith(".stepwatch-compile-cache/jax/") for name in main_files)
    run, run_id = pull_request(gh, team, head)
    workspace = run.workspace  # a clone of the remote, the pull request's merge commit checked out
    pr = workspace / "pr"
    assert outputs_of(run, "Code check") == {"checked": "true"}, (pr / "check.log").read_text()[-3000:]
    assert (pr / "verdict").read_text() == "regression\n", (pr / "check.log").read_text()[-3000:]
    assert run.result == "failure" and run.steps[-1].outcome == "failure"  # the job fails, as its check run does
    comment = (pr / "comment.md").read_text()
    assert comment in run.summary  # the job summary shows it
    assert comment.startswith(f"<!-- stepwatch code-pr -->\n## stepwatch code check: merge base {base[:12]} of ")
    # It leads with what changed for sure: the slowdown its interval resolves, then the counters, exactly.
    lead = comment.splitlines()[3]
    assert lead.startswith("**What changed for sure** (1 series): examples_per_sec -") and "(regression)" in lead
    assert "compiled_flops " in lead and "(changed)" in lead, lead
    assert f"Code that differs: `{CLASSIFIER_NAME}` (`models/layers.py`)." in comment
    # Where the trials' time went, as shares that add up: what more steps a trial would buy against more trials.
    [split] = [line for line in comment.splitlines() if line.startswith("Where the trials' ")]
    shares = dict(part.rsplit(" ", 1) for part in split.split("went: ")[1].rstrip(".").split(", "))
    assert {"start-up", "measured steps"} <= set(shares) and 97 <= sum(int(s.rstrip("%")) for s in shares.values())
    assert "Same code on both commits, not run: `train.py`." in comment
    # The A/A's line: its counters are exact (below); its timings are this runner's, shared with the other tests here,
    # so their false alarm rate is measured where nothing else runs (benchmarks/code_check.py: 0 in 100 verdicts).
    [aa_line] = [line for line in comment.splitlines() if line.startswith("A/A (the merge base in a second checkout")]
    assert "No false alarm." in aa_line or ("compiled_" not in aa_line and "hlo_" not in aa_line), aa_line
    # The numerics beside the speed: the A/A trains the same (on a CPU, to the bit); the wider layer's is reported.
    assert "numerics: 1 identical" in aa_line and "**Numerics: 1 " in comment, (aa_line, comment[-3000:])
    assert "| 🔴 regression | models/classifier.py:classifier/tiny" in comment and "Verdict: **regression**" in comment
    ops = comment.split("Where the time went (stepwatch explain, from the profiled trials):")[1]
    # Which ops grew, each with its interval ("moved" where the interval clears it: timings, so not asserted here).
    grown = [line for line in ops.split("remainder")[0].splitlines() if " ms -> " in line and "  share   +" in line]
    assert "3 + 3 profiled trials" in ops and grown, ops[:3000]

    # The check's own store: the rows of each side name the commit they ran; the verdicts, read back.
    # Each side's rows name its own commit, never the merge commit GITHUB_SHA names.
    db = str(workspace / "data" / "code-check.duckdb")
    con = StoreReader(Path(db)).connection()
    ran = con.sql("SELECT label, project_repository, project_commit, project_dirty, count(*) FROM runs GROUP BY ALL "
                  "ORDER BY 1").fetchall()  # fmt: skip
    con.close()
    # As many trials on every side as its last look had (3, or more where a verdict needed more rounds).
    n = ran[0][-1]
    assert ran == [("baseline", "o/r", base, False, n), ("baseline-aa", "o/r", base, False, n),
                   ("candidate", "o/r", head, False, n)]  # fmt: skip
    [rounds] = [line for line in comment.splitlines() if line.startswith("**Rounds**: ")]
    assert n in (3, 5, 8, 12) and rounds.split(" trials per side")[0].endswith(f" {n}"), rounds
    assert worktrees_of(workspace) == [str(workspace)]
    # The compile cache, kept for the next check although the job failed; the artifact, laid out from the workspace's
    # root (the two paths' common ancestor): the verdict workflow reads artifact/pr/.
    # The merge base found its step compiled in the default branch's cache; the head compiled its own. What the check
    # kept is scoped to this pull request (another restores the default branch's, tests/github.py CACHE_RULE).
    assert outputs_of(run, "Restore the compile cache")["cache-matched-key"] == main_key
    log = (pr / "check.log").read_text()
    assert f"baseline: compile cache for {CLASSIFIER_NAME}" in log and ": held already (ok" in log, log[-3000:]
    assert f"candidate: compile cache for {CLASSIFIER_NAME}" in log and ": compiled (ok" in log, log[-3000:]
    [_, (key, kept, ref)] = gh.caches.entries
    assert key.startswith("stepwatch-compile-Linux-X64-") and kept and ref == "refs/pull/12/merge"
    uploaded = gh.artifacts[run_id]["code-pr"]
    assert {"pr/verdict", "pr/comment.md", "pr/number"} <= set(uploaded) and any(
        name.startswith("data/code-check/") and name.endswith("report.md") for name in uploaded)  # fmt: skip

    def compared(candidate: str) -> dict[str, dict]:
        done = stepwatch("compare", "--baseline", "label=baseline", "--candidate", f"label={candidate}", "--metric",
                         "examples_per_sec,counters", "--format", "json", "--db", db, cwd=workspace)  # fmt: skip
        return {row["metric"]: row for row in json.loads(done.stdout)["rows"]}

    rows = compared("candidate")
    throughput, flops = rows["examples_per_sec"], rows["compiled_flops"]
    assert throughput["verdict"] == "regression" and throughput["ratio"] < 0.8, throughput  # a ratio: 4x the width
    assert flops["verdict"] == "changed" and flops["ratio"] > 10, flops  # 4x the width: 12x the blocks' FLOPs
    aa = compared("baseline-aa")
    assert [m for m, row in aa.items() if row["exact"] and row["verdict"] != "no change"] == []  # the same program

    # Which ops moved, by the command the report prints; the Compare page by its link.
    explain = next(line for line in comment.splitlines() if "stepwatch explain" in line)
    command = explain.split("`stepwatch ")[1].split("`")[0].split()
    done = stepwatch(*command, cwd=workspace)
    assert done.returncode == 0 and grown[0].split()[0] in done.stdout, done.stdout + done.stderr
    link = dict(parse_qsl(urlsplit(explain.split("then ")[1].strip()).query))
    assert link["metric"].startswith("examples_per_sec,compiled_flops,")  # what moved, throughput first
    at = render(Path(db), "compare", monkeypatch, **link)
    assert [box.value for box in at.text_input][:2] == [link["baseline"], link["candidate"]]
    shown = " ".join(str(m.value) for m in at.markdown)
    assert "**Throughput**: geometric mean over 1 series on both sides -" in shown, shown[:2000]
    assert "**FLOPs per step (XLA cost analysis, library calls left out)**: geometric mean" in shown, shown[:2000]

    # The verdict workflow, on the run's completion, downloads its artifact and posts: one comment, a failed check run.
    calls = verdict_posted(gh, tmp_path, run_id, head, "failure")
    assert (tmp_path / "gh-state" / "posted-POST.md").read_text() == comment
    assert "-f name=stepwatch code " in calls[-1] and "-f conclusion=failure" in calls[-1], calls
    # And its shell step on later runs: the comment edited, an older head's run silent, a forged verdict refused.
    posts_one_comment(tmp_path, pr, head, "regression", comment, "code-pr")


def test_a_model_the_head_adds_is_new_and_runs_nothing(team: Path) -> None:
    extra = CLASSIFIER.replace("def classifier", "def extra")
    commit(team, "Another model", {"models/extra.py": extra,
                                   "stepwatch-suite.toml": SUITE + '\n[[configs]]\nmodel = "models/extra.py:extra"\n'
                                   'keras_backend = "jax"\nxla = "on"\n'})  # fmt: skip
    done = stepwatch("code-check", cwd=team)
    assert done.returncode == 0 and "nothing to check" in done.stdout, done.stderr
    assert "Added by the head, nothing to compare with (not run): `models/extra.py:extra`." in done.stdout


@pytest.mark.large
def test_a_head_whose_model_raises_is_an_error_that_says_first_where_and_why_after_one_trial_of_it(
    team: Path, tmp_path: Path
) -> None:
    """The pull request's workflow as GitHub runs it, on a head whose block raises while the model is built: the
    comment, the job's summary and the check run's title say which side, which workload and the exception; the head
    is built once; the merge base's A/A stays quiet; a budget stops the rounds."""
    raising = LAYERS.replace("    x = keras", '    raise ValueError("no")\n    x = keras', 1)
    head = commit(team, "A block that raises", {"models/layers.py": raising})
    gh = on_github(team, tmp_path, STEPWATCH_CODE_ARGS="--budget 0.01")
    run, run_id = pull_request(gh, team, head)
    pr = run.workspace / "pr"
    log = (pr / "check.log").read_text()
    assert (pr / "verdict").read_text() == "error\n" and run.result == "failure", log[-3000:]
    assert "candidate: models/classifier.py:classifier" in log and "ValueError: no" in log
    comment = (pr / "comment.md").read_text()
    # It says first which side failed, in which workload (its file), and why; the head is built once, not again.
    failed = comment.splitlines()[3]
    assert failed.startswith(f"**Failed on the candidate: `{CLASSIFIER_NAME}/tiny ") and "ValueError: no" in failed
    assert "1 of 1 trial(s) failed before its first step" in failed and "Its other 1 trial(s) were not run" in failed
    assert "What changed for sure" not in comment  # a metric the head could not measure changed nothing
    assert "(candidate: 1 failed)" in comment  # the table's n column, plainly
    # The verdicts' count says metrics, not trials ("14 failed" read as fourteen failed trials).
    assert any(line.startswith("**") and "metrics not compared (trials failed)**" in line for line in
               comment.splitlines()), comment[:1500]  # fmt: skip
    assert "**Rounds**: 1 look(s), at 2 trials per side; stopped because its budget of 0.01 minutes ran out" in comment
    [aa_line] = [line for line in comment.splitlines() if line.startswith("A/A (the merge base in a second checkout")]
    # The merge base against itself: its counters exact and equal; its timings are this shared runner's (their false
    # alarm rate is measured where nothing else runs: benchmarks/code_check.py).
    assert "No false alarm." in aa_line or ("compiled_" not in aa_line and "hlo_" not in aa_line), aa_line
    # The A/A's numerics: the merge base trains the same in both checkouts (on a CPU, to the bit); the head trained
    # nothing, so the report has no numerics of it.
    assert "numerics: 1 identical" in aa_line and "**Numerics" not in comment, aa_line
    con = StoreReader(run.workspace / "data" / "code-check.duckdb").connection()
    statuses = con.sql("SELECT label, status, count(*) FROM runs GROUP BY ALL ORDER BY 1").fetchall()
    con.close()
    assert statuses == [("baseline", "ok", 2), ("baseline-aa", "ok", 2), ("candidate", "crash", 1)]
    # The check run: failed, its title saying why.
    calls = verdict_posted(gh, tmp_path, run_id, head, "failure")
    title = next(c.split("output[title]=")[1].split(" -f ")[0] for c in calls if "output[title]=" in c)
    assert title.startswith(f"code check: error (candidate: {CLASSIFIER_NAME}: UserModelError: ") and "no" in title


def test_refs_a_check_cannot_use_are_one_line(team: Path) -> None:
    said = {
        ("--base", "nope"): "'nope' is not a commit of the git repository",
        ("--head", "v9"): "'v9' is not a commit of the git repository",
    }
    for args, line in said.items():
        done = stepwatch("code-check", *args, cwd=team)
        assert done.returncode == 2 and line in done.stderr and done.stderr.count("\n") == 1, done.stderr
    git(team, "checkout", "-q", "--orphan", "elsewhere")
    commit(team, "unrelated", {"README": "x\n"})
    done = stepwatch("code-check", "--base", "main", cwd=team)
    assert done.returncode == 2 and "have no merge base" in done.stderr, done.stderr

    shallow = team.parent / "shallow"
    url = f"file://{team}"
    subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "pr", url, str(shallow)], check=True)
    git(team, "checkout", "-q", "main")
    commit(team, "main moves on", {"notes.txt": "later\n"})
    git(shallow, "fetch", "-q", "--depth", "1", "origin", "main:refs/remotes/origin/main")
    done = stepwatch("code-check", "--base", "origin/main", cwd=shallow)
    assert done.returncode == 2 and "a shallow clone: fetch the full history" in done.stderr, done.stderr

    outside = team.parent / "plain"
    outside.mkdir()
    done = stepwatch("code-check", cwd=outside)
    assert done.returncode == 2 and "is not in a git repository" in done.stderr, done.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_check_leaves_no_checkout_behind(team: Path, sig: signal.Signals) -> None:
    """Stopped (SIGTERM, Ctrl-C) it removes its checkouts on the way out; killed, the next check removes them."""
    commit(team, "Wider blocks", {"models/layers.py": LAYERS.replace("WIDTH = 128", "WIDTH = 512")})
    proc = subprocess.Popen([sys.executable, "-m", "stepwatch", "code-check", "--aa"], cwd=team,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while len(worktrees_of(team)) < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    made = worktrees_of(team)[1:]
    assert len(made) == 3, proc.stderr.read() if proc.poll() is not None else made
    # Into its trials: its results folder and its temporary folder made (named for this check's process).
    temporary = lambda: list(Path(tempfile.gettempdir()).glob(f"{virtualenvs.TEMP_PREFIX}{proc.pid}-*"))  # noqa: E731
    results = team / "data" / "code-check"
    while not (temporary() and results.is_dir() and any(results.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.2)
    [partial] = results.iterdir()
    os.killpg(proc.pid, sig)
    proc.wait(timeout=300)  # its cleanup removes three checkouts and their environments: minutes on a loaded 2-core
    if sig == signal.SIGTERM:
        assert worktrees_of(team) == [str(team)] and not any(Path(p).exists() for p in made)
        assert not temporary()
        return
    assert worktrees_of(team)[1:] == made and temporary() and partial.is_dir()  # nothing ran to remove them
    done = stepwatch("code-check", "--dry-run", cwd=team)
    assert done.returncode == 0, done.stderr
    assert worktrees_of(team) == [str(team)] and not any(Path(p).exists() for p in made)
    assert not temporary() and not partial.exists()  # the next check removed what the killed one left


def pins_and_code(team: Path) -> None:
    """main pins swt-alpha 1.0; the pull request moves it to 2.0 and widens the layer."""
    git(team, "checkout", "-q", "main")
    commit(team, "pins", {"requirements.txt": "swt-alpha==1.0\n"})
    git(team, "checkout", "-q", "-B", "pr")
    commit(team, "Wider blocks and a newer swt-alpha", {
        "requirements.txt": "swt-alpha==2.0\n", "models/layers.py": LAYERS.replace("WIDTH = 128", "WIDTH = 256"),
    })  # fmt: skip


def test_a_pull_request_that_changes_pins_and_code_plans_every_workload_and_says_why(team: Path) -> None:
    pins_and_code(team)
    done = stepwatch("code-check", "--dry-run", "--trials", "2", cwd=team)
    assert done.returncode == 0, done.stderr
    assert "Pin files changed too: each side runs in an environment built from its own commit's pins" in done.stdout
    planned = {line.split(" trial ")[0] for line in done.stdout.splitlines() if " trial " in line}
    assert {line.split()[1].split("/")[0] for line in planned} == {"models", "train.py"}  # the unchanged script too


# Two environments built from local wheels and two trials a side: 35 s of both cores, CI's large job. The plan above
# covers which workloads run and what the report says; test_upgrade, the environments themselves.
@pytest.mark.large
def test_a_pull_request_that_changes_pins_and_code_runs_each_side_on_its_own_commits_pins(
    team: Path, tmp_path: Path
) -> None:
    """Each side is the upgrade check's environment of its own commit's requirements (local wheels, and this
    interpreter's packages beneath them), and the report says that code and packages changed together."""
    wheels = build_wheels(tmp_path / "wheels")
    pins_and_code(team)
    env = {"STEPWATCH_ENV_CACHE": str(tmp_path / "envs")}
    done = stepwatch("code-check", "--trials", "2", "--max-trials", "2", "--models", CLASSIFIER_NAME, *env_args(wheels),
                     cwd=team, env=env)  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr[-3000:]
    [folder] = (team / "data" / "code-check").iterdir()
    text = (folder / "report.md").read_text()
    assert "Pin files changed too: each side runs in an environment built from its own commit's pins" in text
    assert "Packages that differ between the two environments: swt-alpha 1.0 -> 2.0." in text
    con = StoreReader(team / "data" / "code-check.duckdb").connection()
    ran = con.sql("SELECT label, status, count(*) FROM runs GROUP BY ALL ORDER BY 1").fetchall()
    assert ran == [("baseline", "ok", 2), ("candidate", "ok", 2)]
    assert sorted(p.read_text().split()[0] for p in (tmp_path / "envs").glob("*/requirements.txt")) == [
        "swt-alpha==1.0", "swt-alpha==2.0"]  # fmt: skip


def test_a_model_named_by_its_module_in_a_trainers_package_of_the_teams_is_followed_through_its_imports(
    team: Path,
) -> None:
    """``trainers.tabular:build``, as a team names a model in a package of its own (named like stepwatch's own
    ``trainers``, which installed is ``stepwatch.trainers``): found in the folder the command runs in, though a
    console script's path does not hold it, and a change in a module it imports is its change."""
    tabular = CLASSIFIER.replace("from models.layers import block", "from trainers.blocks import block")
    git(team, "checkout", "-q", "main")
    commit(team, "our trainers package", {
        "trainers/__init__.py": "", "trainers/blocks.py": LAYERS, "trainers/tabular.py": tabular,
        "stepwatch-suite.toml": SUITE.replace(CLASSIFIER_NAME, "trainers.tabular:classifier"),
    })  # fmt: skip
    git(team, "checkout", "-q", "-B", "pr")
    commit(team, "Wider blocks", {"trainers/blocks.py": LAYERS.replace("WIDTH = 128", "WIDTH = 256")})
    done = stepwatch("code-check", "--dry-run", "--trials", "2", cwd=team)
    assert done.returncode == 0, done.stderr
    assert "Code that differs: `trainers.tabular:classifier` (`trainers/blocks.py`)." in done.stdout, done.stdout


def test_a_models_setting_beside_a_suite_keeps_each_model_as_the_suite_configures_it_and_names_what_it_leaves_out(
    team: Path,
) -> None:
    """A team that kept init's ``models`` setting and added a suite naming that model and its training script: the
    model runs as the suite configures it (XLA on, 256 a step), not at the suite's defaults, and the script the
    setting leaves out is named, never dropped without a word (a head that slowed it got "nothing to check")."""
    git(team, "checkout", "-q", "main")
    commit(team, "init's models setting kept", {
        "stepwatch.toml": f'suite = "stepwatch-suite.toml"\ntrials = 3\nmodels = ["{CLASSIFIER_NAME}"]\n',
    })  # fmt: skip
    git(team, "checkout", "-q", "-B", "pr")
    commit(team, "A slower loop", {"train.py": TRAIN.replace("(256, 64)", "(1024, 64)")})
    done = stepwatch("code-check", cwd=team)
    assert done.returncode == 0 and "nothing to check" in done.stdout, done.stderr
    assert "In the suite but left out by --models (the `models` setting), not checked: `train.py`." in done.stdout
    commit(team, "Wider blocks", {"models/layers.py": LAYERS.replace("WIDTH = 128", "WIDTH = 256")})
    done = stepwatch("code-check", "--dry-run", "--trials", "2", cwd=team)
    assert done.returncode == 0, done.stderr
    planned = {line.split(" trial ")[0].split(" ", 1)[1] for line in done.stdout.splitlines() if " trial " in line}
    assert planned == {f"{CLASSIFIER_NAME}/tiny cpu xla fp32 b256 fit keras_backend=jax"}, planned  # the suite's
    assert "left out by --models (the `models` setting), not checked: `train.py`." in done.stdout


@pytest.mark.large
def test_a_check_of_the_working_tree_leaves_it_byte_for_byte_as_it_found_it(team: Path) -> None:
    """``--head .`` runs the candidate's trials in the team's own folder: they import its modules, and Python
    caches their bytecode beside them (``models/__pycache__/``) unless told not to, as a check's trials are."""
    (team / "models" / "layers.py").write_text(LAYERS.replace("WIDTH = 128", "WIDTH = 256"))
    before = git(team, "status", "--porcelain", "--untracked-files=all", "--ignored")
    # One look (--max-trials 2): what the trials leave behind is the question, not how many rounds a verdict needs.
    done = stepwatch("code-check", "--head", ".", "--trials", "2", "--max-trials", "2", "--models", CLASSIFIER_NAME,
                     cwd=team, env={"PYTHONDONTWRITEBYTECODE": ""})  # bytecode written (most machines)  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr[-3000:]
    after = git(team, "status", "--porcelain", "--untracked-files=all", "--ignored")
    assert [line for line in after.splitlines() if not line.startswith("!! data/")] == before.splitlines()
    assert not list(team.rglob("__pycache__")), list(team.rglob("__pycache__"))
