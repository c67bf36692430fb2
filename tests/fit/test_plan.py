"""Plans from profiles: heterogeneous fleets, the monolithic baseline, and a real local run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import fitwork
from fitwork import InputError, Pipeline, unit
from fitwork.fit.plan import Plan, plan_for
from fitwork.hardware.discover import discover_local
from fitwork.hardware.fleet import Fleet
from fitwork.profiling import PipelineProfile, profile_pipeline
from fitwork.profiling.record import UnitProfile

MIXED = Fleet.parse({"name": "mixed", "node_types": [
    {"name": "cpu", "count": 4, "cores": 32, "memory": "128GiB"},
    {"name": "v100", "count": 1, "cores": 16, "memory": "64GiB", "devices": {"V100": 4}},
    {"name": "h100", "count": 1, "cores": 32, "memory": "256GiB", "devices": {"H100-SXM": 8}},
]})


def synthetic_profile() -> PipelineProfile:
    def measured(name: str, wall: float, cpu: float, **extra) -> UnitProfile:
        fields = dict(name=name, kind="map", resources={"cpu": 1.0}, device_class="cpu-x86",
                      samples=32, wall_s=wall, cpu_s=cpu, bytes_in=1e4, bytes_out=1e4,
                      output_ratio=1.0, peak_rss=100 << 20)
        return UnitProfile(**{**fields, **extra})

    return PipelineProfile(fitwork_version="test", pipeline="vision", host_class="cpu-x86",
                           created_at=0.0, units=[
        measured("decode", 0.020, 0.019),
        measured("model", 0.500, 0.500, resources={"cpu": 1.0, "gpu": 0.25}, flops=1e12),
        measured("post", 0.004, 0.004, output_ratio=0.5),
    ])


def test_fitted_plan_keeps_the_gpus_several_times_busier_than_monolithic() -> None:
    plan = plan_for(synthetic_profile(), MIXED)
    gpu_classes = ("V100", "H100-SXM")
    fitted = plan.fitted.result.utilization_of("H100-SXM")
    mono = plan.monolithic.result.utilization_of("H100-SXM")
    print(f"H100 utilization: fitted {fitted:.1%}, monolithic {mono:.1%}; throughput "
          f"{plan.fitted.throughput:.0f} vs {plan.monolithic.throughput:.0f} items/s")
    assert plan.fitted.throughput > 5 * plan.monolithic.throughput
    assert fitted >= 3 * mono > 0
    assert plan.fitted.capacity_utilization == pytest.approx(
        plan.fitted.throughput / plan.fitted.result.bound)
    assert plan.monolithic.capacity_utilization < 0.5
    assert plan.multiplicity == {"decode": 1.0, "model": 1.0, "post": 1.0}
    assert set(plan.fitted.mfu) <= set(gpu_classes) and all(0 < v < 1
                                                            for v in plan.fitted.mfu.values())
    methods = {(r.unit, r.device_class): r.method for r in plan.rates}
    assert methods["decode", "cpu-x86"] == "measured"
    assert methods["model", "H100-SXM"] == "flops"
    assert plan.fitted.result.cost_per_million < plan.monolithic.result.cost_per_million


def test_plan_round_trip_and_workers(tmp_path: Path) -> None:
    plan = plan_for(synthetic_profile(), MIXED)
    plan.save(tmp_path / "plan.json")
    loaded = Plan.load(tmp_path / "plan.json")
    assert loaded == plan
    assert len({g.node_type for g in loaded.placement().groups}) > 1  # a mixed fleet's plan
    on_h100 = loaded.placement("h100").counts()
    assert on_h100.get("model", 0) >= 1
    with pytest.raises(InputError, match="places nothing on node type 'tpu'"):
        loaded.placement("tpu").counts()
    with pytest.raises(InputError, match="not a fitwork plan"):
        (tmp_path / "bad.json").write_text("{}")
        Plan.load(tmp_path / "bad.json")


def spin(seconds: float) -> None:
    """Keep a core busy for ``seconds`` of CPU time."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@unit(cpu=0.2)
def prepare(x: int) -> int:
    spin(0.003)
    return x


@unit(cpu=0.2)
def slow_call(x: int) -> int:
    time.sleep(0.012)
    spin(0.001)
    return x * 2


@unit(cpu=0.2)
def finish(x: int) -> int:
    spin(0.002)
    return x + 1


def test_a_plan_for_this_host_runs_and_the_simulated_engine_realizes_it() -> None:
    """The plan for this host: its shape, its outputs on the real engine, and its predicted
    items/s realized by the simulated engine (no timing: the real run's realized/predicted
    is a bench figure, bench/host_plan.py, since a shared 2-core host moves it by 20%)."""
    pipeline = Pipeline(prepare, slow_call, finish, name="waits")
    profiled = profile_pipeline(pipeline, range(16), samples=16)
    plan = plan_for(profiled, discover_local(), fuse=False)  # the split layout is under test
    workers = plan.placement().counts()
    # The waiting unit gets replicas to hide its sleep; cores are planned as the load uses
    # them (fluid), within the ceiling, however many processes that makes.  (On a host so
    # busy that the profile saw most of its runnable time queued, cores are what is scarce.)
    assert workers["slow_call"] >= workers["finish"]
    if plan.core_ceiling >= 0.5:
        assert workers["slow_call"] > workers["finish"]
    cores = plan.fleet.node_types[0].cores
    planned = sum(p.cores * p.replicas for p in plan.fitted.result.replicas)
    assert planned <= plan.core_ceiling * cores + 1e-6
    items = 300
    with fitwork.run(pipeline, range(items), placement=plan) as result:
        outputs = sorted(result)
    assert outputs == [2 * x + 1 for x in range(items)]
    print(f"realized/predicted = {result.record.throughput / plan.fitted.throughput:.2f} "
          f"({result.record.throughput:.0f} vs {plan.fitted.throughput:.0f} items/s; a "
          "figure, not a check: see bench/host_plan.py)")
    # The same placement on the simulated engine, fed at the plan's rate: replicas held for
    # items / planned rate each, so it settles at the plan's items/s, or the plan, its
    # placement or the core that routes it is wrong.
    with fitwork.run(pipeline, range(items), engine="sim", placement=plan,
                     arrival_rate=plan.fitted.throughput, sample_devices=False) as simulated:
        assert sorted(simulated) == outputs
    done, times = simulated.record.completions.completed, simulated.record.completions.times_s
    low = next(i for i, d in enumerate(done) if d >= 0.4 * items)
    high = next(i for i, d in enumerate(done) if d >= 0.9 * items)
    steady = (done[high] - done[low]) / (times[high] - times[low])
    assert steady == pytest.approx(plan.fitted.throughput, rel=0.03)


PIPE = textwrap.dedent("""
    from fitwork import Pipeline, unit

    @unit
    def inc(x):
        return x + 1

    pipeline = Pipeline(inc, name="inc")
    other = Pipeline(unit(lambda x: x, name="same"), name="other")
""")


def test_plan_command_and_its_bad_inputs(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text(PIPE)
    synthetic = PipelineProfile(fitwork_version="t", pipeline="inc", host_class="cpu-x86",
                                created_at=0, units=[UnitProfile(
                                    name="inc", kind="map", resources={"cpu": 1.0},
                                    device_class="cpu-x86", samples=4, wall_s=0.001,
                                    cpu_s=0.001, bytes_in=10, bytes_out=10, output_ratio=1,
                                    peak_rss=0)])
    synthetic.save(tmp_path / "prof.json")
    (tmp_path / "fleet.yaml").write_text(MIXED.to_yaml())

    def plan(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "fitwork.cli", "plan", *args],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)

    done = plan("p.py:pipeline", "--profile", "prof.json", "--fleet", "fleet.yaml",
                "-o", "plan.json")
    assert done.returncode == 0, done.stderr
    assert "monolithic" in done.stdout and "fitted" in done.stdout
    assert "cost per million" in done.stdout and "busy" in done.stdout
    assert Plan.load(tmp_path / "plan.json").fitted.throughput > 0

    other = plan("p.py:other", "--profile", "prof.json", "--fleet", "fleet.yaml")
    assert other.returncode == 1 and "not the pipeline's units" in other.stderr

    (tmp_path / "typo.yaml").write_text("name: f\nnode_types:\n  - name: a\n    cores: 4\n"
                                        "    memory: 1GiB\n    devices: {H10: 1}\n")
    typo = plan("p.py:pipeline", "--profile", "prof.json", "--fleet", "typo.yaml")
    assert typo.returncode == 1
    assert "node_types[0].devices" in typo.stderr and "did you mean" in typo.stderr

    (tmp_path / "broken.yaml").write_text("name: f\nnode_types:\n  - name: a\n    count: 0\n"
                                          "    cores: 4\n    memory: 1GiB\n")
    broken = plan("p.py:pipeline", "--profile", "prof.json", "--fleet", "broken.yaml")
    assert broken.returncode == 1 and "node_types[0].count" in broken.stderr


TINY = Fleet.parse({"name": "tiny", "node_types": [
    {"name": "laptop", "cores": 2, "memory": "8GiB"}]})


def cpu_only(memory: int = 0) -> PipelineProfile:
    profile = synthetic_profile()
    units = [profile.units[0], profile.units[2],
             profile.units[0].model_copy(update={"name": "again"})]
    units = [u.model_copy(update={"resources": {**u.resources, "memory": float(memory)}})
             for u in units]
    return profile.model_copy(update={"units": units})


def test_more_units_than_cores_still_plan_on_a_small_host() -> None:
    # Three units declaring a core each on 2 cores: cores are consumed as measured, so the
    # processes share them.
    plan = plan_for(cpu_only(), TINY, fuse=False)
    assert plan.fitted.throughput > 0
    assert set(plan.placement().counts()) == {"decode", "post", "again"}
    # Nothing here waits or batches, so the split layout gains nothing the fused one lacks
    # in items/s: the two tie, and the split one runs because each fused replica holds
    # every unit's memory (the tie rule's second clause).
    chosen = plan_for(cpu_only(), TINY)
    assert chosen.tie is not None and "runs split (it holds less memory)" in chosen.tie
    assert not chosen.fused and chosen.fitted.throughput == plan.fitted.throughput
    # Where the units hold nothing, the two layouts tie on memory too: fused.
    light = cpu_only().model_copy(deep=True)
    for u in light.units:
        u.peak_rss = 1 << 20
    assert plan_for(light, TINY).fused


def test_either_side_of_a_tie_can_be_run() -> None:
    light = cpu_only().model_copy(deep=True)
    for u in light.units:
        u.peak_rss = 1 << 20
    plan = plan_for(light, TINY)
    assert plan.fused and plan.tie is not None and plan.split is not None
    fused, split = plan.placement(), plan.placement(side="split")
    assert fused.fusion and fused.groups == plan.placement(side="monolithic").groups
    assert not split.fusion and set(split.counts()) == {"decode", "post", "again"}
    kept = plan_for(light, TINY, fuse=False)  # runs split: its split side is what it runs
    assert kept.placement(side="split") == kept.placement()
    from fitwork.errors import InputError

    with pytest.raises(InputError, match="a plan's sides are"):
        plan.placement(side="other")


def test_a_fleet_too_small_for_one_replica_of_each_unit_says_what_to_change() -> None:
    from fitwork.fit import FitInputError

    with pytest.raises(FitInputError, match=r"^fleet 'tiny' gives no plan: one replica of every "
                                            r"unit holds memory \(decode 3 GiB, post 3 GiB, "
                                            r"again 3 GiB\) beyond what one node holds \(at "
                                            r"most 8 GiB\)"):
        plan_for(cpu_only(3 << 30), TINY)


def test_a_unit_larger_than_every_node_is_named_in_one_line() -> None:
    from fitwork.fit import UnitFitsNowhere

    with pytest.raises(UnitFitsNowhere) as caught:
        plan_for(cpu_only(12 << 30), TINY)
    message = str(caught.value)
    assert "\n" not in message and caught.value.unit == "decode"
    assert message.startswith("unit 'decode' fits no node: needs 12 GiB memory on cpu-x86; "
                              "the largest node offers 2 cores, 8 GiB")
