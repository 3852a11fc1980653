"""``stepwatch alerts verify`` as a workflow: a change the nightly history suspects, measured again on this runner.
The nights either side of it are read from the store; each thing that differs between them (the project's commits,
the package sets, the images: ``analysis.verification.causes``) is put on the two sides of an interleaved check with
an A/A, as ``code-check`` and ``upgrade-check`` run one (``workflows.check``); a reproduced regression between
commits more than one apart is bisected to its first slow commit, each step a code check of the good commit against
the one probed. Where nothing recorded differs, no check runs: the alert says the change is the machine's and what
the rows say of the hosts either side. Each alert's verdict is recorded on it (``records.record_verification``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stepwatch.collector.analysis import sequential, verification
from stepwatch.collector.analysis.comparison import Row
from stepwatch.collector.analysis.thresholds import Override, direction_for, threshold_for, worse
from stepwatch.collector.analysis.verification import COMMITS, Cause, Night
from stepwatch.collector.config import BenchmarkConfig, config_from_row
from stepwatch.collector.environments import worktrees
from stepwatch.collector.environments.containers import ImageError
from stepwatch.collector.environments.virtualenvs import UpgradeError
from stepwatch.collector.environments.worktrees import RepositoryError
from stepwatch.collector.errors import Failure
from stepwatch.collector.metrics import get_metric
from stepwatch.collector.runner import execution
from stepwatch.collector.store import database, records
from stepwatch.collector.store.records import Verification
from stepwatch.collector.workflows import check, code_check, import_check
from stepwatch.collector.workflows.hooks import Hooks
from stepwatch.trainers.workload import Kind

RESULTS_DIR = Path("data/verify")  # the verifying checks' parquet, one folder per check
STORE = Path("data/verify.duckdb")  # their store: never the nightly history


@dataclass(frozen=True)
class Plan:
    """What a night's verification may do: where the project's commits are, each check's looks and statistics,
    where its trials go, and its budget (minutes for the whole night, and how many alerts at most)."""

    repo: Path
    design: sequential.Design
    thresholds: list[Override]
    results: Path
    db: Path
    options: execution.RunOptions
    aa: bool = True
    budget_minutes: float | None = None
    most: int | None = None
    reuse_site_packages: bool = False
    pip_args: tuple[str, ...] = ()
    command: import_check.Command | None = None  # what measures an imported series (its team's benchmark command)


@dataclass
class Verified:
    """One alert's verification: its id, what was recorded on it, and a line per check for the report."""

    alert_id: int
    found: Verification
    lines: list[str] = field(default_factory=list)


class Unverifiable(Failure):
    """Why an alert's check cannot run (its commits are gone, its package set does not install), in one line."""


@dataclass
class _Checked:
    state: str
    row: Row | None
    aa: str
    minutes: float
    text: str


def _night(fields: Mapping[str, Any]) -> Night:
    others = {"other load": fields.get("host_other_cpu"), "steal": fields.get("host_steal_cpu")}
    return Night(str(fields["suite_run_id"]), dict(fields), {k: v for k, v in others.items() if v is not None})


def _config(row: Mapping[str, Any], repo: Path, project: Path) -> BenchmarkConfig:
    """The series' config as its night ran it; a workload named by an absolute path inside the repository is named
    relative to the project's folder, as it is in every checkout of it."""
    config = config_from_row(row)
    path, _, function = config.model.partition(":")
    if Path(path).is_absolute():
        try:
            relative = Path(path).resolve().relative_to((repo / project).resolve())
        except ValueError:
            return config
        return config.with_changes(model=f"{relative}{':' + function if function else ''}")
    return config


def _row_of(done: check.Measured, metric: str) -> Row | None:
    return next((row for row in done.comparison.rows if row.metric.name == metric), None)


def _aa_of(done: check.Measured, metric: str) -> str:
    aa = done.comparison.aa
    row = next((r for r in aa.rows if r.metric.name == metric), None) if aa is not None else None
    if row is None:
        return verification.aa_text(None)
    r = row.result
    return verification.aa_text(row.verdict, r.ratio, r.ci_low, r.ci_high)


def _interval(row: Row | None) -> str:
    if row is None:
        return "no verdict (its trials failed)"
    r = row.result
    return f"{row.verdict} {r.ratio - 1:+.1%} [{r.ci_low - 1:+.1%}, {r.ci_high - 1:+.1%}]"


class Verifier:
    """A night's verifying checks, within its plan's budget."""

    def __init__(self, plan: Plan, hooks: Hooks) -> None:
        self.plan, self.hooks = plan, hooks
        self.started = time.monotonic()
        self.repo = _top(plan.repo)
        self.project = plan.repo.resolve().relative_to(self.repo.resolve()) if self.repo else Path(".")

    def minutes_left(self) -> float | None:
        if self.plan.budget_minutes is None:
            return None
        return self.plan.budget_minutes - (time.monotonic() - self.started) / 60

    def _deadline(self) -> float | None:
        left = self.minutes_left()
        return None if left is None else time.monotonic() + left * 60

    def alert(self, alert: Mapping[str, Any], earlier: list[Mapping[str, Any]], after: Mapping[str, Any] | None,
              config_row: Mapping[str, Any] | None) -> Verified:  # fmt: skip
        """Verify one alert from the nights either side of its change and those before (``records.change_nights``,
        the nearest first): where the commits either side do not reproduce it, the check's baseline goes back to
        the commit ``verification.WIDEN_NIGHTS`` nights earlier, and the bisect places the change."""
        before = earlier[0] if earlier else None
        began = time.monotonic()
        alert_id, metric = int(alert["id"]), str(alert["metric"])
        check_id = uuid.uuid4().hex[:12]
        regression = worse(get_metric(metric), config_row or {}, self.plan.thresholds, float(alert["ratio"]))
        if before is None or after is None or config_row is None:
            found = Verification(records.UNVERIFIABLE, check_id, verify_note="no night before the change to measure")
            return Verified(alert_id, found, [f"alert {alert_id}: {found.verify_note}"])
        nights = _night(before), _night(after)
        causes = verification.causes(*nights)
        if not causes:
            said = verification.machine_text(*nights)
            other = verification.unexplained(*nights)
            note = (
                "nothing recorded differs between the nights either side (the same commit, packages and image): "
                f"the change is the machine's ({said})" + (f"; also moved: {', '.join(other)}" if other else "")
            )
            found = Verification(records.MACHINE, check_id, "the same on both nights", verify_minutes=0.0,
                                 verify_note=note)  # fmt: skip
            return Verified(alert_id, found, [f"alert {alert_id}: {note}"])
        config = _config(config_row, self.repo or self.plan.repo, self.project)
        if config.workload is Kind.IMPORTED:
            return self._imported(alert_id, check_id, causes, config_row, metric, regression, began)
        suite = str(after.get("suite") or "verify")
        checked: list[tuple[Cause, _Checked]] = []
        lines: list[str] = []
        first_slow, reasons = None, []
        for cause in causes:
            try:
                result = self._check(cause, config, suite, metric, regression)
            except (Unverifiable, RepositoryError, UpgradeError, ImageError) as error:
                reasons.append(f"{cause.kind} {cause.text}: {error}")
                lines.append(f"alert {alert_id}: {cause.sides()}: cannot check: {error}")
                continue
            lines.append(f"alert {alert_id}: {cause.sides()}: {result.text}, A/A {result.aa} -> {result.state}")
            wider = _wider(cause, earlier) if result.state == records.NOT_REPRODUCED else None
            if wider is not None:
                try:
                    again = self._check(wider, config, suite, metric, regression)
                except (Unverifiable, RepositoryError) as error:
                    lines.append(f"alert {alert_id}: {wider.sides()}: cannot check: {error}")
                else:
                    lines.append(f"alert {alert_id}: not there between the nights either side; from "
                                 f"{verification.WIDEN_NIGHTS} nights earlier, {wider.sides()}: {again.text}, A/A "
                                 f"{again.aa} -> {again.state}")  # fmt: skip
                    if again.state != records.NOT_REPRODUCED:
                        cause, result = wider, again
            checked.append((cause, result))
            if cause.kind == COMMITS and result.state == records.REPRODUCED:
                first_slow, said = self._bisect(cause, config, suite, metric, regression)
                lines += [f"alert {alert_id}: {line}" for line in said]
        minutes = (time.monotonic() - began) / 60
        if not checked:
            found = Verification(records.UNVERIFIABLE, check_id, "; ".join(c.sides() for c in causes),
                                 verify_minutes=minutes, verify_note="; ".join(reasons))  # fmt: skip
            return Verified(alert_id, found, lines)
        state = verification.combined([result.state for _, result in checked])
        if reasons and state != records.REPRODUCED:
            state = records.INCONCLUSIVE  # a cause left unmeasured: not all that differs was seen not to matter
        shown = next(((c, r) for c, r in checked if r.state == state), checked[0])
        row = shown[1].row
        notes = [f"{c.sides()}: {r.text}, A/A {r.aa}" for c, r in checked] + reasons
        if first_slow:
            notes.append(f"first slow commit {first_slow}")
        found = Verification(
            state, check_id, "; ".join(c.sides() for c, _ in checked),
            row.result.ratio if row else None, row.result.ci_low if row else None, row.result.ci_high if row else None,
            shown[1].aa, round(minutes, 2), first_slow, "; ".join(notes),
        )  # fmt: skip
        return Verified(alert_id, found, lines)

    def _check(self, cause: Cause, config: BenchmarkConfig, suite: str, metric: str, regression: bool) -> _Checked:
        """One interleaved check of a cause's two sides (with the A/A where asked), the alert's metric judged."""
        began = time.monotonic()
        left = self.minutes_left()
        if left is not None and left <= 0:
            raise Unverifiable("the night's verification budget is spent")
        if cause.kind == COMMITS:
            done = self._commits(cause.baseline[0], cause.candidate[0], config, suite, metric)
        else:
            sides = {"baseline": cause.baseline, "candidate": cause.candidate}
            envs = check.environments(sides, self.plan.reuse_site_packages, self.plan.pip_args, self.plan.aa,
                                      self.hooks)  # fmt: skip
            asked = check.Asked([metric], self.plan.thresholds)
            done = check.measure([config], self.plan.design, suite, envs, self.plan.results, self.plan.options,
                                 self.plan.db, asked, self.hooks, label=f"{cause.kind}: ", deadline=self._deadline(),
                                 budget_minutes=self.minutes_left())  # fmt: skip
        row, aa = _row_of(done, metric), _aa_of(done, metric)
        state = verification.state_of(row.verdict, regression) if row else records.INCONCLUSIVE
        return _Checked(verification.trusted(state, aa), row, aa, (time.monotonic() - began) / 60, _interval(row))

    def _imported(self, alert_id: int, check_id: str, causes: list[Cause], series: Mapping[str, Any], metric: str,
                  regression: bool, began: float) -> Verified:  # fmt: skip
        """An alert on another tool's result: its team's command (``plan.command``) run on the commits either side,
        interleaved, with an A/A. Package sets and images are no side the command can take: it runs here."""
        commits = next((cause for cause in causes if cause.kind == COMMITS), None)
        note = None
        if self.plan.command is None:
            note = ("an imported result is measured by its own benchmark command: set import and import-results "
                    "(stepwatch init --import)")  # fmt: skip
        elif commits is None:
            note = f"only {', '.join(c.kind for c in causes)} differ, and the command runs in this environment only"
        if note is None:
            try:
                chosen = self._commits_of(commits.baseline[0], commits.candidate[0])
                measured = import_check.check_commits(chosen, self.plan.command, self.plan.design.looks,
                                                      self.plan.aa, self.hooks, self.judged(metric),
                                                      self.plan.design.alpha)  # fmt: skip
                done = measured.get(str(series["config_key"]))
                if done is None or done.verdict is None:
                    raise import_check.CommandFailed("its output has fewer than two values of this series a side")
            except (Unverifiable, RepositoryError, import_check.CommandFailed) as error:
                note = f"{commits.sides()}: cannot check: {error}"
        minutes = round((time.monotonic() - began) / 60, 2)
        if note is not None:
            found = Verification(records.UNVERIFIABLE, check_id, verify_minutes=minutes, verify_note=note)
            return Verified(alert_id, found, [f"alert {alert_id}: {note}"])
        row = done.verdict
        aa = verification.aa_text(*(done.aa.verdict, done.aa.ratio, done.aa.ci_low, done.aa.ci_high)) if done.aa \
            else verification.aa_text(None)
        state = verification.trusted(verification.state_of(row.verdict, regression), aa)
        text = f"{row.verdict} {row.ratio - 1:+.1%} [{row.ci_low - 1:+.1%}, {row.ci_high - 1:+.1%}]"
        counts = f"{len(done.values['baseline'])} and {len(done.values['candidate'])}"
        said = f"{commits.sides()}: the command's {counts} values: {text}"
        found = Verification(state, check_id, commits.sides(), row.ratio, row.ci_low, row.ci_high, aa, minutes, None,
                             f"{said}, A/A {aa}")  # fmt: skip
        return Verified(alert_id, found, [f"alert {alert_id}: {said}, A/A {aa} -> {state}"])

    def judged(self, metric: str) -> Callable[[dict], tuple[float, bool]]:
        """A series' threshold and whether higher is better, as this plan's thresholds say."""
        found = get_metric(metric)
        return lambda series: (threshold_for(found, series, self.plan.thresholds),
                               bool(direction_for(found, series, self.plan.thresholds)))  # fmt: skip

    def _commits_of(self, base: str, head: str) -> code_check.Commits:
        """The two commits of the repository the nightly checked out; Unverifiable where one is not there."""
        if self.repo is None:
            raise Unverifiable(f"{self.plan.repo} is not in a git repository: check out the project's repository")
        for sha in (base, head):
            try:
                worktrees.commit_of(self.repo, sha)
            except RepositoryError:
                raise Unverifiable(
                    f"commit {sha[:12]} is not in the repository at {self.repo} (force-pushed away, or a shallow "
                    "clone: check out with fetch-depth 0)"
                ) from None
        return code_check.Commits(self.repo, self.project, base, head, f"commit {base[:12]}", f"commit {head[:12]}")

    def _commits(self, base: str, head: str, config: BenchmarkConfig, suite: str, metric: str,
                 aa: bool | None = None) -> check.Measured:  # fmt: skip
        """A code check of two commits of the repository the nightly checked out: the series' config at each."""
        commits = self._commits_of(base, head)
        aa = self.plan.aa if aa is None else aa
        with code_check.checked_out(commits, aa) as folders:
            packages = code_check.pins_changed(commits)
            sides = code_check.sides(commits, folders, packages, self.plan.reuse_site_packages, self.plan.pip_args,
                                     self.hooks)  # fmt: skip
            asked = check.Asked([metric], self.plan.thresholds, pool_aa=sides.pins is not None)
            return check.measure([config], self.plan.design, suite, sides.envs, self.plan.results, self.plan.options,
                                 self.plan.db, asked, self.hooks, label=f"{head[:12]}: ", deadline=self._deadline(),
                                 budget_minutes=self.minutes_left())  # fmt: skip

    def _bisect(self, cause: Cause, config: BenchmarkConfig, suite: str, metric: str,
                regression: bool) -> tuple[str | None, list[str]]:  # fmt: skip
        """The first slow commit between a reproduced change's two commits: the head itself where it is the only
        one, else a bisect, each probe a code check of the good commit against it (no A/A: the first check's
        stands for this runner)."""
        base, head = cause.baseline[0], cause.candidate[0]
        between = worktrees.git(self.repo, "rev-list", "--reverse", "--ancestry-path", f"{base}..{head}").split()
        if len(between) <= 1:
            return head, [f"{head[:12]} is the only commit between the nights: the first slow commit"]
        lines = [f"{len(between)} commits between the nights: bisecting"]

        def slow(commit: str) -> bool | None:
            if commit == head:
                return True
            try:
                done = self._commits(base, commit, config, suite, metric, aa=False)
            except Unverifiable as error:
                lines.append(f"probe {commit[:12]}: {error}")
                return None
            row = _row_of(done, metric)
            state = verification.state_of(row.verdict, regression) if row else records.INCONCLUSIVE
            lines.append(f"probe {commit[:12]} against {base[:12]}: {_interval(row)} -> {state}")
            return {records.REPRODUCED: True, records.NOT_REPRODUCED: False}.get(state)

        found, probes, (low, high) = verification.first_slow(between, slow)
        if found is None:
            lines.append(f"the bisect stopped undecided: the first slow commit is between {low[:12]} and {high[:12]}")
        else:
            lines.append(f"first slow commit: {found} ({len(probes)} probe(s))")
        return found, lines


def _wider(cause: Cause, earlier: list[Mapping[str, Any]]) -> Cause | None:
    """The commits check with its baseline ``verification.WIDEN_NIGHTS`` nights further back, where that night
    ran another commit; else None."""
    if cause.kind != COMMITS or len(earlier) < 2:
        return None
    back = earlier[min(verification.WIDEN_NIGHTS, len(earlier) - 1)].get("project_commit")
    if not back or back == cause.baseline[0]:
        return None
    return Cause(COMMITS, (back,), cause.candidate, f"{back[:12]} -> {cause.candidate[0][:12]}")


def _top(folder: Path) -> Path | None:
    """The top folder of the git repository ``folder`` is in, or None outside one."""
    try:
        return worktrees.top(folder)
    except RepositoryError:
        return None


def verify(db: Path, ids: list[int] | None, plan: Plan, hooks: Hooks) -> list[Verified]:
    """Verify the alerts ``ids`` (default: every open alert no check has verified yet, the largest change first,
    at most ``plan.most``, within ``plan.budget_minutes``), recording each verdict on its alert as it ends."""
    with database.open_store(db) as reader:
        con = reader.connection()
        todo = records.alerts_by_id(con, ids)
        if not ids:
            todo = verification.picked(todo, plan.most)
        back = verification.WIDEN_NIGHTS + 1
        work = [(a, *records.change_nights(con, a["series_key"], a["suite_run_id"], back),
                 records.one_row(con, a["series_key"], a["suite_run_id"])) for a in todo]  # fmt: skip
    verifier = Verifier(plan, hooks)
    done = []
    for alert, earlier, after, row in work:
        left = verifier.minutes_left()
        if left is not None and left <= 0:
            hooks.say(f"alert {alert['id']}: left for a later night (the night's verification budget is spent)")
            continue
        hooks.say(f"alert {alert['id']}: verifying {alert['ratio'] - 1:+.1%} from {str(alert['change_at'])[:10]}")
        verified = verifier.alert(alert, earlier, after, row)
        with database.update(db) as con:
            records.record_verification(con, verified.alert_id, verified.found, datetime.now(UTC))
        done.append(verified)
    return done
