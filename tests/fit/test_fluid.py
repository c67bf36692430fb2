"""Fluid cores, reservations, external limits, batch sizes, packing, placement and refit."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fitwork import InputError, Pipeline, unit
from fitwork.fit import ClassDemand, FitInputError, NodeType, UnitDemand, solve
from fitwork.fit.ceiling import core_ceiling
from fitwork.fit.inputs import (
    BATCH_GAIN,
    DRIVER_SECONDS,
    HOP_SECONDS,
    byte_seconds,
    crossing_seconds,
)
from fitwork.fit.plan import (
    MEMORY_MARGIN,
    MEMORY_SHARE,
    TIE_MARGIN,
    Plan,
    PlanSide,
    plan_for,
    refit,
)
from fitwork.hardware.fleet import Fleet
from fitwork.profiling import PipelineProfile, profile_pipeline
from fitwork.profiling.record import BatchMeasurement, UnitProfile
from tests.fit.problems import check_plan, replica_counts
from tests.fit.test_plan import synthetic_profile

GIB = 2**30
MIXED = Path(__file__).parents[2] / "src" / "fitwork" / "hardware" / "fleets" / "mixed.yaml"
TWO_CORES = Fleet.parse({"name": "laptop", "node_types": [
    {"name": "laptop", "cores": 2, "memory": "8GiB"}]})


@unit
def parse(x: str) -> int:
    return int(x)


@unit
def slow(x: int) -> int:
    time.sleep(0.02)
    return x


@unit
def square(x: int) -> int:
    return x * x


def test_three_undeclared_units_plan_on_two_cores_and_run_as_fast_as_the_monolith() -> None:
    pipeline = Pipeline(parse, slow, square, name="three")
    profiled = profile_pipeline(pipeline, [str(i) for i in range(16)], samples=16)
    plan = plan_for(profiled, TWO_CORES)
    fitted, mono = plan.fitted.result, plan.monolithic.result
    split = (plan.split or plan.fitted).result
    workers = {p.unit: p.replicas for p in split.replicas if p.replicas}
    print(f"split {workers} at {split.throughput:,.0f} items/s; monolithic "
          f"{sum(p.replicas for p in mono.replicas)} replicas at {mono.throughput:,.0f} items/s;"
          f" plan {'fuses' if plan.fused else 'splits'}; ceiling {plan.core_ceiling:.2f}")
    assert set(workers) == {"parse", "slow", "square"} and split.throughput > 0
    # The sleeping unit hides its wait with more processes than there are cores...
    assert workers["slow"] > 2 > workers["parse"]
    # ... while the cores the load consumes stay within the ceiling of the two there are.
    used = sum(p.cores * p.replicas for p in split.replicas)
    assert used <= plan.core_ceiling * 2 + 1e-6
    assert split.throughput <= 2 * plan.core_ceiling / (4 * HOP_SECONDS)  # 4 crossings
    # The fused baseline hides the sleep as well, with more calls in flight than cores (as
    # processes, or threads of a threaded monolith); and the plan never predicts less than
    # it, since not splitting is one of its choices.
    assert sum(p.replicas * (p.threads or 1) for p in mono.replicas) > 2
    assert fitted.throughput >= mono.throughput
    assert plan.fused == (split.throughput <= (1 + plan.uncertainty) * mono.throughput)

    import fitwork

    def rate(placement: object) -> float:
        with fitwork.run(pipeline, [str(i) for i in range(2000)], placement=placement) as run:
            assert sorted(run) == [i * i for i in range(2000)]
        return run.record.throughput

    # The plan races the layout it set aside: a fused plan runs the monolith's own layout,
    # so its rival is the split side; a split plan's is the monolith.  Alternating, so a
    # host that slows or quickens part-way moves both sides alike, and pooled, since a
    # single run here moves by 10-20%.
    placement = plan.placement()
    if plan.fused:
        assert placement.groups == plan.placement(side="monolithic").groups
    rival = plan.placement(side="split" if plan.fused else "monolithic")
    assert rival.groups != placement.groups or rival.fusion != placement.fusion
    planned, other = [], []
    for _ in range(3):
        planned.append(rate(placement))
        other.append(rate(rival))
    print(f"realized: plan ({'fused' if plan.fused else 'split'}) {planned} items/s, the "
          f"side it set aside {other}")
    assert sum(planned) >= 0.9 * sum(other)


def demo_profile(queued: float = 0.0) -> PipelineProfile:
    """The demo's joint layout as measured on 2 cores: I/O units holding a tenth of a core
    that use a few milliseconds of it, and a CPU-bound batched OCR unit."""
    def measured(name: str, wall: float, cpu: float, **extra: object) -> UnitProfile:
        fields: dict[str, object] = dict(
            name=name, kind="map", resources={"cpu": 0.1, "io": 8.0}, device_class="cpu-x86",
            samples=32, wall_s=wall, cpu_s=cpu, queued_s=queued, bytes_in=2e5, bytes_out=2e5,
            output_ratio=1.0, peak_rss=40 << 20)
        return UnitProfile(**{**fields, **extra})  # type: ignore[arg-type]

    return PipelineProfile(fitwork_version="test", pipeline="ocr-joint", host_class="cpu-x86",
                           created_at=0.0, units=[
        measured("fetch", 0.050, 0.002),
        measured("ocr", 0.164, 0.160, resources={"cpu": 1.0}, batch_size=8,
                 peak_rss=300 << 20),
        measured("store", 0.030, 0.002),
    ])


def test_two_model_replicas_share_two_cores_with_the_io_units() -> None:
    plan = plan_for(demo_profile(), TWO_CORES, fuse=False)
    workers = plan.placement().counts()
    # What a person lays out by hand: two OCR processes, the I/O units beside them.
    assert workers == {"fetch": 1, "ocr": 2, "store": 1}
    per_page = 0.002 + 0.160 + 0.002 + 4 * HOP_SECONDS  # 3 units, 4 channel crossings
    assert plan.fitted.throughput == pytest.approx(2 / per_page, rel=0.02)
    assert plan.fitted.throughput > 11.0
    cores = {p.unit: p.cores for p in plan.fitted.result.replicas}
    assert cores["fetch"] < 0.1 and cores["store"] < 0.1  # what they use, not what they hold


def skewed_profile(parallelism: float | None = None) -> PipelineProfile:
    """The issue's heavy-tailed pipeline as profiled with BLAS threads free: more CPU than
    wall per item, from pool threads spinning beside the unit's one."""
    def measured(name: str, wall: float, cpu: float) -> UnitProfile:
        return UnitProfile(name=name, kind="map", resources={"cpu": 1.0},
                           device_class="cpu-x86", samples=64, wall_s=wall, cpu_s=cpu,
                           bytes_in=300.0, bytes_out=300.0, output_ratio=1.0,
                           peak_rss=20 << 20, parallelism=parallelism)

    return PipelineProfile(fitwork_version="test", pipeline="skewed", host_class="cpu-x86",
                           created_at=0.0, units=[measured("parse_rec", 0.00077, 0.00152),
                                                  measured("score_skewed", 0.00228, 0.00463)])


@pytest.mark.parametrize("parallelism", [None, 1.0, 1.5])
def test_a_replica_is_planned_no_more_cores_than_one_process_keeps_busy(
        parallelism: float | None) -> None:
    # Without a measured figure a plain unit's replica keeps one core busy (its declared
    # cpu=1); the plan that gave score_skewed one replica of 1.51 cores now gives it more
    # replicas, each within what one process can do.
    plan = plan_for(skewed_profile(parallelism), TWO_CORES, fuse=False)
    bound = parallelism or 1.0
    # The driver's CPU for the frames a replica takes rides on the replica's cores (it is
    # spent on the node, not in the replica's process): at most DRIVER_SECONDS per item.
    driver = 1 + DRIVER_SECONDS / 0.00152
    for side in (plan.fitted, plan.monolithic):
        for p in side.result.replicas:
            assert p.cores <= bound * driver * (1 + 1e-9), p
            assert p.rate <= bound / (0.00463 if "score" in p.unit else 0.00152) + 1e-6
    replicas = {p.unit: p.replicas for p in plan.fitted.result.replicas}
    if bound == 1.0:
        assert replicas["score_skewed"] >= 2
    # The cores the load consumes still bound it: two cores over the CPU one item costs.
    assert plan.fitted.throughput <= 2 / (0.00463 + 0.00152) * (1 + 1e-6)


def test_a_tie_within_the_plans_uncertainty_goes_to_the_fused_layout_by_a_stated_rule(
        ) -> None:
    # The demo's layout on two cores: the fused processes hide the I/O as well as the split
    # replicas do (more processes than cores), so both predict about the same.
    tied = plan_for(demo_profile(), TWO_CORES)
    split = tied.split
    assert split is not None and tied.fused and tied.uncertainty >= TIE_MARGIN
    assert abs(split.throughput / tied.monolithic.throughput - 1) <= tied.uncertainty
    assert tied.tie is not None and "runs fused" in tied.tie
    assert f"{1 + tied.uncertainty:.2f}x" in tied.tie  # TIE_MARGIN and the sides' difference
    assert tied.fitted.throughput == tied.monolithic.throughput
    kept = plan_for(demo_profile(), TWO_CORES, fuse=False)
    assert not kept.fused and kept.tie is not None and "--no-fuse" in kept.tie
    # Where the split layout wins beyond the margin, it runs split and there is no tie.
    io = plan_for(demo_profile(), Fleet.parse({"name": "one", "node_types": [
        {"name": "one", "cores": 16, "memory": "64GiB"}]}))
    if io.split is None:
        assert io.tie is None or "runs fused" in io.tie
    wide = plan_for(synthetic_profile(), Fleet.from_yaml(MIXED))
    assert not wide.fused and wide.tie is None
    assert wide.fitted.throughput > (1 + wide.uncertainty) * wide.monolithic.throughput


def _memory_of(side: PlanSide) -> float:
    return sum(n.memory_used for n in side.result.nodes)


def test_a_tie_goes_to_the_split_layout_where_the_fused_one_holds_twice_its_memory(
        ) -> None:
    # The same tie, but each OCR call in flight holds 300 MiB: every fused replica holds
    # one per thread, where the split layout's model replicas call one item at a time.
    heavy = demo_profile()
    ocr = next(u for u in heavy.units if u.name == "ocr")
    ocr.call_memory = 300 << 20
    plan = plan_for(heavy, TWO_CORES)
    split, fused = plan.fitted, plan.monolithic
    assert plan.tie is not None and "runs split (it holds less memory)" in plan.tie
    assert not plan.fused and plan.split is None and plan.placement().counts()["ocr"] >= 1
    assert abs(split.throughput / fused.throughput - 1) <= plan.uncertainty
    held = [sum(n.memory_used for n in side.result.nodes) for side in (split, fused)]
    assert held[0] * MEMORY_MARGIN <= held[1]
    # Light calls leave the two layouts' memory alike: the tie stays with the fused one.
    assert plan_for(demo_profile(), TWO_CORES).fused
    # The same two layouts on two cores with 64 GiB: the fused one's 2 GiB is 3% of the
    # node, so halving it buys nothing and the tie stays with the fused layout.
    roomy = plan_for(heavy, Fleet.parse({"name": "roomy", "node_types": [
        {"name": "roomy", "cores": 2, "memory": "64GiB"}]}))
    assert roomy.fused and roomy.tie is not None and "runs fused" in roomy.tie
    assert "of 64 GiB" in roomy.tie and roomy.monolithic.throughput > 0
    held = sum(n.memory_used for n in roomy.monolithic.result.nodes)
    assert held < MEMORY_SHARE * (64 << 30) and roomy.split is not None
    assert _memory_of(roomy.split) * MEMORY_MARGIN <= held


def test_the_ceiling_comes_from_the_measured_run_queue_wait() -> None:
    assert core_ceiling(demo_profile()) == 1.0
    waited = demo_profile(queued=0.004)
    q = 3 * 0.004 / (0.002 + 0.160 + 0.002 + 3 * 0.004)
    assert core_ceiling(waited) == pytest.approx(1 - q)
    plan = plan_for(waited, TWO_CORES)
    assert plan.core_ceiling == pytest.approx(1 - q)
    usage = plan.fitted.result.nodes[0]
    assert usage.cores_fluid <= (1 - q) * 2 + 1e-6
    assert plan.fitted.throughput < plan_for(demo_profile(), TWO_CORES).fitted.throughput


def test_a_reservation_is_honoured_exactly() -> None:
    units = [
        UnitDemand(name="held", classes={"cpu-x86": ClassDemand(
            rate=10, cores=2, cpu_seconds=0.05, reserve=True)}),
        UnitDemand(name="shared", classes={"cpu-x86": ClassDemand(
            rate=100, cores=1, cpu_seconds=0.02)}),
    ]
    fleet = [NodeType(name="n", count=2, cores=8, memory=64 * GIB, core_ceiling=0.9)]
    plan = solve(units, fleet, mip_gap=0.0)
    check_plan(plan, units, fleet)
    held = [p for p in plan.replicas if p.unit == "held"]
    assert all(p.reserved and p.cores == 2.0 for p in held)
    count = sum(p.replicas for p in held)
    assert count <= 8  # 4 per node: whole cores held, busy or not
    usage = plan.nodes[0]
    assert usage.cores_reserved == pytest.approx(2.0 * count)
    assert usage.cores_fluid <= 0.9 * (16 - usage.cores_reserved) + 1e-6
    # x held replicas carry 10x items/s and leave 0.9 (16 - 2x) cores for the shared unit's
    # 0.02 core-seconds per item: x = 7 gives min(70, 90), x = 8 gives min(80, 0).
    assert count == 7 and plan.throughput == pytest.approx(70.0)


def test_external_limits_bound_replicas_and_calls() -> None:
    def api(**limits: object) -> list[UnitDemand]:
        return [UnitDemand(name="call", concurrency=4, **limits, classes={  # type: ignore[arg-type]
            "cpu-x86": ClassDemand(rate=40, cores=1, cpu_seconds=0.001)})]

    fleet = [NodeType(name="n", count=1, cores=16, memory=64 * GIB)]
    free = solve(api(), fleet, mip_gap=0.0)
    bounded = solve(api(max_concurrency=10), fleet, mip_gap=0.0)
    assert replica_counts(bounded) == {("call", "cpu-x86", "n"): 2}  # 2 x 4 calls <= 10
    assert bounded.throughput == pytest.approx(80.0)
    assert free.throughput > 80.0
    assert "max_concurrency of 10" in bounded.bottleneck_reason
    limited = solve(api(rate_limit=25.0), fleet, mip_gap=0.0)
    assert limited.throughput == pytest.approx(25.0)
    assert "rate_limit of 25 calls/s" in limited.bottleneck_reason
    batched = [UnitDemand(name="call", rate_limit=25.0, classes={"cpu-x86": ClassDemand(
        rate=400, cores=1, cpu_seconds=0.001, batch_size=8, latency=0.02)})]
    assert solve(batched, fleet, mip_gap=0.0).throughput == pytest.approx(200.0)  # a batch, a call


def batched_unit(**extra: object) -> UnitDemand:
    def option(batch: int, rate: float) -> ClassDemand:
        return ClassDemand(rate=rate, cores=1, cpu_seconds=1 / rate, batch_size=batch,
                           latency=batch / rate, memory=GIB)

    return UnitDemand(name="embed", classes={"cpu-x86": option(8, 40.0)},
                      alternatives={"cpu-x86": [option(1, 10.0), option(32, 60.0)]},
                      **extra)  # type: ignore[arg-type]


def test_the_fit_chooses_the_batch_size_within_the_latency_bound() -> None:
    fleet = [NodeType(name="n", count=1, cores=4, memory=64 * GIB)]
    sizes = {}
    for bound in (None, 0.3, 0.15):
        plan = solve([batched_unit()], fleet, mip_gap=0.0, max_latency=bound)
        check_plan(plan, [batched_unit()], fleet, max_latency=bound)
        sizes[bound] = {p.batch_size for p in plan.replicas}
        assert plan.throughput == pytest.approx(4 * {None: 60, 0.3: 40, 0.15: 10}[bound])
    assert sizes == {None: {32}, 0.3: {8}, 0.15: {1}}
    with pytest.raises(FitInputError, match=r"unit 'embed' cannot meet max_latency=0.05s: its "
                                            r"quickest call takes 0.1s \(batch 1 on cpu-x86\)"):
        solve([batched_unit()], fleet, max_latency=0.05)


def sweep_profile() -> PipelineProfile:
    """A batched CPU unit measured at batch sizes 1, 4 and 16, behind a light one."""
    batches = [BatchMeasurement(batch_size=b, items=32, wall_s=w, cpu_s=w)
               for b, w in ((1, 0.010), (4, 0.004), (16, 0.003))]
    head = UnitProfile(name="load", kind="map", resources={"cpu": 1.0}, device_class="cpu-x86",
                       samples=32, wall_s=0.001, cpu_s=0.001, bytes_in=100, bytes_out=100,
                       output_ratio=1.0, peak_rss=0)
    model = UnitProfile(name="embed", kind="map", resources={"cpu": 1.0}, batch_size=16,
                        device_class="cpu-x86", samples=32, wall_s=0.003, cpu_s=0.003,
                        bytes_in=100, bytes_out=100, output_ratio=1.0, peak_rss=0,
                        batches=batches)
    return PipelineProfile(fitwork_version="t", pipeline="embed", host_class="cpu-x86",
                           created_at=0.0, units=[head, model])


def test_a_plan_picks_batch_sizes_from_the_profiled_sweep() -> None:
    fleet = Fleet.parse({"name": "one", "node_types": [
        {"name": "box", "cores": 4, "memory": "16GiB"}]})
    free = plan_for(sweep_profile(), fleet)
    tight = plan_for(sweep_profile(), fleet, max_latency=0.02)
    batch = {p.unit: p.batch_size for p in free.fitted.result.replicas}
    assert batch["embed"] == 16 and {p.unit: p.batch_size for p in
                                     tight.fitted.result.replicas}["embed"] == 4
    assert tight.max_latency == 0.02 and tight.fitted.throughput < free.fitted.throughput
    groups = {g.unit: g for g in tight.placement().groups}
    assert groups["embed"].batch_size == 4
    # in and out, each a frame of one item (a 4 ms call fills the engine's frame), and the
    # item's 100 bytes each way
    assert groups["embed"].rate == pytest.approx(
        1 / (0.004 + 2 * crossing_seconds(HOP_SECONDS, 0.004) + 2 * byte_seconds(100)))


def test_a_batch_size_is_planned_only_where_it_pays_beyond_the_margin() -> None:
    # The OCR demo's recognise: measured alone, 3% faster per item at batch 2 and 16 than
    # at 1; in a run, batching cost it more than that (filling, bigger frames).
    fleet = Fleet.parse({"name": "one", "node_types": [
        {"name": "box", "cores": 4, "memory": "16GiB"}]})
    flat = sweep_profile().model_copy(deep=True)
    flat.units[1].batches = [BatchMeasurement(batch_size=b, items=32, wall_s=w, cpu_s=w)
                             for b, w in ((1, 0.0100), (2, 0.0097), (16, 0.0098))]
    flat.units[1].wall_s = flat.units[1].cpu_s = 0.0098
    batch = {p.unit: p.batch_size for p in plan_for(flat, fleet, fuse=False).fitted.result.replicas}
    assert batch["embed"] == 1
    # The sweep above (2.5x faster at 16) still batches; so does one just past the margin.
    past = sweep_profile().model_copy(deep=True)
    past.units[1].batches = [BatchMeasurement(batch_size=b, items=32, wall_s=w, cpu_s=w)
                             for b, w in ((1, 0.0100), (16, 0.0100 / (1 + BATCH_GAIN) / 1.02))]
    for profile in (sweep_profile(), past):
        planned = plan_for(profile, fleet, fuse=False).fitted.result.replicas
        assert {p.unit: p.batch_size for p in planned}["embed"] == 16


def test_the_placement_carries_what_engines_ask_for() -> None:
    plan = plan_for(synthetic_profile(), Fleet.from_yaml(MIXED))
    for side in ("fitted", "monolithic"):
        rows = {(p.unit, p.device_class, p.node_type): p
                for p in getattr(plan, side).result.replicas}
        for group in plan.placement(side=side).groups:
            row = rows[group.unit, group.device_class, group.node_type]
            assert group.rate == row.rate > 0
            assert group.resources is not None and len(group.nodes) == group.replicas
            assert group.resources.memory == int(row.memory)
            assert group.resources.cpu == pytest.approx(row.cores, abs=1e-4)
            if not (group.device_class or "").startswith("cpu-"):
                assert group.resources.gpu == row.device_share > 0
    decode = [g for g in plan.placement().groups if g.unit == "decode"]
    assert all(0 < g.resources.cpu < 1.0 for g in decode if g.resources)  # fluid, not 1 whole
    round_trip = Plan.model_validate_json(plan.model_dump_json())
    assert round_trip.placement() == plan.placement()


def test_no_plan_holds_a_replica_that_carries_no_load() -> None:
    fleet = Fleet.from_yaml(MIXED)
    plan = plan_for(synthetic_profile(), fleet)
    cheap = plan_for(synthetic_profile(), fleet, objective="min_cost",
                target=0.3 * plan.fitted.throughput)
    for side in (plan.fitted, plan.monolithic, cheap.fitted):
        for p in side.result.replicas:
            assert p.items_per_s > 0 and p.replicas >= 1
            assert p.replicas <= math.ceil(p.items_per_s / p.rate - 1e-9) * 2


def test_refit_replaces_the_measured_rates_and_solves_again() -> None:
    plan = plan_for(demo_profile(), TWO_CORES, fuse=False)
    before = {g.unit: g for g in plan.placement().groups}
    slower = refit(plan, {"ocr": before["ocr"].rate / 2})
    assert slower.source == "refit"
    after = {g.unit: g for g in slower.groups}
    assert after["ocr"].rate == pytest.approx(before["ocr"].rate / 2)
    assert after["ocr"].replicas > before["ocr"].replicas  # twice as slow: more replicas
    assert after["ocr"].resources is not None and len(after["ocr"].nodes) == after["ocr"].replicas
    assert refit(plan, {}).counts() == plan.placement().counts()
    with pytest.raises(InputError, match="refit: nope not in the plan"):
        refit(plan, {"nope": 1.0})
    with pytest.raises(InputError, match="give a rate > 0"):
        refit(plan, {"ocr": 0.0})


PIPE = textwrap.dedent("""
    from fitwork import Pipeline, unit

    @unit
    def load(x):
        return x

    @unit(batch_size=16)
    def embed(batch):
        return batch

    pipeline = Pipeline(load, embed, name="embed")
""")


def test_plan_command_takes_max_latency_and_shows_batch_sizes(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text(PIPE)
    sweep_profile().save(tmp_path / "prof.json")
    (tmp_path / "fleet.yaml").write_text(Fleet.parse({"name": "one", "node_types": [
        {"name": "box", "cores": 4, "memory": "16GiB"}]}).to_yaml())
    done = subprocess.run([sys.executable, "-m", "fitwork.cli", "plan", "p.py:pipeline",
                           "--profile", "prof.json", "--fleet", "fleet.yaml",
                           "--max-latency", "0.02", "-o", "plan.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "batch" in done.stdout and "cores each" in done.stdout
    saved = Plan.load(tmp_path / "plan.json")
    assert saved.max_latency == 0.02
    assert {p.unit: p.batch_size for p in saved.fitted.result.replicas}["embed"] == 4


def test_a_fleet_without_the_device_a_unit_needs_says_so_in_one_line() -> None:
    from fitwork.fit import UnitFitsNowhere

    with pytest.raises(UnitFitsNowhere) as caught:
        plan_for(synthetic_profile(), TWO_CORES)
    assert caught.value.unit == "model" and "\n" not in str(caught.value)
    assert str(caught.value).startswith(
        "unit 'model' fits no node: needs 0.25 of an accelerator; the largest node offers "
        "2 cores, 8 GiB (node type 'laptop')")
    small = Fleet.parse({"name": "l4", "node_types": [
        {"name": "g", "cores": 8, "memory": "16GiB", "devices": {"L4": 1}}]})
    profile = synthetic_profile()
    profile.units[1].device_memory = 40 << 30
    with pytest.raises(UnitFitsNowhere, match=r"^unit 'model' fits no node: needs L4: needs "
                                              r"40.0 GiB of device memory per replica; .*the "
                                              r"largest node offers 8 cores, 16 GiB"):
        plan_for(profile, small)


def test_the_engine_charge_per_item_follows_the_frames_the_engines_send() -> None:
    from fitwork.engine import sim
    from fitwork.engine.local import driver
    from fitwork.fit.inputs import (
        FRAME_SECONDS,
        ITEM_SHARE,
        MAX_FRAME,
        demands,
        fleet_classes,
        frame_items,
    )
    from fitwork.hardware.catalog import catalog

    # The fit sizes frames as the engines do; if one changes, the other must follow.
    assert FRAME_SECONDS == driver.FRAME_TIME == sim.FRAME_TIME
    assert MAX_FRAME == driver.MAX_FRAME == sim.MAX_FRAME
    assert frame_items(0.020) == 1 and frame_items(0.0005) == 10 and frame_items(0) == MAX_FRAME
    # a replica's frames are half its calls in flight, however long a call waits
    assert frame_items(0.0001, io=16) == 8 and frame_items(0.020, io=16) == 8
    assert frame_items(0.020, io=1) == 1
    from fitwork.engine.core.events import Stage
    from fitwork.engine.core.policy import Policy
    from fitwork.engine.core.sizing import frame_size
    for io, busy in ((16, 0.0001), (16, 0.020), (8, 0.020 / 8), (1, 0.020), (0, 0.0005)):
        # the core's size once 100 items are measured at ``busy`` seconds each
        assert frame_size(Policy(), Stage("u", io=io), 1, 100, 100 * busy, 0) == frame_items(
            busy, io), (io, busy)
    # A cheap unit's items share a frame's cost; a slow one pays it whole.
    assert crossing_seconds(HOP_SECONDS, 0.0005) < crossing_seconds(HOP_SECONDS, 0.020) / 5
    # A chain pays each crossing at the smaller of its own frames and what arrives: a cheap
    # unit after a slow one gets one-item frames and pays the whole charge.
    def charge(order: list[tuple[str, float]]) -> dict[str, float]:
        units = [UnitProfile(name=name, kind="map", resources={"cpu": 1.0},
                             device_class="cpu-x86", samples=8, wall_s=wall, cpu_s=wall,
                             bytes_in=100, bytes_out=100, output_ratio=1.0, peak_rss=1 << 20)
                 for name, wall in order]
        profile = PipelineProfile(fitwork_version="test", pipeline="chain",
                                  host_class="cpu-x86", created_at=0.0, units=units)
        known = catalog()
        made, _, _, _ = demands(profile, fleet_classes(TWO_CORES, known), known)
        # the replica's time per item beyond the unit's own (its crossings and their bytes;
        # the driver's share is in its core-seconds only)
        return {u.name: 1 / u.classes["cpu-x86"].rate - dict(order)[u.name]
                - byte_seconds(100) * (2 if u.name == "end" else 1) for u in made}

    slow_first = charge([("slow", 0.020), ("cheap", 0.0005), ("end", 0.0005)])
    cheap_first = charge([("cheap", 0.0005), ("slow", 0.020), ("end", 0.0005)])
    whole = HOP_SECONDS * (1 + ITEM_SHARE)
    assert slow_first["cheap"] == pytest.approx(whole)
    assert cheap_first["cheap"] == pytest.approx(crossing_seconds(HOP_SECONDS, 0.0005))
    assert slow_first["end"] == cheap_first["end"] == pytest.approx(2 * whole)  # in and out
