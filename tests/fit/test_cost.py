"""The cost model: transfer on Gavel's matrix, per-target bounds, batches, memory, errors."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from fitwork.fit.calibration import calibration
from fitwork.fit.cost import (
    CostModelError,
    batch_rates,
    choose_bound,
    roofline_seconds,
    transfer_rate,
    unit_rates,
)
from fitwork.hardware.catalog import catalog
from fitwork.profiling.record import BatchMeasurement, UnitProfile

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


def test_gpu_units_without_device_bytes_say_the_bound_is_assumed() -> None:
    h100, v100 = catalog().get("H100-SXM"), catalog().get("V100")
    gpu = profile(resources={"gpu": 1.0}, device_class="V100", wall_s=0.012, cpu_s=0.002,
                  accel_s=0.010, flops=1e12, bytes_in=1e9)  # big items: still not device bytes
    (rate,) = [r for r in unit_rates(gpu, [h100, v100], v100) if r.device_class == "H100-SXM"]
    assert rate.bound == "compute" and "device bytes unknown" in rate.note
    assert "bytes between units" in rate.note
    assert rate.error_median > 0.2 and "stand in" in rate.error_basis


def llm_decode(**overrides) -> UnitProfile:
    # One decode step of llama2-70b on 8 GPUs (per GPU: 2 x 70e9 / 8 FLOPs, fp16 weights),
    # timed on A100-80GB: memory-bound everywhere.
    base = dict(resources={"cpu": 1.0, "gpu": 1.0}, device_class="A100-80GB", wall_s=0.046,
                cpu_s=0.001, accel_s=0.045, flops=2 * 70e9 / 8, device_bytes=2 * 70e9 / 8)
    return profile(**{**base, **overrides})


def test_the_bound_is_chosen_per_target_class() -> None:
    a100, h100 = catalog().get("A100-80GB"), catalog().get("H100-SXM")
    (e_a, _), (e_h, _) = (calibration().device_efficiency(n) for n in ("A100-80GB", "H100-SXM"))
    balance_a = a100.fp16_flops * e_a[0] / (a100.memory_bandwidth * e_a[1])
    balance_h = h100.fp16_flops * e_h[0] / (h100.memory_bandwidth * e_h[1])
    assert balance_a < 200 < balance_h  # 160 and 251 FLOP/B at calibrated efficiencies
    unit = llm_decode(flops=200 * 1e9, device_bytes=1e9)
    rates = {r.device_class: r for r in unit_rates(unit, [a100, h100], a100)}
    assert rates["A100-80GB"].method == "measured"
    assert rates["H100-SXM"].bound == "memory"
    source, _ = roofline_seconds(200e9, 1e9, a100, "fp16", e_a)
    target, bound = roofline_seconds(200e9, 1e9, h100, "fp16", e_h)
    assert bound == "memory" and roofline_seconds(200e9, 1e9, a100, "fp16", e_a)[1] == "compute"
    assert rates["H100-SXM"].seconds_per_item == pytest.approx(0.001 + 0.045 * target / source)
    assert "intensity 200 FLOP/B vs balance" in rates["H100-SXM"].note


def test_device_bytes_fix_the_a100_to_h100_overestimate() -> None:
    a100, h100 = catalog().get("A100-80GB"), catalog().get("H100-SXM")
    measured_h100 = 1 / 0.0307  # splitwise: llama2-70b TP8 decode, 30.7 ms/token on H100
    with_bytes = next(r for r in unit_rates(llm_decode(), [a100, h100], a100)
                      if r.device_class == "H100-SXM")
    without = next(r for r in unit_rates(llm_decode(device_bytes=None), [a100, h100], a100)
                   if r.device_class == "H100-SXM")
    assert with_bytes.bound == "memory"
    assert abs(with_bytes.rate / measured_h100 - 1) < 0.15
    assert without.rate / measured_h100 > 2  # FP16 peak ratio: every unit looked compute-bound


def test_estimates_name_their_efficiency_and_where_it_came_from() -> None:
    a100, h100, l4 = (catalog().get(n) for n in ("A100-80GB", "H100-SXM", "L4"))
    rates = {r.device_class: r for r in unit_rates(llm_decode(), [a100, h100, l4], a100)}
    assert rates["H100-SXM"].efficiency == pytest.approx(0.357, abs=0.001)
    assert "splitwise perf_model.csv" in rates["H100-SXM"].efficiency_source
    assert "not calibrated: pooled median" in rates["L4"].efficiency_source


def test_measured_rates_have_no_transfer_error_and_both_have_a_range() -> None:
    a100, h100 = catalog().get("A100-80GB"), catalog().get("H100-SXM")
    rates = {r.device_class: r for r in unit_rates(llm_decode(), [a100, h100], a100)}
    measured, moved = rates["A100-80GB"], rates["H100-SXM"]
    assert (measured.error_median, measured.error_p90) == (0.0, 0.0)
    assert measured.error_basis.startswith("measured on A100-80GB")
    low, high = measured.bounds()
    assert low < measured.rate < high  # the profile's own spread, at least 10% either side
    assert 0 < moved.error_median < moved.error_p90
    low, high = moved.bounds()
    assert low < moved.rate < high
    assert "held out" in moved.error_basis


def test_a_class_with_too_little_device_memory_gets_rate_zero_and_a_reason() -> None:
    a100, l4, h100 = (catalog().get(n) for n in ("A100-80GB", "L4", "H100-SXM"))
    unit = llm_decode(device_memory=40 << 30)
    rates = {r.device_class: r for r in unit_rates(unit, [a100, l4, h100], a100)}
    assert rates["L4"].rate == 0 and rates["L4"].method == "infeasible"
    assert "needs 40.0 GiB of device memory per replica; L4 gives it 24.0 GiB" in rates["L4"].note
    assert rates["H100-SXM"].rate > 0
    half = llm_decode(device_memory=60 << 30, resources={"cpu": 1.0, "gpu": 0.5})
    (h,) = [r for r in unit_rates(half, [a100, h100], a100) if r.device_class == "H100-SXM"]
    assert h.rate == 0 and "40.0 GiB (0.5 x 80 GiB)" in h.note


def test_a_class_without_a_bandwidth_figure_cannot_take_memory_bound_work() -> None:
    a100, sn40l = catalog().get("A100-80GB"), catalog().get("SN40L")
    (rate,) = [r for r in unit_rates(llm_decode(), [a100, sn40l], a100)
               if r.device_class == "SN40L"]
    assert rate.rate == 0 and "no memory bandwidth" in rate.note


def test_rates_are_given_at_every_measured_batch_size() -> None:
    x86 = catalog().get("cpu-x86")
    batches = [BatchMeasurement(batch_size=b, items=32, wall_s=w, cpu_s=w)
               for b, w in ((1, 0.010), (4, 0.004), (16, 0.002))]
    unit = profile(batch_size=16, wall_s=0.002, cpu_s=0.002, batches=batches)
    by_batch = {r.batch_size: r for r in batch_rates(unit, [x86], x86)}
    assert sorted(by_batch) == [1, 4, 16]
    assert by_batch[1].rate == pytest.approx(100) and by_batch[16].rate == pytest.approx(500)
    assert by_batch[4].batch_latency_s == pytest.approx(0.016)
    (own,) = unit_rates(unit, [x86], x86)
    assert own.batch_size == 16 and own.rate == pytest.approx(by_batch[16].rate)


def test_profiles_written_before_device_bytes_still_load() -> None:
    old = profile().model_dump(exclude={"device_bytes", "device_bytes_source", "device_memory"})
    loaded = UnitProfile.model_validate(old)
    assert loaded.device_bytes is None and loaded.device_memory is None
