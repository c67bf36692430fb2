"""A plan for two nodes keeps a chatty pair of units on one node; forced apart, Ray's
predicted rate drops by what the frames crossing nodes cost (`fitwork.engine.ray.costs`)."""

from __future__ import annotations

import dataclasses

import pytest

import fitwork.fit.packing as packing
from fitwork.engine.ray import costs
from fitwork.fit.plan import planned_group
from fitwork.fit.result import FitResult
from fitwork.fit.solver import solve
from fitwork.fit.spec import ClassDemand, NodeType, UnitDemand
from fitwork.placement import Placement

MIB = 2**20
UNITS = ["first", "chatty", "listener"]
SENDS = {"first": 8.0, "chatty": 4.0 * MIB, "listener": 8.0}  # bytes per item to the next


def demand(cores: float, sends: float) -> ClassDemand:
    """One replica: 100 items/s on ``cores`` reserved cores, sending ``sends`` bytes an item."""
    return ClassDemand(rate=100.0, cores=cores, reserve=True, memory=MIB,
                       bytes_out_per_item=sends)


def two_node_plan() -> FitResult:
    """The three units (2.5, 2 and 1.5 reserved cores) fitted to two 4-core nodes by HiGHS:
    one replica each; first-fit by size puts ``first`` and ``listener`` on one node."""
    units = [UnitDemand(name=name, classes={"cpu-x86": demand(cores, SENDS[name])})
             for name, cores in zip(UNITS, (2.5, 2.0, 1.5), strict=True)]
    fleet = [NodeType(name="cpu", count=2, cores=4, memory=8 * 2**30)]
    return solve(units, fleet, time_limit=10.0, mip_gap=0.01)


def placement_of(result: FitResult) -> Placement:
    return Placement(tuple(planned_group(p, {}) for p in result.replicas if p.replicas), "plan")


def nodes_of(placement: Placement, unit: str) -> set[int]:
    return {n for g in placement.groups if g.unit == unit for n in g.nodes}


def ray_rate(result: FitResult, placement: Placement) -> float:
    """The plan's rate on Ray less what its frames crossing nodes cost (8 cores)."""
    extra = costs.crossing_cpu(placement, UNITS, SENDS)
    return costs.crossed_rate(result.throughput, extra, cores=8.0)


def test_the_chatty_pair_shares_a_node_and_apart_it_predicts_less() -> None:
    result = two_node_plan()
    placement = placement_of(result)
    assert result.throughput == pytest.approx(100.0, rel=1e-6)
    assert nodes_of(placement, "chatty") == nodes_of(placement, "listener"), placement
    assert costs.crossing_cpu(placement, UNITS, SENDS) == 0.0
    together = ray_rate(result, placement)
    assert together == pytest.approx(result.throughput)
    # forced apart: the listener moved to the other node
    other = ({0, 1} - nodes_of(placement, "chatty")).pop()
    apart = Placement(tuple(dataclasses.replace(g, nodes=(other,)) if g.unit == "listener"
                            else g for g in placement.groups), "plan")
    extra = costs.crossing_cpu(apart, UNITS, SENDS)
    # a frame holds FRAME_TIME of the listener's work: 10 items of 4 MiB, through the store
    per_item = costs.CROSS_NODE_FRAME_CPU_S / 10 + costs.CROSS_NODE_BYTE_CPU_S * 4 * MIB
    assert extra == pytest.approx(per_item)
    assert ray_rate(result, apart) < together * (1 - 0.5 * per_item * 100 / 8)


def test_without_colocating_first_fit_splits_the_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """The case above is one packing must change: by size alone the pair is split."""
    monkeypatch.setattr(packing, "COLOCATE_NODES", 1)
    placement = placement_of(two_node_plan())
    assert nodes_of(placement, "chatty") != nodes_of(placement, "listener"), placement
    assert costs.crossing_cpu(placement, UNITS, SENDS) > 0


def test_crossing_share_follows_the_replicas_per_node() -> None:
    assert costs.crossing_share([2, 0], [1, 0]) == 0.0
    assert costs.crossing_share([1, 0], [0, 1]) == 1.0
    assert costs.crossing_share([1, 1], [1, 1]) == pytest.approx(0.5)
    assert costs.crossing_share([3, 1], [1]) == pytest.approx(0.25)
    assert costs.frame_crossing_cpu(4, 1000.0) == 0.0  # inline: within Ray's call
