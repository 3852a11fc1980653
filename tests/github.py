"""A workflow run replayed on this machine the way GitHub documents that it runs one, for the tests of the
workflows ``stepwatch init`` writes: each job in a fresh workspace (a clone of the repository, as actions/checkout
makes it), its steps in order with the variables GitHub sets, ``if:`` and ``${{ }}`` evaluated, each step's
``$GITHUB_OUTPUT`` read back as its outputs; artifacts laid out as actions/upload-artifact and
actions/download-artifact document, caches restored and saved as actions/cache documents. A ``git`` remote on disk
stands for the repository on GitHub (``GITHUB_SERVER_URL`` is its ``file://`` parent).

What it does not replay, said where it is skipped: installing Python (setup-python: this machine's is used), the
team's own requirements (``NOT_REPLAYED``), and
stepwatch's own install step of the action unless ``GitHub.action`` names the action's files (stepwatch is then
installed in the environment the steps run in; a stranger's first pull request in the adoption test has the install
step replayed, into a fresh environment, from the package index). GitHub Pages' deployment is GitHub's: the page is
checked as the artifact that would be deployed.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO

STEPWATCH_ACTION = "stepwatch/stepwatch@"  # how the workflows under test name stepwatch's action
# Steps not replayed, by name, and why.
NOT_REPLAYED = {
    "The project's own environment": "the team's requirements: the environment the steps run in is theirs already",
}


# --- Expressions (https://docs.github.com/en/actions/reference/evaluate-expressions-in-workflows-and-actions) ---

TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||[!(),\[\]])"
                   r"|(?P<name>[A-Za-z_][\w-]*(?:\.[\w*-]+|\[[^\]]+\])*))")  # fmt: skip


class Expression:
    """One expression, parsed and evaluated over ``contexts`` (github, env, matrix, steps, needs, ...). The
    operators GitHub documents that these workflows use: ``!``, ``==`` and ``!=`` (strings compared ignoring case),
    ``&&`` and ``||`` (each gives one of its operands, as in JavaScript), the status functions, ``hashFiles``,
    ``fromJSON``, ``toJSON``, ``startsWith``. Anything else raises: a workflow that uses more is not replayed
    silently wrong."""

    def __init__(self, text: str, contexts: dict[str, Any], functions: dict[str, Callable[..., Any]]) -> None:
        self.tokens, at = [], 0
        while at < len(text.rstrip()):
            found = TOKEN.match(text, at)
            if not found or found.end() == at:
                raise ValueError(f"cannot parse the expression {text!r} at {text[at:]!r}")
            self.tokens.append((found.lastgroup, found.group(found.lastgroup)))
            at = found.end()
        self.at, self.contexts, self.functions = 0, contexts, functions

    def value(self) -> Any:
        result = self._or()
        if self.at != len(self.tokens):
            raise ValueError(f"unexpected {self.tokens[self.at]}")
        return result()

    # Each rule parses and returns a thunk: ``&&`` and ``||`` evaluate their right side only when GitHub would.

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _take(self, op: str) -> bool:
        if self._peek() == ("op", op):
            self.at += 1
            return True
        return False

    def _or(self) -> Callable[[], Any]:
        left = self._and()
        while self._take("||"):
            right, first = self._and(), left
            left = lambda first=first, right=right: (lambda v: v if truthy(v) else right())(first())  # noqa: E731
        return left

    def _and(self) -> Callable[[], Any]:
        left = self._compare()
        while self._take("&&"):
            right, first = self._compare(), left
            left = lambda first=first, right=right: (lambda v: right() if truthy(v) else v)(first())  # noqa: E731
        return left

    def _compare(self) -> Callable[[], Any]:
        left = self._unary()
        for op in ("==", "!="):
            if self._take(op):
                right = self._unary()
                return lambda: equal(left(), right()) == (op == "==")
        return left

    def _unary(self) -> Callable[[], Any]:
        if self._take("!"):
            inner = self._unary()
            return lambda: not truthy(inner())
        if self._take("("):
            inner = self._or()
            assert self._take(")"), "unbalanced parentheses"
            return inner
        kind, text = self.tokens[self.at]
        self.at += 1
        if kind == "str":
            return lambda: text[1:-1].replace("''", "'")
        if kind == "num":
            return lambda: float(text)
        if kind == "name" and self._take("("):
            args = []
            while not self._take(")"):
                args.append(self._or())
                self._take(",")
            if text not in self.functions:
                raise ValueError(f"function {text}() is not replayed")
            function = self.functions[text]
            return lambda: function(*(arg() for arg in args))
        if text in ("true", "false", "null"):
            return lambda: {"true": True, "false": False, "null": None}[text]
        return lambda: lookup(self.contexts, text)


def lookup(contexts: dict[str, Any], name: str) -> Any:
    """``a.b['c'].d`` in the contexts; a missing property is null, as GitHub evaluates it."""
    value: Any = contexts
    for bracket, plain in re.findall(r"\['([^']+)'\]|([\w*-]+)", name):
        value = value.get(bracket or plain) if isinstance(value, dict) else None
    return value


STATUS_RULE = (
    "GitHub's docs, 'Status check functions': 'A default status check of success() is applied unless you include one "
    "of these functions' (success(), always(), cancelled(), failure()) in an if conditional."
)


def status_checked(condition: Any) -> str:
    """A job's or step's ``if:`` as GitHub evaluates it (``STATUS_RULE``): ``success() && (...)`` unless it calls a
    status check function itself; ``success()`` where there is none."""
    if condition is None:
        return "success()"
    text = str(condition).strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2].strip()
    if re.search(r"\b(success|always|cancelled|failure)\(\)", text):
        return text
    return f"success() && ({text})"


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, 0.0, "")


def _number(value: Any) -> float:
    """A value as GitHub coerces it to compare values of two types: null 0, a boolean 1 or 0, a string its number
    ('' is 0), anything else NaN."""
    if value is None or isinstance(value, bool | int | float):
        return float(value or 0)
    if isinstance(value, str):
        try:
            return float(value.strip() or 0)
        except ValueError:
            return float("nan")
    return float("nan")


def equal(a: Any, b: Any) -> bool:
    """``==``: strings ignoring case, values of two types as numbers (so ``null == ''``)."""
    if isinstance(a, str) and isinstance(b, str):
        return a.casefold() == b.casefold()
    if type(a) is type(b) and not isinstance(a, str | bool | int | float | type(None)):
        return a is b
    return _number(a) == _number(b)


def text_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else json.dumps(value)


# --- Artifacts and caches ---

UPLOAD_RULE = (
    "actions/upload-artifact (v4 README): 'If multiple paths are provided as input, the least common ancestor of "
    "all the search paths will be used as the root directory of the artifact.' A wildcard keeps the hierarchy after "
    "the first wildcard; 'include-hidden-files' (default false): 'If false, hidden files will be excluded from the "
    "artifact.' 'if-no-files-found': warn: no artifact is made."
)
CONFLICT_RULE = (
    "actions/upload-artifact (v4 README, 'Overwriting an Artifact'): an artifact's name is unique in its workflow run, "
    "over all its attempts; uploading one of a name already there fails ('Failed to CreateArtifact: Received "
    "non-retryable error: Failed request: (409) Conflict: an artifact with this name already exists on the workflow "
    "run') unless 'overwrite: true' deletes it first. actions/upload-pages-artifact (v3) uploads one named by its "
    "'name' input (default github-pages) and has no such input; actions/deploy-pages (v4) deploys the one its "
    "'artifact_name' input names (default github-pages), and fails where there is none ('No uploaded artifact was "
    "found!')."
)
DOWNLOAD_RULE = (
    "actions/download-artifact (v4 README): 'merge-multiple: When multiple artifacts are matched, this changes the "
    "behavior of the destination directories. If true, the downloaded artifacts will be in the same directory "
    "specified by path. If false, the downloaded artifacts will be extracted into individual named directories "
    "within the specified path.' Downloaded by name, an artifact's files land in path itself."
)


def _search_root(workspace: Path, pattern: str) -> Path:
    """A path's search path, as the artifact client's globber gives it: the folders before the first wildcard."""
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if any(c in part for c in "*?["):
            return workspace.joinpath(*fixed)
        fixed.append(part)
    target = workspace.joinpath(*fixed)
    return target if target.is_dir() else target.parent


def _matches(workspace: Path, pattern: str) -> list[Path]:
    target = workspace / pattern
    if not any(c in pattern for c in "*?["):
        if target.is_dir():
            return [p for p in target.rglob("*") if p.is_file()]
        return [target] if target.is_file() else []
    found = [p for p in workspace.rglob("*") if p.is_file()]
    return [p for p in found if fnmatch.fnmatch(str(p.relative_to(workspace)), pattern.rstrip("/"))]


def upload(workspace: Path, path_input: str, include_hidden: bool = False) -> dict[str, bytes]:
    """The files an upload-artifact step stores, keyed by their path in the artifact (``UPLOAD_RULE``)."""
    patterns = [line.strip() for line in path_input.splitlines() if line.strip()]
    roots = [_search_root(workspace, p) for p in patterns]
    root = Path(os.path.commonpath([str(r) for r in roots])) if len(roots) > 1 else roots[0]
    files = {}
    for pattern in patterns:
        for path in _matches(workspace, pattern):
            relative = path.relative_to(root)
            if not include_hidden and any(part.startswith(".") for part in relative.parts):
                continue
            files[str(relative)] = path.read_bytes()
    return files


def conflict(artifacts: dict[str, dict[str, bytes]], name: str, overwrite: bool) -> str | None:
    """Why an upload of ``name`` fails in a run that holds ``artifacts`` (``CONFLICT_RULE``), or None."""
    if name in artifacts and not overwrite:
        return ("Failed to CreateArtifact: Received non-retryable error: Failed request: (409) Conflict: an artifact "
                "with this name already exists on the workflow run")  # fmt: skip
    return None


def download(workspace: Path, artifacts: dict[str, dict[str, bytes]], inputs: dict[str, str]) -> None:
    """A download-artifact step (``DOWNLOAD_RULE``)."""
    target = workspace / (inputs.get("path") or ".")
    if inputs.get("name"):
        chosen, single = {inputs["name"]: artifacts[inputs["name"]]}, True
    else:
        pattern = inputs.get("pattern") or "*"
        chosen, single = {n: a for n, a in artifacts.items() if fnmatch.fnmatch(n, pattern)}, False
    merge = inputs.get("merge-multiple", "false").lower() == "true"
    for name, files in chosen.items():
        folder = target if single or merge else target / name
        for relative, data in files.items():
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_bytes(data)


CACHE_RULE = (
    "GitHub's docs, 'Restrictions for accessing a cache': 'Workflow runs can restore caches created in either the "
    "current branch or the default branch (usually main).' A cache a pull_request run saves is scoped to its "
    "refs/pull/N/merge ref, so another pull request never restores it. actions/cache (README, 'Cache matching'): the "
    "key exactly, else the newest entry a restore key prefixes, in the current branch first, then in the default "
    "branch; a key that exists is not saved again."
)
DEFAULT_BRANCH = "refs/heads/main"


@dataclass
class Caches:
    """actions/cache (``CACHE_RULE``): an entry per key (its paths' files), scoped to the ref of the run that saved
    it. Evicting drops every entry."""

    entries: list[tuple[str, dict[str, bytes], str]] = field(default_factory=list)

    def restore(self, workspace: Path, key: str, restore_keys: list[str], ref: str) -> str | None:
        found = None
        for scope in dict.fromkeys([ref, DEFAULT_BRANCH]):
            mine = [e for e in self.entries if e[2] == scope]
            found = next((e for e in mine if e[0] == key), None)
            for prefix in restore_keys:
                found = found or next((e for e in reversed(mine) if e[0].startswith(prefix)), None)
            if found is not None:
                break
        if found is None:
            return None
        for relative, data in found[1].items():
            (workspace / relative).parent.mkdir(parents=True, exist_ok=True)
            (workspace / relative).write_bytes(data)
        return found[0]

    def save(self, workspace: Path, key: str, paths: list[str], ref: str) -> None:
        if any(e[0] == key for e in self.entries):
            return
        files = {}
        for path in paths:
            target = workspace / path
            members = [p for p in target.rglob("*") if p.is_file()] if target.is_dir() else [target]
            files |= {str(p.relative_to(workspace)): p.read_bytes() for p in members if p.is_file()}
        self.entries.append((key, files, ref))

    def evict(self) -> None:
        self.entries.clear()


# --- Runs ---


@dataclass
class Step:
    name: str
    outcome: str  # success, failure, skipped
    outputs: dict[str, str]
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0


@dataclass
class JobRun:
    name: str
    result: str
    steps: list[Step]
    outputs: dict[str, str]
    workspace: Path
    summary: str


@dataclass
class GitHub:
    """A repository on "GitHub" (a bare remote on disk), its artifacts per run and its caches, and the environment
    (a Python with stepwatch installed) that steps run in."""

    root: Path
    repository: str
    env: dict[str, str]
    caches: Caches = field(default_factory=Caches)
    runs: int = 0
    artifacts: dict[str, dict[str, dict[str, bytes]]] = field(default_factory=dict)  # run id -> its artifacts
    variables: dict[str, str] = field(default_factory=dict)  # the repository's variables (the ``vars`` context)
    secrets: dict[str, str] = field(default_factory=dict)  # the repository's secrets (the ``secrets`` context)
    # The action's files as a runner checks them out (``action_files``): its install step is then replayed too,
    # into the Python the steps find first on their PATH; None: that step is skipped (see the module's docstring).
    action: Path | None = None
    attempts: dict[str, tuple[dict, str, dict, dict, dict[str, list[JobRun]], int]] = field(default_factory=dict)

    @property
    def server(self) -> Path:
        return self.root / "github"

    @property
    def remote(self) -> Path:
        return self.server / self.repository

    def run_workflow(
        self,
        workflow: dict,
        event: str = "schedule",
        inputs: dict[str, str] | None = None,
        payload: dict[str, Any] | None = None,
    ) -> dict[str, list[JobRun]]:
        """One run of ``workflow``: its jobs in the order of their needs, a matrix job once per include. ``payload``
        is the event's (``github.event``: a pull request's numbers and commits, the run a workflow_run follows).
        Its artifacts are kept under its run id (``github.run_id``), where another run's download-artifact with
        ``run-id`` finds them."""
        self.runs += 1
        run_id = str(1000 + self.runs)
        self.artifacts[run_id] = {}
        return self._attempt(workflow, event, inputs or {}, payload or {}, run_id, 1, {})

    def rerun(self, run_id: str, failed_only: bool = False) -> dict[str, list[JobRun]]:
        """Another attempt of run ``run_id`` (GitHub's "Re-run all jobs", or with ``failed_only`` "Re-run failed
        jobs": the failed jobs and the jobs that depend on them run again; the others keep their results and outputs).
        The run keeps its id and its artifacts; ``github.run_attempt`` counts up."""
        workflow, event, inputs, payload, done, attempt = self.attempts[run_id]
        kept = {job: runs for job, runs in done.items() if failed_only and _result(runs) != "failure"}
        for job_id, job in workflow["jobs"].items():  # a job that needs one run again runs again
            needs = job.get("needs", [])
            if any(n not in kept for n in ([needs] if isinstance(needs, str) else needs)):
                kept.pop(job_id, None)
        return self._attempt(workflow, event, inputs, payload, run_id, attempt + 1, kept)

    def _attempt(
        self, workflow: dict, event: str, inputs: dict, payload: dict, run_id: str, attempt: int,
        kept: dict[str, list[JobRun]],
    ) -> dict[str, list[JobRun]]:  # fmt: skip
        artifacts = self.artifacts[run_id]
        self.payload = payload
        self.run = (run_id, str(attempt))
        done: dict[str, list[JobRun]] = {}
        for job_id, job in workflow["jobs"].items():
            if job_id in kept:
                done[job_id] = kept[job_id]
                continue
            needs = job.get("needs", [])
            needs = [needs] if isinstance(needs, str) else needs
            needs_ctx = {n: {"result": _result(done[n]), "outputs": _outputs(done[n])} for n in needs}
            base = {"inputs": inputs, "needs": needs_ctx, "github": self._github(event)}
            condition = status_checked(job.get("if"))
            failed_needs = any(v["result"] != "success" for v in needs_ctx.values())
            includes = job.get("strategy", {}).get("matrix", {}).get("include") or [None]
            runs = []
            for index, matrix in enumerate(includes):
                ctx = {**base, "matrix": matrix or {}, "strategy": {"job-index": index}}
                status = {"success": not failed_needs, "failure": failed_needs}
                if not truthy(self._eval(condition, ctx, status, Path("."))):
                    runs.append(JobRun(job_id, "skipped", [], {}, Path("."), ""))
                    continue
                runs.append(self._job(job_id, job, ctx, artifacts))
            done[job_id] = runs
        self.attempts[run_id] = (workflow, event, inputs, payload, done, attempt)
        return done

    def _github(self, event: str) -> dict[str, Any]:
        run_id, attempt = getattr(self, "run", (str(1000 + self.runs), "1"))
        payload = getattr(self, "payload", {})
        # GITHUB_REF (docs, "Events that trigger workflows"): a pull request's merge ref; a schedule's, a
        # workflow_dispatch's and a workflow_run's, the default branch.
        pull = payload.get("pull_request", {}).get("number")
        ref = f"refs/pull/{pull}/merge" if event == "pull_request" and pull else DEFAULT_BRANCH
        return {"run_id": run_id, "run_attempt": attempt, "repository": self.repository, "ref": ref,
                "server_url": self.server.as_uri(), "token": "replayed-token", "event_name": event,
                "event": payload}  # fmt: skip

    def _eval(self, text: str, ctx: dict, status: dict[str, bool], workspace: Path) -> Any:
        text = str(text).strip()
        if text.startswith("${{") and text.endswith("}}"):
            text = text[3:-2]

        def hash_files(*patterns: str) -> str:
            found = sorted(p for pattern in patterns for p in _matches(workspace, pattern))
            return "hash" + str(len(found)) if found else ""

        functions = {
            "always": lambda: True, "success": lambda: status["success"], "failure": lambda: status["failure"],
            "cancelled": lambda: False, "hashFiles": hash_files, "fromJSON": json.loads, "toJSON": json.dumps,
            "startsWith": lambda text, start: text_of(text).casefold().startswith(text_of(start).casefold()),
        }  # fmt: skip
        return Expression(text, ctx, functions).value()

    def _expand(self, value: Any, ctx: dict, status: dict[str, bool], workspace: Path) -> str:
        return re.sub(r"\$\{\{(.*?)\}\}", lambda m: text_of(self._eval(m.group(1), ctx, status, workspace)),
                      str(value))  # fmt: skip

    def _job(self, job_id: str, job: dict, ctx: dict, artifacts: dict[str, dict[str, bytes]]) -> JobRun:
        attempt = "" if ctx["github"]["run_attempt"] == "1" else f"-attempt{ctx['github']['run_attempt']}"
        workspace = self.root / f"run{self.runs}-{job_id}-{ctx['strategy']['job-index']}{attempt}"
        shutil.rmtree(workspace, ignore_errors=True)
        workspace.mkdir(parents=True)  # the runner's workspace exists before any step (a job may check nothing out)
        summary = workspace.parent / f"{workspace.name}.summary.md"
        summary.write_text("")
        status = {"success": True, "failure": False}
        steps_ctx: dict[str, dict] = {}
        # A Linux runner's context (docs: "runner context": os Linux, arch X64, environment github-hosted for the
        # runners GitHub hosts, named by their ubuntu-* labels, else self-hosted).
        labels = self._expand(job.get("runs-on", ""), {**ctx, "secrets": self.secrets, "vars": self.variables},
                              status, workspace)  # fmt: skip
        hosted = any(label.strip("[]\"' ").startswith("ubuntu-") for label in labels.split(","))
        ctx = {
            **ctx,
            "steps": steps_ctx,
            "secrets": self.secrets,
            "vars": self.variables,
            "env": {},
            "runner": {"os": "Linux", "arch": "X64", "environment": "github-hosted" if hosted else "self-hosted"},
        }
        env = {k: self._expand(v, ctx, status, workspace) for k, v in job.get("env", {}).items()}
        ctx["env"] = env
        steps = []
        for number, step in enumerate(job["steps"]):
            sid = step.get("id", f"__{number}")
            condition = status_checked(step.get("if"))
            if not truthy(self._eval(condition, ctx, status, workspace)):
                steps.append(Step(step.get("name", sid), "skipped", {}))
                steps_ctx[sid] = {"outcome": "skipped", "conclusion": "skipped", "outputs": {}}
                continue
            start = time.perf_counter()
            ran = self._step(step, ctx, status, workspace, env, artifacts, summary)
            ran.seconds = time.perf_counter() - start
            steps.append(ran)
            steps_ctx[sid] = {"outcome": ran.outcome, "conclusion": ran.outcome, "outputs": ran.outputs}
            if ran.outcome == "failure" and not step.get("continue-on-error"):
                status = {"success": False, "failure": True}
        outputs = {k: self._expand(v, ctx, status, workspace) for k, v in job.get("outputs", {}).items()}
        return JobRun(job_id, "failure" if status["failure"] else "success", steps, outputs, workspace,
                      summary.read_text())  # fmt: skip

    def _shell(self, script: str, env: dict[str, str], workspace: Path, name: str) -> Step:
        """A ``run:`` step: GitHub runs it as ``bash -e {0}`` in the workspace, ``$GITHUB_OUTPUT`` a file of its own."""
        output = workspace.parent / f"{workspace.name}.output"
        output.write_text("")
        done = subprocess.run(["bash", "-e", "-c", script], cwd=workspace, env={**env, "GITHUB_OUTPUT": str(output)},
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
        return Step(name, "success" if done.returncode == 0 else "failure", outputs, done.stdout, done.stderr)

    def _step(
        self, step: dict, ctx: dict, status: dict, workspace: Path, job_env: dict, artifacts: dict, summary: Path
    ) -> Step:
        name = step.get("name") or step.get("uses") or "run"
        with_ = {k: self._expand(v, ctx, status, workspace) for k, v in step.get("with", {}).items()}
        step_env = {k: self._expand(v, ctx, status, workspace) for k, v in step.get("env", {}).items()}
        env = {**self.env, **self._variables(ctx, workspace, summary), **job_env, **step_env}
        uses = step.get("uses", "")
        if name in NOT_REPLAYED:
            return Step(name, "success", {})
        if "run" in step:
            return self._shell(step["run"], env, workspace, name)
        if uses.startswith("actions/checkout@"):  # fetch-depth 1 unless told (0: every commit), as the action does
            depth = with_.get("fetch-depth", "1")
            shallow = [] if depth == "0" else ["--depth", depth]
            source = str(self.remote) if depth == "0" else self.remote.resolve().as_uri()  # --depth needs a URL
            done = subprocess.run(["git", "clone", "--quiet", *shallow, source, str(workspace)], capture_output=True,
                                  text=True)  # fmt: skip
            if done.returncode == 0 and ctx["github"]["event_name"] == "pull_request":
                done = self._merge_ref(workspace, ctx["github"], env)
            return Step(name, "success" if done.returncode == 0 else "failure", {}, "", done.stderr)
        if uses.startswith("actions/setup-python@"):
            return Step(name, "success", {})  # this machine's Python (see the module's docstring)
        if uses.startswith(STEPWATCH_ACTION) or uses == "./":
            return self._stepwatch_action(with_, env, workspace, name)
        if uses.startswith("actions/upload-artifact@"):
            files = upload(workspace, with_["path"], with_.get("include-hidden-files", "false").lower() == "true")
            called = with_.get("name", "artifact")
            refused = conflict(artifacts, called, with_.get("overwrite", "false").lower() == "true") if files else None
            if refused:
                return Step(name, "failure", {}, "", refused)
            if files:
                artifacts[called] = files
            return Step(name, "success", {})
        if uses.startswith("actions/download-artifact@"):  # with run-id: another run's (a workflow_run's)
            download(workspace, self.artifacts[with_["run-id"]] if with_.get("run-id") else artifacts, with_)
            return Step(name, "success", {})
        if uses.startswith("actions/cache/restore@"):
            keys = [k.strip() for k in with_.get("restore-keys", "").splitlines() if k.strip()]
            hit = self.caches.restore(workspace, with_["key"], keys, ctx["github"]["ref"])
            return Step(name, "success", {"cache-hit": text_of(hit == with_["key"]), "cache-matched-key": hit or ""})
        if uses.startswith("actions/cache/save@"):
            paths = [p.strip() for p in with_["path"].splitlines() if p.strip()]
            self.caches.save(workspace, with_["key"], paths, ctx["github"]["ref"])
            return Step(name, "success", {})
        if uses.startswith("actions/upload-pages-artifact@"):
            called = with_.get("name") or "github-pages"
            refused = conflict(artifacts, called, overwrite=False)
            if refused:
                return Step(name, "failure", {}, "", refused)
            site = workspace / with_.get("path", "_site")
            with tarfile.open(workspace.parent / f"{workspace.name}.pages.tar", "w") as tar:
                tar.add(site, arcname=".")
            artifacts[called] = {"artifact.tar": (workspace.parent / f"{workspace.name}.pages.tar").read_bytes()}
            return Step(name, "success", {})
        if uses.startswith("actions/deploy-pages@"):  # the deployment is GitHub's (see the docstring)
            if (with_.get("artifact_name") or "github-pages") not in artifacts:
                return Step(name, "failure", {}, "", "Error: No uploaded artifact was found!")
            return Step(name, "success", {"page_url": "https://pages.invalid/"})
        raise AssertionError(f"step {name}: {uses} is not replayed")

    def _variables(self, ctx: dict, workspace: Path, summary: Path) -> dict[str, str]:
        """What GitHub sets in every step's environment (the documented default variables these steps read)."""
        github = ctx["github"]
        return {"GITHUB_ACTIONS": "true", "CI": "true", "GITHUB_WORKSPACE": str(workspace),
                "GITHUB_REPOSITORY": github["repository"], "GITHUB_SERVER_URL": github["server_url"],
                "GITHUB_RUN_ID": github["run_id"], "GITHUB_RUN_ATTEMPT": github["run_attempt"],
                "GITHUB_SHA": github.get("sha") or self._head(), "GITHUB_EVENT_NAME": github["event_name"],
                "GITHUB_REF": github["ref"],
                "GITHUB_STEP_SUMMARY": str(summary), "RUNNER_TEMP": str(workspace.parent),
                "RUNNER_OS": ctx["runner"]["os"], "RUNNER_ARCH": ctx["runner"]["arch"],
                "RUNNER_ENVIRONMENT": ctx["runner"]["environment"]}  # fmt: skip

    def _merge_ref(self, workspace: Path, github: dict[str, Any], env: dict[str, str]) -> subprocess.CompletedProcess:
        """What a pull_request run checks out (GitHub's docs: GITHUB_SHA is "the last merge commit on the
        GITHUB_REF branch", refs/pull/N/merge): the pull request's head merged into its base, as GitHub makes it.
        That commit is GITHUB_SHA for the rest of the job."""
        pull = github["event"]["pull_request"]
        merged = subprocess.run(
            ["bash", "-c", 'git checkout -q --detach "$0" && git merge -q --no-ff --no-edit -m "Merge $1" "$1" && '
             "git rev-parse HEAD", pull["base"]["sha"], pull["head"]["sha"]],
            cwd=workspace, capture_output=True, text=True, env=env,
        )  # fmt: skip
        if merged.returncode == 0:
            github["sha"] = merged.stdout.split()[-1]
        return merged

    def _head(self) -> str:
        done = subprocess.run(["git", "--git-dir", str(self.remote), "rev-parse", "main"], capture_output=True,
                              text=True)  # fmt: skip
        return done.stdout.strip()

    def _stepwatch_action(self, with_: dict[str, str], env: dict[str, str], workspace: Path, name: str) -> Step:
        """stepwatch's composite action: its steps, their ``${{ inputs.X }}`` from ``with`` (else the input's
        default), its install step aside (see the module's docstring)."""
        outputs: dict[str, str] = {}
        last, stdout, stderr = Step(name, "success", {}), [], []
        for inner in action_steps(with_, self.action or REPO):
            if inner["name"] == "Install stepwatch" and self.action is None:
                continue
            last = self._shell(inner["run"], {**env, **inner["env"]}, workspace, name)
            outputs |= last.outputs
            stdout.append(last.stdout)
            stderr.append(last.stderr)
            if last.outcome == "failure":
                break
        return Step(name, last.outcome, outputs, "".join(stdout), "".join(stderr))


def action_files(target: Path) -> Path:
    """stepwatch's action as a runner checks it out for ``uses:``: the repository's files (those git tracks, and
    those it would), without its build outputs or environments."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source, copy = REPO / name, target / name
        if source.is_symlink() or source.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.symlink_to(os.readlink(source)) if source.is_symlink() else shutil.copy2(source, copy)
    return target


def action_steps(with_: dict[str, str], path: Path = REPO) -> list[dict]:
    """stepwatch's action (a composite) as the runner runs it for a step's ``with``: its steps, their
    ``${{ inputs.X }}`` taken from ``with`` (else the input's default), ``${{ github.action_path }}`` its folder
    (``path``)."""
    action = yaml.safe_load((path / "action.yml").read_text())
    given = {name: str(with_.get(name, spec.get("default", ""))) for name, spec in action["inputs"].items()}

    def value(text: str) -> str:
        text = re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", lambda m: given[m.group(1)], text)
        return text.replace("${{ github.action_path }}", str(path))

    return [{**step, "env": {k: value(str(v)) for k, v in step.get("env", {}).items()}} for step in
            action["runs"]["steps"]]  # fmt: skip


def _result(runs: list[JobRun]) -> str:
    """A (matrix) job's result as ``needs`` gives it: failure if any failed, skipped if all were."""
    results = {r.result for r in runs}
    return "failure" if "failure" in results else "skipped" if results == {"skipped"} else "success"


def _outputs(runs: list[JobRun]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for run in runs:
        merged |= run.outputs
    return merged
