"""Threads that mostly wait, beside other work of their own session, take what it leaves."""

from __future__ import annotations

import subprocess

import pytest

from fitwork.fit.ceiling import borne, core_ceiling, processes_of, share_ceiling, yielded
from fitwork.fit.plan import plan_for
from fitwork.fit.result import Placement
from fitwork.profiling.shares import asked, yield_readings
from tests.fit.test_busy_host_threads import io_profile
from tests.fit.test_fluid import TWO_CORES

WAITING = {1: [0.03], 2: [0.06], 4: [0.11], 8: [0.19]}
"""Duty-cycled readings that got what they asked (sleep_io-like work beside a spinner): they
say what this work asks, not what the host would give it."""


def fair(others: float) -> dict[int, list[float]]:
    """What k spinners get of 2 cores beside ``others`` spinners, shared fairly."""
    return {k: [min(k, 2 * k / (k + others)) / 2] for k in WAITING}


def test_spinners_read_where_the_host_gave_all_that_was_asked_set_the_plan_s_ceiling() -> None:
    alone = io_profile(WAITING)
    assert core_ceiling(alone) < 0.6  # one process met the busy core
    before = plan_for(alone, TWO_CORES)
    same_session = alone.model_copy(update={"yield_readings": fair(others=1)})
    plan = plan_for(same_session, TWO_CORES)
    processes = processes_of(plan.fitted.result.replicas)
    print(f"ceiling {before.core_ceiling:.2f} -> {plan.core_ceiling:.2f}, "
          f"{processes:g} processes, {before.fitted.throughput:.0f} -> "
          f"{plan.fitted.throughput:.0f} items/s")
    # At the one-process ceiling the threaded plans of sleep_io, undeclared and io_service
    # realized 1.08-1.33x their prediction beside a spinner of their session; with the
    # spinners' share at their processes, 0.92-1.13x (fitwork.profiling.shares).
    assert plan.core_ceiling > before.core_ceiling + 0.1
    assert plan.core_ceiling == pytest.approx(borne(same_session, plan.fitted.result), abs=1e-3)
    # the share is what as many spinners as the plan's processes got, not its threads'
    assert plan.core_ceiling <= fair(others=1)[2][0] + 1e-3 or processes > 2
    assert plan.fitted.throughput > 1.1 * before.fitted.throughput
    # Beside another session's spinner more spinners get no more than one process met: the
    # plan is unchanged.
    flat = {k: [core_ceiling(alone)] for k in WAITING}
    other_session = alone.model_copy(update={"yield_readings": flat})
    assert plan_for(other_session, TWO_CORES).core_ceiling == pytest.approx(before.core_ceiling)
    # and without processes to count (the fleet plan's threads), no spinners are read into it
    assert share_ceiling(same_session, 8) == share_ceiling(alone, 8)


def test_spinners_are_read_only_where_the_readings_got_what_they_asked(
        spinner: subprocess.Popen[bytes]) -> None:
    duty = 0.05
    granted = {k: [asked(k, 2, duty)] for k in WAITING}
    read = yield_readings(granted, duty, cores=2)
    print("spinners beside a spinner of this session:", read)
    assert set(read) == set(WAITING)
    got = {k: max(v) for k, v in read.items()}
    assert got[8] >= 1.25 * got[1], got  # this session's spinner shares its core
    assert got[8] > 2 * max(granted[8])
    short = {k: [0.2 * asked(k, 2, 0.5)] for k in WAITING}  # the host held that work back
    assert yield_readings(short, 0.5, cores=2) == {}
    assert yield_readings(granted, 1.0, cores=2) == {}  # spinning readings say it already
    assert yield_readings({1: [0.5]}, duty, cores=2) == {}  # a free host: one reading


def test_processes_that_mostly_wait_claim_what_they_ask_not_a_spinner_s_share() -> None:
    same_session = io_profile(WAITING).model_copy(update={"yield_readings": fair(others=1)})
    plan = plan_for(same_session, TWO_CORES)
    host = plan.fitted.result.nodes[0].cores_capacity
    assert host == 2
    # 7 fetch processes asking 0.1 core each and 2 parse processes asking 0.54 beside one
    # spinner: fairly shared, each busy thread gets a level L with 0.7 + 3 L = 2 cores, so
    # the parses get 0.433 each and the plan 1.567 of 2 cores, not the 9 spinners' 0.9.
    fetch = Placement(unit="fetch", device_class="cpu-x86", node_type="local", replicas=7,
                      items_per_s=700, cores=0.1, threads=8)
    parse = Placement(unit="parse", device_class="cpu-x86", node_type="local", replicas=2,
                      items_per_s=700, cores=0.54)
    split = plan.fitted.result.model_copy(update={"replicas": [fetch, parse]})
    assert yielded(same_session, [0.1] * 7 + [0.54] * 2, host) == pytest.approx(1.5667 / 2,
                                                                                abs=1e-3)
    print(f"9 spinners {share_ceiling(same_session, 9 * 1, 9):.3f}, "
          f"the split plan {borne(same_session, split):.3f}")
    assert share_ceiling(same_session, 9, 9) > 0.88
    assert borne(same_session, split) == pytest.approx(1.5667 / 2, abs=1e-3)
    # processes that all get what they ask are not held back: the spinners' share stands
    few = split.model_copy(update={"replicas": [fetch]})
    assert yielded(same_session, [0.1] * 7, host) is None
    assert borne(same_session, few) == pytest.approx(share_ceiling(same_session, 56, 7))
    # and without spinners read, nothing is water-filled
    assert yielded(io_profile(WAITING), [0.54] * 4, host) is None
