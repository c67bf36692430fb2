"""The threaded monolith as one of the fused baseline's options: threads overlap waiting,
not CPU, and the fit is never worse than the threaded monolith it could have chosen."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitwork import Fleet, Pipeline, unit
from fitwork.fit import ClassDemand, NodeType, UnitDemand, monolithic
from fitwork.fit.inputs import waiting_seconds
from fitwork.fit.monolithic import (
    FUSED,
    GIL_SHARE,
    MOST_THREADS,
    THREAD_FILL,
    THREAD_GAIN,
    carried_rates,
    fused_problem,
    threaded_rate,
)
from fitwork.fit.plan import plan_for
from fitwork.fit.result import FitResult
from fitwork.fit.solver import solve_problem
from fitwork.placement import Group, Placement
from fitwork.profiling.record import PipelineProfile, UnitProfile

TWO_CORES = [NodeType(name="laptop", count=1, cores=2, memory=16 << 30)]
EPS = 1e-6


def stage(name: str, wall: float, cpu: float, parallelism: float | None = 1.0) -> UnitDemand:
    """A unit on the CPU class taking ``wall`` seconds per item of which ``cpu`` on a core."""
    return UnitDemand(name=name, classes={"cpu-x86": ClassDemand(
        rate=1 / wall, cpu_seconds=cpu, parallelism=parallelism)})


def test_threads_overlap_waiting_but_not_the_lock() -> None:
    hold, wait = 0.01, 0.09
    assert threaded_rate(1, hold, wait) == 1 / (hold + wait)  # one item at a time
    rates = [threaded_rate(n, hold, wait) for n in (1, 2, 4, 8, 16, 64)]
    assert rates == sorted(rates)
    for n, rate in zip((1, 2, 4, 8, 16, 64), rates, strict=True):
        # never more than n items overlapping fully, nor more than the lock serves
        assert rate <= min(n / (hold + wait), 1 / hold) + EPS
    assert rates[-1] == pytest.approx(GIL_SHARE / hold)  # the lock, handed on, caps it
    # at the knee (n = (hold + wait) / hold) the queue for the lock costs a good share
    assert threaded_rate(10, hold, wait) < 0.85 / hold


def test_a_waiting_pipeline_fuses_into_a_threaded_monolith_of_one_core_a_process() -> None:
    units = [stage("fetch", 0.150, 0.002), stage("ocr", 0.085, 0.085)]
    result = monolithic(units, TWO_CORES)
    threaded = [p for p in result.replicas if p.threads]
    assert threaded and all(p.unit == FUSED for p in result.replicas)
    for p in threaded:
        assert 2 <= (p.threads or 0) <= MOST_THREADS
        assert p.option == 1
        # GIL-bound work: a process keeps at most one core busy, more come from processes
        assert p.cores <= 1 + EPS
        assert p.rate <= 1 / 0.087 + EPS
    # the cores, not the waiting, bound it: near 2 cores / 87 ms of CPU per item
    assert result.throughput > 0.95 * 2 / 0.087
    assert sum(p.replicas for p in result.replicas) <= 3


def test_threaded_replicas_get_the_threads_their_share_needs_not_one_replicas_most() -> None:
    # A 300 ms wait and 85 ms of CPU: one replica alone would want 8 threads to near the
    # 10.3 items/s its lock serves, but three share 2 cores at 7.7 items/s each.
    units = [stage("fetch", 0.300, 0.002), stage("ocr", 0.085, 0.085)]
    first = monolithic(units, TWO_CORES)
    trimmed = monolithic(units, TWO_CORES, carried=carried_rates(first))
    assert trimmed.throughput >= (1 - 1e-6) * first.throughput
    hold, wait = 0.087, 0.300 + 0.085 - 0.087
    for before, after in zip(first.replicas, trimmed.replicas, strict=True):
        assert before.threads and after.threads and after.threads < before.threads
        share = after.items_per_s / after.replicas
        assert threaded_rate(after.threads, hold, wait) >= share / THREAD_FILL  # carries it
        assert threaded_rate(after.threads // 2, hold, wait) < share / THREAD_FILL  # fewest
    # Where one item at a time carries a replica's share, it keeps the fewest threads: the
    # fluid cores do not charge processes of one item at a time for meeting on the cores.
    light = monolithic(units, TWO_CORES, carried={"laptop": 2.0})  # one carries 2.6
    assert light.replicas and all(p.threads == 2 for p in light.replicas)
    assert light.throughput > 0


def test_work_that_does_not_wait_gets_no_threads() -> None:
    units = [stage("parse", 0.001, 0.001), stage("score", 0.004, 0.004)]
    problem = fused_problem(units, TWO_CORES)
    assert all(c.concurrency == 1 for c in problem.candidates)
    assert not any(p.threads for p in monolithic(units, TWO_CORES).replicas)


def only(result: FitResult, threads: bool) -> float:
    """Throughput of a fused problem's result; asserts which option it ran."""
    assert all(bool(p.threads) == threads for p in result.replicas)
    return result.throughput


@settings(max_examples=30, deadline=None)
@given(walls=st.lists(st.sampled_from([0.001, 0.005, 0.02, 0.15]), min_size=1, max_size=3),
       shares=st.lists(st.sampled_from([0.05, 0.3, 1.0]), min_size=3, max_size=3),
       cores=st.sampled_from([1, 2, 8]),
       hop=st.sampled_from([0.0, 70e-6]))
def test_the_fused_baseline_is_never_worse_than_the_threaded_monolith_it_could_choose(
        walls: list[float], shares: list[float], cores: int, hop: float) -> None:
    units = [stage(f"u{i}", wall, wall * share) for i, (wall, share)
             in enumerate(zip(walls, shares, strict=False))]
    fleet = [NodeType(name="n", count=1, cores=cores, memory=64 << 30)]
    result = monolithic(units, fleet, hop_seconds=hop)
    problem = fused_problem(units, fleet, 2 * hop)
    threaded = tuple(c for c in problem.candidates if c.concurrency > 1)
    alone = tuple(c for c in problem.candidates if c.concurrency == 1)
    best_alone = only(solve_problem(replace(problem, candidates=alone),
                                    objective="max_throughput", target=None,
                                    time_limit=10.0, mip_gap=0.01), threads=False)
    # one item at a time runs only where it predicts THREAD_GAIN more than threads
    assert result.throughput >= best_alone / (1 + THREAD_GAIN) - EPS
    if threaded:
        best_threaded = only(solve_problem(replace(problem, candidates=threaded),
                                           objective="max_throughput", target=None,
                                           time_limit=10.0, mip_gap=0.01), threads=True)
        assert result.throughput >= best_threaded * (1 - 0.01) - EPS  # within the MIP gap
    for p in result.replicas:
        # a threaded replica's GIL-bound work stays within one core (with the engine's work
        # charged, a replica's planned cores also hold the driver's share of its frames,
        # which runs in the driver's process, not the replica's)
        if p.threads and not hop:
            assert p.cores <= 1 + EPS, p


def test_a_fused_placement_runs_the_fused_unit_with_the_threads_planned() -> None:
    @unit
    def first(x: int) -> int:
        return x + 1

    @unit
    def second(x: int) -> int:
        return 2 * x

    pipeline = Pipeline(first, second, name="two")
    placement = Placement((Group(FUSED, 2, io=8),), "plan", fusion=(("first", "second"),))
    fused = placement.applied_to(pipeline)
    assert [u.name for u in fused.units] == [FUSED] and fused.units[0].io == 8
    assert Placement.from_json(placement.to_json()).groups[0].io == 8
    plain = Placement((Group(FUSED, 2),), "plan", fusion=(("first", "second"),))
    assert plain.applied_to(pipeline).units[0].io == 0


def profile_of(queued: float, waiting: float) -> PipelineProfile:
    """Two units of 4 ms CPU each; each item also sat ``queued`` in the run queue (a loaded
    host) and waited ``waiting`` on I/O, per unit."""
    def measured(name: str) -> UnitProfile:
        return UnitProfile(name=name, kind="map", resources={"cpu": 1.0},
                           device_class="cpu-x86", samples=32,
                           wall_s=0.004 + queued + waiting, cpu_s=0.004, queued_s=queued,
                           bytes_in=300.0, bytes_out=300.0, output_ratio=1.0,
                           peak_rss=20 << 20, parallelism=1.0)

    return PipelineProfile(fitwork_version="test", pipeline="loaded", host_class="cpu-x86",
                           created_at=0.0, units=[measured("a"), measured("b")])


def test_threads_overlap_io_waits_not_a_loaded_hosts_run_queue() -> None:
    assert waiting_seconds(profile_of(0.020, 0.0)) == 0.0
    assert waiting_seconds(profile_of(0.020, 0.010)) == pytest.approx(0.020)
    fleet = Fleet.parse({"name": "two", "node_types": [
        {"name": "two", "count": 1, "cores": 2, "memory": "8GiB"}]})
    queued = plan_for(profile_of(0.020, 0.0), fleet).monolithic.result.replicas
    assert not any(p.threads for p in queued)  # a busy host's queue is no I/O to overlap
    waits = plan_for(profile_of(0.0, 0.020), fleet).monolithic.result.replicas
    assert all(p.threads for p in waits)




def test_no_threaded_replica_is_planned_to_carry_more_than_its_node_s_cores() -> None:
    # a 150 ms read, then 0.1 s of CPU that lets go of the lock: threads overlap the read,
    # and one process is bounded by the node's cores, not only by the lock
    units = [stage("fetch", 0.150, 0.002), stage("ocr", 0.1, 0.1, parallelism=4.0)]
    threaded = [c for c in fused_problem(units, TWO_CORES).candidates if c.concurrency > 1]
    assert threaded
    for c in threaded:
        assert c.rate <= 2 / c.cpu + EPS
    result = monolithic(units, TWO_CORES)
    assert result.throughput == pytest.approx(2 / 0.102, rel=0.05)  # the cores cap it


def test_a_waiting_unit_is_charged_its_cpu_among_threads_where_threads_run_it() -> None:
    # A unit whose calls sleep, then spend 0.4 ms of CPU alone and 0.15 ms among threads
    # (caches kept warm): io replicas and threaded fused replicas are charged the latter;
    # one call at a time, the former.
    saving = 0.4e-3 - 0.15e-3
    fetch = UnitDemand(name="fetch", concurrency=16, classes={"cpu-x86": ClassDemand(
        rate=1 / 0.030, cpu_seconds=0.4e-3, parallelism=1.0, threaded_saving=saving)})
    work = stage("work", 0.0004, 0.0004)
    plain = ClassDemand(rate=1 / 0.030, cpu_seconds=0.4e-3, parallelism=1.0)
    assert fetch.classes["cpu-x86"].threaded().core_seconds() == pytest.approx(0.15e-3)
    assert plain.threaded() is plain
    from fitwork.fit import solve

    split = solve([fetch, work], TWO_CORES)
    (row,) = [p for p in split.replicas if p.unit == "fetch" and p.replicas]
    assert row.cores * row.replicas / row.items_per_s == pytest.approx(0.15e-3)
    # The threaded monolith's CPU per item has the saving; the one-at-a-time one has not.
    problem = fused_problem([fetch.model_copy(update={"concurrency": 1}), work], TWO_CORES)
    spent = {c.concurrency > 1: c.busy[0][1] for c in problem.candidates}
    assert spent[False] == pytest.approx(0.8e-3)
    assert spent[True] == pytest.approx(0.8e-3 - saving)
