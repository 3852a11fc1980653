"""Price and peak-FLOP/s catalogs: every price is sourced and dated; cost and MFU arithmetic."""

from __future__ import annotations

import os
import re
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from stepwatch.collector.config import BenchmarkConfig
from stepwatch.collector.runner import catalog
from stepwatch.collector.runner.execution import RunOptions, make_row


def test_every_price_says_what_it_covers_and_names_its_source_and_date() -> None:
    prices = catalog.load_prices()
    assert prices
    for price in prices:
        assert price.source and len(price.date) >= 7 and price.usd_per_hour > 0
        assert price.covers in ("instance", "instance share", "device only")  # the bundled catalog says which
    gpus = [p for p in prices if p.device == "gpu"]
    assert {p.covers for p in gpus} == {"instance share"}  # GPU prices compare like with like


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "aws-p5.48xlarge-h100-sxm"),  # the SXM part, as NVML names it
        ("NVIDIA H100 PCIe", "lambda-1x-h100-pcie"),
        ("NVIDIA H100 NVL", "azure-nc40ads-h100-v5-h100-nvl"),
        ("NVIDIA A100-SXM4-40GB", "aws-p4d.24xlarge-a100-sxm4-40gb"),
        ("NVIDIA A100-SXM4-80GB", "aws-p4de.24xlarge-a100-sxm4-80gb"),
        ("NVIDIA A100 80GB PCIe", "azure-nc24ads-a100-v4-a100-80gb-pcie"),
        ("NVIDIA L4", "aws-g6.xlarge-l4"),
        ("NVIDIA L40S", "aws-g6e.xlarge-l40s"),
        ("NVIDIA H200", "aws-p5en.48xlarge-h200"),
        ("NVIDIA B200", "aws-p6-b200.48xlarge-b200"),
        ("NVIDIA A100-PCIE-40GB", None),  # not in the catalog: no cost, rather than another card's
        ("NVIDIA RTX 6000 Ada Generation", None),
    ],
)
def test_a_gpu_is_priced_by_its_exact_product(name: str, key: str | None) -> None:
    price = catalog.find_price(catalog.load_prices(), "gpu", name)
    assert (price.key if price else None) == key


def test_a_cpu_is_priced_only_as_the_runner_it_is() -> None:
    """GitHub's hosted runners by SKU (its rates from 2026-01-01), from what GitHub sets in every job and the core
    count; any other CPU has no price."""
    prices = catalog.load_prices()
    hosted = {"RUNNER_ENVIRONMENT": "github-hosted", "RUNNER_ARCH": "X64"}
    arm = {**hosted, "RUNNER_ARCH": "ARM64"}
    found = {(cores, arch["RUNNER_ARCH"]): catalog.find_price(prices, "cpu", "AMD EPYC 7763", cores, arch)
             for cores in (2, 4, 8, 16) for arch in (hosted, arm)}  # fmt: skip
    assert {key: (p.key, p.usd_per_hour) for key, p in found.items() if p} == {
        (2, "X64"): ("github-hosted-linux-2core", 0.36), (4, "X64"): ("github-hosted-linux-4core", 0.72),
        (8, "X64"): ("github-hosted-linux-8core", 1.32), (16, "X64"): ("github-hosted-linux-16core", 2.52),
        (2, "ARM64"): ("github-hosted-linux-2core-arm64", 0.30),
        (4, "ARM64"): ("github-hosted-linux-4core-arm64", 0.48),
    }  # fmt: skip
    assert all(p.date == "2026-01-01" and "actions-runner-pricing" in p.source for p in found.values() if p)
    assert catalog.find_price(prices, "cpu", "AMD EPYC 7763", 2, {}) is None  # a laptop, a VM: unknown
    assert (
        catalog.find_price(prices, "cpu", "AMD EPYC 7763", 2, {**hosted, "RUNNER_ENVIRONMENT": "self-hosted"}) is None
    )
    assert catalog.find_price(prices, "cpu", "AMD EPYC 7763", 32, hosted) is None
    note = catalog.no_price_note("cpu", "AMD EPYC 7763", 2)
    assert note.startswith("no price: AMD EPYC 7763 (cpu, 2 CPUs) matches no entry") and "--price-per-hour" in note


def test_the_peaks_keep_the_ratios_of_their_tensor_cores() -> None:
    """What holds for every NVIDIA entry whatever its figures, so that a mistyped figure shows: the same dense
    rate for fp16 and bf16; on Ampere and Hopper TF32 at half of it; fp32 (no tensor cores) below both."""
    for peak in catalog.load_peaks():
        t = peak.tflops
        if "mixed_float16" in t and "mixed_bfloat16" in t:
            assert t["mixed_float16"] == t["mixed_bfloat16"], peak.match
        if re.search(r"A100|H100|H200", peak.match):
            assert t["tf32"] == pytest.approx(t["mixed_bfloat16"] / 2, rel=1e-3), peak.match
        if "fp32" in t and "mixed_float16" in t:
            assert t["fp32"] < t["mixed_float16"] and t["fp32"] <= t.get("tf32", t["fp32"]), peak.match
        if "fp8" in t:  # every fp8 tensor core listed runs twice its bf16 rate, and fp4 at least twice fp8's
            assert t["fp8"] == pytest.approx(2 * t["mixed_bfloat16"], rel=1e-3), peak.match
        if "fp4" in t:
            assert t["fp4"] >= 2 * t["fp8"] * (1 - 1e-3), peak.match


def test_the_accelerators_mlperf_training_v6_ran_on_have_their_peaks_each_from_its_page() -> None:
    """B200, B300, GB200, GB300, MI300X, MI355X and the TPUs v6e and 7x: a dense bf16 peak per device, each with the
    address of the page it was read from (TPU7x's two TensorCores are two JAX devices: half a chip's each)."""
    peaks = catalog.load_peaks()
    bf16 = {name: catalog.peak_tflops(peaks, name, "mixed_bfloat16", 1) for name in
            ("NVIDIA B200", "NVIDIA GB200", "NVIDIA B300 SXM6 AC", "NVIDIA GB300", "AMD Instinct MI300X",
             "AMD Instinct MI355X", "TPU v6 lite", "TPU7x")}  # fmt: skip
    assert {name: total for name, (total, _) in bf16.items()} == {
        "NVIDIA B200": 2250.0, "NVIDIA GB200": 2500.0, "NVIDIA B300 SXM6 AC": 2250.0, "NVIDIA GB300": 2500.0,
        "AMD Instinct MI300X": 1307.4, "AMD Instinct MI355X": 2516.6, "TPU v6 lite": 918.0, "TPU7x": 2307.0 / 2,
    }  # fmt: skip
    assert all(re.search(r"\(https://[\w./-]+\)$", source) for _, source in bf16.values()), bf16
    fp4 = {p.match: p.tflops.get("fp4") for p in peaks if "fp4" in p.tflops}
    assert fp4 == {"NVIDIA B200": 9000.0, "NVIDIA GB200": 10000.0, "NVIDIA GB300": 15000.0,
                   "AMD Instinct MI355X( VF)?": 10066.3}  # fmt: skip


def test_peak_is_per_exact_product_and_precision_and_absent_rather_than_guessed() -> None:
    peaks = catalog.load_peaks()
    total, source = catalog.peak_tflops(peaks, "NVIDIA A100-SXM4-80GB", "tf32", 2)
    assert total == 2 * 156.0 and "A100" in source  # the datasheet's dense TF32 (312 with sparsity), two devices
    # the three H100 parts: SXM, PCIe and NVL differ
    fp32 = {name: catalog.peak_tflops(peaks, name, "fp32", 1)[0] for name in
            ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL")}  # fmt: skip
    assert fp32 == {"NVIDIA H100 80GB HBM3": 67.0, "NVIDIA H100 PCIe": 51.0, "NVIDIA H100 NVL": 60.0}
    assert catalog.peak_tflops(peaks, "NVIDIA H100 PCIe", "mixed_bfloat16", 1)[0] == 756.5
    assert catalog.peak_tflops(peaks, "NVIDIA L4", "mixed_bfloat16", 1)[0] == 121.0
    assert catalog.peak_tflops(peaks, "NVIDIA H100", "fp32", 1) == (None, None)  # which part? not guessed
    assert catalog.peak_tflops(peaks, "Tesla V100-SXM2-16GB", "mixed_bfloat16", 1) == (None, None)
    assert catalog.peak_tflops(peaks, "AMD EPYC", "fp32", 1) == (None, None)
    total, _ = catalog.peak_tflops(peaks, "TPU v3-8", "mixed_bfloat16", 8)  # 8 cores = 4 chips
    assert total == pytest.approx(4 * 123.0)


def test_cost_of_a_run_and_of_a_million_examples() -> None:
    price = catalog.Price("k", "gpu", "A100", "instance share", 3.0, "somewhere", "2025-01")
    cost = catalog.cost_columns(price, None, num_devices=2, wall_s=1800, examples_per_sec=1000)
    assert cost["cost_usd"] == pytest.approx(3.0)  # 2 devices x $3/h x 0.5 h
    assert cost["cost_per_1m_examples_usd"] == pytest.approx(6.0 / 3600 / 1000 * 1e6)
    assert cost["price_per_device_hour"] == 3.0 and cost["price_covers"] == "instance share"
    host = catalog.Price("k", "gpu", "A100", "instance", 8.0, "somewhere", "2025-01")
    assert catalog.cost_columns(host, None, 2, 3600, None)["cost_usd"] == 8.0  # a whole instance: not per device
    missing = catalog.cost_columns(None, None, 1, 3600, 100.0, "no price: why")
    assert missing["cost_usd"] is None and missing["price_note"] == "no price: why"
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
    p4d = catalog.find_price(catalog.load_prices(), "gpu", "NVIDIA A100-SXM4-40GB")
    assert row["price_covers"] == "instance share" and row["price_key"] == p4d.key
    assert row["cost_usd"] == pytest.approx(p4d.usd_per_hour / 60)  # one device of the instance for a minute
    assert row["xla_requested"] is False and row["global_batch"] == 8
    rtx = "NVIDIA RTX 6000 Ada Generation"  # in neither catalog
    unknown = make_row(config, 0, {**child, "accelerator": rtx}, 60.0, 0, datetime.now(UTC), "s", "id", RunOptions())
    assert unknown["cost_usd"] is None and unknown["mfu"] is None
    assert unknown["price_note"].startswith(f"no price: {rtx} (gpu) matches no entry of the price catalog")
    assert f"no dense peak of {rtx} at mixed_bfloat16" in unknown["peak_missing"]


def test_a_catalog_entry_without_source_or_with_unknown_cover_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text('[[price]]\nkey="x"\nbackend="cpu"\nmatch=".*"\nper="host"\nusd_per_hour=1.0\nsource=""\ndate=""\n')
    with pytest.raises(catalog.CatalogError, match="needs a source and a date"):
        catalog.load_prices(path)
    path.write_text(
        '[[price]]\nkey="x"\ndevice="gpu"\nmatch="A"\ncovers="gpu"\nusd_per_hour=1.0\nsource="s"\ndate="d"\n'
    )
    with pytest.raises(catalog.CatalogError, match="covers must be one of"):
        catalog.load_prices(path)


def test_a_catalog_written_before_covers_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text('[[price]]\nkey="x"\nbackend="gpu"\nmatch="NVIDIA L4"\nper="device"\nusd_per_hour=1.0\n'
                    'source="ours"\ndate="2024-01"\n')  # fmt: skip
    (price,) = catalog.load_prices(path)
    assert price.per == "device" and price.covers == "device" and price.hourly(2) == 2.0


def test_a_price_is_old_from_a_year_after_the_month_or_day_it_was_read() -> None:
    today = date(2026, 11, 26)
    assert catalog.price_age_days("2026-11", today) == -4  # read this month: its last day counts
    assert catalog.price_age_days("2025-11", today) == 361 and catalog.price_age_days("2025-10", today) == 391
    assert catalog.price_age_days("2025-11-20", today) == 371
    assert catalog.price_age_days("July 2023", today) is None and catalog.price_age_days(None, today) is None
    dates = {"new": "2026-02", "year": "2025-11", "old": "2023-07", "undated": ""}
    assert {key for key, read in dates.items() if catalog.stale(read, today)} == {"old"}


def test_the_first_match_for_an_h100_sxm_and_an_h200_is_after_awss_2025_cut_with_its_page_and_confidence() -> None:
    """AWS cut P4/P5 on-demand prices on 2025-06-01 (p5.48xlarge $98.32 -> $55.04): an H100 SXM hour is 6.88, an
    H200's 7.912 (p5en.48xlarge $63.296 / 8). Every bundled entry says how far it is trusted; a provisional or
    low-confidence one is marked as such."""
    prices = catalog.load_prices()
    h100 = catalog.find_price(prices, "gpu", "NVIDIA H100 80GB HBM3")
    h200 = catalog.find_price(prices, "gpu", "NVIDIA H200")
    assert (h100.usd_per_hour, h200.usd_per_hour) == (6.88, 7.912)
    assert h100.date >= "2025-06" and h200.date >= "2025-06" and h100.trust == h200.trust == "high"
    assert "https://" in h100.source and "$55.04" in h100.source and "$63.296" in h200.source
    assert {p.confidence for p in prices} <= set(catalog.CONFIDENCE) and all(p.confidence for p in prices)
    b200 = catalog.find_price(prices, "gpu", "NVIDIA B200")
    assert b200.trust == "low, provisional"
    today = date(2026, 11, 27)
    assert catalog.doubts(b200.date, b200.trust, today) == ["provisional", "low confidence"]
    assert catalog.doubts(h200.date, h200.trust, today) == []
    assert catalog.doubts("2024-06", "high", today) == ["read 2024-06, more than a year ago"]


def test_a_teams_own_price_comes_first_and_every_row_says_whose_it_is() -> None:
    own = catalog.own_price(3.1, "our 3-year commitment", date(2026, 11, 27))
    prices = [own, *catalog.load_prices()]
    assert catalog.find_price(prices, "gpu", "NVIDIA H100 80GB HBM3") is own
    assert catalog.find_price(prices, "tpu", "TPU v6 lite") is own
    assert (
        catalog.find_price(prices, "cpu", "AMD EPYC", 2, {"RUNNER_ENVIRONMENT": "github-hosted", "RUNNER_ARCH": "X64"})
        is own
    )
    row = catalog.cost_columns(own, None, 2, 3600.0, 1000.0)
    assert row["price_whose"] == "your own price" and row["cost_usd"] == pytest.approx(6.2)
    assert row["price_source"] == "our 3-year commitment" and row["price_key"] == "own-price"
    said = catalog.costed_at([row], date(2026, 11, 27))
    assert said == "own-price (your own price, 3.1 USD per device-hour: our 3-year commitment)"
    with pytest.raises(catalog.CatalogError, match="own-price must be a positive"):
        catalog.own_price(0, None, date(2026, 11, 27))


HOSTED_SCRIPT = """\
import numpy as np

import stepwatch

def batches():
    while True:
        yield np.ones((32, 8))


weights = np.zeros(8)
for x in stepwatch.steps(batches(), examples_per_step=32):
    weights -= 0.01 * x.mean(axis=0)
"""


def test_a_night_on_a_github_hosted_2_core_runner_costs_its_rate_and_the_page_says_what_it_cost(tmp_path: Path) -> None:
    """A trial as GitHub's hosted runners run one (RUNNER_ENVIRONMENT and RUNNER_ARCH as GitHub sets them; two CPUs,
    pinned so that any machine is the 2-core runner): its row carries $0.36 an hour with its source and date, and the
    night's page says what the night cost. Before, a CPU night there was priced at the 2025 rate or not at all."""
    import subprocess
    import sys

    import pyarrow.parquet as pq

    from stepwatch.dashboard import page

    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to be the 2-core runner")
    (tmp_path / "train.py").write_text(HOSTED_SCRIPT)
    env = {**os.environ, "RUNNER_ENVIRONMENT": "github-hosted", "RUNNER_ARCH": "X64"}
    done = subprocess.run([sys.executable, "-m", "stepwatch", "run", "--script", "train.py", "--trials", "1",
                           "--out", "out"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
                          preexec_fn=lambda: os.sched_setaffinity(0, cpus))  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [row] = pq.read_table(next((tmp_path / "out").glob("*.parquet"))).to_pylist()
    assert (row["cpu_cores"], row["price_key"], row["price_per_device_hour"]) == (2, "github-hosted-linux-2core", 0.36)
    assert "actions-runner-pricing" in row["price_source"] and row["price_date"] == "2026-01-01"
    assert row["cost_usd"] == pytest.approx(0.36 * row["wall_s"] / 3600)
    db = tmp_path / "store.duckdb"
    assert subprocess.run([sys.executable, "-m", "stepwatch", "ingest", "out", "--db", str(db)], cwd=tmp_path,
                          capture_output=True, timeout=300).returncode == 0  # fmt: skip
    html, _ = page.render(db)
    said = re.search(r"What the night cost: It cost \$([0-9.]+): 1 trial\(s\), [0-9.]+ min of runner time at "
                     r"github-hosted-linux-2core \(\$0\.36 per hour; GitHub Actions runner pricing", html)  # fmt: skip
    assert said and float(said[1]) == pytest.approx(row["cost_usd"], abs=1e-4), html[:2500]
