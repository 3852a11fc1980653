"""The servers a shared store needs, started on 127.0.0.1 for a test or a benchmark: a PostgreSQL of its own
(``initdb`` and ``pg_ctl`` into a temporary folder) for the catalog, and moto's S3 for the files. No pytest here:
benchmarks import it too."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stepwatch.dashboard.browser_harness import free_port

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "stepwatch-test",
    "AWS_SECRET_ACCESS_KEY": "stepwatch-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
USER = "stepwatch"


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (Debian keeps them out of PATH), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


@dataclass
class Postgres:
    host: str
    port: int
    folder: Path
    as_user: tuple[str, ...] = ()

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection dropped, the server back on the same port."""
        binaries = postgres_bin()
        assert binaries is not None
        subprocess.run([*self.as_user, str(binaries / "pg_ctl"), "-D", str(self.folder / "data"), "-l",
                        str(self.folder / "log"), "-m", "fast", "-w", "restart"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, cwd=self.folder)  # fmt: skip

    def url(self, database: str) -> str:
        return f"postgresql://{USER}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> None:
        import psycopg2

        con = psycopg2.connect(host=self.host, port=self.port, user=USER, dbname="postgres")
        con.autocommit = True
        try:
            con.cursor().execute(f'CREATE DATABASE "{name}"')
        finally:
            con.close()


@contextlib.contextmanager
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server of its own on a free port of 127.0.0.1 (trust for user ``stepwatch`` on loopback only),
    stopped and deleted afterwards. As root, its server runs as the ``postgres`` user (it refuses root)."""
    binaries = postgres_bin()
    if binaries is None:
        raise RuntimeError("no PostgreSQL server here (apt-get install postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="stepwatch-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", free_port()
    run = {"check": True, "capture_output": True, "cwd": folder}
    subprocess.run([*as_user, str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", USER, "--no-sync",
                    "-E", "UTF8"], **run)  # fmt: skip
    options = f"-h 127.0.0.1 -p {port} -k {folder} -F -c max_connections=100"
    subprocess.run([*as_user, str(binaries / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-o", options,
                    "-w", "start"], **run)  # fmt: skip
    try:
        yield Postgres("127.0.0.1", port, folder, tuple(as_user))
    finally:
        subprocess.run([*as_user, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, cwd=folder)  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def s3() -> Iterator[str]:
    """moto's S3 on a free port of 127.0.0.1; yields its endpoint."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def bucket(endpoint: str, name: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=endpoint, **_boto_credentials()).create_bucket(Bucket=name)


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


def environment(endpoint: str) -> dict[str, str]:
    """What a stepwatch process needs to reach the S3 server."""
    return {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}


@contextlib.contextmanager
def chat_webhook() -> Iterator[tuple[str, list[dict]]]:
    """A chat tool's incoming webhook on 127.0.0.1 (Slack's JSON): its address, and what was posted to it."""
    import http.server
    import json
    import threading

    posted: list[dict] = []

    class Chat(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Chat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/team", posted
    finally:
        server.shutdown()
        server.server_close()
