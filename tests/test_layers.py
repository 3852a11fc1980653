"""The layers of pyproject.toml's import-linter contracts hold in this tree (no upward import, no circle), and an
upward import or a circle breaks them: the same check `make lint` and `make test` run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, copy_source

LINT = Path(sys.executable).parent / "lint-imports"


def _lint(tree: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "HOME": str(tree)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=300)


def test_an_upward_import_breaks_the_layers(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    copy_source(tree)
    shutil.copy(REPO / "pyproject.toml", tree / "pyproject.toml")
    kept = _lint(tree)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "stepwatch layers KEPT" in kept.stdout
    assert "stepwatch has no import circles KEPT" in kept.stdout

    queries = tree / "collector" / "store" / "queries.py"  # the store reaching up into the output layer
    text = queries.read_text()
    queries.write_text(
        text.replace("\nimport duckdb\n", "\nimport duckdb\n\nimport stepwatch.collector.output.text  # noqa\n", 1)
    )
    broken = _lint(tree)
    assert broken.returncode != 0
    assert "stepwatch layers BROKEN" in broken.stdout
    assert "stepwatch.collector.store.queries -> stepwatch.collector.output.text" in broken.stdout


def test_a_circle_breaks_the_contract_even_through_an_import_inside_a_function(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    copy_source(tree)
    shutil.copy(REPO / "pyproject.toml", tree / "pyproject.toml")
    sizes = tree / "trainers" / "resnet_sizes.py"  # imported by resnet50.py; importing it back closes a circle
    sizes.write_text(
        sizes.read_text() + "\n\ndef _keras_build():\n    from stepwatch.trainers import resnet50  # noqa\n"
    )
    broken = _lint(tree)
    assert broken.returncode != 0
    assert "stepwatch has no import circles BROKEN" in broken.stdout
    assert "stepwatch layers KEPT" in broken.stdout


MODULE_LINES = 550  # the most a module of the layout holds (docs/reference.md, "Layout")


def test_no_module_is_longer_than_the_layout_keeps_to() -> None:
    modules = [path for part in ("collector", "dashboard", "trainers") for path in (REPO / part).rglob("*.py")]
    lines = {str(path.relative_to(REPO)): len(path.read_text().splitlines()) for path in modules}
    assert len(lines) > 100 and max(lines.values()) > MODULE_LINES // 2
    assert {name: n for name, n in lines.items() if n > MODULE_LINES} == {}
