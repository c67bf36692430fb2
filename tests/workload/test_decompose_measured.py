"""Decomposition with a sample: kinds measured, values that will not pickle, fusion, the fit."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import fitwork
from fitwork.decomposition import DecomposeError, decompose
from fitwork.fit.plan import plan_for
from fitwork.hardware.discover import discover_local


def wait_then_compute(x: int) -> float:
    time.sleep(0.012)
    start = x + 1
    grid = np.full((300, 300), float(start))
    total = 0.0
    for _ in range(6):
        total += float((grid @ grid[:, :20]).sum())
    scaled = total / 7
    return scaled


def test_kinds_are_measured_and_neighbours_fused_and_the_profile_fits() -> None:
    pipeline = decompose(wait_then_compute, sample=range(6))
    made = pipeline.decomposition
    assert made.samples == 6 and made.fallback is None
    assert [(u.kind, u.kind_source) for u in made.units] == [("io", "measured"),
                                                            ("cpu", "measured")]
    io, cpu = pipeline.units
    assert io.io == 8 and 0 < io.resources.cpu <= 1
    assert cpu.resources.cpu == 1 and cpu.io == 0
    assert any(m.rule == "kind" for m in made.merges)
    assert all(u.cost is not None and u.cost.wall_s > 0 for u in made.units)
    assert made.units[0].cost.bound == "io"
    assert pipeline.profile is not None
    assert [u.name for u in pipeline.profile.units] == [u.name for u in pipeline.units]
    assert pipeline.profile.units[0].resources == {"cpu": io.resources.cpu, "io": 8.0}
    names = {u.name for u in pipeline.units}
    split = plan_for(pipeline.profile, discover_local(), fuse=False)
    assert set(split.placement().counts()) <= names and not split.fused
    plan = plan_for(pipeline.profile, discover_local())
    if plan.fused:  # fused unless split predicts more than the plan's uncertainty above it
        assert set(plan.placement().counts()) == {"monolithic"} and plan.split is not None
        fused, alone = plan.fitted.result.throughput, plan.split.result.throughput
        assert alone <= (1 + plan.uncertainty) * fused
        if alone > fused:  # the split one predicts more: the plan says why fused runs anyway
            assert plan.tie is not None and "runs fused" in plan.tie
    else:
        assert set(plan.placement().counts()) <= names
    with fitwork.run(pipeline, range(8), ordered=True) as result:
        assert list(result) == [wait_then_compute(x) for x in range(8)]


def holds_a_lock(x: int) -> int:
    guard = threading.Lock()
    value = x * 3
    with guard:
        value += 1
    doubled = value * 2
    return doubled


def test_a_value_that_will_not_pickle_is_found_on_the_sample_and_kept_in_one_unit() -> None:
    without = decompose(holds_a_lock, fuse=False)
    assert len(without.units) == 5, "the static rules cannot see a lock made by a call"
    pipeline = decompose(holds_a_lock, sample=[1, 2], fuse=False)
    pickles = [m for m in pipeline.decomposition.merges if m.rule == "pickle"]
    assert pickles and pickles[0].reason.startswith("guard cannot be pickled")
    assert "fusion off" in pipeline.decomposition.notes[-1]
    with fitwork.run(pipeline, [1, 2], ordered=True) as result:
        assert list(result) == [8, 14]


def fails_on_odd(x: int) -> int:
    half = x / 2
    check = 1 // (x % 2 - 1)
    return int(half) + check


def test_a_sample_the_function_fails_on_is_refused_with_the_place() -> None:
    with pytest.raises(DecomposeError, match=r"fails in lines \d+-\d+ \(ZeroDivisionError"):
        decompose(fails_on_odd, sample=[3])


def test_a_fallback_is_still_measured() -> None:
    def sleeps(x: int) -> int:
        a = x + 1  # noqa: F841 - read by eval
        time.sleep(0.005)
        return eval("a")

    pipeline = decompose(sleeps, sample=[1, 2, 3])
    made = pipeline.decomposition
    assert made.fallback and len(pipeline.units) == 1
    assert made.units[0].kind == "io" and pipeline.units[0].io == 8
    assert pipeline.profile is not None and pipeline.profile.units[0].name == "sleeps"
