"""Vendors honestly: per-vendor attainment from MLPerf rows, ranges wide where rows are few."""

from __future__ import annotations

import csv
import math
import statistics
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from fitwork.fit.calibration import calibration
from fitwork.fit.coverage import coverage_table
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


LICENSED = {("mlcommons/inference_results_v4.1", "198fc46"),
            ("mlcommons/training_results_v5.1", "441d65f")}
"""The sources whose licence (Apache-2.0) was read at that commit: no other row is shipped."""


@pytest.mark.parametrize(("vendor", "bound"), [("AMD", "memory"), ("AMD", "compute")])
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
    amd_memory = vendor_fit(rows, "AMD", "memory", known)  # one submission
    amd_compute = vendor_fit(rows, "AMD", "compute", known)  # one benchmark
    assert amd_memory.groups == 1 and nvidia["memory"].groups >= 10
    assert amd_compute.groups == 3 and nvidia["compute"].groups >= 10
    assert width(amd_memory.low, amd_memory.high) > 2 * width(nvidia["memory"].low,
                                                              nvidia["memory"].high)
    assert width(amd_compute.low, amd_compute.high) > 2 * width(nvidia["compute"].low,
                                                                nvidia["compute"].high)
    for thin in (amd_memory, amd_compute):
        assert width(thin.low, thin.high) >= attainment_spread(rows, known) - 1e-9
    assert "only 1 submission" in amd_memory.basis
    # the same vendor's range narrows as submissions are added: cut NVIDIA to two submissions
    two = [r for r in rows if r.vendor != "NVIDIA" or r.group in ("NVIDIA (v4.1)", "Dell (v4.1)")]
    for bound in ("memory", "compute"):
        cut, full = (vendor_fit(x, "NVIDIA", bound, known) for x in (two, rows))
        assert cut.groups == 2 and "only 2 submission" in cut.basis
        assert width(cut.low, cut.high) > 2 * width(full.low, full.high)


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
    gaudi = calibration().error("bytes", "A100-80GB", "Gaudi2", "memory", "fp16")
    assert "not calibrated for this vendor (Intel, memory-bound)" in gaudi.basis
    mi300x = calibration().error("bytes", "A100-80GB", "MI300X", "memory", "fp16")
    assert "not calibrated" not in mi300x.basis and "AMD memory-bound" in mi300x.basis


@pytest.mark.parametrize("bound", ["memory", "compute"])
def test_intel_without_a_licensed_row_says_not_calibrated(bound: str) -> None:
    known = catalog()
    rows = mlperf_rows(known)
    assert not [r for r in rows if r.vendor == "Intel"]
    fit = vendor_fit(rows, "Intel", bound, known)  # type: ignore[arg-type]
    assert not fit.calibrated and fit.n == fit.groups == 0
    assert fit.basis.startswith(f"not calibrated for this vendor (Intel, {bound}-bound)")
    assert width(fit.low, fit.high) >= attainment_spread(rows, known) - 1e-9
    # it takes the other vendors' (AMD's) median attainment for the bound, not NVIDIA's 1
    amd = [a for r, a in attainments(rows, known) if r.vendor == "AMD" and r.bound == bound]
    assert amd and fit.value == pytest.approx(statistics.median(amd))


def test_every_row_names_its_source_file() -> None:
    text = resources.files("fitwork.fit").joinpath("data", MLPERF_FILE).read_text()
    rows = list(csv.DictReader(text.splitlines()))
    assert len(rows) >= 100
    for row in rows:
        assert (row["repository"], row["commit"]) in LICENSED, row
        assert row["path"].endswith(("mlperf_log_summary.txt", "result_*.txt")), row
        assert float(row["rate"]) > 0 and row["bound"] in ("memory", "compute")
    license_text = resources.files("fitwork.fit").joinpath("data", "LICENSE.mlperf").read_text()
    assert "Apache License" in license_text
    for repository, commit in LICENSED:
        assert f"https://github.com/{repository} @ {commit}" in license_text


def test_the_bench_prints_coverage_per_vendor_with_row_counts() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "coverage.py"), "--data-only"],
                          capture_output=True, text=True, timeout=300, check=True)
    lines = {line.split("  ")[0]: line.split() for line in done.stdout.splitlines()
             if line.startswith("attainment ")}
    amd = lines["attainment memory-bound, AMD (MLPerf)"]
    assert amd[-5] == "4" and amd[-4] == "1"  # rows and submissions
    assert lines["attainment compute-bound, AMD (MLPerf)"][-5:-3] == ["4", "3"]
    assert not [k for k in lines if "Intel" in k]  # no row: nothing to hold out
    table = {c.kind: c for c in coverage_table()}
    for kind, line in lines.items():  # the bench prints what the API measures
        assert line[-5:-2] == [str(table[kind].n), str(table[kind].groups),
                               f"{table[kind].share:.0%}"], kind
    share = int(lines["attainment memory-bound, NVIDIA (MLPerf)"][-3].rstrip("%"))
    assert 60 <= share <= 95
