"""The fit solver on constructed fleets: messages, the monolithic baseline, cost, network."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from fitwork.errors import FitworkError
from fitwork.fit import (
    ClassDemand,
    FitInputError,
    FitResult,
    NodeType,
    TargetUnreachable,
    UnitDemand,
    UnitFitsNowhere,
    monolithic,
    solve,
)
from fitwork.fit.candidates import build_problem
from fitwork.fit.model import build_model
from tests.fit.problems import check_plan, replica_counts

GIB = 2**30
TIMES = "\u00d7"  # the multiplication sign the messages print


def mixed_fleet() -> list[NodeType]:
    """CPU-only nodes, and GPU nodes of two generations."""
    return [
        NodeType(name="cpu", count=10, cores=64, memory=256 * GIB, network=12.5e9,
                 price_per_hour=2.0),
        NodeType(name="v100", count=2, cores=32, memory=256 * GIB, devices={"V100": 8},
                 network=12.5e9, price_per_hour=10.0),
        NodeType(name="h100", count=2, cores=64, memory=1024 * GIB, devices={"H100": 8},
                 network=25e9, price_per_hour=40.0),
    ]


def image_pipeline() -> list[UnitDemand]:
    """CPU decode, a GPU model holding a quarter of a device, CPU post-processing."""
    return [
        UnitDemand(name="pre", classes={
            "cpu-x86": ClassDemand(rate=50, cores=4, memory=4 * GIB, bytes_out_per_item=600e3),
        }),
        UnitDemand(name="model", classes={
            "H100": ClassDemand(rate=400, cores=1, memory=16 * GIB, device_share=0.25,
                                bytes_out_per_item=4e3),
            "V100": ClassDemand(rate=120, cores=1, memory=16 * GIB, device_share=0.25,
                                bytes_out_per_item=4e3),
            "cpu-x86": ClassDemand(rate=2, cores=8, memory=16 * GIB, bytes_out_per_item=4e3),
        }),
        UnitDemand(name="post", classes={"cpu-x86": ClassDemand(rate=200, cores=1, memory=GIB)}),
    ]


def test_a_unit_that_fits_nowhere_says_what_it_needs_beside_the_largest_node() -> None:
    unit = UnitDemand(name="model", classes={
        "H100-SXM": ClassDemand(rate=10, cores=4, memory=100 * GIB, device_share=1.0)})
    fleet = [NodeType(name="a100", count=4, cores=64, memory=512 * GIB,
                      devices={"A100-80GB": 8}),
             NodeType(name="small", count=8, cores=16, memory=64 * GIB)]
    with pytest.raises(UnitFitsNowhere) as caught:
        solve([unit], fleet)
    assert str(caught.value).startswith(
        f"unit 'model' fits no node: needs 100 GiB memory, 1.0 {TIMES} H100-SXM; "
        f"the largest node offers 64 cores, 512 GiB, 8 {TIMES} A100-80GB")
    assert caught.value.unit == "model"
    assert isinstance(caught.value, FitworkError)


def test_a_unit_too_large_for_every_node_lists_each_class_it_could_use() -> None:
    unit = UnitDemand(name="big", classes={
        "cpu-x86": ClassDemand(rate=1, cores=128, memory=GIB, reserve=True),
        "gpu": ClassDemand(rate=5, cores=2, memory=GIB, device_share=4.0)})
    fleet = [NodeType(name="n", count=2, cores=64, memory=64 * GIB, devices={"gpu": 2})]
    with pytest.raises(UnitFitsNowhere, match=rf"needs 1 GiB memory, 4\.0 {TIMES} gpu "
                                              r"\(or 128 reserved cores, 1 GiB memory on "
                                              r"cpu-x86\)"):
        solve([unit], fleet)


def test_fluid_cores_fit_a_unit_whose_declared_cores_exceed_every_node() -> None:
    # Declared cores only say how many a replica may use: without reserve=True the unit
    # consumes what it measurably does, so it runs where 128 reserved cores would not.
    unit = UnitDemand(name="big", classes={"cpu-x86": ClassDemand(rate=1, cores=128,
                                                                  cpu_seconds=0.5)})
    fleet = [NodeType(name="n", count=1, cores=64, memory=64 * GIB)]
    plan = solve([unit], fleet, mip_gap=0.0)
    check_plan(plan, [unit], fleet)
    assert plan.throughput == pytest.approx(128.0)  # 64 cores / 0.5 core-seconds per item


def test_fitted_plan_keeps_gpus_several_times_busier_than_the_monolithic_baseline() -> None:
    units, fleet = image_pipeline(), mixed_fleet()
    fitted = solve(units, fleet)
    base = monolithic(units, fleet)
    check_plan(fitted, units, fleet)
    assert fitted.throughput > 2 * base.throughput
    assert fitted.accelerator_utilization() >= 2 * base.accelerator_utilization()
    assert fitted.utilization_of("H100") >= 3 * base.utilization_of("H100")
    assert fitted.cost_per_million is not None and base.cost_per_million is not None
    assert fitted.cost_per_million < base.cost_per_million
    # The model runs on accelerators only; decode and post-processing stay on cores.
    counts = replica_counts(fitted)
    assert all(cls != "cpu-x86" for (unit, cls, _) in counts if unit == "model")
    # Cores, consumed as the load uses them, are what holds throughput: pre uses the most.
    assert fitted.bottleneck == "pre"
    assert fitted.bottleneck_reason.startswith("the cores of cpu")


def test_monolithic_rate_runs_every_stage_in_sequence() -> None:
    units = [
        UnitDemand(name="a", classes={"cpu-x86": ClassDemand(rate=10, cores=1)}),
        UnitDemand(name="b", multiplicity=2.0,
                   classes={"cpu-x86": ClassDemand(rate=40, cores=1)}),
    ]
    fleet = [NodeType(name="n", count=1, cores=4, memory=8 * GIB, price_per_hour=1.0)]
    base = monolithic(units, fleet, mip_gap=0.0)
    # One fused replica: 1/10 + 2/40 = 0.15 s per source item, busy on a core all of it
    # (the stages run in turn); the cores' 4 core-seconds per second carry 4 / 0.15.
    assert replica_counts(base) == {("monolithic", "cpu-x86", "n"): 4}
    assert base.throughput == pytest.approx(4 / 0.15)
    assert base.utilization_of("cpu-x86") == pytest.approx(1.0)
    fitted = solve(units, fleet, mip_gap=0.0)
    check_plan(fitted, units, fleet)
    # Fluid cores: a's 0.1 and b's 2 x 0.025 core-seconds per source item share the same
    # 4 cores, so splitting gives the same 4 / 0.15 with 3 + 2 processes on 4 cores.
    assert fitted.throughput == pytest.approx(4 / 0.15)
    assert replica_counts(fitted) == {("a", "cpu-x86", "n"): 3, ("b", "cpu-x86", "n"): 2}


def test_min_cost_meets_the_target_for_no_more_than_the_max_throughput_plan() -> None:
    units, fleet = image_pipeline(), mixed_fleet()
    best = solve(units, fleet, mip_gap=0.0)
    costs = []
    for share in (0.1, 0.25, 0.5, 1.0):
        plan = solve(units, fleet, objective="min_cost", target=share * best.throughput,
                     mip_gap=0.0)
        check_plan(plan, units, fleet)
        assert plan.throughput == pytest.approx(share * best.throughput)
        assert plan.cost_per_hour <= best.cost_per_hour + 1e-9
        assert plan.bound <= plan.cost_per_hour + 1e-9
        costs.append(plan.cost_per_hour)
    assert costs == sorted(costs)
    assert costs[0] < 0.25 * best.cost_per_hour


def test_min_cost_serves_the_monolithic_throughput_for_less() -> None:
    units, fleet = image_pipeline(), mixed_fleet()
    base = monolithic(units, fleet)
    plan = solve(units, fleet, objective="min_cost", target=base.throughput)
    check_plan(plan, units, fleet)
    assert plan.cost_per_hour < 0.5 * base.cost_per_hour
    used = {n.node_type: n.nodes_used for n in plan.nodes}
    assert sum(used.values()) < sum(n.nodes_used for n in base.nodes)


def test_an_unreachable_target_names_the_most_the_fleet_gives() -> None:
    units, fleet = image_pipeline(), mixed_fleet()
    best = solve(units, fleet)
    with pytest.raises(TargetUnreachable) as caught:
        solve(units, fleet, objective="min_cost", target=10 * best.throughput)
    assert caught.value.achievable == pytest.approx(best.throughput, rel=0.02)
    assert f"at most {caught.value.achievable:.6g} items/s" in str(caught.value)


def test_network_binds_when_consecutive_units_sit_on_different_node_types() -> None:
    units = [
        UnitDemand(name="read", classes={
            "cpu-x86": ClassDemand(rate=1000, cores=1, bytes_out_per_item=1e6)}),
        UnitDemand(name="infer", classes={"gpu": ClassDemand(rate=1000, cores=1,
                                                             device_share=0.5)}),
    ]
    fleet = [NodeType(name="cpu", count=2, cores=32, memory=64 * GIB, network=1e8),
             NodeType(name="gpu", count=1, cores=32, memory=64 * GIB, cpu_class=None,
                      devices={"gpu": 4}, network=1e8)]
    plan = solve(units, fleet)
    check_plan(plan, units, fleet)
    # The gpu node receives every byte `read` sends: 1e6 bytes per item over 1e8 bytes/s.
    assert plan.throughput == pytest.approx(100.0, rel=1e-6)
    assert plan.bottleneck_reason.startswith(
        "the network of gpu (100 MB/s of 100 MB/s) holds throughput at 100 items/s")
    assert plan.bottleneck in {"read", "infer"}
    usage = {n.node_type: n for n in plan.nodes}
    assert usage["gpu"].network_in == pytest.approx(1e8, rel=1e-6)


def test_fractional_shares_pack_whole_replicas_per_device() -> None:
    unit = UnitDemand(name="m", classes={"gpu": ClassDemand(rate=10, cores=0,
                                                            device_share=0.3)})
    fleet = [NodeType(name="g", count=2, cores=8, memory=8 * GIB, devices={"gpu": 1})]
    plan = solve([unit], fleet, mip_gap=0.0)
    assert replica_counts(plan) == {("m", "gpu", "g"): 6}  # 3 per device, not 3.33
    assert plan.throughput == pytest.approx(60.0)


def test_cpu_classes_run_only_on_nodes_with_that_cpu() -> None:
    unit = UnitDemand(name="arm-only", classes={"cpu-arm": ClassDemand(rate=1, cores=1)})
    fleet = [NodeType(name="x86", count=4, cores=64, memory=64 * GIB),
             NodeType(name="arm", count=1, cores=8, memory=64 * GIB, cpu_class="cpu-arm")]
    plan = solve([unit], fleet, mip_gap=0.0)
    assert replica_counts(plan) == {("arm-only", "cpu-arm", "arm"): 8}
    assert {n.node_type: n.nodes_used for n in plan.nodes} == {"x86": 0, "arm": 1}


def test_model_size_follows_node_types_not_node_count() -> None:
    units = image_pipeline()
    small = build_model(build_problem(units, mixed_fleet()), min_cost=False, target=None)
    many = [n.model_copy(update={"count": n.count * 1000}) for n in mixed_fleet()]
    large = build_model(build_problem(units, many), min_cost=False, target=None)
    assert small.a.shape == large.a.shape
    plan = solve(units, many)
    assert plan.throughput > 900 * solve(units, mixed_fleet()).throughput


def test_result_and_inputs_round_trip_through_json() -> None:
    units, fleet = image_pipeline(), mixed_fleet()
    plan = solve(units, fleet)
    assert FitResult.model_validate_json(plan.model_dump_json()) == plan
    assert [UnitDemand.model_validate_json(u.model_dump_json()) for u in units] == units
    assert [NodeType.model_validate_json(n.model_dump_json()) for n in fleet] == fleet
    assert plan.cost_per_million == pytest.approx(
        plan.cost_per_hour / (plan.throughput * 3600) * 1e6)
    assert math.isclose(plan.gap, (plan.bound - plan.throughput) / plan.bound)


@pytest.mark.parametrize(("units", "fleet", "match"), [
    ([], [NodeType(name="n", count=1, cores=1, memory=0)], "no units"),
    ([UnitDemand(name="a", classes={"cpu-x86": ClassDemand(rate=1)})] * 2,
     [NodeType(name="n", count=1, cores=1, memory=0)], "repeated: a"),
    ([UnitDemand(name="a", classes={"cpu-x86": ClassDemand(rate=1)})],
     [NodeType(name="n", count=0, cores=1, memory=0)], "no nodes"),
    ([UnitDemand(name="a", classes={"cpu-x86": ClassDemand(rate=1, device_share=0.5)})],
     [NodeType(name="n", count=1, cores=1, memory=0)], "CPU class"),
    ([UnitDemand(name="a", classes={"gpu": ClassDemand(rate=1, cores=0)})],
     [NodeType(name="n", count=1, cores=1, memory=0, devices={"gpu": 1})], "demands nothing"),
    ([UnitDemand(name="a", classes={"gpu": ClassDemand(rate=0, cores=1)})],
     [NodeType(name="n", count=1, cores=1, memory=0, devices={"gpu": 1})], "rate > 0"),
])
def test_inputs_no_plan_can_come_from_are_refused(units: list[UnitDemand],
                                                  fleet: list[NodeType], match: str) -> None:
    with pytest.raises(FitInputError, match=match):
        solve(units, fleet)


def test_options_are_checked() -> None:
    units, fleet = image_pipeline(), mixed_fleet()
    with pytest.raises(FitInputError, match="needs a target"):
        solve(units, fleet, objective="min_cost")
    with pytest.raises(FitInputError, match="min_cost' only"):
        solve(units, fleet, target=10.0)
    with pytest.raises(FitInputError, match="objective="):
        solve(units, fleet, objective="fastest")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="cpu_class"):
        NodeType(name="n", count=1, cores=1, memory=0, cpu_class="x86")
    with pytest.raises(ValidationError, match="CPU class"):
        NodeType(name="n", count=1, cores=1, memory=0, devices={"cpu-x86": 1})
