"""``stepwatch dashboard``: serve the dashboard on the project's store, from wherever stepwatch is installed.

Named results (the project's ``results`` folder by default, an ``s3://`` or ``gs://`` prefix, or ``git:BRANCH``,
the history branch the nightly workflow pushes) are ingested before the server starts and again every
``--refresh`` seconds while it serves, so new nights appear without a rebuild by hand. Ingest is idempotent and the
dashboard reads while it runs (``collector.store``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from stepwatch.collector.cli.arguments import add_db_argument, console, db_path
from stepwatch.collector.cli.exits import EXIT_OK
from stepwatch.collector.cli.ingest import ingest_and_report
from stepwatch.collector.errors import Failure, UsageError
from stepwatch.collector.store import objectstore
from stepwatch.collector.store.address import attached, named, shown
from stepwatch.collector.store.files import DB_ENV

BRANCH = "git:"  # a source that names a branch of the repository the command runs in, or another's (URL#BRANCH)


def register(commands: Any) -> None:
    parser = commands.add_parser("dashboard", help="serve the dashboard on the store (http://127.0.0.1:8501)")
    parser.add_argument(
        "sources", nargs="*",
        help="results to ingest first and every --refresh seconds: folders, files, s3:// or gs:// prefixes, or "
        f"{BRANCH}BRANCH (a history branch of this repository's origin, e.g. {BRANCH}stepwatch-history; another "
        f"repository's: {BRANCH}URL#BRANCH)",
    )  # fmt: skip
    add_db_argument(parser)
    parser.add_argument("--address", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this host)")
    parser.add_argument("--port", type=int, default=8501)
    parser.add_argument(
        "--refresh", type=float, default=600, metavar="SECONDS",
        help="ingest the sources again this often while serving (default 600; 0: once, at the start)",
    )  # fmt: skip
    parser.set_defaults(handler=run)


def branch_folder(branch: str, repository: Path) -> Path:
    """The branch's tree as it is on ``origin`` now (else the local branch), unpacked into a cache folder; with
    ``URL#BRANCH``, that repository's branch, fetched into a cache of its own."""
    url, _, name = branch.rpartition("#") if "#" in branch else ("origin", "", branch)
    if not name or name.startswith("-") or url.startswith("-") or not url:
        raise UsageError(f"{BRANCH}{branch}: name a branch, e.g. {BRANCH}stepwatch-history or {BRANCH}URL#BRANCH")
    key = hashlib.sha256(f"{repository.resolve() if url == 'origin' else url}:{name}".encode()).hexdigest()[:16]
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stepwatch" / "branches" / key
    folder.parent.mkdir(parents=True, exist_ok=True)
    if url != "origin":  # another repository's history: fetched into a bare repository of the cache's
        repository = folder.with_suffix(".git")
        subprocess.run(["git", "init", "--quiet", "--bare", str(repository)], capture_output=True, check=True)
    git = ["git", "-C", str(repository)]
    shallow = ["--depth", "1"] if url != "origin" else []  # the team's own clone is never made shallow
    fetched = subprocess.run([*git, "fetch", "--quiet", *shallow, "--", url, name], capture_output=True, text=True)
    if fetched.returncode != 0 and url != "origin":
        reason = fetched.stderr.strip().splitlines()
        raise UsageError(f"cannot read the branch {name!r} of {url}: {reason[-1] if reason else 'git fetch failed'}")
    ref = "FETCH_HEAD" if fetched.returncode == 0 else name
    archive = folder.with_suffix(".tar")
    with open(archive, "wb") as out:
        done = subprocess.run([*git, "archive", "--format=tar", ref], stdout=out, stderr=subprocess.PIPE, text=False)
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        raise UsageError(f"cannot read the branch {name!r}: {reason[-1] if reason else 'git archive failed'}")
    shutil.rmtree(folder, ignore_errors=True)  # the branch as it is now: files it no longer holds (compacted) go
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    archive.unlink()
    return folder


def _local(sources: list[str]) -> list[str]:
    """The sources as ingest reads them: a branch becomes its unpacked folder; a missing folder is skipped."""
    out = []
    for source in sources:
        if source.startswith(BRANCH):
            out.append(str(branch_folder(source[len(BRANCH) :], Path.cwd())))
        elif objectstore.is_remote(source) or Path(source).exists():
            out.append(source)
        else:
            console.print(f"note: {source} does not exist (yet): nothing to ingest from it")
    return out


def _refresh(sources: list[str], db: Path) -> None:
    found = _local(sources)
    if found:
        ingest_and_report(found, db, synthetic=False, recursive=True, named=False)


def serve(db: Path, address: str, port: int, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The dashboard's server on the store ``db``, started (``python -m stepwatch.dashboard``), with ``env`` added to
    its environment. A kill of this command (SIGTERM) then stops the server too: it unwinds through the caller's
    ``finally``, which ``stop``s it."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    command = [sys.executable, "-m", "stepwatch.dashboard", f"--server.address={address}", f"--server.port={port}"]
    console.print(f"dashboard: http://{address}:{port} on {escape(shown(db))} (Ctrl-C to stop)")
    return subprocess.Popen(command, env={**os.environ, DB_ENV: named(db), **(env or {})})


def stop(server: subprocess.Popen) -> None:
    """The server stopped: asked, then killed if it does not stop within 30 s."""
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a server that does not stop when asked
            server.kill()
            server.wait()


def served(server: subprocess.Popen) -> int:
    """The exit code of a server stopped by Ctrl-C or a kill: success."""
    return EXIT_OK if server.returncode in (0, -15) else server.returncode


def run(args: argparse.Namespace) -> int:
    """Ingest the sources, serve the dashboard on the store, ingest again every --refresh seconds."""
    if args.refresh < 0:
        raise UsageError("--refresh must be 0 (once) or a number of seconds")
    db = db_path(args)
    db = db if attached(db) else db.resolve()
    _refresh(args.sources, db)
    server = serve(db, args.address, args.port)
    try:
        while server.poll() is None:
            if not args.refresh or not args.sources:
                server.wait()
                break
            deadline = time.monotonic() + args.refresh
            while server.poll() is None and time.monotonic() < deadline:
                time.sleep(min(1.0, args.refresh))
            if server.poll() is None:
                try:
                    _refresh(args.sources, db)
                except (UsageError, Failure) as error:  # a source gone for now: keep serving, say so
                    console.print(f"note: could not refresh the store: {error}")
    finally:
        stop(server)
    return served(server)
