"""The cost model: roofline transfer checked against Gavel's measured matrix, and unit rates."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from fitwork.fit.cost import CostModelError, choose_bound, transfer_rate, unit_rates
from fitwork.hardware.catalog import catalog
from fitwork.profiling.record import UnitProfile

GAVEL = Path(__file__).resolve().parents[1] / "data" / "gavel" / "throughputs_alone.csv"
CLASS = {"k80": "K80", "p100": "P100", "v100": "V100"}


def gavel_rows(scale: int = 1) -> list[dict[str, str]]:
    with GAVEL.open() as f:
        return [row for row in csv.DictReader(f) if int(row["scale"]) == scale]


def transfer_errors(source: str, target: str, bound: str) -> list[float]:
    src, dst = catalog().get(CLASS[source]), catalog().get(CLASS[target])
    errors = []
    for row in gavel_rows():
        measured, actual = float(row[source]), float(row[target])
        if measured > 0 and actual > 0:
            predicted = transfer_rate(measured, src, dst, bound, "fp32")  # type: ignore[arg-type]
            errors.append(abs(predicted - actual) / actual)
    return errors


# Median and worst relative error of roofline transfer over Gavel's 26 single-GPU jobs,
# as measured with the catalog's datasheet peaks (FP32 FLOP/s; memory bandwidth).
PINNED = {
    ("v100", "p100", "compute"): (0.271, 0.744),
    ("v100", "p100", "memory"): (0.260, 0.649),
    ("v100", "k80", "compute"): (0.490, 2.234),
    ("v100", "k80", "memory"): (0.470, 2.102),
    ("p100", "v100", "compute"): (0.372, 2.908),
    ("p100", "v100", "memory"): (0.224, 1.846),
    ("k80", "v100", "compute"): (0.448, 4.429),
    ("k80", "v100", "memory"): (0.424, 4.661),
}


@pytest.mark.parametrize("direction", sorted(PINNED))
def test_roofline_transfer_error_on_gavel_is_what_we_measured(direction) -> None:
    errors = transfer_errors(*direction)
    assert len(errors) == 26
    median, worst = PINNED[direction]
    assert statistics.median(errors) == pytest.approx(median, abs=0.001)
    assert max(errors) == pytest.approx(worst, abs=0.001)


def test_roofline_cannot_explain_p100_beating_v100() -> None:
    row = next(r for r in gavel_rows() if r["job"] == "Recommendation (batch size 512)")
    assert float(row["p100"]) > float(row["v100"])  # 48.9 vs 23.3 steps/s, measured
    v100, p100 = catalog().get("V100"), catalog().get("P100")
    for bound in ("compute", "memory"):
        assert transfer_rate(float(row["v100"]), v100, p100, bound) < float(row["v100"])


def profile(**overrides) -> UnitProfile:
    base = dict(name="u", kind="map", resources={"cpu": 1.0}, device_class="cpu-x86",
                samples=8, wall_s=0.010, cpu_s=0.008, bytes_in=100.0, bytes_out=100.0,
                output_ratio=1.0, peak_rss=0)
    return UnitProfile(**{**base, **overrides})


def test_cpu_units_are_measured_on_the_host_class_and_scaled_elsewhere() -> None:
    x86, arm = catalog().get("cpu-x86"), catalog().get("cpu-arm")
    rates = {r.device_class: r for r in unit_rates(profile(), catalog().of_kind("cpu"), x86)}
    assert rates["cpu-x86"].method == "measured" and rates["cpu-x86"].rate == pytest.approx(100)
    expected = 0.002 + 0.008 * x86.fp32_flops / arm.fp32_flops
    assert rates["cpu-arm"].seconds_per_item == pytest.approx(expected)
    assert rates["cpu-arm"].method == "roofline"


def test_io_units_overlap_calls_up_to_their_cpu_time() -> None:
    x86 = catalog().get("cpu-x86")
    io = profile(resources={"cpu": 0.25, "io": 8.0}, wall_s=0.020, cpu_s=0.001)
    (rate,) = [r for r in unit_rates(io, [x86], x86)]
    assert rate.rate == pytest.approx(8 / 0.020)


def test_gpu_units_scale_device_time_by_the_bound() -> None:
    h100, v100 = catalog().get("H100-SXM"), catalog().get("V100")
    gpu = profile(resources={"cpu": 1.0, "gpu": 1.0}, device_class="V100", wall_s=0.012,
                  cpu_s=0.002, accel_s=0.010, flops=1e12, bytes_in=1e6)
    rates = {r.device_class: r for r in unit_rates(gpu, [h100, v100], v100)}
    assert rates["V100"].method == "measured"
    bound, _ = choose_bound(1e12, 1e6 + 100, v100, "fp16")
    assert bound == "compute"
    expected = 0.002 + 0.010 * v100.fp16_flops / h100.fp16_flops
    assert rates["H100-SXM"].seconds_per_item == pytest.approx(expected)


def test_gpu_units_profiled_on_a_cpu_use_flops_with_a_stated_efficiency() -> None:
    h100, x86 = catalog().get("H100-SXM"), catalog().get("cpu-x86")
    gpu = profile(resources={"cpu": 1.0, "gpu": 0.5}, flops=4e9)
    (rate,) = unit_rates(gpu, [h100, x86], x86, efficiency=0.5)
    assert rate.method == "flops" and "50% of fp16 peak" in rate.note
    assert rate.seconds_per_item == pytest.approx(4e9 / (h100.fp16_flops * 0.5))
    with pytest.raises(CostModelError, match="declare flops="):
        unit_rates(profile(resources={"gpu": 1.0}), [h100], x86)
