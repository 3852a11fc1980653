"""The build's one addition to pyproject.toml: a wheel built from a git checkout records the checkout's commit
(``stepwatch/collector/data/source-commit``), so that ``stepwatch init`` pins stepwatch's action to that commit, as
a pin check asks, whatever way the wheel was installed."""

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

COMMIT_FILE = Path("stepwatch") / "collector" / "data" / "source-commit"


class RecordCommit(build_py):
    def run(self) -> None:
        super().run()
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=Path(__file__).parent)  # fmt: skip
        commit = done.stdout.strip()
        if done.returncode == 0 and len(commit) == 40 and dirty.returncode == 0 and not dirty.stdout.strip():
            target = Path(self.build_lib) / COMMIT_FILE
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(commit + "\n")


setup(cmdclass={"build_py": RecordCommit})
