"""What a split costs: the plan charges moving items between units per frame and per byte,
so its CPU per item is the run's."""

from __future__ import annotations

import time

import numpy as np

import fitwork
from fitwork import Pipeline, unit
from fitwork.fit.inputs import byte_seconds
from fitwork.fit.plan import Plan, fit
from fitwork.hardware.fleet import Fleet

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
    between a run of 150 items and one of 600, the lower of two such measurements: others'
    processes on a shared host make a run's processes spend more CPU on the same work
    (caches, switches), by 30% from one minute to the next on this repository's 2-core
    host, and the lower is the nearer to what the work itself takes."""
    return min((run_cpu(pipeline, plan, 600) - run_cpu(pipeline, plan, 150)) / 450
               for _ in range(2))


def test_a_split_plan_charges_what_moving_large_arrays_costs() -> None:
    pipeline = Pipeline(tile, normalise, summary, name="tiles")
    # CPU seconds, not wall time: what a busy shared host moves least.  Still, a profile of
    # 24 samples and a run's difference move by 20% on a loaded 2-core host: up to three
    # tries, each profiled, planned and run afresh.
    ratios = []
    for _ in range(3):
        profile = fitwork.profile_pipeline(pipeline, range(24), samples=24)
        assert profile.units[1].bytes_in > 1 << 20
        plan = fit(profile, TWO_CORES, fuse=False)
        work = sum(u.cpu_s for u in profile.units)
        # The bytes are a good part of what a split costs here: three crossings of the tile
        # (in to normalise, in to summary, and the seed's and the float's, which are nothing).
        moved = (byte_seconds(profile.units[1].bytes_in)
                 + byte_seconds(profile.units[2].bytes_in))
        assert moved > 0.1 * work
        planned = planned_cpu(plan)
        ratios.append(planned / run_cpu_per_item(pipeline, plan))
        print(f"planned {planned * 1e3:.3f} ms of CPU per item (units' own {work * 1e3:.3f}, "
              f"bytes {moved * 1e3:.3f}); planned / run: {ratios[-1]:.3f}")
        if abs(ratios[-1] - 1) <= 0.15:
            break
    assert abs(ratios[-1] - 1) <= 0.15, ratios
