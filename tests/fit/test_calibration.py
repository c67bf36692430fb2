"""Calibration: class efficiencies, the A100<->H100 transfer check, stated uncertainty in plans."""

from __future__ import annotations

from importlib import resources

import pytest
from rich.console import Console

from fitwork.fit.calibration import (
    MODELS,
    calibration,
    splitwise_settings,
    transfer_table,
)
from fitwork.fit.plan import plan_for
from fitwork.hardware.fleet import Fleet
from fitwork.profiling.record import PipelineProfile, UnitProfile
from fitwork.report.terminal import plan_table

# Median and worst relative error of the predicted rate, |predicted - measured| / measured,
# on splitwise perf_model.csv (76 settings timed on both A100-80GB and H100-SXM; 19 for the
# bloom split), as measured with this calibration.  "held-out": each model/TP group predicted
# with efficiencies calibrated on the other three; "bloom": calibrated on llama2-70b only;
# "in-sample": calibrated on the rows tested (circular, for comparison only); "before": the
# cost model before device bytes (compute-bound assumed, FP16 peak ratio).
SPLITWISE = {
    ("held-out", "prefill A100-80GB -> H100-SXM"): (0.080, 0.720),
    ("held-out", "prefill H100-SXM -> A100-80GB"): (0.074, 0.446),
    ("held-out", "decode A100-80GB -> H100-SXM"): (0.075, 0.145),
    ("held-out", "decode H100-SXM -> A100-80GB"): (0.078, 0.158),
    ("bloom", "prefill A100-80GB -> H100-SXM"): (0.047, 0.180),
    ("bloom", "prefill H100-SXM -> A100-80GB"): (0.049, 0.219),
    ("bloom", "decode A100-80GB -> H100-SXM"): (0.099, 0.145),
    ("bloom", "decode H100-SXM -> A100-80GB"): (0.090, 0.127),
    ("in-sample", "prefill A100-80GB -> H100-SXM"): (0.090, 0.786),
    ("in-sample", "prefill H100-SXM -> A100-80GB"): (0.082, 0.440),
    ("in-sample", "decode A100-80GB -> H100-SXM"): (0.036, 0.115),
    ("in-sample", "decode H100-SXM -> A100-80GB"): (0.036, 0.113),
    ("before", "prefill A100-80GB -> H100-SXM"): (0.435, 1.822),
    ("before", "prefill H100-SXM -> A100-80GB"): (0.303, 0.646),
    ("before", "decode A100-80GB -> H100-SXM"): (1.155, 1.402),
    ("before", "decode H100-SXM -> A100-80GB"): (0.536, 0.584),
}

# Gavel (26 jobs at scale 1), FP32 ratio with per-class factors, leave-one-job-out.
GAVEL = {
    "K80 -> P100": (0.298, 1.229), "K80 -> V100": (0.398, 5.300),
    "P100 -> K80": (0.367, 1.666), "P100 -> V100": (0.241, 1.914),
    "V100 -> K80": (0.508, 1.957), "V100 -> P100": (0.283, 0.657),
}  # fmt: skip


@pytest.fixture(scope="module")
def table() -> dict[tuple[str, str, str], tuple[int, float, float]]:
    return {(r.data, r.split, r.kind): (r.n, r.median, r.worst) for r in transfer_table()}


@pytest.mark.parametrize(("split", "kind"), sorted(SPLITWISE))
def test_splitwise_transfer_error_is_what_we_measured(table, split: str, kind: str) -> None:
    n, median, worst = table["splitwise", split, kind]
    assert n == (19 if split == "bloom" else 76)
    assert (median, worst) == pytest.approx(SPLITWISE[split, kind], abs=0.001)


def test_held_out_a100_h100_transfer_meets_the_aim_of_a_median_within_20_percent(table) -> None:
    for split in ("held-out", "bloom"):
        medians = [v[1] for k, v in table.items() if k[:2] == ("splitwise", split)]
        assert len(medians) == 4 and max(medians) <= 0.2
    # The worst held-out case does not: a 128-token prefill on H100 is mostly overhead.
    assert table["splitwise", "held-out", "prefill A100-80GB -> H100-SXM"][2] > 0.7
    # And the cost model before device bytes missed the aim by far on decode.
    assert table["splitwise", "before", "decode A100-80GB -> H100-SXM"][1] > 1.0


@pytest.mark.parametrize("kind", sorted(GAVEL))
def test_gavel_transfer_error_per_direction_is_what_we_measured(table, kind: str) -> None:
    n, median, worst = table["gavel", "gavel-held-out", kind]
    assert n == 26
    assert (median, worst) == pytest.approx(GAVEL[kind], abs=0.001)


def test_efficiencies_are_calibrated_per_class_and_bound() -> None:
    found = {k: round(v.value, 3) for k, v in calibration().efficiencies.items()}
    assert found == {("A100-80GB", "compute"): 0.417, ("A100-80GB", "memory"): 0.399,
                     ("H100-SXM", "compute"): 0.304, ("H100-SXM", "memory"): 0.357}
    (compute, memory), why = calibration().device_efficiency("L4")
    assert 0.3 < compute < 0.42 and 0.35 < memory < 0.4
    assert "L4 compute efficiency not calibrated: pooled median" in why
    assert "splitwise perf_model.csv" in calibration().device_efficiency("H100-SXM")[1]


def test_the_llm_shapes_are_the_published_ones() -> None:
    assert MODELS["llama2-70b"].kv_bytes_per_token == 80 * 2 * 8 * 128 * 2  # GQA: 8 KV heads
    assert MODELS["bloom-176b"].kv_bytes_per_token == 70 * 2 * 112 * 128 * 2  # MHA
    settings = splitwise_settings()
    assert len(settings) == 76  # 19 per model/TP group, power-capped H100 rows left out
    assert all(set(s.seconds) == {"A100-80GB", "H100-SXM"} for s in settings)
    decode = next(s for s in settings if (s.model, s.tp, s.prompt, s.batch) ==
                  ("llama2-70b", 8, 2048, 1) and s.tokens == 128)
    assert decode.seconds["A100-80GB"]["prefill"] == pytest.approx(0.274, abs=0.001)
    assert decode.seconds["H100-SXM"]["prefill"] == pytest.approx(0.137, abs=0.001)


def test_the_calibration_data_ships_with_its_licenses() -> None:
    data = resources.files("fitwork.fit").joinpath("data")
    for name, commit in (("splitwise", "8f99e7d"), ("gavel", "c4fa400")):
        text = data.joinpath(f"LICENSE.{name}").read_text()
        assert text.startswith("Attribution: ") and commit in text.splitlines()[0]
        assert "MIT License" in text
    assert data.joinpath("splitwise_perf_model.csv").read_text().startswith("model,hardware")


FLEET = Fleet.parse({"name": "mixed", "node_types": [
    {"name": "cpu", "count": 2, "cores": 32, "memory": "128GiB"},
    {"name": "a100", "count": 1, "cores": 32, "memory": "512GiB", "devices": {"A100-80GB": 8}},
    {"name": "h100", "count": 1, "cores": 32, "memory": "512GiB", "devices": {"H100-SXM": 8}},
]})


def llm_profile(**model: object) -> PipelineProfile:
    base = dict(name="decode", kind="map", resources={"cpu": 1.0, "gpu": 1.0},
                device_class="A100-80GB", samples=8, wall_s=0.050, cpu_s=0.002,
                accel_s=0.045, flops=2 * 70e9 / 8, device_bytes=2 * 70e9 / 8,
                device_memory=30 << 30, bytes_in=100.0, bytes_out=100.0, output_ratio=1.0,
                peak_rss=0)
    prep = UnitProfile(name="prep", kind="map", resources={"cpu": 1.0}, device_class="cpu-x86",
                       samples=8, wall_s=0.004, cpu_s=0.004, bytes_in=100.0, bytes_out=100.0,
                       output_ratio=1.0, peak_rss=0)
    return PipelineProfile(fitwork_version="test", pipeline="llm", host_class="A100-80GB",
                           created_at=0.0, units=[prep, UnitProfile(**{**base, **model})])


def test_a_plan_states_a_range_and_which_rates_were_measured() -> None:
    plan = plan_for(llm_profile(), FLEET, fuse=False)  # the split side's range is under test
    side = plan.fitted
    low, high = side.throughput_range
    assert low < side.throughput < high
    assert side.measured == ["prep"] and side.transferred == ["decode"]
    placed = {p.device_class for p in side.result.replicas if p.unit == "decode" and p.replicas}
    assert "H100-SXM" in placed  # transferred there, so the range is not a point
    h100 = next(r for r in plan.rates if (r.unit, r.device_class) == ("decode", "H100-SXM"))
    assert h100.bound == "memory" and h100.error_median == pytest.approx(0.081, abs=0.001)
    assert "A100-80GB -> H100-SXM" in h100.error_basis
    mono_low, mono_high = plan.monolithic.throughput_range
    assert mono_low <= plan.monolithic.throughput <= mono_high


def test_a_plan_of_measured_rates_only_has_a_range() -> None:
    fleet = Fleet.parse({"name": "a100", "node_types": [
        {"name": "a100", "count": 1, "cores": 32, "memory": "512GiB",
         "devices": {"A100-80GB": 8}}]})
    plan = plan_for(llm_profile(), fleet)
    low, high = plan.fitted.throughput_range
    assert low < plan.fitted.throughput < high  # a measured rate varies too (at least 10%)
    assert plan.fitted.transferred == []


def test_the_plan_table_shows_the_range_and_the_rate_errors() -> None:
    console = Console(record=True, width=200)
    console.print(plan_table(plan_for(llm_profile(), FLEET, fuse=False)))
    text = console.export_text()
    assert "predicted range (p10-p90)" in text
    assert "units measured / transferred" in text
    assert "measured on A100-80GB" in text or "p90" in text
    assert "bound and gap are exact for the predicted rates only" in text
    assert "fitted rates measured: prep; transferred: decode" in text
