"""The nightly's publish, whatever layout its artifacts arrive in: find a night's parquet (and raw profiles) at any
depth below the folders the jobs' artifacts were downloaded into, ingest them (a corrupt file is quarantined there,
never archived), archive the rest on the history branch's work tree, and push it, retried over a push race. The
workflow only moves folders; everything that depends on where files land is here, and tested for real.

A job is a folder directly below a night folder (download-artifact without ``merge-multiple`` makes one per
artifact); a ``job.txt`` in it names the job (the collect job writes its matrix name and shard there). Parquet
directly in a night folder (merged artifacts) count as one job named after the folder.
"""

from __future__ import annotations

import filecmp
import hashlib
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stepwatch.collector import schema
from stepwatch.collector.errors import Failure
from stepwatch.collector.store import history, objectstore
from stepwatch.collector.store.database import ingest
from stepwatch.collector.store.ingest import IngestReport

RESULTS = "results"  # on the history branch: every night's parquet
PROFILES = "profiles"  # on the history branch: raw profiles, one folder per run_id
STATE = "state"  # on the history branch: the alerts' triage
ALERTS_FILE = f"{STATE}/alerts.parquet"
JOB_FILE = "job.txt"
PUSH_ATTEMPTS = 5
# The history's bound (docs/reference.md, "History with a bound"): raw profiles of the last 14 nights at up to 10 MB a
# night, the results of a month in one file, the branch one commit. A synthetic year of 100 series at that budget
# is benchmarks/history_size.py.
PROFILES_BUDGET = 10 * 2**20
KEEP_NIGHTS = 14
# A push sends raw profiles (MBs of compressed binary) as they are: searching deltas for them against every profile the
# branch keeps (all named alike) took a push from 0.8 s to 11 s as the kept nights grew (benchmarks/history_size.py).
BINARY = ("-c", "core.bigFileThreshold=1m")
SQUASHED = "(the branch keeps one commit: stepwatch publish squashes it each night)"


class PublishError(Failure):
    """The history cannot be written or pushed, in one line."""


@dataclass
class Job:
    """One collect job's artifact: its parquet files, and the rows and ok trials they hold."""

    name: str
    files: list[Path] = field(default_factory=list)
    rows: int = 0
    ok: int = 0
    error: str | None = None  # the first failed trial's reason (its error type and message), where one failed


@dataclass
class Night:
    """What a publish found, kept and pushed."""

    jobs: list[Job] = field(default_factory=list)
    ingested: list[IngestReport] = field(default_factory=list)  # the artifacts', then the bucket's
    from_bucket: int = 0  # rows the night added from s3:// or gs:// prefixes (jobs that wrote to a bucket)
    archived: list[str] = field(default_factory=list)  # file names added to the history's results
    profiles: int = 0
    profiles_left: int = 0  # raw profiles past the night's budget: in the run's artifacts only
    pruned: int = 0  # nights whose raw profiles left the history (past the last N)
    compacted: int = 0  # result files merged into their month's
    rebuilt: IngestReport | None = None  # the store, rebuilt from the history (its cache was gone)
    pushed: str | None = None  # the commit pushed, if any

    @property
    def rows(self) -> int:
        return sum(job.rows for job in self.jobs)

    @property
    def ok(self) -> int:
        return sum(job.ok for job in self.jobs)


def _parquet(folder: Path) -> list[Path]:
    """Every result file at any depth below ``folder`` (not in quarantine/)."""
    return sorted(p for p in folder.rglob("*.parquet") if objectstore.QUARANTINE not in p.relative_to(folder).parts)


def find_jobs(nights: list[Path]) -> list[Job]:
    """The jobs whose artifacts lie below the night folders, each with its result files."""
    jobs = []
    for night in nights:
        if not night.is_dir():
            continue
        below = sorted(p for p in night.iterdir() if p.is_dir() and p.name not in (objectstore.QUARANTINE, PROFILES))
        loose = sorted(night.glob("*.parquet"))
        if loose:
            jobs.append(Job(night.name, loose))
        for folder in below:
            named = folder / JOB_FILE
            name = named.read_text().strip() if named.is_file() else folder.name
            jobs.append(Job(name or folder.name, _parquet(folder)))
    return jobs


def _count(job: Job) -> None:
    """The rows and ok trials of a job's files (those still there: ingest moves a corrupt one to quarantine/)."""
    job.files = [p for p in job.files if p.exists()]
    job.rows = job.ok = 0
    for path in job.files:
        try:
            table = pq.read_table(path, columns=["status", "error_type", "error_message"]).to_pylist()
        except Exception:  # noqa: BLE001 - refused by ingest, kept as it is: counted as no rows
            continue
        statuses = [row["status"] for row in table]
        job.rows += len(statuses)
        job.ok += statuses.count("ok")
        failed = next((row for row in table if row["status"] != "ok"), None)
        if failed and job.error is None:
            reason = ": ".join(filter(None, (failed["error_type"], failed["error_message"]))) or failed["status"]
            job.error = " ".join(reason.split())[:300]


def _archive_name(source: Path, folder: Path) -> Path | None:
    """Where ``source`` goes in ``folder``: its own name, another one if that holds other bytes, None if the same
    file is there already (a night published twice)."""
    target = folder / source.name
    if not target.exists():
        return target
    if filecmp.cmp(source, target, shallow=False):
        return None
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:8]
    other = folder / f"{source.stem}-{digest}{source.suffix}"
    return None if other.exists() else other


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def archive(jobs: list[Job], nights: list[Path], tree: Path, budget: int, night: str) -> tuple[list[str], int, int]:
    """Copy the jobs' result files into the history's results/ and raw profile folders into its profiles/NIGHT/
    (``profiles/2026-11-27/RUN_ID``) while they fit in ``budget`` bytes a night (a git branch grows by what it is
    given; their op tables are in the rows anyway); returns the names added, how many profiles were kept and how
    many were not."""
    results, profiles = tree / RESULTS, tree / PROFILES / night
    results.mkdir(parents=True, exist_ok=True)
    added = []
    for job in jobs:
        for path in job.files:
            target = _archive_name(path, results)
            if target is not None:
                shutil.copyfile(path, target.with_name(f".{target.name}.tmp"))
                target.with_name(f".{target.name}.tmp").replace(target)
                added.append(target.name)
    copied = left = spent = 0
    for night in nights:
        for kept in sorted(night.rglob(f"{PROFILES}/*")) if night.is_dir() else []:
            target = profiles / kept.name
            if not kept.is_dir() or any((tree / PROFILES).glob(f"*/{kept.name}")):  # kept on an earlier night
                continue
            size = _size(kept)
            if spent + size > budget:
                left += 1
                continue
            shutil.copytree(kept, target)
            spent += size
            copied += 1
    return added, copied, left


NIGHT = re.compile(r"\d{4}-\d{2}-\d{2}")  # a night's folder under profiles/
MONTH = re.compile(r"\d{4}-\d{2}\.parquet")  # a month's results, compacted


def prune_profiles(tree: Path, keep: int) -> int:
    """Keep the raw profiles of the last ``keep`` nights on the history (``profiles/NIGHT/``); older nights leave it,
    as do the folders of a history written before profiles were kept by night (older than any night). Their op
    tables stay in the rows. Returns how many nights' folders were removed."""
    folder = tree / PROFILES
    if not folder.is_dir():
        return 0
    nights = sorted(p.name for p in folder.iterdir() if p.is_dir() and NIGHT.fullmatch(p.name))
    old = [folder / name for name in nights[: max(0, len(nights) - keep)]]
    if len(nights) >= keep:  # the history's first kept nights are its last ``keep``: what came before them goes too
        old += [p for p in folder.iterdir() if not NIGHT.fullmatch(p.name)]
    for path in old:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return len(old)


def compact_results(tree: Path, night: str) -> int:
    """The history's results of every month before ``night``'s in one file a month (``results/2026-10.parquet``),
    rows of a run_id once: a month's files are merged once it is over (a file that arrives late for it is merged
    into its month on the next night). A file that does not read as results is left as it is. Returns how many
    files were merged away."""
    folder = tree / RESULTS
    if not folder.is_dir():
        return 0
    current = night[:7]
    by_month: dict[str, list[pa.Table]] = {}
    merged: list[Path] = []
    for path in sorted(folder.rglob("*.parquet")):
        if MONTH.fullmatch(path.name) and path.parent == folder:
            continue
        try:  # the months first, from one column: a file of this month is not read whole every night
            months = set(pc.unique(pc.strftime(pq.read_table(path, columns=["started_at"])[0], "%Y-%m")).to_pylist())
            if not months or max(months) >= current:
                continue
            table = schema.conform(pq.read_table(path))
        except Exception:  # noqa: BLE001 - ingest reads what it can of it; compaction leaves it alone
            continue
        of_month = pc.strftime(table.column("started_at"), "%Y-%m")
        for month in months:
            by_month.setdefault(month, []).append(table.filter(pc.equal(of_month, month)))
        merged.append(path)
    for month, tables in sorted(by_month.items()):
        target = folder / f"{month}.parquet"
        if target.exists():
            tables.insert(0, schema.conform(pq.read_table(target)))
        rows = pa.concat_tables(tables)
        first: dict[str, int] = {}
        for index, run_id in enumerate(rows.column("run_id").to_pylist()):
            first.setdefault(run_id, index)
        rows = rows.take(pa.array(sorted(first.values()))).sort_by("started_at")
        temporary = target.with_name(f".{target.name}.tmp")
        schema.write_parquet(rows, temporary)
        temporary.replace(target)
    for path in merged:
        path.unlink()
    return len(merged)


def restore(db: Path, tree: Path, on_file: Callable[[str, str], None]) -> IngestReport | None:
    """The store rebuilt from the history when it is gone (a cache evicted); None when it is there, or when the
    history holds no result yet."""
    results = tree / RESULTS
    if db.exists() or not results.is_dir() or not _parquet(results):
        return None
    alerts = tree / ALERTS_FILE
    report, _ = history.rebuild([str(tree / RESULTS)], db, str(alerts) if alerts.is_file() else None,
                                on_file=on_file, recursive=True)  # fmt: skip
    return report


def collect(
    nights: list[Path],
    remote: list[str],
    db: Path,
    tree: Path,
    on_file: Callable[[str, str], None],
    date: str,
    profiles_budget: int = PROFILES_BUDGET,
    keep_nights: int = KEEP_NIGHTS,
) -> Night:
    """Restore the store if it is gone, ingest the night (its local folders and any bucket prefixes), archive the
    local files that were not quarantined on the history's work tree as the night of ``date`` (YYYY-MM-DD), and keep
    the history bounded: raw profiles of the last ``keep_nights`` nights, a month's results in one file."""
    night = Night(jobs=find_jobs(nights))
    night.rebuilt = restore(db, tree, on_file)
    folders = [n for n in nights if n.is_dir()]
    if folders:
        night.ingested.append(ingest([str(n) for n in folders], db, on_file=on_file, recursive=True))
    if remote:  # ingested apart: its rows are the jobs' that wrote to the bucket, not in any artifact
        night.ingested.append(ingest(remote, db, on_file=on_file, recursive=True))
        night.from_bucket = night.ingested[-1].rows_added
    for job in night.jobs:
        _count(job)
    night.archived, night.profiles, night.profiles_left = archive(night.jobs, folders, tree, profiles_budget, date)
    night.pruned = prune_profiles(tree, keep_nights)
    night.compacted = compact_results(tree, date)
    return night


def _reason(stderr: str) -> str:
    """git's own reason, in one line: its first fatal or error line, else its last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    return next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1] if lines else "failed")


def _git(tree: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    who = ["-c", "user.name=stepwatch", "-c", "user.email=stepwatch@users.noreply.github.com"]
    done = subprocess.run(["git", "-C", str(tree), *who, *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise PublishError(f"git {args[0]} in {tree}: {_reason(done.stderr)}")
    return done


def origin(tree: Path) -> str | None:
    """The address of the history's ``origin`` (where it is pushed), if it has one, without any credentials in it."""
    done = _git(tree, "remote", "get-url", "origin", check=False) if (tree / ".git").exists() else None
    if done is None or done.returncode != 0:
        return None
    parts = urlsplit(done.stdout.strip())
    if parts.username or parts.password:
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return parts.geturl()


def commit(tree: Path, message: str) -> bool:
    """Commit everything the history's work tree holds now; whether there was anything to commit."""
    if not (tree / ".git").exists():
        _git(tree, "init", "--quiet")
    _git(tree, "add", "--all")
    if _git(tree, "diff", "--cached", "--quiet", check=False).returncode == 0:
        return False
    _git(tree, "commit", "--quiet", "-m", message)
    return True


def push(tree: Path, branch: str, say: Callable[[str], None], squash: bool = True) -> str:
    """Push the history's last commit to ``origin``'s ``branch``. Squashed (the default), the branch is one commit
    holding the history's files, replaced each night with a lease on the commit this publish started from, as GitHub
    Pages branches are: a clone fetches what the history holds now, never what it once held. From a shallow clone
    (the nightly's, ``--depth 1``) git sends only the objects the branch lacks; from a full one, the whole tree.
    Rejected because another
    publish pushed first (a manual run beside the schedule), this night's commit is replayed on what is there now,
    its own files winning where both wrote the same (the alerts, the page), and pushed again: no night is lost.
    Returns the commit pushed."""
    if _git(tree, "remote", "get-url", "origin", check=False).returncode != 0:
        raise PublishError(f"cannot push the history to {branch}: {tree} has no remote 'origin' (clone the branch)")
    parent = _git(tree, "rev-parse", "--verify", "--quiet", "HEAD~1", check=False).stdout.strip()
    for attempt in range(1, PUSH_ATTEMPTS + 1):
        if squash:
            message = _git(tree, "log", "-1", "--format=%B").stdout.strip()
            sent = _git(tree, "commit-tree", "HEAD^{tree}", "-m", f"{message}\n\n{SQUASHED}").stdout.strip()
            lease = f"--force-with-lease=refs/heads/{branch}:{parent}"  # empty: the branch must not exist yet
            done = _git(tree, *BINARY, "push", "--quiet", lease, "origin", f"{sent}:refs/heads/{branch}", check=False)
        else:
            sent = _git(tree, "rev-parse", "HEAD").stdout.strip()
            done = _git(tree, *BINARY, "push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", check=False)
        if done.returncode == 0:
            if squash:
                _git(tree, "reset", "--quiet", "--soft", sent)
            return sent
        fetched = _git(tree, "fetch", "--quiet", "origin", branch, check=False)
        if fetched.returncode != 0:
            raise PublishError(f"cannot push the history to {branch}: {_reason(done.stderr)}")
        say(f"the history branch {branch} moved meanwhile: replaying this night on it (attempt {attempt})")
        # Only this night's commit is replayed (a squashed branch shares no history with the one it replaced); in a
        # rebase, "theirs" is the commit being replayed: this publish's.
        upstream = ["--onto", "FETCH_HEAD", parent] if parent else ["--root", "--onto", "FETCH_HEAD"]
        rebased = _git(tree, "rebase", "--quiet", "-X", "theirs", *upstream, check=False)
        if rebased.returncode != 0:
            _git(tree, "rebase", "--abort", check=False)
            raise PublishError(f"cannot replay this night on {branch}: {rebased.stderr.strip()[-200:]}")
        parent = _git(tree, "rev-parse", "HEAD~1").stdout.strip()
    raise PublishError(f"cannot push the history to {branch}: rejected {PUSH_ATTEMPTS} times")


def summary(night: Night, collect_result: str | None) -> list[str]:
    """The night in markdown lines for the job summary: per job its files, rows and ok trials, and what it lacks."""
    lines = ["## stepwatch: the night's results", ""]
    if night.jobs:
        lines += ["| job | files | rows | ok |", "|---|---:|---:|---:|"]
        lines += [f"| {job.name} | {len(job.files)} | {job.rows} | {job.ok} |" for job in night.jobs]
        lines.append("")
    empty = [job.name for job in night.jobs if not job.rows]
    if empty:
        lines.append(f"- wrote no row: {', '.join(empty)}")
    if night.from_bucket:
        lines.append(f"- {night.from_bucket} new row(s) from the bucket")
    if not night.rows and not night.from_bucket:
        lines.append("- **no job wrote a row tonight**")
    elif every_job_failed(night, collect_result):
        lines.append("- **every collect job failed tonight**: no trial ran ok (each job's reason is on the page)")
    if collect_result not in (None, "", "success"):
        lines.append(f"- the collect jobs' result: {collect_result} (a job that wrote nothing has no artifact: "
                     "see the run's jobs)")  # fmt: skip
    for report in night.ingested:
        for uri, reason, _ in report.quarantined:
            lines.append(f"- quarantined, not archived: {Path(uri).name} ({reason[:160]})")
    if night.rebuilt is not None:
        lines.append(f"- the store was gone: rebuilt from the history ({night.rebuilt.rows_added} rows)")
        lines += [f"- skipped in the history: {Path(uri).name} ({reason[:160]})"
                  for uri, reason, _ in night.rebuilt.quarantined]  # fmt: skip
    lines.append(f"- archived on the history branch: {len(night.archived)} file(s), {night.profiles} profile(s)")
    if night.profiles_left:
        lines.append(f"- {night.profiles_left} raw profile(s) past the night's budget for the branch: in the run's "
                     "artifacts only (their op tables are in the rows)")  # fmt: skip
    if night.pruned:
        lines.append(f"- {night.pruned} older night(s) of raw profiles left the history branch (it keeps the last "
                     "nights'; their op tables are in the rows)")  # fmt: skip
    if night.compacted:
        lines.append(f"- {night.compacted} result file(s) of past months compacted into one file a month")
    if night.pushed:
        lines.append(f"- pushed: {night.pushed[:12]}")
    return lines


def every_job_failed(night: Night, collect_result: str | None) -> bool:
    """A night to fail: no ok trial anywhere (nor a new row in the bucket), and either the collect jobs failed or
    their rows are all failures."""
    if night.from_bucket:
        return False
    return not night.ok and (night.rows > 0 or collect_result in ("failure", "cancelled"))
