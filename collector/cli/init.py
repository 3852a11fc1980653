"""``stepwatch init``: make a repository a stepwatch project. Writes a starter ``stepwatch.toml`` and the
workflows that run it (a nightly, an upgrade check of every pull request that changes the pinned packages, and a
code check of every pull request that changes the training code), each with comments, through stepwatch's GitHub
Action; never changes a file that exists."""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from stepwatch.collector.cli.arguments import add_import_arguments, import_command
from stepwatch.collector.cli.exits import EXIT_OK
from stepwatch.collector.config import KERAS_BACKENDS, TRIALS
from stepwatch.collector.data import bundled
from stepwatch.collector.environments import virtualenvs
from stepwatch.collector.errors import UsageError
from stepwatch.collector.project import CONFIG_FILE, GPU_EXTRAS, TPU_EXTRA, Project, version
from stepwatch.collector.workflows import code_check

WORKFLOWS = Path(".github") / "workflows"
# The workflows init writes: the file in the repository, and its template among stepwatch's data.
WORKFLOW_FILES = {"stepwatch-nightly.yml": "nightly.yml", "stepwatch-upgrade-pr.yml": "upgrade-pr.yml",
                  "stepwatch-code-pr.yml": "code-pr.yml",
                  "stepwatch-upgrade-pr-verdict.yml": "upgrade-pr-verdict.yml"}  # fmt: skip
ACTION_REPOSITORY = "stepwatch/stepwatch"
COMMIT_FILE = "source-commit"  # the commit a wheel was built from (setup.py writes it)
# What stays out of git: the results and stores stepwatch's commands write in the repository.
IGNORED = ("stepwatch-results/", "stepwatch-nightly/", f"{virtualenvs.RESULTS_DIR}/", f"{virtualenvs.STORE}*",
           f"{code_check.RESULTS_DIR}/", f"{code_check.STORE}*")  # fmt: skip
LOOPS = ("fit", "pytorch")  # the loops a model of yours trains in (a script is its own loop)


def register(commands: Any) -> None:
    parser = commands.add_parser("init", help="write stepwatch.toml and the nightly and upgrade workflows here")
    parser.add_argument(
        "--models", default="",
        help="your models and training scripts, comma-separated (path/file.py:function, train.py)",
    )  # fmt: skip
    parser.add_argument("--keras-backend", default="tensorflow", choices=KERAS_BACKENDS,
                        help="the framework your models train on (the workflows install its build)")  # fmt: skip
    parser.add_argument(
        "--cpu-runner", default="ubuntu-latest", help="runner label of the nightly CPU job ('none': none)"
    )
    parser.add_argument("--gpu-runner", help="runner label of the nightly GPU job (none without it)")
    parser.add_argument("--tpu-runner", help="runner label of the nightly TPU job (none without it)")
    parser.add_argument(
        "--shards", type=int, default=4,
        help="jobs the GPU and TPU suites are split into (default 4; never more than the configs they run)",
    )  # fmt: skip
    parser.add_argument(
        "--loop", choices=LOOPS,
        help="the loop your models train in: fit (Keras) or pytorch (a torch.nn.Module in the plain PyTorch loop); "
        "default: what your model function returns decides",
    )  # fmt: skip
    parser.add_argument(
        "--gpu-batch", type=int, default=32, help="per-device batch of the GPU and TPU jobs (default 32)"
    )
    parser.add_argument(
        "--action", help=f"the action the workflows use, pinned to a commit (default {ACTION_REPOSITORY} at the "
        "commit this stepwatch was installed from, where it knows it)",
    )  # fmt: skip
    parser.add_argument(
        "--trials", type=int, metavar="N",
        help=f"write a trial count into stepwatch.toml (default: none, so every command takes stepwatch's own, "
        f"{TRIALS}: the nightly's trials per config, a check's first look)",
    )  # fmt: skip
    add_import_arguments(parser)  # written into stepwatch.toml: the nightly and the checks run the command
    parser.add_argument("--dir", type=Path, default=Path("."), help="the repository (default: here)")
    parser.set_defaults(handler=run)


@functools.cache  # one install per process: read once, for the four workflows and the note
def source_commit() -> str | None:
    """The commit this stepwatch was installed from: pip records it for an install from git, a checkout knows its
    own, and a wheel built from a clean checkout carries it (``setup.py``); None where none is known."""
    try:
        direct = json.loads(metadata.distribution("stepwatch").read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        direct = {}
    commit = direct.get("vcs_info", {}).get("commit_id")
    if not commit and direct.get("url", "").startswith("file://") and Path(direct["url"][len("file://") :]).is_dir():
        done = subprocess.run(["git", "-C", direct["url"][len("file://") :], "rev-parse", "HEAD"],
                              capture_output=True, text=True)  # fmt: skip
        commit = done.stdout.strip() if done.returncode == 0 else None
    recorded = bundled(COMMIT_FILE)
    if not commit and recorded.is_file():
        commit = recorded.read_text().strip()
    return commit if commit and re.fullmatch(r"[0-9a-f]{40}", commit) else None


def action_reference() -> str:
    """stepwatch's action pinned to the commit this stepwatch was installed from, else at this version's tag, which
    GitHub resolves but a pin check flags (init then says how to pin it)."""
    commit = source_commit()
    return f"{ACTION_REPOSITORY}@{commit} # v{version()}" if commit else f"{ACTION_REPOSITORY}@v{version()}"


UNPINNED = (
    "note: the workflows name stepwatch's action by its tag v{version} (this stepwatch knows no commit of its own): "
    "pin it to the tag's commit (`git ls-remote https://github.com/{repository} refs/tags/v{version}`), as a pin "
    "check asks, or run init with --action {repository}@COMMIT"
)


# actionlint (the workflow linter) knows GitHub's hosted runners; the labels of a team's own runners are said here.
ACTIONLINT = """# The labels of this repository's own runners, for actionlint (written by stepwatch init).
self-hosted-runner:
  labels: {labels}
"""


def runner_labels(args: argparse.Namespace) -> list[str]:
    """The runner labels init was given, but the one every self-hosted runner has."""
    given = [args.gpu_runner, args.tpu_runner, args.cpu_runner if args.cpu_runner != "ubuntu-latest" else None]
    labels = [part for label in given if label and label != "none" for part in _labels(label)]
    return sorted(set(labels) - {"self-hosted"})


def _labels(label: str) -> list[str]:
    """A runner as the user gave it: one label, or several comma-separated."""
    return [part.strip() for part in label.split(",") if part.strip()]


def _runner(label: str) -> str:
    """A runner label as YAML: one label, or a list for self-hosted labels given comma-separated."""
    labels = _labels(label)
    return json.dumps(labels[0] if len(labels) == 1 else labels)


def suite_configs(root: Path, suite: str, extra: list[str]) -> int | None:
    """How many configs ``stepwatch run --suite SUITE EXTRA`` runs under the project's settings at ``root`` (None
    where they cannot be planned here yet: a model file not written yet, say)."""
    from stepwatch.collector.cli import apply_project, build_parser
    from stepwatch.collector.cli.arguments import matrix_values
    from stepwatch.collector.runner.suite import load_suite, narrow

    argv = ["run", "--suite", suite, *extra]
    try:
        parser = build_parser(argv)
        apply_project(parser, argv, Project.find(root))
        args = parser.parse_args(argv)
        found = load_suite(args.suite)
        return len(narrow(found.configs, matrix_values(args), found.defaults))
    except (UsageError, ValueError):
        return None


def matrix(args: argparse.Namespace, root: Path | None = None) -> list[dict[str, str]]:
    """The nightly's jobs: one per runner the user named, the accelerators' suites split in ``--shards``, never in
    more shards than the project's settings give them configs (an empty shard would run nothing)."""
    jobs = []
    if args.cpu_runner and args.cpu_runner != "none":
        jobs.append({"name": "cpu", "runner": args.cpu_runner, "extras": args.keras_backend,
                     "suite": "smoke", "shard": "1/1", "args": ""})  # fmt: skip
    for name, label, suite in (("gpu", args.gpu_runner, "gpu-nightly"), ("tpu", args.tpu_runner, "tpu-nightly")):
        if label:
            extras = GPU_EXTRAS[args.keras_backend] if name == "gpu" else TPU_EXTRA
            flags = f"--device {name} --batch {args.gpu_batch}"
            planned = suite_configs(root, suite, flags.split()) if root is not None else None
            shards = max(1, min(args.shards, planned)) if planned else args.shards
            jobs += [{"name": name, "runner": label, "extras": extras, "suite": suite, "shard": f"{k}/{shards}",
                      "args": flags} for k in range(1, shards + 1)]  # fmt: skip
    return jobs


def render(template: str, args: argparse.Namespace, root: Path | None = None) -> str:
    """A workflow template with the action and the nightly's matrix filled in."""
    text = bundled(f"init/{template}").read_text()
    rows = "\n".join(
        f"          - name: {job['name']}\n            runner: {_runner(job['runner'])}\n"
        f'            extras: {job["extras"]}\n            suite: {job["suite"]}\n            shard: "{job["shard"]}"\n'
        f'            args: "{job["args"]}"'
        for job in matrix(args, root)
    )
    return text.replace("@@ACTION@@", args.action or action_reference()).replace("@@MATRIX@@", rows)


def starter_config(args: argparse.Namespace) -> str:
    models = [m.strip() for m in args.models.split(",") if m.strip()] or ["resnet50"]
    text = bundled(f"init/{CONFIG_FILE}").read_text()
    text = text.replace("@@MODELS@@", json.dumps(models)).replace("@@BACKENDS@@", json.dumps([args.keras_backend]))
    loop = f"loop = {json.dumps([args.loop])}" if args.loop else '# loop = ["fit"]'
    if args.trials is not None and args.trials < 2:
        raise UsageError(f"--trials must be at least 2 (two a side, the least a check compares), not {args.trials}")
    trials = f"trials = {args.trials}" if args.trials else f"# trials = {TRIALS}"
    text = text.replace("@@LOOP@@", loop).replace("@@TRIALS@@", trials)
    if args.import_command:
        line = f"models = {json.dumps(models)}\n"
        settings = IMPORT_SETTINGS.format(json.dumps(args.import_command), json.dumps(args.import_results),
                                          f"import-format = {json.dumps(args.import_format)}\n" if args.import_format
                                          else "")  # fmt: skip
        text = text.replace(line, f"# {line}{settings}")
    return text


# The settings ``--import`` writes: the command, and what it writes.
IMPORT_SETTINGS = """
# Your own benchmark command, instead of models: every `stepwatch run` here (the nightly's) runs it in this folder
# and imports what it writes (pytest-benchmark, asv, Google Benchmark, PyTorch's v3 records, torchtitan's TensorBoard
# folder, MLPerf logs, github-action-benchmark's or Bencher's JSON: stepwatch's docs/imports), and a check of a pull
# request or of a change the nightly suspects (`code-check`, `alerts verify`) runs it on both commits, interleaved.
import = {}
import-results = {}
{}
"""


def ignore_results(root: Path) -> str | None:
    """The lines of ``IGNORED`` that .gitignore lacks, added (the file made if there is none); what was done."""
    path = root / ".gitignore"
    text = path.read_text() if path.exists() else ""
    missing = [line for line in IGNORED if line not in text.splitlines()]
    if not missing:
        return None
    lead = "" if not text or text.endswith("\n") else "\n"
    try:
        with open(path, "a") as out:
            out.write(lead + "# stepwatch's results and stores (stepwatch init)\n" + "".join(f"{m}\n" for m in missing))
    except OSError as error:
        raise UsageError(f"cannot write .gitignore: {error.strerror or error}") from None
    return f"added {', '.join(missing)} to .gitignore"


def _write(root: Path, path: Path, text: str) -> None:
    """Write a file that does not exist yet; say so, or that it was kept."""
    shown = path.relative_to(root)
    if path.exists():
        print(f"kept {shown}: it exists")
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x") as out:
            out.write(text)
    except OSError as error:
        raise UsageError(f"cannot write {shown}: {error.strerror or error}") from None
    print(f"wrote {shown}")


def run(args: argparse.Namespace) -> int:
    """Write what is missing; say what was written and what was kept."""
    if args.shards < 1:
        raise UsageError("--shards must be at least 1")
    if args.gpu_batch < 1:
        raise UsageError("--gpu-batch must be at least 1")
    if bool(args.import_command) != bool(args.import_results):
        raise UsageError("--import COMMAND and --import-results PATH go together: the command, and what it writes")
    import_command(args)  # its format, where one is named, is one stepwatch reads
    if not matrix(args):
        raise UsageError("no runner for the nightly: give --cpu-runner, --gpu-runner or --tpu-runner")
    root = args.dir.resolve()
    if not root.is_dir():
        raise UsageError(f"{args.dir} is not a directory")
    existing = Project.find(root)
    if existing.root == root:
        print(f"kept {existing.source.relative_to(root)}: it already holds stepwatch's settings")
    else:
        _write(root, root / CONFIG_FILE, starter_config(args))
    # The workflows after the settings: their shards are planned from them.
    for name, template in WORKFLOW_FILES.items():
        _write(root, root / WORKFLOWS / name, render(template, args, root))
    labels = runner_labels(args)
    if labels:
        _write(root, root / ".github" / "actionlint.yaml", ACTIONLINT.format(labels=json.dumps(labels)))
    ignored = ignore_results(root)
    if ignored:
        print(ignored)
    if not args.action and source_commit() is None:
        print(UNPINNED.format(version=version(), repository=ACTION_REPOSITORY))
    print("next: edit stepwatch.toml, then `stepwatch run` here; commit the workflows to run it nightly and on "
          "pull requests")  # fmt: skip
    return EXIT_OK
