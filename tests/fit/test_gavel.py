"""The solver on Gavel's measured matrix: a lone job goes to its fastest GPU class."""

from __future__ import annotations

import pytest

from fitwork.fit import ClassDemand, NodeType, UnitDemand, solve
from tests.fit.test_cost import CLASS, gavel_rows


def one_slot_fleet(scale: int) -> list[NodeType]:
    # One core per node: exactly one replica fits, so the solver must choose its class.
    return [NodeType(name="slot", count=1, cores=1, memory=1 << 30, cpu_class=None,
                     devices={name: scale for name in CLASS.values()})]


@pytest.mark.parametrize("scale", [1, 2, 4, 8])
def test_each_job_alone_goes_to_its_fastest_class_never_to_a_zero(scale: int) -> None:
    rows = gavel_rows(scale)
    assert rows
    p100_wins = 0
    for row in rows:
        rates = {CLASS[g]: float(row[g]) for g in CLASS}
        job = UnitDemand(name="job", classes={
            name: ClassDemand(rate=rate, cores=1, device_share=float(scale))
            for name, rate in rates.items()})  # zero rates included: the solver must skip them
        plan = solve([job], one_slot_fleet(scale), mip_gap=0.0)
        (placed,) = [p for p in plan.replicas if p.replicas]
        assert placed.replicas == 1
        assert placed.device_class == max(rates, key=rates.__getitem__), row["job"]
        assert rates[placed.device_class] > 0
        assert plan.throughput == pytest.approx(max(rates.values()))
        p100_wins += placed.device_class == "P100"
    if scale == 1:
        assert p100_wins >= 5  # Recommendation at every batch size, ResNet-18 at small ones
