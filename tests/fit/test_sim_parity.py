"""Plan against run, without timing: every solver plan, simulated at the rate it predicts."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings

import fitwork
from fitwork import Group, Pipeline, Placement, Unit
from fitwork.fit import FitResult, NodeType, UnitDemand, solve
from tests.fit.problems import fleets, pipelines


def ratio_unit(name: str, ratio: float) -> Unit:
    """A unit that gives ``ratio`` outputs per input on average, exactly, per replica."""

    class Ratio:
        def __init__(self) -> None:
            self.owed = 0.0

        def __call__(self, value: int) -> list[int]:
            self.owed += ratio
            count = math.floor(self.owed + 1e-9)
            self.owed -= count
            return [value * 8 + j for j in range(count)]

    return fitwork.unit(Ratio, name=name, kind="flat_map")


def synthetic(units: list[UnitDemand]) -> Pipeline:
    """A pipeline whose units see the plan's multiplicities (a free first stage when the
    first unit's is not 1)."""
    stages = [ratio_unit("source", units[0].multiplicity)]
    for unit, after in zip(units, [*units[1:], None], strict=True):
        ratio = after.multiplicity / unit.multiplicity if after else 1.0
        stages.append(ratio_unit(unit.name, ratio))
    return Pipeline(stages, name="synthetic")


def placement(result: FitResult) -> Placement:
    groups = [Group("source", 1, rate=1e9)]
    groups += [Group(p.unit, p.replicas, device_class=p.device_class, node_type=p.node_type,
                     rate=p.rate) for p in result.replicas if p.replicas]
    return Placement(tuple(groups), "plan")


def simulated_throughput(units: list[UnitDemand], result: FitResult, items: int) -> Any:
    """Source items/s the simulated run settles once steady (from 40% to 90% of items)."""
    rate = result.throughput
    with fitwork.run(synthetic(units), range(items), engine="sim",
                     placement=placement(result), arrival_rate=rate,
                     sample_devices=False) as run:
        for _ in run:
            pass
    record = run.record
    times, done = record.completions.times_s, record.completions.completed
    low = next(i for i, d in enumerate(done) if d >= 0.4 * items)
    high = next(i for i, d in enumerate(done) if d >= 0.9 * items)
    return (done[high] - done[low]) / (times[high] - times[low])


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(units=pipelines(), node_types=fleets())
def test_every_plan_is_realized_by_the_simulated_run_within_two_percent(
        units: list[UnitDemand], node_types: list[NodeType]) -> None:
    result = solve(units, node_types, time_limit=5, mip_gap=0.01)  # an error fails the test
    if result.throughput <= 0:
        # Only a problem the solver proves has no plan that places anything (the MILP's
        # bound is 0: memory or reserved cores leave no replica room) has nothing to run.
        assert result.bound <= 0, (
            f"a plan of 0 items/s with a bound of {result.bound:.3f} items/s")
        assume(False)
    # A steady state needs a run many times longer than the slowest replica's call: a plan
    # that routes items to replicas taking a second each is not measured in two.
    slowest = max(1 / p.rate for p in result.replicas if p.replicas)
    items = max(3000, math.ceil(40 * result.throughput * slowest))
    assume(items <= 20_000)
    simulated = simulated_throughput(units, result, items)
    assert simulated == pytest.approx(result.throughput, rel=0.02), (
        f"plan {result.throughput:.3f} items/s, simulated {simulated:.3f}")
