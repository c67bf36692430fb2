"""Fit: integer replicas of each unit per device class and node type, solved by HiGHS.

Sets: units u in pipeline order (u sends to u+1), multiplicity m_u (items u processes per
source item); node types n (``count`` identical nodes); device classes d. A candidate
c = (u, d, n) exists where n offers d (accelerators in ``devices``, or ``cpu_class`` for a
``cpu-`` class), rate r_c = rate[u, d] > 0, and ONE replica fits on ONE node of n:
``cores <= node cores``, ``memory <= node memory``, ``share <= 1`` (a fraction of one device)
or ``ceil(share) <= devices per node`` (whole devices on one node). Problem size follows
node types, not node count: 1,000 nodes of 10 types give the same model as 10 nodes.

max_throughput::

    maximise   T
    subject to sum_{c of u} r_c·x_c                     >= m_u·T        every unit u
               sum_{c on n} cores_c·x_c                 <= count_n·cores_n
               sum_{c on n} memory_c·x_c                <= count_n·memory_n
               sum_{c on n, class d} share_c·x_c        <= count_n·devices_n[d]
               x_c <= count_n·P_c,   P_c = replicas of c that fit on one node (packing)
               x_c integer >= 0,  T >= 0

Fractional shares pack: ``share_c`` is the fraction of one device (0.25 for MPS/MIG/time
slicing), so the device row says the shares placed on type n class d fit its devices; P_c
caps a unit at ``devices·floor(1/share)`` per node (a 0.3 share packs three to a device, not
3.33), and at ``floor(node cores / cores_c)`` etc. The capacity rows are the aggregate of
``count_n`` nodes: exact per resource, and with P_c exact for one unit per type; replicas of
different units sharing a type may still need a placement step to bin-pack them (a replica
never straddles two nodes, which the per-node fit and P_c guarantee).

Network (only where a node type declares ``network``, bytes/s per node each way): routed
load f_c (items/s) replaces r_c·x_c in the throughput row, with f_c <= r_c·x_c, and::

    sum_{c on n} bytes_out_c·f_c <= count_n·network_n          egress
    sum_{c on n} bytes_in_c·f_c  <= count_n·network_n          ingress

Conservatively, EVERY byte between consecutive units is taken to cross the network: exact for
a locality-blind router (power-of-two-choices over all downstream replicas), pessimistic where
both ends share a node. ``bytes_in`` of u is the most u-1 sends per item on any class, times
m_{u-1}/m_u. The source's input and the sink's output are not modelled. Every extra node
or node type only relaxes these rows, so more fleet never gives less throughput.

min_cost (at ``target``): T is fixed to ``target``, integer nodes-in-use y_n in [0, count_n]
replace ``count_n`` on every capacity and network row, ``x_c <= P_c·y_n``, and the objective is
``minimise sum_n price_n·y_n``: the node-hours actually paid for, not a proxy. Replicas the
routed load does not need are then dropped, and the reported nodes in use are the fewest whose
capacity covers what is left.

How it is solved (``max_throughput``)::

    LP relaxation (HiGHS) ──▶ bound ──┐
          │                           ├─ within mip_gap? ──yes──▶ plan (method "lp_round")
          └──▶ round down + greedy fill (rounding.py) ──┘   │no
                                   HiGHS branch-and-bound ──┴──▶ the better plan

The LP relaxation (same model, integrality dropped) bounds the optimum. Rounding its replica
counts down and refilling greedily usually lands within a fraction of a percent of it, which
proves the plan within ``mip_gap`` without branch-and-bound; otherwise HiGHS's MILP runs
(``time_limit`` and ``mip_rel_gap`` always passed) and the better plan is kept. ``min_cost``
always runs the MILP. The reported ``bound`` is the tighter of the LP bound and HiGHS's dual
bound, and ``gap`` is measured against it. After solving, load is routed to each unit's
replicas in proportion to their rates where the network allows (else as the solver routed
it), and utilization, usage, nodes in use, cost and the bottleneck follow (analysis.py).
The only clock is around the HiGHS calls (highs.py), to report solve seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NoReturn

import numpy as np

from fitwork.fit import analysis
from fitwork.fit.candidates import Problem, build_problem
from fitwork.fit.errors import FitInputError, SolverError, TargetUnreachable
from fitwork.fit.highs import Outcome, run_highs
from fitwork.fit.model import MilpModel, build_model
from fitwork.fit.result import FitResult, Method, Objective, Status
from fitwork.fit.rounding import round_and_fill
from fitwork.fit.spec import NodeType, UnitDemand

OBJECTIVES = ("max_throughput", "min_cost")


def solve(units: Sequence[UnitDemand], node_types: Sequence[NodeType], *,
          objective: Objective = "max_throughput", target: float | None = None,
          time_limit: float = 10.0, mip_gap: float = 0.01) -> FitResult:
    """Fit ``units`` (pipeline order) to the fleet ``node_types``; see the module docstring.

    Raises `UnitFitsNowhere` when a unit fits no node, `TargetUnreachable` when a ``min_cost``
    target is above what the fleet gives, `SolverError` when HiGHS finds no plan in time.
    """
    return solve_problem(build_problem(units, node_types), objective=objective, target=target,
                         time_limit=time_limit, mip_gap=mip_gap)


@dataclass(frozen=True)
class Solved:
    """A solution vector and how it was reached; bounds are on the objective, unscaled."""

    v: np.ndarray
    status: Status
    method: Method
    bound: float
    lp_bound: float
    seconds: float
    lp_seconds: float


def solve_problem(problem: Problem, *, objective: Objective, target: float | None,
                  time_limit: float, mip_gap: float) -> FitResult:
    """Solve a built `Problem` (the units' candidates), for `solve` and the monolithic baseline."""
    _check_options(objective, target, time_limit, mip_gap)
    min_cost = objective == "min_cost"
    model = build_model(problem, min_cost=min_cost, target=target)
    lp = run_highs(model, relax=True, time_limit=time_limit, mip_gap=mip_gap)
    if min_cost and lp.status == 2:
        _unreachable(problem, target, time_limit, mip_gap)
    if lp.status != 0 or lp.objective is None or lp.x is None:
        raise SolverError(f"the LP relaxation did not solve: {lp.message}; raise time_limit "
                          f"(now {time_limit}s)")
    if min_cost:
        solved = _min_cost(problem, model, lp, target, time_limit, mip_gap)
    else:
        solved = _max_throughput(problem, model, lp, time_limit, mip_gap)
    return _result(problem, model, solved, objective, target)


def _max_throughput(problem: Problem, model: MilpModel, lp: Outcome, time_limit: float,
                    mip_gap: float) -> Solved:
    """Round the LP; branch and bound only when rounding is not within ``mip_gap``."""
    assert lp.x is not None and lp.objective is not None
    t_col, scale = model.layout.t, model.t_scale
    lp_bound = -lp.objective * scale
    rounded, seconds = _settle(problem, model, round_and_fill(problem, model, lp.x), time_limit)
    seconds += lp.seconds
    if lp_bound - rounded[t_col] * scale <= mip_gap * lp_bound:
        return Solved(rounded, "optimal", "lp_round", lp_bound, lp_bound, seconds, lp.seconds)
    mip = run_highs(model, relax=False, time_limit=time_limit, mip_gap=mip_gap)
    bound = lp_bound if mip.dual_bound is None else min(lp_bound, -mip.dual_bound * scale)
    seconds += mip.seconds
    status: Status = "optimal" if mip.status == 0 else "time_limit"
    if mip.x is not None and mip.status in (0, 1):
        settled, more = _settle(problem, model, mip.x, time_limit)
        seconds += more
        if settled[t_col] >= rounded[t_col]:
            return Solved(settled, status, "milp", bound, lp_bound, seconds, lp.seconds)
    return Solved(rounded, status, "lp_round", bound, lp_bound, seconds, lp.seconds)


def _settle(problem: Problem, model: MilpModel, v: np.ndarray,
            time_limit: float) -> tuple[np.ndarray, float]:
    """The most T the solution's integer replicas carry (a solver within its gap may stop
    short of it): the least unit capacity, or with network rows an LP with replicas fixed."""
    lay = model.layout
    v = v.copy()
    v[: lay.n_cand] = np.rint(v[: lay.n_cand])
    if not lay.flows:
        caps = analysis.unit_capacity(problem, v[: lay.n_cand])
        t = min(c / m for c, m in zip(caps, problem.multiplicity, strict=True))
        v[lay.t] = min(t / model.t_scale, float(model.ub[lay.t]))
        return v, 0.0
    lb, ub = model.lb.copy(), model.ub.copy()
    lb[: lay.n_cand] = ub[: lay.n_cand] = v[: lay.n_cand]
    fixed = replace(model, lb=lb, ub=ub)
    out = run_highs(fixed, relax=True, time_limit=time_limit, mip_gap=0.0)
    if out.status != 0 or out.x is None or out.x[lay.t] < v[lay.t]:
        return v, out.seconds
    return out.x, out.seconds


def _min_cost(problem: Problem, model: MilpModel, lp: Outcome, target: float | None,
              time_limit: float, mip_gap: float) -> Solved:
    """Branch and bound on the node counts; the LP gives the lower bound on cost."""
    assert lp.objective is not None
    mip = run_highs(model, relax=False, time_limit=time_limit, mip_gap=mip_gap)
    if mip.status == 2:
        _unreachable(problem, target, time_limit, mip_gap)
    if mip.x is None or mip.status not in (0, 1):
        raise SolverError(f"HiGHS found no plan: {mip.message}; raise time_limit "
                          f"(now {time_limit}s) or mip_gap (now {mip_gap})")
    lp_bound = lp.objective
    bound = lp_bound if mip.dual_bound is None else max(lp_bound, mip.dual_bound)
    status: Status = "optimal" if mip.status == 0 else "time_limit"
    return Solved(mip.x, status, "milp", bound, lp_bound, lp.seconds + mip.seconds, lp.seconds)


def _check_options(objective: str, target: float | None, time_limit: float,
                   mip_gap: float) -> None:
    if objective not in OBJECTIVES:
        raise FitInputError(f"objective={objective!r}: use one of {', '.join(OBJECTIVES)}")
    if objective == "min_cost" and (target is None or not target > 0):
        raise FitInputError(f"objective='min_cost' needs a target throughput > 0 (got {target})")
    if objective == "max_throughput" and target is not None:
        raise FitInputError("target applies to objective='min_cost' only; leave it None")
    if not time_limit > 0:
        raise FitInputError(f"time_limit={time_limit}: must be > 0 seconds")
    if not mip_gap >= 0:
        raise FitInputError(f"mip_gap={mip_gap}: must be >= 0")


def _unreachable(problem: Problem, target: float | None, time_limit: float,
                 mip_gap: float) -> NoReturn:
    best = solve_problem(problem, objective="max_throughput", target=None,
                         time_limit=time_limit, mip_gap=mip_gap)
    raise TargetUnreachable(float(target or 0.0), best.throughput, best.bound)


def _result(problem: Problem, model: MilpModel, solved: Solved, objective: Objective,
            target: float | None) -> FitResult:
    lay = model.layout
    v = solved.v
    replicas = np.rint(v[: lay.n_cand])
    rates = np.array([cand.rate for cand in problem.candidates])
    solver_flows = v[lay.n_cand: 2 * lay.n_cand] * rates if lay.flows else None
    if lay.min_cost and target is not None:
        t = float(target)
    else:  # never more than the rounded replicas, or the solver's routing, carry
        carried = np.array(analysis.unit_capacity(problem, replicas))
        if solver_flows is not None:
            routed = np.array(analysis.unit_capacity(problem, solver_flows / rates))
            carried = np.minimum(carried, routed)
        ratios = carried / np.asarray(problem.multiplicity)
        t = max(0.0, min(float(v[lay.t]) * model.t_scale, float(ratios.min())))
    nodes = (np.rint(v[lay.t + 1:]) if lay.min_cost
             else np.array([n.count for n in problem.node_types], dtype=float))
    flows = analysis.route(problem, replicas, solver_flows, t, nodes)
    if lay.min_cost:
        routed = (analysis.scaled_flows(problem, solver_flows, t) if solver_flows is not None
                  else flows)
        replicas = analysis.trim(problem, replicas, routed)
        flows = analysis.route(problem, replicas, routed if solver_flows is not None else None,
                               t, nodes)
    used = analysis.usage(problem, replicas, flows)
    in_use = [analysis.nodes_needed(node, used[n]) for n, node in enumerate(problem.node_types)]
    cost = sum(node.price_per_hour * in_use[n] for n, node in enumerate(problem.node_types))
    if lay.min_cost:
        value = cost
        bound = min(solved.bound, value)
        gap = (value - bound) / value if value > 0 else 0.0
    else:
        value = t
        bound = max(solved.bound, value)
        gap = (bound - value) / bound if bound > 0 else 0.0
    name, reason = analysis.bottleneck(problem, replicas, flows, used, t,
                                       target if lay.min_cost else None)
    return FitResult(
        objective=objective,
        status=solved.status,
        method=solved.method,
        throughput=t,
        target=target,
        objective_value=value,
        bound=bound,
        lp_bound=solved.lp_bound,
        gap=max(0.0, gap),
        solve_seconds=solved.seconds,
        lp_seconds=solved.lp_seconds,
        replicas=analysis.placements(problem, replicas, flows),
        utilization=analysis.utilization(problem, flows, in_use),
        nodes=analysis.node_usage(problem, used, in_use),
        bottleneck=name,
        bottleneck_reason=reason,
        cost_per_hour=cost,
        cost_per_million=cost / (t * 3600.0) * 1e6 if t > 0 else None,
    )
