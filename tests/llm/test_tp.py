"""TP degree as the solver's decision: brute force over layouts and TP choices, properties."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitwork.commands.llm import _show as show
from fitwork.fit import FitResult, UnitDemand, solve
from fitwork.fit.inputs import solver_nodes
from fitwork.hardware.catalog import catalog
from fitwork.hardware.fleet import Fleet
from fitwork.llm.options import SLO, Mix
from fitwork.llm.plan import plan_colocated, plan_split, split_units
from fitwork.llm.trace import Trace
from tests.llm import toy

SLO_ = SLO.parse("ttft_p90=1s,tpot_p90=100ms")
CLASS = toy.CLASS
EPS = 1e-6
Layout = tuple[float, float, float]  # prefill req/s, decode req/s, $/h


def _trace(n: int = 2000, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    return Trace("synthetic", np.sort(rng.uniform(0, 3600, n)), rng.integers(200, 1500, n),
                 rng.integers(20, 300, n))


TRACE = _trace()
MIX = Mix.of(TRACE)


@cache
def _book():  # type: ignore[no-untyped-def]
    return toy.tp_book()


def _fleet(*types: tuple[str, int, int, float]) -> Fleet:
    """Node types of (name, count, A100s per node, $/h per node); no network limit."""
    return Fleet.parse({"name": "t", "node_types": [
        {"name": name, "count": count, "cores": 64, "memory": "512GiB",
         "devices": {CLASS: gpus}, "price_per_hour": price}
        for name, count, gpus, price in types]})


def _units(fleet: Fleet) -> list[UnitDemand]:
    """The planner's prefill and decode units (M/G/1 prefill queues)."""
    return split_units(_book(), "toy", fleet, MIX, SLO_)[0]


def _rates(units: list[UnitDemand]) -> list[tuple[int, int, float]]:
    """(phase index, TP, rate) of every option the units offer."""
    return [(i, int(d.device_share), d.rate) for i, u in enumerate(units)
            for d in u.options(CLASS)]


def _frontier(points: set[Layout]) -> list[Layout]:
    """The layouts no other beats on both rates at no more cost."""
    keep: list[Layout] = []
    for p in sorted(points, key=lambda x: (x[2], -x[0], -x[1])):
        if not any(q[0] >= p[0] - EPS and q[1] >= p[1] - EPS and q[2] <= p[2] + EPS
                   for q in keep):
            keep.append(p)
    return keep


def _node_layouts(gpus: int, price: float, options: list[tuple[int, int, float]]
                  ) -> list[Layout]:
    """Every set of replicas one node of ``gpus`` GPUs holds, as (prefill, decode, cost)."""
    found: set[Layout] = set()

    def grow(k: int, left: int, pre: float, dec: float) -> None:
        if k == len(options):
            used = pre > 0 or dec > 0
            found.add((pre, dec, price if used else 0.0))
            return
        phase, tp, rate = options[k]
        for n in range(left // tp + 1):
            grow(k + 1, left - n * tp, pre + (rate * n if phase == 0 else 0.0),
                 dec + (rate * n if phase == 1 else 0.0))

    grow(0, gpus, 0.0, 0.0)
    return _frontier(found)


def brute_force(fleet: Fleet, units: list[UnitDemand]) -> list[Layout]:
    """Every non-dominated (prefill, decode, cost) of the whole fleet, node by node."""
    states: list[Layout] = [(0.0, 0.0, 0.0)]
    options = _rates(units)
    for node in fleet.node_types:
        mine = _node_layouts(node.devices[CLASS], node.price_per_hour or 0.0, options)
        for _ in range(node.count):
            states = _frontier({(a + x, b + y, c + z) for a, b, c in states
                                for x, y, z in mine})
    return states


def best_goodput(states: list[Layout]) -> float:
    return max(min(p, d) for p, d, _ in states)


def least_cost(states: list[Layout], target: float) -> float:
    return min(c for p, d, c in states if min(p, d) >= target - EPS)


def _only(units: list[UnitDemand], tps: tuple[int, int]) -> list[UnitDemand]:
    """The units with one TP degree each (prefill, decode): the old planner's choice."""
    out = []
    for unit, tp in zip(units, tps, strict=True):
        demand = next(d for d in unit.options(CLASS) if d.device_share == tp)
        out.append(UnitDemand(name=unit.name, classes={CLASS: demand}))
    return out


def _nodes_hold(result: FitResult, fleet: Fleet) -> None:
    """Node by node as packed: the GPUs of the replicas on a node are at most its GPUs."""
    held: dict[tuple[str, int], float] = defaultdict(float)
    for p in result.replicas:
        assert len(p.nodes) == p.replicas
        for j in p.nodes:
            held[p.node_type, j] += p.device_share
    gpus = {n.name: n.devices[CLASS] for n in fleet.node_types}
    for (name, _), value in held.items():
        assert value <= gpus[name] + EPS


def _carries(result: FitResult, units: list[UnitDemand]) -> None:
    """Each unit routes exactly T, within what its replicas carry at their rates."""
    for unit in units:
        mine = [p for p in result.replicas if p.unit == unit.name]
        assert math.isclose(sum(p.items_per_s for p in mine), result.throughput,
                            rel_tol=1e-6, abs_tol=1e-6)
        for p in mine:
            demand = unit.options(p.device_class)[p.option]
            assert p.device_share == demand.device_share and p.rate == demand.rate
            assert p.items_per_s <= p.replicas * demand.rate * (1 + EPS) + EPS


# A fleet whose small nodes cannot hold the TP degree with the most req/s per GPU (TP4).
UNEVEN = _fleet(("x8", 1, 8, 20.0), ("x2", 2, 2, 6.0))


def test_rates_per_gpu_favour_tp4() -> None:
    per_gpu = {(i, tp): rate / tp for i, tp, rate in _rates(_units(UNEVEN))}
    for phase in (0, 1):
        best = max((k for k in per_gpu if k[0] == phase), key=per_gpu.__getitem__)
        assert best == (phase, 4)


def test_solver_picks_tp_per_node_shape_as_brute_force_does() -> None:
    units = _units(UNEVEN)
    exact = best_goodput(brute_force(UNEVEN, units))
    result = solve(units, solver_nodes(UNEVEN, catalog()), mip_gap=0.0)
    _nodes_hold(result, UNEVEN)
    _carries(result, units)
    assert result.throughput == pytest.approx(exact, rel=1e-6)
    # One TP degree per phase, tried one pair at a time (as the planner once chose it): each
    # pair is worse, TP4 for both (the most per GPU) leaves the small nodes idle.
    tps = sorted({int(d.device_share) for d in units[0].options(CLASS)})
    single = {pair: solve(_only(units, pair), solver_nodes(UNEVEN, catalog()),
                          mip_gap=0.0).throughput
              for pair in itertools.product(tps, tps)}
    assert max(single.values()) < exact * (1 - 0.02)
    assert single[4, 4] < exact * 0.8
    # The small nodes run TP2 or less; the large one holds a TP4 replica.
    assert {p.node_type for p in result.replicas} == {"x8", "x2"}
    assert any(p.node_type == "x8" and p.device_share == 4 for p in result.replicas)


def test_plan_lists_the_tp_the_solver_chose(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_split("toy", TRACE, UNEVEN, SLO_, book=_book(), burst=1.0, mip_gap=0.0)
    exact = best_goodput(brute_force(UNEVEN, _units(UNEVEN)))
    # The refined prefill queue (M/G/c) only raises the rates brute force used (M/G/1).
    assert plan.capacity >= exact * (1 - 1e-6)
    assert plan.capacity <= plan.solver["bound"] * (1 + 1e-9)  # type: ignore[operator]
    assert {p.node_type for p in plan.pools} == {"x8", "x2"}
    assert all(p.tp <= 2 for p in plan.pools if p.node_type == "x2")
    assert 4 in {p.tp for p in plan.pools}
    show(plan)
    lines = capsys.readouterr().out
    for pool in plan.pools:
        assert pool.gpus == pool.tp * pool.replicas
        assert f"{pool.phase:<9} {CLASS:<10} TP{pool.tp} x{pool.replicas:<4} on " \
            f"{pool.node_type:<10}" in lines


# One-GPU nodes are the cheapest way to a small rate; the eight-GPU node adds the most.
SMALL_AND_LARGE = _fleet(("x1", 2, 1, 3.0), ("x8", 1, 8, 20.0))


def test_min_cost_picks_a_smaller_tp_than_max_goodput() -> None:
    units = _units(SMALL_AND_LARGE)
    states = brute_force(SMALL_AND_LARGE, units)
    cheap = plan_split("toy", TRACE, SMALL_AND_LARGE, SLO_, book=_book(), burst=1.0,
                       objective="min_cost")
    most = plan_split("toy", TRACE, SMALL_AND_LARGE, SLO_, book=_book(), burst=1.0,
                      mip_gap=0.0)
    assert cheap.cost_per_hour == pytest.approx(least_cost(states, TRACE.rate)) == 6.0
    assert cheap.capacity >= TRACE.rate * (1 - 1e-9)
    assert {(p.node_type, p.tp) for p in cheap.pools} == {("x1", 1)}
    assert most.capacity >= best_goodput(states) * (1 - 1e-6)
    assert max(p.tp for p in most.pools) > max(p.tp for p in cheap.pools)
    # With TP4 alone (the most per GPU) the cheapest plan would need the $20 node.
    only4 = _only(units, (4, 4))
    result = solve(only4, solver_nodes(SMALL_AND_LARGE, catalog()), objective="min_cost",
                   target=TRACE.rate)
    assert result.cost_per_hour == 20.0


def test_colocated_baseline_also_chooses_tp() -> None:
    plan = plan_colocated("toy", TRACE, UNEVEN, SLO_, book=_book(), burst=1.0, mip_gap=0.0)
    assert plan.feasible
    assert all(p.tp <= 2 for p in plan.pools if p.node_type == "x2")
    assert {p.node_type for p in plan.pools} == {"x8", "x2"}


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    """1-3 node types of 1-2 nodes with 1, 2, 4 or 8 A100s each, at a price per GPU-hour."""
    types = []
    for i in range(draw(st.integers(1, 3))):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        types.append((f"n{i}", draw(st.integers(1, 2)), gpus,
                      gpus * draw(st.sampled_from([2.0, 2.5, 3.0]))))
    return _fleet(*types)


PROPERTIES = settings(max_examples=30, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])


@PROPERTIES
@given(fleet=fleets())
def test_llm_rows_fit_the_fleet_under_the_bound(fleet: Fleet) -> None:
    units = _units(fleet)
    result = solve(units, solver_nodes(fleet, catalog()), mip_gap=0.0)
    _nodes_hold(result, fleet)
    _carries(result, units)
    assert result.throughput <= result.lp_bound * (1 + EPS) + EPS
    assert result.throughput <= result.bound * (1 + EPS) + EPS
    exact = best_goodput(brute_force(fleet, units))
    assert result.throughput <= exact * (1 + EPS) + EPS  # a packed plan is a layout
    if result.status == "optimal":
        assert result.throughput >= exact * (1 - EPS) - EPS


@PROPERTIES
@given(fleet=fleets(), data=st.data())
def test_more_gpus_never_less_goodput(fleet: Fleet, data: st.DataObject) -> None:
    n = data.draw(st.integers(0, len(fleet.node_types) - 1), label="grow type")
    if data.draw(st.booleans(), label="more GPUs per node"):
        grow = {"devices": {CLASS: fleet.node_types[n].devices[CLASS] * 2}}
    else:
        grow = {"count": fleet.node_types[n].count + 1}
    bigger = fleet.model_copy(update={"node_types": [
        t.model_copy(update=grow) if i == n else t for i, t in enumerate(fleet.node_types)]})
    before = solve(_units(fleet), solver_nodes(fleet, catalog()), mip_gap=0.0)
    after = solve(_units(bigger), solver_nodes(bigger, catalog()), mip_gap=0.0)
    assert after.bound >= before.bound * (1 - EPS) - EPS
    if "repaired" not in (before.status, after.status):
        assert after.throughput >= before.throughput * (1 - EPS) - EPS
    # The planner on top (refined queues, burst 1): the solver's gap at most.
    small = plan_split("toy", TRACE, fleet, SLO_, book=_book(), burst=1.0, mip_gap=0.0)
    large = plan_split("toy", TRACE, bigger, SLO_, book=_book(), burst=1.0, mip_gap=0.0)
    assert large.goodput >= small.goodput * (1 - 0.01)
    assert small.capacity <= small.solver["lp_bound"] * (1 + EPS)  # type: ignore[operator]
    assert large.capacity <= large.solver["lp_bound"] * (1 + EPS)  # type: ignore[operator]
