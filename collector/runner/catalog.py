"""Reference data the collector reads: prices (``prices.toml``) and peak FLOP/s (``accelerators.toml``), bundled
with stepwatch (``stepwatch.collector.data``); a project names its own price catalog in its settings."""

from __future__ import annotations

import datetime
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepwatch.collector.config import FP8, PRECISIONS
from stepwatch.collector.data import bundled
from stepwatch.collector.errors import UsageError

PRICES_PATH = bundled("prices.toml")
ACCELERATORS_PATH = bundled("accelerators.toml")


class CatalogError(UsageError):
    """A catalog file that cannot be used, in one line."""


# What a price pays for, and so whether it is multiplied by the devices a run holds: a whole instance (per host);
# an instance's price divided by its devices (its CPUs, memory and disk included); the accelerator alone, without
# the machine it sits in; or, in a catalog written before entries said so, a device's price of unknown extent.
COVERS = {"instance": "host", "instance share": "device", "device only": "device", "device": "device"}
CATALOG_HINT = (
    "give your own price (the project's `own-price` setting), --price-per-hour, or add an entry to the price catalog "
    "(the project's `prices` setting)"
)
CONFIDENCE = ("high", "medium", "low")
DOUBTED = ("low",)  # a confidence the Cost page and the reports mark
# Whose price a row was costed at (its price_whose).
CATALOG, OWN_CATALOG, OWN_PRICE, OVERRIDE = "stepwatch's catalog", "your catalog", "your own price", "--price-per-hour"
ANY = "any"  # an own price's device: every run's


@dataclass(frozen=True)
class Price:
    key: str
    device: str  # cpu, gpu or tpu (``backend`` in catalogs written before Keras backends)
    match: str  # a regular expression the accelerator's whole product name must match
    covers: str  # COVERS
    usd_per_hour: float
    source: str
    date: str
    cores: int | None = None  # only on a host with this many CPUs (a CPU runner is priced by its size)
    env: str | tuple[str, ...] | None = None  # only where these environment variables have these values ("NAME=value")
    confidence: str | None = None  # CONFIDENCE: how far its source can be trusted (a catalog of yours may not say)
    provisional: bool = False  # a figure to replace once a better source is found
    whose: str = CATALOG  # WHOSE: the bundled catalog's, a catalog of yours, or your own price (own-price)

    @property
    def per(self) -> str:
        return COVERS[self.covers]

    def hourly(self, num_devices: int) -> float:
        return self.usd_per_hour * (num_devices if self.per == "device" else 1)

    @property
    def trust(self) -> str | None:
        """The row's ``price_confidence``: 'low, provisional', 'high', or None where the entry does not say."""
        said = [word for word in (self.confidence, "provisional" if self.provisional else None) if word]
        return ", ".join(said) or None

    def fits(self, device: str, accelerator: str | None, cores: int | None, environ: Mapping[str, str]) -> bool:
        if self.device not in (device, ANY) or not re.fullmatch(self.match, accelerator or ""):
            return False
        if self.cores is not None and cores != self.cores:
            return False
        said = [self.env] if isinstance(self.env, str) else self.env or []
        return all(environ.get(name) == value for name, _, value in (one.partition("=") for one in said))


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


STALE_AFTER_DAYS = 365  # a price read longer ago than this may no longer be what its source asks


def price_age_days(date: str | None, today: datetime.date) -> int | None:
    """How many days before ``today`` a price was read: its ``date`` ("2025-01", or a day "2025-01-15"), counted
    from the end of that month or that day; None where it has no date that reads as one."""
    found = re.fullmatch(r"(\d{4})-(\d{2})(?:-(\d{2}))?", (date or "").strip())
    if not found:
        return None
    year, month = int(found[1]), int(found[2])
    if found[3]:
        read = datetime.date(year, month, int(found[3]))
    else:  # a month: its last day (the price was read within it)
        read = datetime.date(year + month // 12, month % 12 + 1, 1) - datetime.timedelta(days=1)
    return (today - read).days


def stale(date: str | None, today: datetime.date) -> bool:
    """Whether a price dated ``date`` was read more than ``STALE_AFTER_DAYS`` before ``today`` (undated: not)."""
    age = price_age_days(date, today)
    return age is not None and age > STALE_AFTER_DAYS


def load_prices(path: Path = PRICES_PATH) -> list[Price]:
    """Every price entry; each must say what it covers and name its source and date."""
    prices = []
    for i, entry in enumerate(_read(path, "price")):
        if "backend" in entry and "device" not in entry:
            entry = {("device" if k == "backend" else k): v for k, v in entry.items()}
        if isinstance(entry.get("env"), list):
            entry["env"] = tuple(entry["env"])
        if "per" in entry:  # a catalog written before entries said what they cover
            per = entry.pop("per")
            entry.setdefault("covers", "instance" if per == "host" else "device")
        try:
            price = Price(**entry, whose=CATALOG if path == PRICES_PATH else OWN_CATALOG)
        except TypeError as error:
            raise CatalogError(f"{path}: price #{i + 1}: {error}") from None
        if not price.source or not price.date:
            raise CatalogError(f"{path}: price {price.key!r} needs a source and a date")
        if price.confidence is not None and price.confidence not in CONFIDENCE:
            raise CatalogError(f"{path}: price {price.key!r}: confidence must be one of {', '.join(CONFIDENCE)}")
        if price.covers not in COVERS:
            raise CatalogError(f"{path}: price {price.key!r}: covers must be one of {', '.join(map(repr, COVERS))}")
        try:
            re.compile(price.match)
        except re.error as error:
            raise CatalogError(f"{path}: price {price.key!r}: match {price.match!r}: {error}") from None
        prices.append(price)
    return prices


def own_price(usd_per_hour: float, source: str | None, today: datetime.date) -> Price:
    """The team's own price (the project's ``own-price`` setting: a commitment, a neocloud, its own hardware), ahead
    of every catalog entry for every run: per device-hour on an accelerator, per hour of a CPU host."""
    if not usd_per_hour > 0:
        raise CatalogError(f"own-price must be a positive USD per accelerator-hour, not {usd_per_hour!r}")
    said = source or "the project's own-price setting"
    return Price("own-price", ANY, ".*", "instance share", usd_per_hour, said, today.isoformat(),
                 whose=OWN_PRICE)  # fmt: skip


def doubts(date: str | None, trust: str | None, today: datetime.date) -> list[str]:
    """Why a row's price may not be what its hardware costs today: read more than a year ago, provisional, of low
    confidence (empty: none)."""
    found = [f"read {date}, more than a year ago"] if stale(date, today) else []
    words = (trust or "").split(", ")
    found += ["provisional"] * ("provisional" in words) + [f"{word} confidence" for word in words if word in DOUBTED]
    return found


def costed_at(rows: list[Mapping[str, Any]], today: datetime.date) -> str:
    """The prices ``rows`` were costed at, for a report's cost line: 'aws-p5en.48xlarge-h200 (stepwatch's catalog,
    7.912 USD per device-hour, read 2026-08-06)', 'own-price (your own price, 3.1 USD per device-hour: our
    commitment)', each with its doubts (``doubts``); empty where none was."""
    said = []
    for key in dict.fromkeys(row.get("price_key") for row in rows if row.get("price_key")):
        row = next(r for r in rows if r.get("price_key") == key)
        hourly = f"{row.get('price_per_device_hour') or 0:.4g} USD per device-hour"
        where = (
            f": {row.get('price_source')}" if row.get("price_whose") == OWN_PRICE else f", read {row.get('price_date')}"
        )
        marks = doubts(row.get("price_date"), row.get("price_confidence"), today)
        said.append(f"{key} ({row.get('price_whose') or CATALOG}, {hourly}{where})"
                    + (f" ⚠️ {', '.join(marks)}" if marks else ""))  # fmt: skip
    return "; ".join(said)


def load_peaks(path: Path = ACCELERATORS_PATH) -> list[Peak]:
    """Peak dense TFLOP/s per precision for known accelerators (and fp4's, for reference: no run trains in it)."""
    peaks = []
    for entry in _read(path, "accelerator"):
        tflops = {p: float(entry[p]) for p in (*PRECISIONS, FP4) if p in entry}
        peaks.append(Peak(entry["match"], tflops, int(entry.get("cores_per_chip", 1)), entry.get("source", "")))
    return peaks


def find_price(
    prices: list[Price],
    device: str,
    accelerator: str | None,
    cores: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> Price | None:
    """The first price for this device kind whose pattern matches the accelerator's whole product name (and whose
    host conditions hold): an H100 PCIe is not priced as an H100 SXM, nor any CPU as a hosted runner."""
    environ = os.environ if environ is None else environ
    return next((p for p in prices if p.fits(device, accelerator, cores, environ)), None)


def no_price_note(device: str, accelerator: str | None, cores: int | None) -> str:
    """Why a run has no cost: what it ran on matches no entry of the catalog."""
    host = f", {cores} CPUs" if cores and device == "cpu" else ""
    return (
        f"no price: {accelerator or 'an unnamed device'} ({device}{host}) matches no entry of the price catalog; "
        f"{CATALOG_HINT}"
    )


FP4 = "fp4"  # a peak the catalog keeps for reference (Blackwell, MI355X), not a precision a run can train in
# A precision whose MFU is stated against another's peak, and why (kept in the row's peak_tflops_source).
PEAK_OF = {FP8: "mixed_bfloat16"}
PEAK_NOTES = {
    FP8: "fp8 MFU is against the bf16 peak: only the matmuls run in fp8, and against the fp8 peak (twice the bf16) "
    "the figure would fall as fp8 speeds them up (torchtitan stops reporting MFU with Float8 for this reason)",
}


def peak_tflops(
    peaks: list[Peak], accelerator: str | None, precision: str, num_devices: int
) -> tuple[float | None, str | None]:
    """Total dense peak of the devices a run used, or (None, None) where none is published for that exact product
    (an H100 PCIe has not the SXM part's peak) and precision."""
    if not accelerator:
        return None, None
    against = PEAK_OF.get(precision, precision)
    for peak in peaks:
        if re.fullmatch(peak.match, accelerator):
            per_chip = peak.tflops.get(against)
            if per_chip is None:
                return None, None
            source = peak.source if against == precision else f"{peak.source}; {PEAK_NOTES[precision]}"
            return per_chip * num_devices / peak.cores_per_chip, source
    return None, None


def cost_columns(
    price: Price | None,
    override_per_hour: float | None,
    num_devices: int,
    wall_s: float | None,
    examples_per_sec: float | None,
    missing: str | None = None,
) -> dict[str, Any]:
    """Cost of the run (its wall time) and of one million examples at its throughput; without a price, none, and
    ``missing`` (why) as the row's price_note."""
    if override_per_hour is not None:
        hourly, key, source, date = override_per_hour, "override", "--price-per-hour", None
        per_device, covers, whose, trust = override_per_hour / num_devices, "instance", OVERRIDE, None
    elif price is not None:
        hourly, key, source, date = price.hourly(num_devices), price.key, price.source, price.date
        per_device, covers, whose, trust = hourly / num_devices, price.covers, price.whose, price.trust
    else:
        empty = ("price_key", "price_per_device_hour", "price_source", "price_date", "price_covers", "price_whose",
                 "price_confidence", "cost_usd", "cost_per_1m_examples_usd")  # fmt: skip
        return {**dict.fromkeys(empty), "price_note": missing}
    return {
        "price_key": key,
        "price_whose": whose,
        "price_confidence": trust,
        "price_per_device_hour": per_device,
        "price_source": source,
        "price_date": date,
        "price_covers": covers,
        "price_note": None,
        "cost_usd": hourly * wall_s / 3600 if wall_s is not None else None,
        "cost_per_1m_examples_usd": hourly / 3600 / examples_per_sec * 1e6 if examples_per_sec else None,
    }
