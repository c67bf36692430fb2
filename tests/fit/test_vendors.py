"""Vendors honestly: per-vendor attainment from MLPerf rows, ranges wide where rows are few."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from fitwork.fit.calibration import calibration
from fitwork.fit.vendors import (
    MLPERF_FILE,
    attainment_spread,
    attainments,
    mlperf_rows,
    vendor_fit,
)
from fitwork.hardware.catalog import catalog

ROOT = Path(__file__).resolve().parents[2]


def width(low: float, high: float) -> float:
    return math.log(high / low)


@pytest.mark.parametrize(("vendor", "bound"), [("AMD", "memory"), ("AMD", "compute"),
                                               ("Intel", "memory")])
def test_a_vendors_attainment_lies_within_its_rows(vendor: str, bound: str) -> None:
    known = catalog()
    rows = mlperf_rows(known)
    values = [a for r, a in attainments(rows, known) if r.vendor == vendor and r.bound == bound]
    fit = vendor_fit(rows, vendor, bound, known)  # type: ignore[arg-type]
    assert fit.calibrated and fit.n == len(values) >= 2
    assert min(values) <= fit.value <= max(values)
    assert fit.value < 0.9  # these stacks reach less of the roofline than NVIDIA's
    assert fit.low < 1 < fit.high


def test_few_rows_give_a_wider_range_than_nvidias() -> None:
    known = catalog()
    rows = mlperf_rows(known)
    nvidia = {b: vendor_fit(rows, "NVIDIA", b, known) for b in ("memory", "compute")}
    intel = vendor_fit(rows, "Intel", "memory", known)  # one submission
    amd_compute = vendor_fit(rows, "AMD", "compute", known)  # one benchmark
    assert intel.groups == 1 and nvidia["memory"].groups >= 10
    assert width(intel.low, intel.high) > 2 * width(nvidia["memory"].low, nvidia["memory"].high)
    assert width(amd_compute.low, amd_compute.high) > 2 * width(nvidia["compute"].low,
                                                                nvidia["compute"].high)
    assert width(intel.low, intel.high) >= attainment_spread(rows, known) - 1e-9
    assert "only 1 submission" in intel.basis
    # the same vendor's range narrows as submissions are added: cut AMD to one submission
    one = [r for r in rows if r.vendor != "AMD" or r.group == "AMD (v5.1)"]
    cut, full = (vendor_fit(x, "AMD", "memory", known) for x in (one, rows))
    assert width(cut.low, cut.high) > width(full.low, full.high)


def test_a_vendor_never_measured_says_not_calibrated() -> None:
    known = catalog()
    rows = mlperf_rows(known)
    fit = vendor_fit(rows, "SambaNova", "compute", known)
    assert not fit.calibrated
    assert fit.basis.startswith("not calibrated for this vendor (SambaNova")
    assert width(fit.low, fit.high) >= attainment_spread(rows, known) - 1e-9
    error = calibration().error("assumed", "H100-SXM", "SN40L", "compute", "fp16")
    assert "not calibrated for this vendor (SambaNova" in error.basis
    gaudi = calibration().error("assumed", "H100-SXM", "Gaudi2", "compute", "fp16")
    assert "not calibrated for this vendor (Intel, compute-bound)" in gaudi.basis
    mi300x = calibration().error("bytes", "A100-80GB", "MI300X", "memory", "fp16")
    assert "not calibrated" not in mi300x.basis and "AMD memory-bound" in mi300x.basis


def test_every_row_names_its_source_file() -> None:
    text = resources.files("fitwork.fit").joinpath("data", MLPERF_FILE).read_text()
    rows = list(csv.DictReader(text.splitlines()))
    assert len(rows) >= 100
    for row in rows:
        assert row["repository"].startswith("mlcommons/") and len(row["commit"]) >= 7
        assert row["path"].endswith(("mlperf_log_summary.txt", "result_*.txt")), row
        assert float(row["rate"]) > 0 and row["bound"] in ("memory", "compute")
    license_text = resources.files("fitwork.fit").joinpath("data", "LICENSE.mlperf").read_text()
    assert "Apache License" in license_text and "965182b" in license_text


def test_the_bench_prints_coverage_per_vendor_with_row_counts() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "coverage.py"), "--data-only"],
                          capture_output=True, text=True, timeout=300, check=True)
    lines = {line.split("  ")[0]: line.split() for line in done.stdout.splitlines()
             if line.startswith("attainment ")}
    amd = lines["attainment memory-bound, AMD (MLPerf)"]
    assert amd[-5] == "18" and amd[-4] == "5"  # rows and submissions
    assert "attainment memory-bound, Intel (MLPerf)" in lines
    share = int(amd[-3].rstrip("%"))
    assert 60 <= share <= 95
