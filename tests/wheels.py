"""Small pure-Python wheels built on the spot, for side environments that pip's resolver and installer build
for real with ``--no-index`` (bisect, package-sets, the upgrade-pr workflow)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

PLANTED_MB = 100  # a trial of the tests holds about 280 MB: +35%, far beyond any threshold


def wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (), planted: bool = False) -> None:
    """A pure-Python wheel of ``name`` (a module that says its version); ``planted`` adds a .pth file that
    imports it at every interpreter start and makes it hold PLANTED_MB of touched memory."""
    module = name.replace("-", "_")
    body = f"VERSION = {version!r}\n"
    if planted:
        body += f"BALLAST = b'x' * ({PLANTED_MB} * 2**20)\n"
    dist = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": body,
        f"{dist}/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: stepwatch-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if planted:
        files[f"{module}-planted.pth"] = f"import {module}\n"
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / f"{module}-{version}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
