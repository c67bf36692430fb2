"""What one call holds while it runs is measured, and a replica with several calls in flight
(``io`` threads, a threaded fused replica) is planned to hold it once per call."""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import pytest

from fitwork import Pipeline, unit
from fitwork.fit.plan import plan_for
from fitwork.hardware.fleet import Fleet
from fitwork.profiling import profile_pipeline
from fitwork.profiling.concurrent import LOCK_CORES

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the call's memory is read from Linux's /proc")

MIB = 2**20
WORKING = 64 * MIB
"""What ``holds`` touches during a call and frees after it."""

FLEET = Fleet.parse({"name": "box", "node_types": [
    {"name": "box", "count": 1, "cores": 2, "memory": "16GiB"}]})


@unit(io=8, cpu=0.25)
def holds(n: int) -> int:
    """Waits 150 ms holding 64 MiB it has written to, then lets it go (long enough that
    four threads' blocks are all held at once, though writing them holds the GIL)."""
    block = np.ones(WORKING // 8)  # float64: touched, so resident
    time.sleep(0.15)
    return n + int(block[0])


@unit(cpu=0.25)
def light(n: int) -> int:
    time.sleep(0.002)
    return n


def test_what_a_call_holds_is_measured_and_charged_per_call_in_flight() -> None:
    profile = profile_pipeline(Pipeline(holds, light, name="held"), list(range(8)),
                               samples=8, loaded=False)
    held, other = profile.units
    assert held.call_memory is not None and other.call_memory is not None
    print(f"call memory: holds {held.call_memory / MIB:.1f} MiB, light "
          f"{other.call_memory / MIB:.1f} MiB; peak {held.peak_rss / MIB:.1f} MiB")
    assert 0.8 * WORKING <= held.call_memory <= 1.5 * WORKING
    assert other.call_memory < 0.25 * WORKING
    assert held.peak_rss >= held.call_memory  # the peak holds one call's
    plan = plan_for(profile, FLEET, fuse=False)
    (group,) = [p for p in plan.fitted.result.replicas if p.unit == "holds" and p.replicas]
    # a replica of eight calls at once holds what one call holds seven more times
    assert group.memory == pytest.approx(held.peak_rss + 7 * held.call_memory)
    for p in plan.monolithic.result.replicas:
        if p.replicas and p.threads:  # a threaded fused replica: once per further thread
            assert profile.fused_rss is not None
            assert p.memory == pytest.approx(profile.fused_rss
                                             + (p.threads - 1) * held.call_memory)


@unit(io=4, cpu=0.25)
def one_thread_only(n: int) -> int:
    """Ends its process when called from any thread but the main one."""
    if threading.current_thread() is not threading.main_thread():
        os._exit(3)
    return n


def test_a_unit_that_dies_in_threads_costs_only_its_call_memory() -> None:
    profile = profile_pipeline(Pipeline(one_thread_only, name="fragile"), list(range(8)),
                               samples=8, loaded=False)
    (measured,) = profile.units
    assert measured.call_memory is None  # the pass ran in a copy, which died
    assert measured.failures == 0 and measured.cpu_s > 0


@unit
def python_spin(n: int) -> int:
    """About 10 ms of pure Python: it holds the interpreter lock throughout."""
    total = 0
    for i in range(200_000):
        total += i ^ n
    return total


@unit
def digest(n: int) -> int:
    """About 10 ms of hashing a large buffer: hashlib lets go of the lock while it runs."""
    import hashlib

    return hashlib.sha256(bytes([n % 256]) * 16_000_000).digest()[0]


def test_the_share_of_a_call_that_holds_the_interpreter_lock_is_measured() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("calls at once can only be told apart from one at a time on 2+ cores")
    # A busy host also takes a core from the pure-Python threads now and then, which reads
    # as less CPU with calls at once (0.67 in about 1 profile of 4 here, at 6263859 too); a
    # host that leaves the threads under `LOCK_CORES` cores reads no share at all: up to
    # three profiles, the highest CPU reading with a share kept.
    spins = []
    for _ in range(3):
        spins.append(profile_pipeline(Pipeline(python_spin), range(16), samples=16,
                                      loaded=False).units[0])
        if spins[-1].lock_share is not None and (spins[-1].concurrent_cpu or 0.0) > 0.8:
            break
    held = max(spins, key=lambda u: (u.lock_share is not None, u.concurrent_cpu or 0.0))
    # The hashing threads' share is read against the cores they kept busy and those left
    # idle, so a core another process holds is not read as the lock (a process spinning
    # beside them read 0.93-0.98 before, none now); the lowest share of up to three kept.
    readings = []
    for _ in range(3):
        free = profile_pipeline(Pipeline(digest), range(16), samples=16, loaded=False).units[0]
        readings.append(free)
        if free.lock_share is not None and free.lock_share < 0.6:
            break
    free = min(readings, key=lambda u: 2.0 if u.lock_share is None else u.lock_share)
    print(f"lock share: pure Python {held.lock_share}, hashlib {free.lock_share}; CPU "
          f"with calls at once over alone: {held.concurrent_cpu}, {free.concurrent_cpu}")
    # Other processes left the threads under LOCK_CORES cores in three profiles: no share is
    # read then (by design, rather than a wrong one), and none can be checked; a failure
    # here beside another test is what CI runs again alone.
    assert held.lock_share is not None and free.lock_share is not None, \
        f"no lock share read: the host left the threads under {LOCK_CORES} cores"
    # four threads of pure Python keep one core busy; of hashing, every core the copy has
    # (here 0.99 and 0.50-0.74 on 2 cores)
    assert held.lock_share > 0.8
    assert free.lock_share < 0.8 and held.lock_share - free.lock_share > 0.2
    assert held.concurrent_cpu is not None and held.concurrent_cpu > 0.8


@unit(io=16)
def sleeps_then_draws(n: int) -> int:
    """Waits 20 ms, then draws 16 KiB: a storage read."""
    time.sleep(0.02)
    return len(np.random.default_rng(n).bytes(16 << 10))


def test_a_waiting_unit_s_cpu_among_threads_is_measured_and_planned_with() -> None:
    from fitwork.fit.inputs import demands, fleet_classes
    from fitwork.hardware.catalog import catalog

    profile = profile_pipeline(Pipeline(sleeps_then_draws, python_spin, name="read"),
                               list(range(8)), samples=8, loaded=False)
    waits, spins = profile.units
    print(f"CPU per call among 16 threads over alone: {waits.threaded_cpu}; "
          f"conditions: {waits.conditions}")
    assert waits.threaded_cpu is not None and waits.threaded_cpu > 0
    assert "16 calls at once in threads" in waits.conditions
    assert spins.threaded_cpu is None  # it does not wait: threads would not run it
    units, _, _, _ = demands(profile, fleet_classes(FLEET, catalog()), catalog(),
                             fleet=FLEET)
    read = units[0].classes[waits.device_class]
    assert read.threaded_saving == pytest.approx(
        waits.cpu_s * max(0.0, 1 - waits.threaded_cpu), rel=1e-6, abs=1e-12)
    assert units[1].classes[spins.device_class].threaded_saving == 0.0
