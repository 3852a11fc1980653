"""``stepwatch alerts verify``: the history nominates, a controlled check decides. Its pure parts on their own; on a
real store and a real repository, the paths where no trial runs (nothing recorded differs: the machine's; commits
gone after a force-push: unverifiable, nothing lost; verified twice: never); and, large, the whole loop on a team's
repository of five commits, one of which makes its training script 25% slower."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stepwatch.collector.analysis import changepoints, verification
from stepwatch.collector.analysis.verification import COMMITS, IMAGE, PACKAGES, Night
from stepwatch.collector.outcomes import IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION
from stepwatch.collector.output.runs import verified_text
from stepwatch.collector.store import records
from tests.conftest import commit, git, result_rows, stepwatch, write_results
from tests.github import GitHub
from tests.services import chat_webhook
from tests.test_analysis import COLD_FIRST_NIGHT, LONE_AA, QUIET_POOL, TWO_HOSTS_STEP, judged_night_by_night, lone_night
from tests.test_dashboard import render
from tests.test_publish import nightly, sh, team_repository, with_issues

START = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)


def night_of(**fields: object) -> Night:
    return Night("run", fields)


def test_causes_name_each_thing_that_differs_and_nothing_when_only_the_machine_moved() -> None:
    sets = json.dumps({"numpy": "2.2.0", "pip": "24"})
    before = {"project_commit": "a" * 40, "host": "runner-1", "package_set": sets}
    after = {**before, "project_commit": "b" * 40, "host": "runner-2",
             "package_set": json.dumps({"numpy": "2.3.0", "pip": "25"})}  # fmt: skip
    found = verification.causes(night_of(**before), night_of(**after))
    assert [c.kind for c in found] == [COMMITS, PACKAGES]
    assert found[1].baseline == ("numpy==2.2.0",) and found[1].candidate == ("numpy==2.3.0",)  # pip never pinned
    assert found[1].text == "numpy 2.2.0 -> 2.3.0" and found[0].sides() == f"commit {'a' * 12} -> {'b' * 12}"
    # Only the host moved: no cause, and the machine's text names both hosts.
    same = {**before, "host": "runner-2", "host_other_cpu": 0.9}
    assert verification.causes(night_of(**before), night_of(**same)) == []
    text = verification.machine_text(Night("a", before, {"other load": 0.1}), Night("b", same, {"other load": 0.9}))
    assert "host runner-1 -> runner-2" in text and "other load 0.10 -> 0.90 cores" in text
    # Images: their packages come with them, so no package check beside the image check.
    images = verification.causes(night_of(container_image="team:1", package_set=before["package_set"]),
                                 night_of(container_image="team:2", package_set=after["package_set"]))  # fmt: skip
    assert [(c.kind, c.baseline, c.candidate) for c in images] == [(IMAGE, ("image=team:1",), ("image=team:2",))]
    # Older rows without a whole package set: the frameworks their version columns name.
    old = verification.causes(night_of(tf_version="2.20.0"), night_of(tf_version="2.21.0"))
    assert [(c.kind, c.baseline, c.candidate) for c in old] == [(PACKAGES, ("tensorflow==2.20.0",),
                                                                  ("tensorflow==2.21.0",))]  # fmt: skip
    assert verification.unexplained(night_of(driver_version="550"), night_of(driver_version="560")) == [
        "driver_version 550 -> 560"
    ]


def test_a_verdict_decides_the_alert_only_when_it_measures_the_same_change() -> None:
    assert verification.state_of(REGRESSION, regression=True) == records.REPRODUCED
    assert verification.state_of(NO_CHANGE, regression=True) == records.NOT_REPRODUCED
    assert verification.state_of(IMPROVEMENT, regression=True) == records.NOT_REPRODUCED
    assert verification.state_of(IMPROVEMENT, regression=False) == records.REPRODUCED
    assert verification.state_of(INCONCLUSIVE, regression=True) == records.INCONCLUSIVE
    assert verification.combined([records.NOT_REPRODUCED, records.REPRODUCED]) == records.REPRODUCED
    assert verification.combined([records.NOT_REPRODUCED, records.INCONCLUSIVE]) == records.INCONCLUSIVE
    assert verification.combined([]) == records.MACHINE
    assert verification.aa_text(NO_CHANGE) == "quiet"
    assert verification.aa_text(REGRESSION, 0.9, 0.88, 0.92) == "raised regression -10.0% [-12.0%, -8.0%]"


def test_a_bisect_names_the_first_slow_commit_in_log2_probes_and_stops_where_a_probe_is_undecided() -> None:
    commits = [f"c{i}" for i in range(1, 9)]  # c5 on are slow
    probed = []

    def slow(c: str) -> bool:
        probed.append(c)
        return int(c[1:]) >= 5

    found, probes, _ = verification.first_slow(commits, slow)
    assert found == "c5" and len(probes) == len(probed) == 3
    found, probes, left = verification.first_slow(commits, lambda c: None if c == "c4" else int(c[1:]) >= 5)
    assert found is None and left == ("c1", "c8")
    assert verification.first_slow(["c1"], slow)[0] == "c1"  # one commit: it, unprobed


def test_an_alert_says_what_its_check_made_of_it_and_nothing_where_none_ran() -> None:
    nothing = {"verification": float("nan"), "verify_ratio": float("nan"), "verify_aa": float("nan")}  # a frame's row
    assert verified_text(nothing) == "" and verified_text({}) == ""
    machine = {"verification": records.MACHINE, "verify_minutes": 0.0, "verify_note": "host a -> b",
               "verify_ratio": float("nan"), "verify_aa": None}  # fmt: skip
    assert verified_text(machine) == "the machine's, 0.0 min, host a -> b"


def test_a_night_verifies_the_largest_unverified_changes_first_and_never_one_twice() -> None:
    alerts = [{"id": 1, "ratio": 0.95}, {"id": 2, "ratio": 0.7}, {"id": 3, "ratio": 0.6, "verification": "reproduced"},
              {"id": 4, "ratio": 1.2}]  # fmt: skip
    assert [a["id"] for a in verification.picked(alerts, 2)] == [2, 4]
    assert [a["id"] for a in verification.picked(alerts, None)] == [2, 4, 1]


def nights(results: Path, commits: list[str], hosts: list[str], levels: list[float], seed: int = 3) -> None:
    """A series' nightly history: 3 trials a night at 2% noise, each night at its commit, on its host."""
    rng = np.random.default_rng(seed)
    for i, (sha, host, level) in enumerate(zip(commits, hosts, levels)):
        rows = result_rows(3, f"night-{i}", project_commit=sha, host=host, project_repository="team")
        for row, noise in zip(rows, rng.standard_normal(3)):
            row["examples_per_sec"] = float(level * np.exp(0.02 * noise))
            row["started_at"] = START + timedelta(days=i, minutes=row["trial"])
            row["finished_at"] = row["started_at"] + timedelta(seconds=30)
        write_results(results / f"night-{i:02d}.parquet", rows)


def alerted(tmp_path: Path, commits: list[str], hosts: list[str]) -> tuple[Path, dict]:
    """A store whose history steps down 20% on night 8, detected: its one alert."""
    db = tmp_path / "store.duckdb"
    nights(tmp_path / "results", commits, hosts, [1000.0] * 8 + [800.0] * 4)
    assert stepwatch("ingest", str(tmp_path / "results"), "--db", str(db)).returncode == 0
    detected = stepwatch("detect", "--db", str(db), "--format", "json")
    assert detected.returncode == 0, detected.stderr  # the history alone opens no issue: a check decides
    assert "1 suspected regression(s) not verified yet: `stepwatch alerts verify`" in detected.stderr
    [alert] = json.loads(detected.stdout)
    assert alert["ratio"] < 0.85 and alert["verification"] is None
    return db, alert


def test_a_change_nothing_recorded_explains_is_the_machines_naming_the_hosts_and_opens_no_issue(
    tmp_path: Path,
) -> None:
    db, alert = alerted(tmp_path, ["c" * 40] * 12, ["runner-fast"] * 8 + ["runner-slow"] * 4)
    done = stepwatch("alerts", "verify", "--db", str(db), "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [shown] = json.loads(done.stdout)
    assert shown["id"] == alert["id"] and shown["verification"] == records.MACHINE and shown["verify_minutes"] == 0
    assert "nothing recorded differs between the nights either side" in shown["verify_note"]
    assert "host runner-fast -> runner-slow" in shown["verify_note"]
    assert not (tmp_path / "data").exists()  # no check ran
    again = stepwatch("alerts", "verify", "--db", str(db), cwd=tmp_path)  # verified once: never again
    assert again.returncode == 0 and "no alert to verify" in again.stderr, again.stderr
    assert stepwatch("detect", "--db", str(db)).returncode == 0  # and the machine's change opens no issue


def repository(folder: Path, message: str, files: dict[str, str]) -> tuple[Path, str]:
    """A team's git repository with its first commit: the folder and the commit."""
    folder.mkdir()
    git(folder, "init", "-q", "-b", "main")
    git(folder, "config", "user.email", "ci@example.com")
    git(folder, "config", "user.name", "ci")
    return folder, commit(folder, message, files)


def test_an_alert_whose_commits_are_gone_says_so_in_one_line_and_stays_suspected_with_nothing_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, kept = repository(tmp_path / "team", "kept", {"train.py": "print('hello')\n"})
    gone = "0123456789abcdef" * 2 + "01234567"  # force-pushed away: in the history's rows, not in the repository
    db, alert = alerted(tmp_path, [kept] * 8 + [gone] * 4, ["runner"] * 12)
    before = stepwatch("alerts", "list", "--status", "all", "--format", "json", "--db", str(db)).stdout
    done = stepwatch("alerts", "verify", "--db", str(db), "--format", "json", cwd=repo)
    assert done.returncode == 0, done.stderr
    [shown] = json.loads(done.stdout)
    assert shown["verification"] == records.UNVERIFIABLE and shown["status"] == alert["status"]
    assert f"commit {gone[:12]} is not in the repository" in shown["verify_note"], shown["verify_note"]
    assert "force-pushed" in shown["verify_note"] and "\n" not in shown["verify_note"]
    kept_columns = ("id", "status", "ratio", "change_at", "suite_run_id", "ci_low", "ci_high")
    [was] = json.loads(before)
    assert all(shown[c] == was[c] for c in kept_columns)
    count = stepwatch("query", "SELECT count(*) AS n FROM runs", "--db", str(db), "--format", "csv")
    assert count.stdout.split()[-1] == "36", count.stdout
    # A verified alert that reproduced is what opens the issue, with its interval on the alert.
    from stepwatch.collector.store import database

    with database.update(db) as con:
        records.record_verification(con, alert["id"], records.Verification(
            records.REPRODUCED, "check", "commit a -> b", 0.8, 0.78, 0.82, "quiet", 3.0, gone, "by hand"),
            datetime.now(UTC))  # fmt: skip
    assert stepwatch("detect", "--db", str(db)).returncode == 1
    listed = stepwatch("alerts", "list", "--db", str(db), "--format", "markdown")
    said = "reproduced -20.0% [-22.0%, -18.0%], A/A quiet, first slow commit 0123456789ab, 3.0 min"
    assert f"| {said} |" in listed.stdout
    page = render(db, "overview", monkeypatch)  # the Overview says it too, beside the alert
    assert "Verified on one runner" in [s.value for s in page.subheader]
    assert said in page.dataframe[-1].value["verified"].tolist()


@pytest.mark.parametrize("ids", [["999"]])
def test_an_unknown_alert_id_is_one_line(tmp_path: Path, ids: list[str]) -> None:
    db, _ = alerted(tmp_path, ["c" * 40] * 12, ["runner"] * 12)
    done = stepwatch("alerts", "verify", *ids, "--db", str(db), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no alert with id 999" in done.stderr


TRAIN = '''"""The team's training loop, framework-free: each step waits WAITS milliseconds on its input (as a step
waits on its data loader), then a small matrix product. A wait is not slowed down by a loaded runner as computing
is: the tests that use it measure stepwatch, not the load that other tests put on the machine."""

import time

import numpy as np

import stepwatch

WAITS = 4
rng = np.random.default_rng(0)
weights = rng.standard_normal((32, 32)).astype(np.float32) / 6
batch = rng.standard_normal((16, 32)).astype(np.float32)


def batches():
    while True:
        yield batch


for x in stepwatch.steps(batches(), examples_per_step=16):
    time.sleep(WAITS / 1000)
    x = np.tanh(x @ weights)
'''


@pytest.mark.large
def test_a_slow_commit_between_two_nights_is_reproduced_bisected_to_its_commit_and_its_aa_stays_quiet(
    tmp_path: Path,
) -> None:
    """Five commits, one of which (the third) makes the script 25% slower: one more millisecond of waiting a step on
    four. The nightly ran
    at commits 1, 2 and 5; after night 3 the history nominates the step, the check of commit 2 against commit 5
    reproduces it with a quiet A/A, the bisect names commit 3, and only then does detect fail the night."""
    settings = 'models = ["train.py"]\ntrials = 3\nmax-trials = 5\n'
    repo, first = repository(tmp_path / "team", "the loop", {"train.py": TRAIN, "stepwatch.toml": settings,
                                                             ".gitignore": "data/\nstepwatch-results/\n*.duckdb\n"})
    shas = [first]
    shas.append(commit(repo, "words", {"README.md": "Our model.\n"}))
    shas.append(commit(repo, "a slower input pipeline", {"train.py": TRAIN.replace("WAITS = 4", "WAITS = 5")}))
    shas.append(commit(repo, "docs", {"README.md": "Our model, documented.\n"}))
    shas.append(commit(repo, "more docs", {"README.md": "Our model, documented twice.\n"}))
    db = tmp_path / "history.duckdb"
    for night, sha in enumerate((shas[0], shas[1], shas[4])):
        git(repo, "checkout", "-q", sha)
        ran = stepwatch("run", "--label", "nightly", "--out", str(tmp_path / f"night-{night}"), cwd=repo)
        assert ran.returncode == 0, ran.stderr
        assert stepwatch("ingest", str(tmp_path / f"night-{night}"), "--db", str(db)).returncode == 0
    git(repo, "checkout", "-q", "main")
    detected = stepwatch("detect", "--db", str(db), "--format", "json")
    assert detected.returncode == 0, detected.stderr  # nominated, not yet verified: no issue
    [alert] = json.loads(detected.stdout)
    assert alert["status"] == "new" and alert["ratio"] < 0.93

    with chat_webhook() as (url, posted):
        done = stepwatch("alerts", "verify", "--db", str(db), "--format", "json", "--webhook", url, cwd=repo,
                         timeout=900)  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]  # reproduced: the night fails, and the chat hears it once
    [message] = posted
    assert message["text"].startswith("stepwatch: 1 reproduced training-speed regression(s) in throughput")
    assert f"first slow commit {shas[2][:12]}" in message["text"], message["text"]
    [verified] = json.loads(done.stdout)
    assert verified["verification"] == records.REPRODUCED, verified["verify_note"]
    assert verified["verify_commit"] == shas[2], done.stderr[-3000:]  # the first slow commit
    assert verified["verify_aa"] == "quiet" and verified["verify_ratio"] < 0.9 and verified["verify_ci_high"] < 1
    assert verified["verify_sides"] == f"commit {shas[1][:12]} -> {shas[4][:12]}"
    assert "3 commits between the nights: bisecting" in done.stderr and f"first slow commit: {shas[2]}" in done.stderr
    assert verified["verify_minutes"] > 0
    # The night's report: detect now fails it, and verifying again runs nothing.
    assert stepwatch("detect", "--db", str(db)).returncode == 1
    again = stepwatch("alerts", "verify", "--db", str(db), cwd=repo)
    assert again.returncode == 1 and "no alert to verify" in again.stderr
    assert git(repo, "worktree", "list").count("\n") == 0  # no checkout left behind


def push(gh: GitHub, message: str, files: dict[str, str]) -> str:
    work = gh.root / "work"
    for name, text in files.items():
        (work / name).write_text(text)
    sh("git", "add", "-A", cwd=work, env=gh.env)
    sh("git", "commit", "-q", "-m", message, cwd=work, env=gh.env)
    sh("git", "push", "-q", str(gh.remote), "main", cwd=work, env=gh.env)
    return sh("git", "rev-parse", "HEAD", cwd=work, env=gh.env)


def publish_step(run: dict) -> tuple[Any, Any]:
    [publish] = run["publish"]
    [step] = [s for s in publish.steps if s.name.startswith("Ingest, archive and push")]
    return publish, step


@pytest.mark.large
def test_the_nightly_as_github_runs_it_opens_one_issue_naming_the_slow_commit_and_none_for_a_slow_runner(
    tmp_path: Path,
) -> None:
    """The nightly of a team's repository replayed as GitHub runs it (``tests.github``) at commits 1, 2 and 5 of five,
    the third twice as slow a step (the test above measures a 25% step; this one the workflow around it, on nights
    that a loaded CI runner moves): the publish job nominates the step after night 3, verifies commit 2 against
    commit 5 on its runner (reproduced, A/A quiet), bisects it to commit 3 and opens one issue naming that commit with
    its interval; re-running the job verifies nothing twice. A second repository whose third night ran on a slower
    runner (the same commit; the runner's environment makes the script do more work): the machine's, no issue."""
    one = TRAIN.replace("WAITS = 4", "WAITS = 2")  # two more is twice the step: one that loaded nights cannot hide
    gh = team_repository(tmp_path / "team", {"train.py": one}, ["--models", "train.py"], "trials = 3\n")
    issues = with_issues(gh, tmp_path / "team")
    shas = [sh("git", "rev-parse", "HEAD", cwd=gh.root / "work", env=gh.env)]
    assert publish_step(gh.run_workflow(nightly(gh)))[1].outputs["exit-code"] == "0"
    shas.append(push(gh, "words", {"README.md": "Our model.\n"}))
    assert publish_step(gh.run_workflow(nightly(gh)))[1].outputs["exit-code"] == "0"
    shas.append(push(gh, "a slower input pipeline", {"train.py": TRAIN}))
    shas.append(push(gh, "docs", {"README.md": "Our model, documented.\n"}))
    shas.append(push(gh, "more docs", {"README.md": "Our model, documented twice.\n"}))
    run = gh.run_workflow(nightly(gh))
    publish, step = publish_step(run)
    assert step.outputs["exit-code"] == "1", step.stdout[-3000:] + step.stderr[-3000:]
    assert f"first slow commit: {shas[2]}" in step.stdout + step.stderr
    [issue] = issues()
    [row] = [line for line in issue["body"].splitlines() if line.startswith("| ") and "reproduced" in line]
    assert f"first slow commit {shas[2][:12]}" in row and ", A/A quiet," in row, row
    assert re.search(r"reproduced -\d+\.\d% \[-\d+\.\d%, -\d+\.\d%\]", row), row
    # "Re-run failed jobs": the publish job again, on the same run; the alert is verified already.
    again = gh.rerun(gh.run[0], failed_only=True)
    _, step = publish_step(again)
    assert "no alert to verify" in step.stdout + step.stderr and "bisecting" not in step.stdout + step.stderr
    assert len(issues()) == 1 and issues()[0]["state"] == "open"

    # The same commit three nights; the third night's runner is slower.
    other = team_repository(tmp_path / "other", {"train.py": SLOW_RUNNER}, ["--models", "train.py"], "trials = 3\n")
    other_issues = with_issues(other, tmp_path / "other")
    for night in range(3):
        other.env = {**other.env, "TEAM_RUNNER_SLOWER": "1" if night == 2 else ""}
        publish, step = publish_step(other.run_workflow(nightly(other)))
    assert step.outputs["exit-code"] == "0", step.stdout[-3000:] + step.stderr[-3000:]
    said = step.stdout + step.stderr
    assert "nothing recorded differs between the nights either side" in said and "the machine's" in said, said[-3000:]
    assert other_issues() == []


SLOWER = 'WAITS = 8 if os.environ.get("TEAM_RUNNER_SLOWER") else 4  # a slow runner'
SLOW_RUNNER = TRAIN.replace("WAITS = 4", SLOWER).replace("import time", "import os\nimport time")


def nominations(history: list, lengths: range) -> dict[int, list[tuple[int, str]]]:
    """Per length, the changes ``detect`` reports of a series alone on its runner (the lone prior) when a check
    decides (``nominate``), each judgment given the nights confirmed before."""
    seen, held = {}, set()
    for length in lengths:
        trials = history[:length]
        found = changepoints.detect_changes([float(np.median(t)) for t in trials], 0.03, True, trials=trials,
                                            night=lone_night(trials), confirmed=sorted(held),
                                            nominate=True).changes  # fmt: skip
        held = (held - {c.moved_from for c in found}) | {c.index for c in found if c.status == "confirmed"}
        seen[length] = [(c.index, c.status) for c in found]
    return seen


def test_a_cold_start_step_the_lone_prior_hides_is_nominated_by_its_second_slow_night_and_nothing_else_moves() -> None:
    """Issue 92's examples judged as ``detect`` judges a series alone on its runner (the lone prior applied). The -20%
    step after a cold first night, which the history alone never confirms at 9 to 12 nights, is nominated on its
    night by its 2nd slow night, for the verifying check to decide. Nominating adds suspected changes only: what the
    history confirms is what it confirmed without them, on the quiet pool, the real A/A and the step."""
    alone = judged_night_by_night(COLD_FIRST_NIGHT, range(4, 13), lone_night)
    assert all(s != "confirmed" for length in alone for _, s, _ in alone[length]), alone
    seen = nominations(COLD_FIRST_NIGHT, range(4, 13))
    assert (3, "suspected") in seen[4] + seen[5], seen
    for history in (COLD_FIRST_NIGHT, QUIET_POOL, LONE_AA, TWO_HOSTS_STEP):
        lengths = range(4, len(history) + 1)
        before = judged_night_by_night(history, lengths, lone_night)
        after = nominations(history, lengths)
        for length in lengths:
            assert [(i, s) for i, s, _ in before[length] if s == "confirmed"] == [
                (i, s) for i, s in after[length] if s == "confirmed"
            ], (length, before[length], after[length])


def package_nights(tmp_path: Path, versions: tuple[str, str, str]) -> tuple[Path, Path]:
    """Three real nights of a project outside git, their rows saying they ran with six at ``versions`` and the third
    30% slower (its throughput scaled: a slow host): the project's folder and the store, detected."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    (project / "stepwatch.toml").write_text('models = ["train.py"]\ntrials = 3\n')
    db = tmp_path / "history.duckdb"
    for night, version in enumerate(versions):
        out = tmp_path / f"night-{night}"
        assert stepwatch("run", "--label", "nightly", "--out", str(out), cwd=project).returncode == 0
        [path] = out.glob("*.parquet")
        rows = pq.read_table(path).to_pylist()
        for row in rows:
            row["package_set"] = json.dumps({**json.loads(row["package_set"]), "six": version})
            row["examples_per_sec"] *= 0.7 if night == 2 else 1.0
        pq.write_table(pa.Table.from_pylist(rows, pq.read_schema(path)), path)
        assert stepwatch("ingest", str(out), "--db", str(db)).returncode == 0
    [alert] = json.loads(stepwatch("detect", "--db", str(db), "--format", "json").stdout)
    assert alert["ratio"] < 0.8
    return project, db


@pytest.mark.large
def test_nights_whose_package_sets_differ_get_an_upgrade_check_of_the_two_versions_and_its_aa_stays_quiet(
    tmp_path: Path,
) -> None:
    """The third night ran with six 1.17.0 instead of 1.16.0, and on a slow host. The nomination's check pins six at
    each night's version over this environment and interleaves both with an A/A: the package is not the cause, and
    no issue opens."""
    project, db = package_nights(tmp_path, ("1.16.0", "1.16.0", "1.17.0"))
    done = stepwatch("alerts", "verify", "--db", str(db), "--format", "json", cwd=project, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]  # no issue
    [verified] = json.loads(done.stdout)
    assert verified["verify_sides"] == "package set (six 1.16.0 -> 1.17.0)", verified["verify_sides"]
    # The package is not the cause: not reproduced, or on a loaded runner undecided within its trials; never reproduced.
    assert verified["verification"] in (records.NOT_REPRODUCED, records.INCONCLUSIVE), verified["verify_note"]
    assert verified["verify_aa"] == "quiet", verified["verify_note"]


@pytest.mark.large
def test_a_package_set_that_cannot_be_installed_is_one_line_on_the_alert_which_stays_open(tmp_path: Path) -> None:
    project, db = package_nights(tmp_path, ("1.16.0", "1.16.0", "999.0.0"))
    done = stepwatch("alerts", "verify", "--db", str(db), "--format", "json", cwd=project, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    [verified] = json.loads(done.stdout)
    assert verified["verification"] == records.UNVERIFIABLE and verified["status"] == "new"
    note = verified["verify_note"]
    assert note.startswith("packages six 1.16.0 -> 999.0.0: cannot install six==999.0.0") and "\n" not in note, note


def test_the_projects_settings_reach_alerts_verify_and_its_results_stay_its_own(tmp_path: Path) -> None:
    """stepwatch.toml's night-budget, most, issue-on and max-trials are `alerts verify`'s options too (a command's
    action is a command); its results are its own, never the nightly's."""
    from stepwatch.collector.cli import apply_project, build_parser
    from stepwatch.collector.project import Project

    (tmp_path / "stepwatch.toml").write_text('trials = 2\nmax-trials = 8\nnight-budget = 15\nmost = 1\n'
                                             'issue-on = "confirmed"\nresults = "stepwatch-results"\n')  # fmt: skip
    argv = ["alerts", "verify"]
    parser = build_parser(argv)
    apply_project(parser, argv, Project.find(tmp_path))
    args = parser.parse_args(argv)
    assert (args.night_budget, args.most, args.issue_on, args.max_trials) == (15.0, 1, "confirmed", 8)
    assert args.results == Path("data/verify") and args.trials == 2
