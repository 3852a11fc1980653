"""Reference data the collector reads: prices (``prices.toml``) and peak FLOP/s (``accelerators.toml``), bundled
with stepwatch (``stepwatch.collector.data``); a project names its own price catalog in its settings."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepwatch.collector.config import PRECISIONS
from stepwatch.collector.data import bundled
from stepwatch.collector.errors import UsageError

PRICES_PATH = bundled("prices.toml")
ACCELERATORS_PATH = bundled("accelerators.toml")


class CatalogError(UsageError):
    """A catalog file that cannot be used, in one line."""


@dataclass(frozen=True)
class Price:
    key: str
    device: str  # cpu, gpu or tpu (``backend`` in catalogs written before Keras backends)
    match: str
    per: str  # "device" or "host"
    usd_per_hour: float
    source: str
    date: str

    def hourly(self, num_devices: int) -> float:
        return self.usd_per_hour * (num_devices if self.per == "device" else 1)


@dataclass(frozen=True)
class Peak:
    match: str
    tflops: dict[str, float]
    cores_per_chip: int
    source: str


def _read(path: Path, table: str) -> list[dict[str, Any]]:
    try:
        entries = tomllib.loads(path.read_text()).get(table, [])
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise CatalogError(f"cannot read {path}: {error}") from None
    if not isinstance(entries, list):
        raise CatalogError(f"{path}: [[{table}]] must be an array of tables")
    return entries


def load_prices(path: Path = PRICES_PATH) -> list[Price]:
    """Every price entry; each must name its source and date."""
    prices = []
    for i, entry in enumerate(_read(path, "price")):
        if "backend" in entry and "device" not in entry:
            entry = {("device" if k == "backend" else k): v for k, v in entry.items()}
        try:
            price = Price(**entry)
        except TypeError as error:
            raise CatalogError(f"{path}: price #{i + 1}: {error}") from None
        if not price.source or not price.date:
            raise CatalogError(f"{path}: price {price.key!r} needs a source and a date")
        if price.per not in ("device", "host"):
            raise CatalogError(f"{path}: price {price.key!r}: per must be 'device' or 'host'")
        prices.append(price)
    return prices


def load_peaks(path: Path = ACCELERATORS_PATH) -> list[Peak]:
    """Peak dense TFLOP/s per precision for known accelerators."""
    peaks = []
    for entry in _read(path, "accelerator"):
        tflops = {p: float(entry[p]) for p in PRECISIONS if p in entry}
        peaks.append(Peak(entry["match"], tflops, int(entry.get("cores_per_chip", 1)), entry.get("source", "")))
    return peaks


def find_price(prices: list[Price], device: str, accelerator: str | None) -> Price | None:
    """The first price for this device kind whose pattern is found in the accelerator name."""
    for price in prices:
        if price.device == device and re.search(price.match, accelerator or ""):
            return price
    return None


def peak_tflops(
    peaks: list[Peak], accelerator: str | None, precision: str, num_devices: int
) -> tuple[float | None, str | None]:
    """Total dense peak of the devices a run used, or (None, None) where none is published."""
    if not accelerator:
        return None, None
    for peak in peaks:
        if re.search(peak.match, accelerator):
            per_chip = peak.tflops.get(precision)
            if per_chip is None:
                return None, None
            return per_chip * num_devices / peak.cores_per_chip, peak.source
    return None, None


def cost_columns(
    price: Price | None,
    override_per_hour: float | None,
    num_devices: int,
    wall_s: float | None,
    examples_per_sec: float | None,
) -> dict[str, Any]:
    """Cost of the run (its wall time) and of one million examples at its throughput."""
    if override_per_hour is not None:
        hourly, key, source, date = override_per_hour, "override", "--price-per-hour", None
        per_device = override_per_hour / num_devices
    elif price is not None:
        hourly, key, source, date = price.hourly(num_devices), price.key, price.source, price.date
        per_device = hourly / num_devices
    else:
        return {
            "price_key": None,
            "price_per_device_hour": None,
            "price_source": None,
            "price_date": None,
            "cost_usd": None,
            "cost_per_1m_examples_usd": None,
        }
    return {
        "price_key": key,
        "price_per_device_hour": per_device,
        "price_source": source,
        "price_date": date,
        "cost_usd": hourly * wall_s / 3600 if wall_s is not None else None,
        "cost_per_1m_examples_usd": hourly / 3600 / examples_per_sec * 1e6 if examples_per_sec else None,
    }
