"""The README and the reference: every relative link and #anchor leads somewhere, and the README stays a
five-minute read that links the reference."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = [REPO / "README.md", REPO / "docs" / "reference.md", REPO / "data" / "reference" / "README.md",
        *sorted((REPO / "docs" / "imports").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for a markdown file's headings (outside code blocks)."""
    found, fence = set(), False
    for line in path.read_text().splitlines():
        fence ^= line.startswith("```")
        heading = re.match(r"^#{1,6} (.+)$", line)
        if heading and not fence:
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_relative_link_and_anchor_resolves(doc: Path) -> None:
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        assert path.exists(), f"{doc.name}: {target} does not exist"
        if anchor:
            assert anchor in anchors(path), f"{doc.name}: {target} names no heading of {path.name}"


def test_the_readme_is_short_and_leads_to_the_reference() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 120
    for heading in ("## Start", "## Before an upgrade, in three commands", "## What it found on real data"):
        assert heading in text
    assert "(docs/reference.md)" in text and "make run" in text and "make test" in text
