"""A pull request's two images: the image the project's suite runs in at the commit the pull request branched from (the
merge base) and at its head, for the upgrade-pr workflow's image check (``upgrade-check --baseline image=REF
--candidate image=REF``).

At each commit, the project's settings (its ``stepwatch.toml``, read at that commit with git) say which image:

- ``image = "REF"``: that image (a team that runs its suite in a framework container, ``nvcr.io/nvidia/pytorch:...``);
- else its Dockerfile (``dockerfile = "PATH"``, default ``Dockerfile`` at the top): the image built from it at that
  commit (the commit's files as the build context, tagged ``localhost/stepwatch-pr:<commit>``), so that a changed
  ``FROM`` line, and whatever else the file changes, is checked as what the team ships.

Nothing to check where neither commit names an image, or where both name the same one in the same way (the same
setting, or the same Dockerfile text).
"""

from __future__ import annotations

import re
import subprocess
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from stepwatch.collector.environments import containers, worktrees
from stepwatch.collector.project import CONFIG_FILE

DEFAULT_DOCKERFILE = "Dockerfile"
BUILT = "localhost/stepwatch-pr"  # the tag of an image built from a commit's Dockerfile: BUILT:<commit>
BUILD_TIMEOUT_S = 3600.0


class ImageSideError(containers.ImageError):
    """A side's image that cannot be named or built, in one line."""


@dataclass(frozen=True)
class Declared:
    """How a commit names its image: a setting's reference, or a Dockerfile's path and text (and its FROM lines)."""

    commit: str
    image: str | None = None
    dockerfile: str | None = None
    text: str | None = None

    @property
    def named(self) -> bool:
        return bool(self.image or self.text)

    @property
    def how(self) -> str:
        if self.image:
            return f"{CONFIG_FILE}'s image {self.image}"
        bases = re.findall(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", self.text or "", re.I | re.M)
        return f"{self.dockerfile} (FROM {', '.join(bases) or '?'})"


def _show(repo: Path, commit: str, path: str) -> str | None:
    done = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def declared(repo: Path, commit: str) -> Declared:
    """What the commit's settings name: its ``image``, else its Dockerfile's text (None where it has neither)."""
    settings: dict = {}
    text = _show(repo, commit, CONFIG_FILE)
    if text is not None:
        try:
            settings = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ImageSideError(f"{CONFIG_FILE} at {commit[:12]} cannot be read: {error}") from None
    image = settings.get("image")
    if image is not None and (not isinstance(image, str) or not image.strip()):
        raise ImageSideError(f"{CONFIG_FILE} at {commit[:12]}: image must be an image reference, not {image!r}")
    dockerfile = str(settings.get("dockerfile") or DEFAULT_DOCKERFILE)
    if image:
        return Declared(commit, image=image.strip())
    return Declared(commit, dockerfile=dockerfile, text=_show(repo, commit, dockerfile))


def build(repo: Path, side: Declared, engine_path: str) -> str:
    """The image built from the commit's Dockerfile, its files (``git archive``) the build context; its tag."""
    tag = f"{BUILT}:{side.commit[:12]}"
    with tempfile.TemporaryDirectory(prefix="stepwatch-image-") as tmp:
        archive = Path(tmp) / "context.tar"
        subprocess.run(["git", "-C", str(repo), "archive", "-o", str(archive), side.commit], check=True,
                       capture_output=True)  # fmt: skip
        context = Path(tmp) / "context"
        with tarfile.open(archive) as files:
            files.extractall(context, filter="data")
        done = subprocess.run([engine_path, "build", "-q", "-f", str(context / str(side.dockerfile)), "-t", tag,
                               str(context)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)  # fmt: skip
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        raise ImageSideError(f"cannot build {side.dockerfile} at {side.commit[:12]}: "
                             f"{lines[-1][:300] if lines else f'exit {done.returncode}'}")  # fmt: skip
    return tag


@dataclass(frozen=True)
class ImageSides:
    baseline: Declared
    candidate: Declared
    refs: tuple[str, str] | None = None  # the two images to check, once built (None: nothing to check)

    @property
    def changed(self) -> bool:
        return self.refs is not None


def of_refs(repo: Path, base: str, head: str, engine_choice: str | None = None) -> ImageSides:
    """The merge base's image and the head's, built where a Dockerfile names them, or no refs where neither names one
    or both name the same."""
    start, tip = worktrees.merge_base(repo, base, head), worktrees.commit_of(repo, head)
    a, b = declared(repo, start), declared(repo, tip)
    if not (a.named or b.named) or (a.image, a.dockerfile, a.text) == (b.image, b.dockerfile, b.text):
        return ImageSides(a, b)
    for side, found in (("merge base", a), ("head", b)):
        if not found.named:
            raise ImageSideError(f"the {side} ({found.commit[:12]}) names no image: no image setting in {CONFIG_FILE} "
                                 f"and no {found.dockerfile}")  # fmt: skip
    engine_path = containers.engine(engine_choice) if not (a.image and b.image) else ""
    refs = tuple(side.image or build(repo, side, engine_path) for side in (a, b))
    return ImageSides(a, b, (refs[0], refs[1]))


def outputs(found: ImageSides) -> str:
    """The step's outputs: changed=, and the two sides as upgrade-check takes them."""
    if not found.changed:
        return "changed=false\nbaseline=\ncandidate=\n"
    assert found.refs is not None
    return f"changed=true\nbaseline={containers.IMAGE}{found.refs[0]}\ncandidate={containers.IMAGE}{found.refs[1]}\n"


def markdown(found: ImageSides) -> str:
    """What the comment says of the two images."""
    if not found.changed:
        return ""
    assert found.refs is not None
    a, b = found.baseline, found.candidate
    return (f"**Images**: the merge base {a.commit[:12]} runs in {a.how} (`{found.refs[0]}`), the head "
            f"{b.commit[:12]} in {b.how} (`{found.refs[1]}`).\n")  # fmt: skip
