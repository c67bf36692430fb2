"""The three utilization figures of run records: hand-built records, a fitted plan, a real run."""

from __future__ import annotations

import time

import pytest

import fitwork
from fitwork import InputError, Pipeline, unit
from fitwork.fit.plan import plan_for
from fitwork.hardware.catalog import catalog
from fitwork.hardware.fleet import Fleet
from fitwork.profiling.record import PipelineProfile, UnitProfile
from fitwork.telemetry.record import (
    DeviceSample,
    QueueSeries,
    RunRecord,
    UnitRecord,
    WorkerRecord,
)
from fitwork.telemetry.utilization import (
    CPU_BASIS,
    GPU_BASIS,
    GPU_MEASURED_BASIS,
    capacity_bound,
    capacity_utilization,
    fleet_utilization,
    model_flops_utilization,
    needed_flops,
    plan_flops,
    run_figures,
    sampled_busy,
    unit_classes,
)


def make_record(units: list[UnitRecord], wall_s: float, *, workers: list[WorkerRecord] = (),
                completed: int = 100, throughput: float | None = None,
                samples: list[DeviceSample] = ()) -> RunRecord:
    return RunRecord(
        fitwork_version="test", run_id="r1", pipeline="p", engine="local", started_at=0.0,
        wall_s=wall_s, items_in=completed, items_completed=completed, outputs=completed,
        failures=0, poisoned=0, retries=0, worker_restarts=0,
        throughput=completed / wall_s if throughput is None else throughput,
        latency_p50_s=None, latency_p95_s=None, units=units, resources=[],
        workers=list(workers), queue=QueueSeries(), device_samples=list(samples))


def cpu_and_gpu() -> RunRecord:
    """decode: 2 x 1 core; model: 4 x (1 core, 1/4 GPU); post: 1 x half a core; 10 s."""
    return make_record([
        UnitRecord(name="decode", kind="map", replicas=2, resources={"cpu": 1.0},
                   items_in=1000, busy_s=12.0, cpu_s=9.0),
        UnitRecord(name="model", kind="map", replicas=4, resources={"cpu": 1.0, "gpu": 0.25},
                   items_in=1000, busy_s=32.0, cpu_s=4.0),
        UnitRecord(name="post", kind="map", replicas=1, resources={"cpu": 0.5},
                   items_in=1000, busy_s=2.0, cpu_s=1.0),
    ], wall_s=10.0, completed=1000)


def test_fleet_utilization_of_a_cpu_only_record_matches_its_resource_figure() -> None:
    record = make_record([
        UnitRecord(name="a", kind="map", replicas=2, resources={"cpu": 1.0}, cpu_s=3.0),
        UnitRecord(name="b", kind="map", replicas=1, resources={"cpu": 0.5, "io": 4},
                   cpu_s=0.5),
    ], wall_s=4.0)
    [row] = fleet_utilization(record)
    assert row.device_class == "cpu-x86"
    assert (row.allocated, row.allocated_s, row.busy_s) == (2.5, 10.0, 3.5)
    assert row.utilization == pytest.approx(0.35)
    assert row.basis == CPU_BASIS
    assert row.mfu is None


def test_units_on_a_named_accelerator_count_their_share_and_their_host_cores() -> None:
    record = cpu_and_gpu()
    assert unit_classes(record.units, {"model": "h100 sxm"}) == {
        "decode": "cpu-x86", "model": "H100-SXM", "post": "cpu-x86"}
    rows = {r.device_class: r for r in fleet_utilization(record, {"model": "h100-sxm"})}
    gpu, cpu = rows["H100-SXM"], rows["cpu-x86"]
    assert (gpu.allocated, gpu.allocated_s, gpu.busy_s) == (1.0, 10.0, 8.0)
    assert gpu.utilization == pytest.approx(0.8)
    assert gpu.basis == GPU_BASIS
    assert (cpu.allocated, cpu.allocated_s, cpu.busy_s) == (6.5, 65.0, 14.0)
    assert cpu.utilization == pytest.approx(14 / 65)


def test_an_unnamed_gpu_share_gets_the_placeholder_class_and_no_mfu() -> None:
    record = cpu_and_gpu()
    assert [r.device_class for r in fleet_utilization(record)] == ["cpu-x86", "gpu"]
    with pytest.raises(InputError, match="no device class was named"):
        model_flops_utilization(record, {"model": 1e12})


def test_a_unit_placed_on_an_accelerator_without_a_share_holds_a_whole_device() -> None:
    record = make_record([UnitRecord(name="m", kind="map", replicas=2, resources={"cpu": 1.0},
                                     busy_s=5.0, cpu_s=5.0)], wall_s=5.0)
    rows = {r.device_class: r for r in fleet_utilization(record, {"m": "T4"})}
    assert rows["T4"].allocated == 2.0
    assert rows["T4"].utilization == pytest.approx(0.5)
    assert rows["cpu-x86"].allocated == 2.0


def test_mfu_is_needed_flops_over_peak_times_devices_times_wall() -> None:
    record = cpu_and_gpu()
    known = catalog()
    flops = {"model": 2e12, "decode": 1e9}
    assert needed_flops(record, flops, {"model": "H100-SXM"}) == {
        "H100-SXM": 2e15, "cpu-x86": 1e12}
    mfu = model_flops_utilization(record, flops, {"model": "H100-SXM"})
    h100, cpu = known.get("H100-SXM"), known.get("cpu-x86")
    assert mfu["H100-SXM"] == pytest.approx(2e15 / (h100.fp16_flops * 1.0 * 10.0))
    assert mfu["cpu-x86"] == pytest.approx(1e12 / (cpu.fp32_flops * 6.5 * 10.0))
    fp32 = model_flops_utilization(record, flops, {"model": "H100-SXM"}, precision="fp32")
    assert 2e15 / (h100.fp32_flops * 10.0) > 1  # more FLOPs than the FP32 peak allows
    assert fp32["H100-SXM"] == 1.0  # never over 100%; run_figures says why
    assert fp32["cpu-x86"] == mfu["cpu-x86"]
    row = run_figures(record, flops_per_item=flops, classes={"model": "H100-SXM"},
                      precision="fp32").of("H100-SXM")
    assert row.mfu == 1.0 and "exceed the peak" in row.note


def gpu_samples(name: str, busy: dict[int, list[float]], node: str | None = None
                ) -> list[DeviceSample]:
    """Readings of devices (index -> utilization per reading), 0.5 s apart."""
    return [DeviceSample(t_s=0.5 * (i + 1), node=node, device=device, name=name,
                         utilization=value, memory_used=1 << 30, memory_total=80 << 30)
            for device, values in busy.items() for i, value in enumerate(values)]


def test_sampled_busy_is_mean_utilization_times_wall_per_device() -> None:
    samples = [*gpu_samples("NVIDIA H100 80GB HBM3", {0: [0.2, 0.4, 0.6], 1: [1.0, 1.0, 0.7]}),
               *gpu_samples("NVIDIA H100 80GB HBM3", {0: [0.1, 0.1, 0.1]}, node="other"),
               *gpu_samples("NVIDIA L4", {0: [0.5]}, node="l4-box"),
               *gpu_samples("Made-up GPU", {3: [1.5]})]
    figures = sampled_busy(samples, wall_s=10.0)
    assert list(figures) == ["H100-SXM", "L4", "Made-up GPU"]
    devices, busy = figures["H100-SXM"]
    mean = (0.2 + 0.4 + 0.6 + 1.0 + 1.0 + 0.7 + 0.1 * 3) / 9
    assert devices == 3 and busy == pytest.approx(mean * 10.0 * 3)  # sampled evenly
    assert figures["L4"] == (1, pytest.approx(5.0))
    assert figures["Made-up GPU"] == (1, 10.0)  # utilization read above 1 counts as 1
    assert sampled_busy([], 10.0) == {}


def test_device_samples_make_the_gpu_figure_measured() -> None:
    record = cpu_and_gpu()  # model: 4 x 1/4 GPU, declared busy 32 s x 1/4 = 8 s of 10
    declared = {r.device_class: r for r in fleet_utilization(record, {"model": "H100-SXM"})}
    assert declared["H100-SXM"].basis == GPU_BASIS and not declared["H100-SXM"].measured
    sampled = make_record(record.units, wall_s=10.0, completed=1000, samples=gpu_samples(
        "NVIDIA H100 80GB HBM3", {0: [0.5, 0.7, 0.6, 0.6]}))
    rows = {r.device_class: r for r in fleet_utilization(sampled)}  # class from the samples
    gpu, cpu = rows["H100-SXM"], rows["cpu-x86"]
    assert gpu.basis == GPU_MEASURED_BASIS and gpu.measured
    assert gpu.basis.startswith("measured") and GPU_BASIS.startswith("declared")
    assert (gpu.allocated, gpu.busy_s) == (1.0, pytest.approx(6.0))
    assert gpu.utilization == pytest.approx(0.6)
    assert cpu == declared["cpu-x86"] and cpu.basis == CPU_BASIS and cpu.measured
    two = make_record(record.units, wall_s=10.0, samples=gpu_samples(
        "NVIDIA H100 80GB HBM3", {0: [0.9], 1: [0.1]}))
    [_, both] = fleet_utilization(two)
    assert (both.allocated, both.busy_s) == (2.0, pytest.approx(10.0))  # at least as sampled
    mfu = model_flops_utilization(two, {"model": 2e12})
    assert mfu["H100-SXM"] == pytest.approx(
        1000 * 2e12 / (catalog().get("H100-SXM").fp16_flops * 2.0 * 10.0))


def test_samples_of_a_class_the_run_did_not_use_change_nothing() -> None:
    record = cpu_and_gpu()
    samples = [*gpu_samples("NVIDIA H100 80GB HBM3", {0: [1.0]}),
               *gpu_samples("NVIDIA L4", {0: [1.0]})]
    sampled = make_record(record.units, wall_s=10.0, completed=1000, samples=samples)
    rows = fleet_utilization(sampled, {"model": "T4"})
    assert [(r.device_class, r.basis) for r in rows] == [("cpu-x86", CPU_BASIS),
                                                         ("T4", GPU_BASIS)]
    assert [r.device_class for r in fleet_utilization(sampled)] == ["cpu-x86", "gpu"]


@pytest.mark.parametrize("name", ["Gaudi2", "SN40L"])
def test_a_class_without_a_peak_has_no_mfu(name: str) -> None:
    record = cpu_and_gpu()
    assert model_flops_utilization(record, {"model": 1e12}, {"model": name},
                                   precision="fp32") == {}
    figures = run_figures(record, flops_per_item={"model": 1e12, "decode": 1e9},
                          classes={"model": name}, precision="fp32")
    row = figures.of(name)
    assert row.flops == 1e15 and row.peak_flops is None and row.mfu is None
    assert figures.of("cpu-x86").mfu is not None
    assert run_figures(record, flops_per_item={"model": 1e12}, classes={"model": name},
                       precision="fp16").of(name).mfu is not None


def test_figures_for_units_the_record_lacks_are_refused() -> None:
    record = cpu_and_gpu()
    with pytest.raises(InputError, match="units typo, which the run record does not have"):
        fleet_utilization(record, {"typo": "T4"})
    with pytest.raises(InputError, match=r"FLOPs per item given for units nope.*decode"):
        needed_flops(record, {"nope": 1.0})


def test_server_capacity_is_throughput_over_the_bound() -> None:
    assert capacity_utilization(50.0, 200.0) == 0.25
    assert capacity_utilization(50.0, 0.0) == 0.0
    figures = run_figures(cpu_and_gpu(), classes={"model": "H100-SXM"},
                          flops_per_item={"model": 2e12}, bound=400.0)
    assert figures.throughput == 100.0
    assert figures.capacity_utilization == 0.25
    assert "given bound (400.0 items/s)" in figures.capacity_basis
    assert figures.of("H100-SXM").flops == 2e15
    assert figures.of("H100-SXM").peak_flops == catalog().get("H100-SXM").fp16_flops
    assert figures.of("cpu-x86").mfu is None
    with pytest.raises(KeyError, match="allocated nothing of device class 'T4'"):
        figures.of("T4")
    bare = run_figures(cpu_and_gpu())
    assert bare.capacity_utilization is None and bare.capacity_bound is None


def small_profile() -> PipelineProfile:
    def measured(name: str, wall: float, **extra: object) -> UnitProfile:
        fields: dict[str, object] = dict(
            name=name, kind="map", resources={"cpu": 1.0}, device_class="cpu-x86", samples=8,
            wall_s=wall, cpu_s=wall, bytes_in=1e3, bytes_out=1e3, output_ratio=1.0,
            peak_rss=50 << 20)
        return UnitProfile(**{**fields, **extra})

    return PipelineProfile(fitwork_version="test", pipeline="p", host_class="cpu-x86",
                           created_at=0.0, units=[
        measured("prep", 0.001, output_ratio=2.0),
        measured("score", 0.004, flops=1e8),
    ])


def test_plan_gives_the_flops_and_the_bound() -> None:
    fleet = Fleet.parse({"name": "box", "node_types": [
        {"name": "box", "count": 1, "cores": 4, "memory": "16GiB"}]})
    plan = plan_for(small_profile(), fleet)
    bound = capacity_bound(plan)
    assert bound >= plan.fitted.throughput > 0
    assert plan.fitted.capacity_utilization == pytest.approx(plan.fitted.throughput / bound)
    staged = make_record([
        UnitRecord(name="prep", kind="flat_map", replicas=1, resources={"cpu": 1.0},
                   items_in=100, cpu_s=0.1),
        UnitRecord(name="score", kind="map", replicas=3, resources={"cpu": 1.0},
                   items_in=200, cpu_s=0.8),
    ], wall_s=1.0, completed=100)
    fused = make_record([UnitRecord(name="p_fused", kind="flat_map", replicas=4,
                                    resources={"cpu": 1.0}, items_in=100, cpu_s=0.9)],
                        wall_s=2.0, completed=100)
    assert plan_flops(plan, staged) == {"score": 1e8}
    assert plan_flops(plan, fused) == {"p_fused": 2e8}
    figures = run_figures(staged, plan)
    assert figures.capacity_bound == bound
    assert figures.capacity_utilization == pytest.approx(100.0 / bound)
    assert "plan bound for fleet 'box'" in figures.capacity_basis
    peak = catalog().get("cpu-x86").fp32_flops
    assert figures.of("cpu-x86").mfu == pytest.approx(200 * 1e8 / (peak * 4 * 1.0))
    assert run_figures(fused, plan).of("cpu-x86").flops == pytest.approx(100 * 2e8)


@unit(cpu=0.5)
def wait_a_little(x: int) -> int:
    time.sleep(0.002)
    return x


@unit(cpu=0.5)
def square(x: int) -> int:
    return sum(i * i for i in range(2000)) + x


def test_figures_of_a_real_run() -> None:
    pipeline = Pipeline(wait_a_little, square, name="real")
    with fitwork.run(pipeline, range(100), workers={"wait_a_little": 2}) as result:
        assert sorted(result) == sorted(sum(i * i for i in range(2000)) + x
                                        for x in range(100))
    record = result.record
    figures = run_figures(record, flops_per_item={"square": 4000.0}, bound=10_000.0)
    cpu = figures.of("cpu-x86")
    assert [c.device_class for c in figures.classes] == ["cpu-x86"]
    assert cpu.allocated == 1.5
    assert cpu.utilization == pytest.approx(record.resource("cpu").utilization)
    assert cpu.allocated_s == pytest.approx(record.resource("cpu").allocated_s)
    peak = catalog().get("cpu-x86").fp32_flops
    assert cpu.mfu == pytest.approx(100 * 4000.0 / (peak * 1.5 * record.wall_s))
    assert 0 < cpu.mfu < 1
    assert figures.capacity_utilization == pytest.approx(record.throughput / 10_000.0)
