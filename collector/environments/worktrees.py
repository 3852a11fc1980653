"""Commits of the team's repository as sides of a check: each checked out beside the working tree (a detached git
worktree in a folder of its own), its models and scripts read and run there, and removed afterwards.

A check that is killed before it removes its worktrees leaves folders named with its process id; the next check
in the repository removes those whose process is gone (``git worktree remove --force``, then ``prune``).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from stepwatch.collector.environments import owners
from stepwatch.collector.errors import UsageError

PREFIX = "stepwatch-worktree-"
WORKING_TREE = "."  # --head . : the working tree as it is, edits included


class RepositoryError(UsageError):
    """A repository, ref or working tree a check cannot use, in one line."""


def git(repo: Path, *args: str, check: bool = True) -> str:
    """``git -C repo args``' output, stripped; RepositoryError with git's own line when it fails and ``check``."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as error:
        raise RepositoryError(f"cannot run git in {repo}: {error}") from None
    if done.returncode != 0 and check:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise RepositoryError(f"git {' '.join(args[:2])} in {repo}: {said}")
    return done.stdout.strip()


def top(where: Path) -> Path:
    """The top folder of the git repository ``where`` is in."""
    found = git(where, "rev-parse", "--show-toplevel", check=False)
    if not found:
        raise RepositoryError(f"{where.resolve()} is not in a git repository: a code check compares two of its commits")
    return Path(found)


def commit_of(repo: Path, ref: str) -> str:
    """The commit ``ref`` names; one line saying so when it names none."""
    found = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if not found:
        raise RepositoryError(f"{ref!r} is not a commit of the git repository {repo}")
    return found


def default_branch(repo: Path) -> str:
    """The branch pull requests go into: origin's HEAD, else the first of origin/main, origin/master, main, master."""
    remote = git(repo, "symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD", check=False)
    if remote:
        return remote
    for name in ("origin/main", "origin/master", "main", "master"):
        if git(repo, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", check=False):
            return name
    raise RepositoryError(f"{repo} has no default branch to start from (origin/HEAD, main or master): give --base")


def merge_base(repo: Path, base: str, head: str) -> str:
    """Where ``head`` branched from ``base``: what a pull request is compared against."""
    found = git(repo, "merge-base", commit_of(repo, base), commit_of(repo, head), check=False)
    if not found:
        shallow = git(repo, "rev-parse", "--is-shallow-repository", check=False) == "true"
        why = "a shallow clone: " if shallow else ""
        raise RepositoryError(
            f"{base} and {head} have no merge base in {repo} ({why}fetch the full history: fetch-depth 0)"
        )
    return found


def edited(repo: Path) -> list[str]:
    """Tracked files with changes not committed (what ``--head .`` measures, and what a check of HEAD would not)."""
    return [line for line in git(repo, "diff", "--name-only", "HEAD").splitlines() if line]


def listed(repo: Path) -> list[Path]:
    """The worktrees of ``repo`` made by checks."""
    out = git(repo, "worktree", "list", "--porcelain")
    paths = [Path(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("worktree ")]
    return [path for path in paths if path.name.startswith(PREFIX)]


def remove_stale(repo: Path) -> list[Path]:
    """Remove the worktrees of checks that were killed before they could; returns them."""
    stale = [path for path in listed(repo) if not owners.owner_alive(path, PREFIX)]
    for path in stale:
        git(repo, "worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(path, ignore_errors=True)
    git(repo, "worktree", "prune", check=False)
    return stale


@contextlib.contextmanager
def checked_out(repo: Path, commits: dict[str, str]) -> Iterator[dict[str, Path]]:
    """side -> a detached worktree of its commit (``WORKING_TREE``: the repository's own folder), removed on the
    way out, also after an error or Ctrl-C."""
    remove_stale(repo)
    made: list[Path] = []
    try:
        folders = {}
        for side, commit in commits.items():
            if commit == WORKING_TREE:
                folders[side] = repo
                continue
            folder = Path(tempfile.mkdtemp(prefix=f"{owners.prefix(PREFIX)}{side}-"))
            made.append(folder)
            git(repo, "worktree", "add", "--detach", "--force", str(folder), commit)
            folders[side] = folder
        yield folders
    finally:
        for folder in made:
            git(repo, "worktree", "remove", "--force", str(folder), check=False)
            shutil.rmtree(folder, ignore_errors=True)
        if made:
            git(repo, "worktree", "prune", check=False)


def changed_files(repo: Path, base: str, head: str) -> list[str]:
    """Paths that differ between two commits (``head`` ``WORKING_TREE``: the working tree, edits included)."""
    args = ("diff", "--name-only", base) if head == WORKING_TREE else ("diff", "--name-only", base, head)
    return [line for line in git(repo, *args).splitlines() if line]
