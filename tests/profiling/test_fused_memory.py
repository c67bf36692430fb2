"""A fused replica's memory is measured as one process running every unit, not summed from
units that each load what one process loads once; and a unit's peak memory is its own, not
what the profiling process once held."""

from __future__ import annotations

import functools
import sys
import time

import numpy as np
import pytest

from fitwork import Pipeline, unit
from fitwork.fit.plan import plan_for
from fitwork.hardware.fleet import Fleet
from fitwork.profiling import profile_pipeline
from fitwork.profiling.rss import reset_high_water

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="peak memory is read from Linux's /proc")

MIB = 2**20
SHARED = 96 * MIB
"""What both units load on building: once per process, as a library or a model cache is."""

FLEET = Fleet.parse({"name": "box", "node_types": [
    {"name": "box", "count": 1, "cores": 2, "memory": "16GiB"}]})


@functools.cache
def table() -> np.ndarray:
    """Loaded once per process, whichever unit asks first (written to: resident)."""
    return np.ones(SHARED // 8)


class Lookup:
    """A unit that holds the process's table."""

    def __init__(self) -> None:
        self.table = table()

    def __call__(self, n: int) -> int:
        return n + int(self.table[n % 16])


def sharing(memory: str | None = None) -> Pipeline:
    first = unit(Lookup, name="first", cpu=0.5, **({"memory": memory} if memory else {}))
    return Pipeline(first, unit(Lookup, name="second", cpu=0.5), name="sharing")


def test_units_that_share_what_they_load_are_measured_once_as_a_fused_replica() -> None:
    profile = profile_pipeline(sharing(), list(range(16)), samples=16, loaded=False)
    first, second = profile.units
    fused = profile.fused_rss
    print(f"peak: first {first.peak_rss / MIB:.1f} MiB, second {second.peak_rss / MIB:.1f} "
          f"MiB; one process running both {fused and fused / MIB:.1f} MiB")
    assert min(first.peak_rss, second.peak_rss) >= 0.9 * SHARED  # each loads it alone
    assert fused is not None and 0.9 * SHARED <= fused <= 1.3 * SHARED  # both, once
    plan = plan_for(profile, FLEET)
    calls = max(first.call_memory or 0, second.call_memory or 0)
    for p in plan.monolithic.result.replicas:
        if p.replicas:  # a thread is in one stage at a time: the most one stage's call holds
            assert p.memory == pytest.approx(fused + max(0, (p.threads or 1) - 1) * calls)


def test_a_unit_that_declares_its_memory_keeps_the_stages_sum() -> None:
    profile = profile_pipeline(sharing(memory="512MiB"), list(range(8)), samples=8,
                               loaded=False)
    assert profile.fused_rss is not None
    plan = plan_for(profile, FLEET)
    (fused,) = [p for p in plan.monolithic.result.replicas if p.replicas and not p.threads]
    assert fused.memory >= 512 * MIB + 0.9 * SHARED  # the declared word, and the other's


@unit(cpu=0.25)
def small(n: int) -> int:
    return n * 2


def test_a_profile_counts_none_of_what_its_parent_held_before() -> None:
    if not reset_high_water():
        pytest.skip("this kernel does not let a process lower its peak RSS mark")
    block = np.ones(256 * MIB // 8)  # the parent's high-water mark rises past 256 MiB
    del block  # and its resident memory falls back: a forked child starts from here
    profile = profile_pipeline(Pipeline(small, name="small"), list(range(8)), samples=8,
                               loaded=False)
    assert profile.units[0].peak_rss < 32 * MIB


PER_ITEM = 4 * MIB
"""What ``widens`` holds per item of its batch while a call runs."""


@unit(batch_size=16, cpu=0.5)
def widens(rows: list[int]) -> list[int]:
    """Holds `PER_ITEM` per row while it runs, and takes as long per row at any batch (so
    batching does not pay, and a plan runs it one row at a time)."""
    block = np.ones(len(rows) * PER_ITEM // 8)  # written to: resident while the call runs
    time.sleep(0.002 * len(rows))
    return [r + int(block[0]) for r in rows]


def test_a_replica_planned_at_a_small_batch_is_charged_that_batch_s_memory() -> None:
    profile = profile_pipeline(Pipeline(widens, name="widens"), list(range(32)), samples=32,
                               loaded=False)
    (measured,) = profile.units
    peaks = {b.batch_size: b.peak_rss for b in measured.batches}
    print({size: f"{peak / MIB:.1f} MiB" for size, peak in peaks.items() if peak})
    assert peaks[1] is not None and peaks[16] is not None
    assert peaks[16] - peaks[1] >= 12 * PER_ITEM  # the sweep's largest batch held far more
    plan = plan_for(profile, FLEET, fuse=False)
    (group,) = [p for p in plan.fitted.result.replicas if p.replicas]
    assert (group.batch_size or 1) < 16
    assert group.memory == pytest.approx(peaks[group.batch_size or 1])
