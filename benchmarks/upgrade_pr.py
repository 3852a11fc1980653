"""The upgrade-pr workflow on TensorFlow, here: its shell steps (as ``tests/test_upgrade_pr.py`` runs them) on a
git repository made on the spot, whose main branch pins ``tensorflow==2.20.0``, for two pull requests:

- **A/A**: the same release written as a range (``tensorflow>=2.20.0,<2.20.1``). It must say that nothing the
  environments resolve to changed, and stop without measuring.
- **A bump** to ``tensorflow==2.21.0``: the package sets, the upgrade check with its own A/A, the verdict.

The environments are real (pip resolves against the index; the side environments are cached as upgrade-check
caches them). Each pull request's comment body is written to ``--out``.

    .venv/bin/python benchmarks/upgrade_pr.py [--trials 3] [--models bert] [--out data/reference/upgrade-pr]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.test_upgrade_pr import commit, git, job, run_steps  # noqa: E402

PULL_REQUESTS = (
    ("aa", "Same release, written as a range", "tensorflow>=2.20.0,<2.20.1"),
    ("bump", "Bump tensorflow from 2.20.0 to 2.21.0", "tensorflow==2.21.0"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="3")
    parser.add_argument("--models", default="bert")
    parser.add_argument("--metric", default="examples_per_sec,peak_memory_bytes")
    parser.add_argument("--out", type=Path, default=Path("data/reference/upgrade-pr"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stepwatch-upgrade-pr-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        git(repo, "config", "user.email", "bench@example.com")
        git(repo, "config", "user.name", "bench")
        base = commit(repo, "base", {"requirements.txt": "# the training stack\ntensorflow==2.20.0\n"})
        (repo / ".git" / "info" / "exclude").write_text("pr/\ndata/\n")
        for name, message, pin in PULL_REQUESTS:
            git(repo, "checkout", "-q", "-b", name, base)
            head = commit(repo, message, {"requirements.txt": f"# the training stack\n{pin}\n"})
            shutil.rmtree(repo / "pr", ignore_errors=True)
            env = {
                "PR": "1", "BASE_SHA": base, "HEAD_SHA": head, "SUITE": "smoke", "TRIALS": args.trials,
                "METRIC": args.metric, "CHECK_ARGS": f"--models {args.models} --xla off --precision fp32",
                "ENV_ARGS": "", "RUN_URL": "https://github.com/OWNER/REPO/actions/runs/RUN",
                "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # the job's python3: this one
            }  # fmt: skip
            steps = job("stepwatch-upgrade-pr.yml")["steps"]
            start = time.perf_counter()
            outputs = run_steps(steps, repo, env, Path(tmp) / "summary.md")
            verdict = (repo / "pr" / "verdict").read_text().strip()
            shutil.copyfile(repo / "pr" / "comment.md", args.out / f"comment-{name}.md")
            print(f"{name}: changed={outputs['sets'].get('changed')} verdict={verdict} "
                  f"job exit {steps[-1]['result'].returncode}, {time.perf_counter() - start:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
