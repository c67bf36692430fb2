"""Fit: integer replicas of each unit per device class, batch size and node type, by HiGHS.

Sets: units u in pipeline order (u sends to u+1), multiplicity m_u (items u processes per
source item); node types n (``count`` identical nodes of ``C_n`` cores, ``M_n`` memory,
``D_nd`` devices of class d, core ceiling rho_n); device classes d.  A candidate
c = (u, d, k, n) is unit u on class d at batch option k on node type n, where n offers d,
the rate r_c > 0, the option's call latency is within ``max_latency``, and ONE replica fits
on ONE node.  Per replica, c HOLDS ``R_c`` reserved cores (the declared cores when the unit
reserves them, else 0), memory ``M_c`` and a device slot ``s_c`` (a share up to 1, or
whole devices); per item it CONSUMES ``cpu_c`` core-seconds and ``a_c`` device-seconds
(0 where held instead), sends ``out_c`` bytes and receives ``in_c``.  Problem size follows
node types, not node count: 1,000 nodes of 10 types give the same model as 10 nodes.

max_throughput, with x_c integer replicas, f_c = r_c·b_c items/s routed to c::

    maximise   T
    subject to sum_{c of u} f_c                                  >= m_u·T       every unit u
               f_c <= r_c·x_c                                                   every c
               sum_{c on n} R_c·x_c + sum_{c on n} cpu_c·f_c / rho_n <= count_n·C_n   cores
               sum_{c on n} M_c·x_c                              <= count_n·M_n   memory
               sum_{c on n, class d} s_c·x_c                     <= count_n·D_nd  slots
               sum_{c on n, class d} a_c·f_c                     <= count_n·D_nd  time
               sum_{c of u} io_c·x_c                             <= N_u   max_concurrency
               sum_{c of u} f_c / batch_c                        <= R_u   rate_limit
               x_c <= count_n·P_c,  P_c = replicas of c that fit on one node
               x_c <= P_c·count_n·z_k,  sum_{k of (u, d)} z_k <= 1   one batch size per (u, d)
                                                       (unless u's options are not exclusive)
               x_c integer >= 0,  f_c >= 0,  z_k binary,  T >= 0

Cores are FLUID: load consumes them as measured (core-seconds per item times items/s), so
processes may outnumber cores and a replica costs cores only while it works.  The cores row
says reservations fit and the fluid load fits in ``rho_n`` of the cores left after them: the
oversubscription cost (``rho_n`` is derived from the profile's measured run-queue wait, see
``fitwork.fit.ceiling.core_ceiling``).  Memory, reserved cores and device slots are HELD per
replica; device time is fluid like cores.  The z rows exist only for a (unit, class) that
offers several batch sizes.  P_c caps a candidate at what one node holds alone (a 0.3 slot
packs three to a device, not 3.33); fluid load does not cap it (a replica that holds nothing
is capped at ``MOST_PER_NODE``, a bound for HiGHS only).

Network (only where a node type declares ``network``, bytes/s per node each way)::

    sum_{c on n} out_c·f_c <= count_n·network_n          egress
    sum_{c on n} in_c·f_c  <= count_n·network_n          ingress

Conservatively, EVERY byte between consecutive units is taken to cross the network: exact for
a locality-blind router, pessimistic where both ends share a node.  ``in_c`` of u is the most
u-1 sends per item on any class, times m_{u-1}/m_u.  Every extra node or node type only
relaxes these rows, so more fleet never gives less throughput (before packing).

min_cost (at ``target``): T is fixed to ``target``, integer nodes-in-use y_n in [0, count_n]
replace ``count_n`` on every capacity and network row, ``x_c <= P_c·y_n``, and the objective is
``minimise sum_n price_n·y_n``.

How it is solved (``max_throughput``)::

    LP relaxation (HiGHS) ──▶ bound ──────────────────────┐
          │                                               ├─ within mip_gap? ─yes─▶ plan
          └──▶ round, repair, fill (rounding.py); flows ──┘        │no       ("lp_round")
               re-solved with the replicas fixed (LP)      HiGHS branch-and-bound ──▶
                                                           the better plan ("milp")

The LP relaxation bounds the optimum.  Rounding keeps its busy shares, gives each a replica
and repairs what replicas hold; an LP with the replicas fixed then routes the most T they
carry.  When that is within ``mip_gap`` of the bound, branch-and-bound is skipped; otherwise
HiGHS's MILP runs (``time_limit`` and ``mip_rel_gap`` always passed) and the better plan is
kept.  ``min_cost`` always runs the MILP.

After solving: the solver's flows, scaled so each unit carries exactly m_u·T, are the plan's
routing; replicas the load does not need are dropped (every replica carries load); then each
node type's replicas are packed onto its nodes (packing.py; a min-cost plan onto the nodes
it pays for), a group's load split evenly over its replicas (what an engine asks for each);
fluid replicas that do not fit are first split into more, smaller ones where what they hold
allows.  A plan that still does not pack is repaired, in this order, stopping once it packs:

1. (max_throughput) the plan at 99.8, 99.5 or 99% of its load: fragments of fluid load fit
   once each replica needs a little less;
2. a cut, at most ``CUT_ROUNDS`` times: the node type that failed has each row that blocked
   a replica derated by the share of its nodes that did not fit plus the largest replica
   (fragmentation), and the model is solved again (then step 1 again);
3. (min_cost) the cheaper of: the plan on every node it needs, and the packed
   max-throughput plan scaled down to the target (the target kept, at what cost it takes);
4. the better of: the replicas left over dropped and the flows re-solved with the rest fixed
   until it packs, or every replica kept at the largest share of its load (bisection) with
   which it packs.

A plan that needed a repair and ends outside ``mip_gap`` (or, for min_cost, short of its
target) says status ``repaired``; any other plan that states a gap above zero says
``feasible`` (an LP-rounded or a branch-and-bound plan within ``mip_gap``, or one that
routing or packing lost a little of): ``optimal`` is said only of a plan proved at a gap of
zero (up to ``ZERO_GAP``), and `FitResult.label` states the gap beside every other status
(``feasible (gap 0.4%)``).  The reported ``bound`` is that of the uncut model (the tighter of
its LP bound and HiGHS's dual bound), and ``gap`` is measured against it.  The only clock is
around the HiGHS calls (highs.py), to report solve seconds.
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
from fitwork.fit.packing import Packing, pack, split
from fitwork.fit.result import FitResult, Method, Objective, Status
from fitwork.fit.rounding import round_and_fill
from fitwork.fit.spec import NodeType, UnitDemand

OBJECTIVES = ("max_throughput", "min_cost")
CUT_ROUNDS = 3
IDLE = 1e-4
"""A candidate whose load is under this share of one replica's rate gets no replica."""
SPLIT_ROUNDS = 2
BISECT_STEPS = 8
SHED = (0.998, 0.995, 0.99)
"""Shares of a plan's load tried when fluid fragmentation keeps it from packing."""
ZERO_GAP = 1e-9
"""The largest relative gap still read as zero: a plan is labelled ``optimal`` only at a
proven gap of zero; within ``mip_gap`` but above this, it is ``feasible``."""


def solve(units: Sequence[UnitDemand], node_types: Sequence[NodeType], *,
          objective: Objective = "max_throughput", target: float | None = None,
          time_limit: float = 10.0, mip_gap: float = 0.01,
          max_latency: float | None = None) -> FitResult:
    """Fit ``units`` (pipeline order) to the fleet ``node_types``; see the module docstring.

    Raises `UnitFitsNowhere` when a unit fits no node, `FitInputError` when a unit cannot
    meet ``max_latency``, `TargetUnreachable` when a ``min_cost`` target is above what the
    fleet gives, `SolverError` when HiGHS finds no plan in time.
    """
    _check_options(objective, target, time_limit, mip_gap)
    problem = build_problem(units, node_types, max_latency=max_latency)
    return solve_problem(problem, objective=objective, target=target, time_limit=time_limit,
                         mip_gap=mip_gap)


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
    model = uncut = build_model(problem, min_cost=min_cost, target=target)
    first = solved = _solve_model(problem, model, min_cost, target, time_limit, mip_gap)
    x, flows, t = _routed(problem, model, solved.v, target)
    x, packing = _pack(problem, model, solved.v, x, flows)
    seconds = solved.seconds
    repaired = not packing.complete
    if repaired and not min_cost:
        x, flows, t, packing = _shed(problem, x, flows, t, packing)
    derate: dict[tuple[int, str], float] = {}
    for _ in range(CUT_ROUNDS):
        if packing.complete:
            break
        derate = _cut(problem, packing, derate)
        cut = build_model(problem, min_cost=min_cost, target=target, derate=derate)
        try:
            again = _solve_model(problem, cut, min_cost, target, time_limit, mip_gap)
        except (TargetUnreachable, SolverError):
            break
        seconds += again.seconds
        model, solved = cut, again
        x, flows, t = _routed(problem, model, solved.v, target)
        x, packing = _pack(problem, model, solved.v, x, flows)
        if not packing.complete and not min_cost:
            x, flows, t, packing = _shed(problem, x, flows, t, packing)
    if repaired and min_cost:  # pay for more nodes rather than miss the target
        if not packing.complete:
            x, packing = _pack(problem, model, None, x, flows)
        x, flows, t, packing = _cheapest(problem, x, packing, flows, t,
                                         float(target or 0.0), time_limit, mip_gap)
    dropped = not packing.complete
    if dropped:
        kept = _bisect(problem, x, flows, t)
        x, flows, t, packing, more = _repair(problem, uncut, x, packing, time_limit)
        seconds += more
        if kept is not None and kept[2] > t:
            x, flows, t, packing = kept
    solved = replace(solved, seconds=seconds, bound=first.bound, lp_bound=first.lp_bound,
                     lp_seconds=first.lp_seconds)
    return _result(problem, model, solved, objective, target, x, flows, t, packing, mip_gap,
                   cut=repaired)


def _solve_model(problem: Problem, model: MilpModel, min_cost: bool, target: float | None,
                 time_limit: float, mip_gap: float) -> Solved:
    lp = run_highs(model, relax=True, time_limit=time_limit, mip_gap=mip_gap)
    if min_cost and lp.status == 2:
        _unreachable(problem, target, time_limit, mip_gap)
    if lp.status != 0 or lp.objective is None or lp.x is None:
        raise SolverError(f"the LP relaxation did not solve: {lp.message}; raise time_limit "
                          f"(now {time_limit}s)")
    if min_cost:
        return _min_cost(problem, model, lp, target, time_limit, mip_gap)
    return _max_throughput(problem, model, lp, time_limit, mip_gap)


def _max_throughput(problem: Problem, model: MilpModel, lp: Outcome, time_limit: float,
                    mip_gap: float) -> Solved:
    """Round the LP; branch and bound only when rounding is not within ``mip_gap``."""
    assert lp.x is not None and lp.objective is not None
    t_col, scale = model.layout.t, model.t_scale
    lp_bound = -lp.objective * scale
    rounded, seconds = _settle(model, round_and_fill(problem, model, lp.x), time_limit)
    seconds += lp.seconds
    if lp_bound - rounded[t_col] * scale <= mip_gap * lp_bound:
        return Solved(rounded, "optimal", "lp_round", lp_bound, lp_bound, seconds, lp.seconds)
    mip = run_highs(model, relax=False, time_limit=time_limit, mip_gap=mip_gap)
    bound = lp_bound if mip.dual_bound is None else min(lp_bound, -mip.dual_bound * scale)
    seconds += mip.seconds
    status: Status = "optimal" if mip.status == 0 else "time_limit"
    if mip.x is not None and mip.status in (0, 1):
        settled, more = _settle(model, mip.x, time_limit)
        seconds += more
        if settled[t_col] >= rounded[t_col]:
            return Solved(settled, status, "milp", bound, lp_bound, seconds, lp.seconds)
    return Solved(rounded, status, "lp_round", bound, lp_bound, seconds, lp.seconds)


def _fixed(model: MilpModel, x: np.ndarray) -> MilpModel:
    """The model with replicas fixed to ``x`` (and each batch choice to what x uses)."""
    lay = model.layout
    lb, ub = model.lb.copy(), model.ub.copy()
    lb[: lay.n_cand] = ub[: lay.n_cand] = x
    if lay.choices:
        rows = {name: i for i, name in enumerate(model.row_names)}
        used: set[int] = set()
        for i in range(lay.n_cand):
            row = rows.get(f"chosen[{i}]")
            if row is not None and x[i] > 0:
                cols = model.a.indices[model.a.indptr[row]: model.a.indptr[row + 1]]
                used.update(int(c) for c in cols if c >= lay.z(0))
        for k in range(len(lay.choices)):
            lb[lay.z(k)] = ub[lay.z(k)] = 1.0 if lay.z(k) in used else 0.0
    return replace(model, lb=lb, ub=ub)


def _settle(model: MilpModel, v: np.ndarray, time_limit: float) -> tuple[np.ndarray, float]:
    """The most T the solution's integer replicas carry: an LP with the replicas fixed."""
    lay = model.layout
    v = v.copy()
    v[: lay.n_cand] = np.rint(v[: lay.n_cand])
    out = run_highs(_fixed(model, v[: lay.n_cand]), relax=True, time_limit=time_limit,
                    mip_gap=0.0)
    if out.status != 0 or out.x is None or out.x[lay.t] < v[lay.t]:
        v[lay.n_cand: 2 * lay.n_cand] = np.minimum(v[lay.n_cand: 2 * lay.n_cand],
                                                   v[: lay.n_cand])
        return v, out.seconds
    x = out.x.copy()
    x[: lay.n_cand] = v[: lay.n_cand]
    return x, out.seconds


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


def _routed(problem: Problem, model: MilpModel, v: np.ndarray,
            target: float | None) -> tuple[np.ndarray, np.ndarray, float]:
    """Replicas, items/s per candidate (each unit exactly m_u·T) and T, idle replicas gone."""
    lay = model.layout
    n = lay.n_cand
    rates = np.array([cand.rate for cand in problem.candidates])
    x = np.rint(v[:n])
    flows = np.clip(np.minimum(v[n: 2 * n], x), 0.0, None) * rates
    if lay.min_cost and target is not None:
        t = float(target)
    else:  # never more than the routed flows carry
        routed = np.array(analysis.unit_capacity(problem, flows / rates))
        t = max(0.0, min(float(v[lay.t]) * model.t_scale,
                         float((routed / np.asarray(problem.multiplicity)).min())))
    flows = analysis.scaled_flows(problem, flows, t)
    # A candidate carrying next to nothing keeps no replica: its load goes (min-cost) to the
    # unit's other replicas, or (max-throughput) T shrinks by as little.
    idle = flows < (1e-9 if lay.min_cost else IDLE) * rates
    if idle.any() and t > 0:
        flows[idle] = 0.0
        if not lay.min_cost:
            sums = np.zeros(len(problem.unit_names))
            np.add.at(sums, [k.unit for k in problem.candidates], flows)
            t = min(t, float((sums / np.asarray(problem.multiplicity)).min()))
        flows = analysis.scaled_flows(problem, flows, t)
    x = np.where(flows > 0, analysis.trim(problem, x, flows), 0.0)
    return x, flows, t


def _pack(problem: Problem, model: MilpModel, v: np.ndarray | None, x: np.ndarray,
          flows: np.ndarray) -> tuple[np.ndarray, Packing]:
    """Pack (a min-cost plan onto the nodes it pays for, given ``v``); split fluid replicas
    that do not fit into smaller ones, at most ``SPLIT_ROUNDS`` times."""
    lay = model.layout
    limit = None
    if lay.min_cost and v is not None:
        limit = [int(np.rint(v[lay.y(n)])) for n in range(lay.n_nodes)]
    packing = pack(problem, x, flows, limit)
    for _ in range(SPLIT_ROUNDS):
        if packing.complete:
            break
        more = split(problem, x, packing)
        if more is None:
            break
        trial = pack(problem, more, flows, limit)
        if trial.unplaced.sum() >= packing.unplaced.sum():
            break
        x, packing = more, trial
    return x, packing


def _shed(problem: Problem, x: np.ndarray, flows: np.ndarray, t: float, packing: Packing
          ) -> tuple[np.ndarray, np.ndarray, float, Packing]:
    """The most of the plan's load, among ``SHED`` shares of it, with which its replicas
    pack: fluid load left over by fragmentation fits once each replica needs a little
    less.  Unchanged if none packs (what is short is held, not fluid)."""
    for share in SHED:
        trial = pack(problem, x, flows * share)
        if trial.complete:
            return x, flows * share, t * share, trial
    return x, flows, t, packing


def _bisect(problem: Problem, x: np.ndarray, flows: np.ndarray, t: float
            ) -> tuple[np.ndarray, np.ndarray, float, Packing] | None:
    """The largest share of the load (by bisection) with which these replicas pack; ``None``
    if none does (what is short is held, not fluid)."""
    least = pack(problem, x, flows * 1e-6)
    if not least.complete:
        return None
    lo, hi, best = 1e-6, 1.0, least
    for _ in range(BISECT_STEPS):
        mid = (lo + hi) / 2
        trial = pack(problem, x, flows * mid)
        if trial.complete:
            lo, best = mid, trial
        else:
            hi = mid
    return x, flows * lo, t * lo, best


def _cheapest(problem: Problem, x: np.ndarray, packing: Packing, flows: np.ndarray, t: float,
              target: float, time_limit: float, mip_gap: float
              ) -> tuple[np.ndarray, np.ndarray, float, Packing]:
    """The cheaper of two min-cost plans that meet the target and pack: the solved one on
    every node it needs, and the packed max-throughput plan scaled down to the target."""
    options = [(x, flows, t, packing)] if packing.complete else []
    scaled = _from_max(problem, target, time_limit, mip_gap, (x, flows, t, packing))
    if scaled[3].complete:
        options.append(scaled)
    if not options:
        return x, flows, t, packing

    def cost(option: tuple[np.ndarray, np.ndarray, float, Packing]) -> float:
        return sum(n.price_per_hour * used
                   for n, used in zip(problem.node_types, option[3].used, strict=True))

    return min(options, key=cost)


def _from_max(problem: Problem, target: float, time_limit: float, mip_gap: float,
              fallback: tuple[np.ndarray, np.ndarray, float, Packing]
              ) -> tuple[np.ndarray, np.ndarray, float, Packing]:
    """A min-cost fallback: the packed max-throughput plan, its load scaled down to ``target``
    (each replica then needs less, so its packing still holds), if it reaches the target."""
    best = solve_problem(problem, objective="max_throughput", target=None,
                         time_limit=time_limit, mip_gap=mip_gap)
    if best.throughput < target * (1 - 1e-9):
        return fallback
    index = {(problem.unit_names[k.unit], k.device_class, problem.node_types[k.node].name,
              k.option): i for i, k in enumerate(problem.candidates)}
    x = np.zeros(len(problem.candidates))
    flows = np.zeros(len(problem.candidates))
    for p in best.replicas:
        i = index[p.unit, p.device_class, p.node_type, p.option]
        x[i], flows[i] = p.replicas, p.items_per_s * target / best.throughput
    return x, flows, target, pack(problem, x, flows)


def _cut(problem: Problem, packing: Packing,
         derate: dict[tuple[int, str], float]) -> dict[tuple[int, str], float]:
    """Derate each row of a node type that did not pack by the share of its nodes that was
    short there."""
    out = dict(derate)
    for n, node in enumerate(problem.node_types):
        for row, short in packing.short[n].items():
            out[n, row] = out.get((n, row), 1.0) * max(0.05, 1.0 - short / node.count)
    return out


def _repair(problem: Problem, model: MilpModel, x: np.ndarray, packing: Packing,
            time_limit: float) -> tuple[np.ndarray, np.ndarray, float, Packing, float]:
    """Drop what did not pack, re-route the most T the rest carries, pack again."""
    seconds = 0.0
    lay = model.layout
    free = replace(model, lb=model.lb.copy(), ub=model.ub.copy(),
                   c=np.where(np.arange(lay.size) == lay.t, -1.0, 0.0))
    free.lb[lay.t] = 0.0
    free.ub[lay.t] = model.ub[lay.t] if not lay.min_cost else np.inf
    if lay.min_cost:  # nodes in use are free here: the packing decides them
        for n, node in enumerate(problem.node_types):
            free.lb[lay.y(n)] = free.ub[lay.y(n)] = node.count
    while True:
        x = x - packing.unplaced
        v = np.zeros(lay.size)
        v[: lay.n_cand] = x
        settled, more = _settle(free, v, time_limit)
        seconds += more
        x, flows, t = _routed(problem, free, settled, None)
        packing = pack(problem, x, flows)
        if packing.complete:  # each round drops replicas, so this ends
            return x, flows, t, packing, seconds


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
            target: float | None, replicas: np.ndarray, flows: np.ndarray, t: float,
            packing: Packing, mip_gap: float, cut: bool = False) -> FitResult:
    lay = model.layout
    used = analysis.usage(problem, replicas, flows)
    in_use = list(packing.used)
    cost = sum(node.price_per_hour * in_use[n] for n, node in enumerate(problem.node_types))
    status = solved.status
    if lay.min_cost:
        value = cost
        bound = min(solved.bound, value)
        gap = (value - bound) / value if value > 0 else 0.0
        if t < float(target or 0.0) * (1 - 1e-9) or (cut and gap > mip_gap):
            status = "repaired"
    else:
        value = t
        bound = max(solved.bound, value)
        gap = (bound - value) / bound if bound > 0 else 0.0
        if cut and status == "optimal" and gap > mip_gap:
            status = "repaired"
    if status == "optimal" and gap > ZERO_GAP:
        status = "feasible"  # within the gap asked for, perhaps, but not proved optimal
    name, reason = analysis.bottleneck(problem, replicas, flows, used, t,
                                       target if lay.min_cost else None)
    return FitResult(
        objective=objective,
        status=status,
        method=solved.method,
        throughput=t,
        target=target,
        objective_value=value,
        bound=bound,
        lp_bound=solved.lp_bound,
        gap=max(0.0, gap),
        solve_seconds=solved.seconds,
        lp_seconds=solved.lp_seconds,
        replicas=analysis.placements(problem, replicas, flows, packing),
        utilization=analysis.utilization(problem, flows, in_use),
        nodes=analysis.node_usage(problem, used, in_use),
        bottleneck=name,
        bottleneck_reason=reason,
        cost_per_hour=cost,
        cost_per_million=cost / (t * 3600.0) * 1e6 if t > 0 else None,
    )
