"""Price and peak-FLOP/s catalogs: every price is sourced and dated; cost and MFU arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from stepwatch.collector.bench import catalog
from stepwatch.collector.bench.runner import RunOptions, make_row
from stepwatch.collector.config import BenchmarkConfig


def test_every_price_names_its_source_and_date() -> None:
    prices = catalog.load_prices()
    assert prices
    for price in prices:
        assert price.source and len(price.date) >= 7 and price.usd_per_hour > 0


def test_price_lookup_by_device_and_accelerator_name() -> None:
    prices = catalog.load_prices()
    assert catalog.find_price(prices, "gpu", "NVIDIA H100 80GB HBM3").key == "aws-p5.48xlarge-h100"
    assert catalog.find_price(prices, "gpu", "NVIDIA A100-SXM4-40GB").key == "gcp-a2-highgpu-a100-40gb"
    assert catalog.find_price(prices, "cpu", "AMD EPYC").device == "cpu"
    assert catalog.find_price(prices, "gpu", "NVIDIA GeForce RTX 4090") is None


def test_peak_is_per_precision_and_absent_rather_than_guessed() -> None:
    peaks = catalog.load_peaks()
    total, source = catalog.peak_tflops(peaks, "NVIDIA A100-SXM4-80GB", "tf32", 2)
    assert total == 312.0 and "A100" in source
    assert catalog.peak_tflops(peaks, "Tesla V100-SXM2-16GB", "mixed_bfloat16", 1) == (None, None)
    assert catalog.peak_tflops(peaks, "AMD EPYC", "fp32", 1) == (None, None)
    total, _ = catalog.peak_tflops(peaks, "TPU v3-8", "mixed_bfloat16", 8)  # 8 cores = 4 chips
    assert total == pytest.approx(4 * 123.0)


def test_cost_of_a_run_and_of_a_million_examples() -> None:
    price = catalog.Price("k", "gpu", "A100", "device", 3.0, "somewhere", "2025-01")
    cost = catalog.cost_columns(price, None, num_devices=2, wall_s=1800, examples_per_sec=1000)
    assert cost["cost_usd"] == pytest.approx(3.0)  # 2 devices x $3/h x 0.5 h
    assert cost["cost_per_1m_examples_usd"] == pytest.approx(6.0 / 3600 / 1000 * 1e6)
    assert cost["price_per_device_hour"] == 3.0
    override = catalog.cost_columns(price, 10.0, num_devices=2, wall_s=360, examples_per_sec=None)
    assert override["cost_usd"] == pytest.approx(1.0) and override["price_key"] == "override"
    assert override["cost_per_1m_examples_usd"] is None


def test_make_row_computes_mfu_from_flops_throughput_and_peak() -> None:
    config = BenchmarkConfig(model="resnet50", preset="224", device="gpu", precision="mixed_bfloat16", warmup_steps=20)
    child = {
        "status": "ok",
        "examples_per_sec": 2000.0,
        "flops_per_example": 24.5e9,
        "replicas": 1,
        "units_per_example": 1,
        "accelerator": "NVIDIA A100-SXM4-40GB",
    }
    row = make_row(config, 0, child, 60.0, 0, datetime.now(UTC), "s", "id", RunOptions())
    assert row["achieved_tflops"] == pytest.approx(49.0)
    assert row["mfu"] == pytest.approx(49.0 / 312.0)
    assert row["cost_usd"] == pytest.approx(2.93 / 60)
    assert row["xla_requested"] is False and row["global_batch"] == 8


def test_a_catalog_entry_without_source_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text('[[price]]\nkey="x"\nbackend="cpu"\nmatch=".*"\nper="host"\nusd_per_hour=1.0\nsource=""\ndate=""\n')
    with pytest.raises(catalog.CatalogError, match="needs a source and a date"):
        catalog.load_prices(path)
