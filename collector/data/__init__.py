"""The data stepwatch ships: the price catalog, the peak FLOP/s of accelerators and the default per-series
thresholds. They travel inside the installed package and are read through ``importlib.resources``, wherever
stepwatch runs from."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def bundled(name: str) -> Path:
    """The path of the bundled data file ``name`` (``prices.toml``, ``accelerators.toml``, ``thresholds.toml``)."""
    return Path(str(resources.files(__name__) / name))
