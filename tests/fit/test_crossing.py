"""What a split costs: the plan charges moving items between units per frame and per byte,
so its CPU per item is the run's."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Iterator

import numpy as np
import pytest

import fitwork
from fitwork import Pipeline, unit
from fitwork.fit.inputs import byte_seconds
from fitwork.fit.plan import Plan, plan_for
from fitwork.hardware.fleet import Fleet
from fitwork.profiling.wire_cost import (
    REFERENCE_SECONDS_PER_BYTE,
    SCALE_RANGE,
    SPREAD,
    wire_scale,
    wire_seconds_per_byte,
)

TWO_CORES = Fleet.parse({"name": "laptop", "node_types": [
    {"name": "laptop", "cores": 2, "memory": "8GiB"}]})
SIDE = 384  # a 384 x 384 float64 tile: 1.1 MiB, crossing out of band through /dev/shm


@unit
def tile(seed: int) -> np.ndarray:
    """A tile from a seed."""
    return np.random.default_rng(seed).standard_normal((SIDE, SIDE))


@unit
def normalise(values: np.ndarray) -> np.ndarray:
    """Scale to zero mean and unit variance: light work on a large array."""
    return (values - values.mean()) / values.std()


@unit
def summary(values: np.ndarray) -> float:
    """A few figures of the tile, reduced to one."""
    return float(np.abs(values[::7, ::5]).sum())


@contextlib.contextmanager
def on_two_cores() -> Iterator[None]:
    """This process, and what it starts, held to two of this host's cores while inside: the
    plan is made for a 2-core host, and a run spread over more cores spends less CPU on the
    same work (fewer switches, caches not shared) than one on the two it was planned for."""
    held = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(held)[:2])
    try:
        yield
    finally:
        os.sched_setaffinity(0, held)


def planned_cpu(plan: Plan) -> float:
    """CPU seconds per source item the plan's replicas consume."""
    used = sum(p.cores * p.replicas for p in plan.fitted.result.replicas)
    return used / plan.fitted.throughput


def run_cpu(pipeline: Pipeline, plan: Plan, items: int) -> float:
    """CPU seconds a run spent: its replicas' and the driver's (this process, which keeps
    the books and feeds the first channel and reads the last)."""
    start = time.process_time()
    with fitwork.run(pipeline, range(items), placement=plan) as result:
        assert len(list(result)) == items
    driver = time.process_time() - start
    return sum(u.cpu_s for u in result.record.units) + driver


def run_cpu_per_item(pipeline: Pipeline, plan: Plan) -> float:
    """CPU seconds per source item, the start-up (forks, first calls) differenced out
    between a run of 150 items and one of 600."""
    return (run_cpu(pipeline, plan, 600) - run_cpu(pipeline, plan, 150)) / 450


def test_a_split_plan_charges_what_moving_large_arrays_costs() -> None:
    pipeline = Pipeline(tile, normalise, summary, name="tiles")
    # CPU seconds, not wall time: what a busy shared host moves least.  Still, a profile of
    # 24 samples and a run's difference each move by 20-30% from one minute to the next on
    # a shared 2-core host (others' processes on its cores and caches): up to five rounds,
    # each profiled, planned and run afresh, the plan's and the runs' CPU compared in total
    # (the lower of each would favour the run, whose difference of two runs spreads more),
    # as the ratio of their medians: one round's profile taken in a noisy minute (0.0056 s
    # against 0.0039-0.0041 in the four others) moved the ratio of sums to 1.17.
    planned: list[float] = []
    run: list[float] = []
    for _ in range(5):
        with on_two_cores():
            charged, spent = planned_and_run(pipeline)
        planned.append(charged)
        run.append(spent)
        ratio = statistics.median(planned) / statistics.median(run)
        if abs(ratio - 1) <= 0.15:
            break
    assert abs(ratio - 1) <= 0.15, (planned, run)


def planned_and_run(pipeline: Pipeline) -> tuple[float, float]:
    """Profile, plan for two cores and run: the plan's CPU per item and the run's."""
    profile = fitwork.profile_pipeline(pipeline, range(24), samples=24)
    assert profile.units[1].bytes_in > 1 << 20
    plan = plan_for(profile, TWO_CORES, fuse=False)
    work = sum(u.cpu_s for u in profile.units)
    # The bytes are a good part of what a split costs here: three crossings of the tile
    # (in to normalise, in to summary, and the seed's and the float's, which are nothing).
    moved = (byte_seconds(profile.units[1].bytes_in, profile.wire_scale)
             + byte_seconds(profile.units[2].bytes_in, profile.wire_scale))
    assert moved > 0.1 * work
    planned, run = planned_cpu(plan), run_cpu_per_item(pipeline, plan)
    print(f"planned {planned * 1e3:.3f} ms of CPU per item (units' own {work * 1e3:.3f}, "
          f"bytes {moved * 1e3:.3f} at {profile.wire_scale}x); planned / run: "
          f"{planned / run:.3f}")
    return planned, run


def test_the_byte_charges_follow_this_host_s_cpu_per_byte() -> None:
    pipeline = Pipeline(tile, normalise, summary, name="tiles")
    profile = fitwork.profile_pipeline(pipeline, range(8), samples=8, loaded=False)
    # measured, since the tiles cross out of band, and near what the probe reads now
    low, high = SCALE_RANGE
    assert low <= profile.wire_scale <= high
    assert profile.wire_ns_per_byte is not None
    assert profile.wire_scale == wire_scale(profile.wire_ns_per_byte * 1e-9)
    now = wire_seconds_per_byte() / REFERENCE_SECONDS_PER_BYTE
    if profile.wire_scale == 1.0:  # this host reads within the reference host's spread
        assert 1 / (2 * SPREAD) <= now <= 2 * SPREAD, now
    else:
        assert 0.5 <= profile.wire_scale / now <= 2.0, (profile.wire_scale, now)
    # a host that moves bytes at twice the CPU is charged twice the bytes, and only them
    base = profile.model_copy(update={"wire_scale": 1.0})
    slow = profile.model_copy(update={"wire_scale": 2.0})
    moved = sum(byte_seconds(u.bytes_in) for u in profile.units[1:])
    moved += byte_seconds(profile.units[-1].bytes_out) + byte_seconds(profile.units[0].bytes_in)
    one, two = (plan_for(p, TWO_CORES, fuse=False) for p in (base, slow))
    charged = [planned_cpu(p) for p in (one, two)]
    assert charged[1] - charged[0] == pytest.approx(moved, rel=0.05)
    # a profile of small items is not probed
    small = fitwork.profile_pipeline(Pipeline(summary, name="small"),
                                     [np.ones((4, 4))], samples=1, loaded=False)
    assert small.wire_ns_per_byte is None and small.wire_scale == 1.0
    # and the scale follows the reading: 1.0 within the reference host's spread, else the
    # reading, bounded
    reference = REFERENCE_SECONDS_PER_BYTE
    assert wire_scale(reference * SPREAD * 0.99) == wire_scale(reference / SPREAD * 1.01) == 1.0
    assert wire_scale(reference * 2) == 2.0 and wire_scale(reference * 0.5) == 0.5
    assert wire_scale(reference * 100) == high and wire_scale(reference / 100) == low


@unit
def counts_of(seed: int) -> dict[str, int]:
    """Word counts of a document: a dictionary of 400 short keys (about 8 KB pickled)."""
    return {f"w{seed % 7}-{k}": (seed * k) % 97 for k in range(400)}


@unit
def top(counts: dict[str, int]) -> int:
    """The largest count: light work on an item of many small objects."""
    return max(counts.values())


def test_a_split_plan_charges_what_moving_many_small_objects_costs() -> None:
    """An item of many small objects costs its objects to cross, not its bytes: the profile
    times pickling and unpickling each unit's items, and the plan charges that where it is
    more than the bytes' charge, so a split's CPU per item is the run's."""
    pipeline = Pipeline(counts_of, top, name="word_counts")
    planned: list[float] = []
    run: list[float] = []
    for _ in range(5):
        with on_two_cores():
            profile = fitwork.profile_pipeline(pipeline, range(24), samples=24)
            into = profile.units[1]
            assert into.wire_in_s is not None
            bytes_only = byte_seconds(into.bytes_in, profile.wire_scale)
            assert into.wire_in_s > 5 * bytes_only, (into.wire_in_s, bytes_only)
            assert "to pickle and unpickle" in into.conditions, into.conditions
            plan = plan_for(profile, TWO_CORES, fuse=False)
            planned.append(planned_cpu(plan))
            run.append(run_cpu_per_item(pipeline, plan))
        ratio = statistics.median(planned) / statistics.median(run)
        print(f"planned {planned[-1] * 1e6:.0f} us of CPU per item, run {run[-1] * 1e6:.0f} "
              f"(crossing into top: {into.wire_in_s * 1e6:.0f} us measured, "
              f"{bytes_only * 1e6:.1f} by bytes)")
        if abs(ratio - 1) <= 0.2:
            break
    assert abs(ratio - 1) <= 0.2, (planned, run)
