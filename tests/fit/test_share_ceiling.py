"""A plan made beside a busy core counts the share its own threads get, not one process's."""

from __future__ import annotations

import subprocess

import pytest

from fitwork import Pipeline, unit
from fitwork.fit.ceiling import borne, busy_threads, core_ceiling, share_ceiling
from fitwork.fit.plan import plan_for
from fitwork.profiling import profile_pipeline
from fitwork.profiling.shares import share_readings
from tests.fit.test_fluid import TWO_CORES, demo_profile

QUEUED = 0.164 / 3
"""Run-queue seconds per item of each of demo_profile's three units that make one process's
ceiling 0.5 (half of its runnable time found no free core): what one process meets beside
another spinning on 2 cores."""


def fair_shares(others: int, cores: int = 2) -> dict[int, list[float]]:
    """Shares of ``cores`` that k spinning processes get beside ``others`` more, shared
    fairly: min(k, cores k / (k + others)) cores."""
    return {k: [min(k, cores * k / (k + others)) / cores] for k in (1, 2, 4, 8)}


def side(plan_: object) -> object:
    return plan_.fitted.result  # type: ignore[attr-defined]


def test_a_plan_beside_a_spinning_core_grows_to_what_its_threads_get() -> None:
    alone = demo_profile(queued=QUEUED)
    assert core_ceiling(alone) == pytest.approx(0.5)
    before = plan_for(alone, TWO_CORES)
    assert before.core_ceiling == pytest.approx(0.5)  # no share readings: one process's
    beside = alone.model_copy(update={"share_readings": fair_shares(others=1)})
    plan = plan_for(beside, TWO_CORES)
    threads = busy_threads(plan.fitted.result)
    # One process got half the host, so a plan held to that ran one OCR replica and lost
    # to monoliths of four processes, which got 1.6 cores (issue 37: 0.29x).
    assert plan.core_ceiling > 0.7, (plan.core_ceiling, threads)
    assert share_ceiling(beside, threads) >= plan.core_ceiling - 1e-3  # its threads get it
    assert threads > busy_threads(before.fitted.result)
    assert plan.fitted.throughput > 1.3 * before.fitted.throughput


def test_a_share_more_threads_would_need_is_not_planned_without_them() -> None:
    alone = demo_profile(queued=QUEUED)
    # Only sixteen processes would get most of the host: a plan of a few is held to theirs.
    steep = {1: [0.5], 2: [0.52], 4: [0.55], 16: [0.95]}
    plan = plan_for(alone.model_copy(update={"share_readings": steep}), TWO_CORES)
    threads = busy_threads(plan.fitted.result)
    assert share_ceiling(alone.model_copy(update={"share_readings": steep}), threads) \
        >= plan.core_ceiling - 1e-3
    assert plan.core_ceiling < 0.95
    # Where more processes get no more (other sessions' work, shared among sessions), the
    # plan is the one-process plan.
    flat = alone.model_copy(update={"share_readings": {k: [0.5] for k in (1, 2, 4, 8)}})
    assert plan_for(flat, TWO_CORES).core_ceiling == pytest.approx(0.5)
    counts = plan_for(alone, TWO_CORES).placement().counts()
    assert plan_for(flat, TWO_CORES).placement().counts() == counts


@unit
def crunch(x: int) -> int:
    total = 0
    for i in range(20_000):
        total += (i * x) % 7
    return total


def test_processes_beside_a_spinner_get_more_of_the_host_the_more_they_are(
        spinner: subprocess.Popen[bytes]) -> None:
    readings = share_readings(cores=2)
    got = {k: max(v) for k, v in readings.items()}
    print("shares beside a spinner:", readings)
    assert set(got) == {1, 2, 4, 8}
    assert got[8] >= 1.25 * got[1], got
    profiled = profile_pipeline(Pipeline(crunch, name="crunch"), list(range(8)), samples=8)
    # and more where the unit's calls left the core idle part of the time on this busy host
    # (the probe works at the pipeline's duty: `fitwork.profiling.shares.counts`)
    assert {1, 2, 4, 8} <= set(profiled.share_readings)
    plan = plan_for(profiled, TWO_CORES)
    threads = busy_threads(plan.fitted.result)
    print(f"one process's ceiling {core_ceiling(profiled):.2f}, plan's {plan.core_ceiling:.2f}"
          f" with {threads:g} busy threads")
    assert plan.core_ceiling >= core_ceiling(profiled)
    assert borne(profiled, plan.fitted.result) >= plan.core_ceiling - 1e-3
