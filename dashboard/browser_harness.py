"""The dashboard served for a browser to open: ``python -m stepwatch.dashboard`` on a free port of 127.0.0.1
on a given store, and the chromium to open it with. Used by the browser tests and the browser benchmark."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
# Streamlit's page as its DOM tells it, for whoever waits on it in a browser: the script has run to its end
# (``data-test-script-state`` on the app's root); an element still shows its placeholder while its code loads
# (each element type's code is loaded on first use, and can arrive after the script has finished).
SCRIPT_DONE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
LOADING = '[data-testid="stSkeleton"]'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve(db: Path, script: Path | None = None) -> Iterator[str]:
    """``python -m stepwatch.dashboard`` (``streamlit run dashboard/app.py``, its modules imported first) from the
    repository root (its .streamlit/config.toml applies) on a free port of 127.0.0.1, on the store ``db``;
    yields its URL once it answers its health check. With ``script``, ``streamlit run script`` instead."""
    app = ["-m", "streamlit", "run", str(script)] if script else ["-m", "stepwatch.dashboard"]

    def command(port: int) -> list[str]:
        return [
            sys.executable, *app, "--server.headless=true",
            "--server.address=127.0.0.1", f"--server.port={port}", "--browser.gatherUsageStats=false",
        ]  # fmt: skip

    with served(command, REPO, {**os.environ, "STEPWATCH_DB": str(db)}) as url:
        yield url


@contextlib.contextmanager
def served(command: Callable[[int], list[str]], cwd: Path, env: dict[str, str]) -> Iterator[str]:
    """A dashboard server started by ``command(port)`` (``stepwatch dashboard --port PORT ...``, say) in ``cwd``
    on a free port of 127.0.0.1; yields its URL once it answers its health check, and stops it afterwards."""
    port = free_port()
    # The server's output goes to a file: a pipe nobody reads would stall it once full.
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(command(port), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # a start under load (imports, then the first page) takes a while
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.read() == b"ok":
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"the dashboard did not start: {log.read().decode()[-2000:]}") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
