"""The co-fit as arrays for HiGHS (columns, sparse rows, objective) and one timed solve.

Columns, in order: ``b[c]`` busy replicas of each offer c of an active job (items/s routed
to c over its rate, so ``f_c = rate_c·b_c``); ``x[c]`` integer replicas (integral models
only: in the LP relaxation ``x = b`` loses nothing, since x appears only in rows it can only
tighten, so the relaxation drops it); ``s[p]`` each active job's normalised rate
``T_p / scale_p``; for a job placed whole, ``s[p, n]`` its rate on pool n and ``a[p, n]``
its share of time on pool n (binary "the job runs on pool n" when integral; relaxed, the
time-sharing across types of Gavel's allocation: ``sum_n a[p, n] <= 1`` and what the job
uses of pool n at most ``a[p, n]`` of the pool, so it is never on two types at once); ``z``
the fair floor; ``y[n]`` nodes in use (min_cost). Capacity rows are divided by the pool's
capacity, unit rows by ``m·scale_p``, quota rows by the quota, so coefficients sit near 1
whatever the units of the resources.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from fitwork.fit.model import Rows
from fitwork.jobs.cofit_types import JobSpec, Offer, Pool


@dataclass(frozen=True)
class Goal:
    """What a model maximises (or, with ``min_cost``, minimises)."""

    s_weight: Mapping[int, float] = field(default_factory=dict)
    """Maximise the sum of these weights times ``s[p]`` (job index -> weight)."""
    fair: bool = False
    """Add ``z`` with ``s[p] >= w_p·z`` for every active job."""
    z_floor: float | None = None
    """With ``fair``: hold ``z`` at least this and maximise ``s_weight`` instead of ``z``."""
    min_cost: bool = False
    """Minimise the price of nodes in use (``y``); ``s_weight`` is ignored."""
    s_floor: float | None = None
    """Hold the ``s_weight`` sum at least this and minimise instead the load on offers the
    running plan (``warm``) does not use."""


@dataclass
class Layout:
    """Where each variable sits in the vector HiGHS solves for."""

    offers: list[int]
    jobs: list[int]
    integral: bool
    whole: dict[tuple[int, int], int] = field(default_factory=dict)
    """(job, pool) -> column of ``s[p, n]`` (jobs placed whole only)."""
    choose: dict[tuple[int, int], int] = field(default_factory=dict)
    """(job, pool) -> column of ``a[p, n]``, the job's time on pool n (binary when integral;
    whole jobs only)."""
    z: int | None = None
    y0: int | None = None
    size: int = 0

    def b(self, k: int) -> int:
        """Column of the busy replicas of the k-th active offer."""
        return k

    def x(self, k: int) -> int:
        """Column of the replicas of the k-th active offer (``b`` in a relaxation)."""
        return len(self.offers) + k if self.integral else k

    def s(self, i: int) -> int:
        """Column of the i-th active job's normalised rate."""
        return len(self.offers) * (2 if self.integral else 1) + i


@dataclass(frozen=True)
class Model:
    """``minimise c·v  s.t.  row_lb <= A v <= row_ub,  lb <= v <= ub,  v[integrality] int``."""

    layout: Layout
    c: np.ndarray
    integrality: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    a: sp.csr_array
    row_lb: np.ndarray
    row_ub: np.ndarray
    sense: float
    """+1 when the objective is minimised as stated, -1 when it is a maximisation negated."""

    @property
    def rows(self) -> int:
        """Number of rows."""
        return int(self.a.shape[0])

    @property
    def integers(self) -> int:
        """Number of integer (or binary) columns."""
        return int(np.count_nonzero(self.integrality))


@dataclass(frozen=True)
class Outcome:
    """A solve: HiGHS ``status`` (0 optimal within the gap, 1 limit, 2 infeasible, 3
    unbounded, 4 other), the solution if any, objective and bound in the model's own sense."""

    status: int
    message: str
    v: np.ndarray | None
    objective: float | None
    bound: float | None
    seconds: float


def _columns(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool],
             active: Sequence[int], integral: bool, goal: Goal) -> Layout:
    """Lay out the columns for the active jobs' offers."""
    chosen = set(active)
    mine = [k for k, o in enumerate(offers) if o.job in chosen]
    layout = Layout(offers=mine, jobs=list(active), integral=integral)
    col = layout.s(0) + len(active)
    pools_of: dict[int, set[int]] = {}
    for k in mine:
        if jobs[offers[k].job].whole:
            pools_of.setdefault(offers[k].job, set()).add(offers[k].pool)
    for p in active:
        if jobs[p].whole:
            for n in sorted(pools_of.get(p, set())):
                layout.whole[(p, n)] = col
                layout.choose[(p, n)] = col + 1
                col += 2
    if goal.fair:
        layout.z = col
        col += 1
    if goal.min_cost:
        layout.y0 = col
        col += len(pools)
    layout.size = col
    return layout


def _use(offer: Offer, key: str) -> tuple[float, float]:
    """(held per replica, consumed per busy replica) of ``key`` by ``offer``."""
    return offer.held.get(key, 0.0), offer.consumed.get(key, 0.0) * offer.rate


def _terms(lay: Layout, offers: Sequence[Offer], ks: Sequence[int], key: str, total: float,
           fixed: np.ndarray | None) -> tuple[list[tuple[int, float]], float]:
    """Row entries for ``key`` over active offers ``ks``, divided by ``total``; with the
    replicas ``fixed``, what they hold is returned as a constant instead."""
    entries: list[tuple[int, float]] = []
    constant = 0.0
    for k in ks:
        held, used = _use(offers[lay.offers[k]], key)
        if held and fixed is not None:
            constant += held * fixed[lay.offers[k]] / total
        elif held:
            entries.append((lay.x(k), held / total))
        if used:
            entries.append((lay.b(k), used / total))
    return entries, constant


def _group(lay: Layout, offers: Sequence[Offer], by: str) -> dict[object, list[int]]:
    """Active offers (positions) grouped by pool, job, or (job, pool)."""
    out: dict[object, list[int]] = {}
    for k, o in enumerate(lay.offers):
        offer = offers[o]
        key: object = {"pool": offer.pool, "job": offer.job,
                       "job_pool": (offer.job, offer.pool)}[by]
        out.setdefault(key, []).append(k)
    return out


def _capacity_rows(rows: Rows, lay: Layout, offers: Sequence[Offer], pools: Sequence[Pool],
                   min_cost: bool, fixed: np.ndarray | None) -> None:
    """Per pool and resource: what replicas hold and their load consumes fits."""
    by_pool = _group(lay, offers, "pool")
    for n, pool in enumerate(pools):
        for key, cap in pool.capacity.items():
            entries, constant = _terms(lay, offers, by_pool.get(n, []), key,
                                       cap * pool.count, fixed)
            if not entries:
                continue
            if min_cost and lay.y0 is not None:
                entries.append((lay.y0 + n, -1.0 / pool.count))
                rows.add("", entries, -np.inf, -constant)
            else:
                rows.add("", entries, -np.inf, 1.0 - constant)


def _unit_rows(rows: Rows, lay: Layout, jobs: Sequence[JobSpec], offers: Sequence[Offer],
               scale: Sequence[float]) -> None:
    """Per job and unit (and pool, for a job placed whole): the unit carries m·T."""
    groups: dict[tuple[int, int, int], list[int]] = {}
    for k, o in enumerate(lay.offers):
        offer = offers[o]
        n = offer.pool if jobs[offer.job].whole else -1
        groups.setdefault((offer.job, offer.unit, n), []).append(k)
    index = {p: i for i, p in enumerate(lay.jobs)}
    places: dict[int, list[int]] = {}
    for (p, n) in lay.whole:
        places.setdefault(p, []).append(n)
    for p in lay.jobs:
        job = jobs[p]
        for n in places.get(p, [-1]):
            t_col = lay.s(index[p]) if n < 0 else lay.whole[(p, n)]
            for u, m in enumerate(job.multiplicity):
                if m <= 0:
                    continue
                norm = m * scale[p] * job.count
                entries = [(lay.b(k), offers[lay.offers[k]].rate / norm)
                           for k in groups.get((p, u, n), [])]
                rows.add("", [*entries, (t_col, -1.0)], 0.0, np.inf)
        if p in places:
            parts = [(lay.whole[(p, n)], -1.0) for n in places[p]]
            rows.add("", [(lay.s(index[p]), 1.0), *parts], 0.0, 0.0)
            rows.add("", [(lay.choose[(p, n)], 1.0) for n in places[p]], -np.inf, 1.0)


def _link_rows(rows: Rows, lay: Layout, offers: Sequence[Offer], pools: Sequence[Pool],
               jobs: Sequence[JobSpec], min_cost: bool) -> None:
    """Busy <= replicas; replicas only on nodes in use; a whole job only on its chosen pool."""
    for k, o in enumerate(lay.offers):
        offer = offers[o]
        if lay.integral:
            rows.add("", [(lay.b(k), 1.0), (lay.x(k), -1.0)], -np.inf, 0.0)
        if min_cost and lay.y0 is not None:
            rows.add("", [(lay.x(k), 1.0), (lay.y0 + offer.pool, -float(offer.per_node))],
                     -np.inf, 0.0)
        pick = lay.choose.get((offer.job, offer.pool))
        if pick is not None and lay.integral:
            most = float(pools[offer.pool].count * offer.per_node)
            rows.add("", [(lay.x(k), 1.0), (pick, -most)], -np.inf, 0.0)


def _time_share_rows(rows: Rows, lay: Layout, jobs: Sequence[JobSpec],
                     offers: Sequence[Offer], pools: Sequence[Pool],
                     fixed: np.ndarray | None) -> None:
    """A job placed whole uses of each pool at most its time share there of the pool (its
    copies, ``count`` of them, each their share)."""
    mine = _group(lay, offers, "job_pool")
    for (p, n), col in lay.choose.items():
        copies = float(jobs[p].count)
        pool = pools[n]
        for key, cap in pool.capacity.items():
            entries, constant = _terms(lay, offers, mine.get((p, n), []), key,
                                       cap * pool.count, fixed)
            if entries:
                rows.add("", [*entries, (col, -copies)], -np.inf, -constant)


def _quota_rows(rows: Rows, lay: Layout, jobs: Sequence[JobSpec], offers: Sequence[Offer],
                fixed: np.ndarray | None) -> None:
    """Per job and quota key: what its replicas hold plus what its load consumes, at most."""
    mine = _group(lay, offers, "job")
    for p in lay.jobs:
        for key, each in (jobs[p].quota or {}).items():
            most = each * jobs[p].count
            norm = most if most > 0 else 1.0
            entries, constant = _terms(lay, offers, mine.get(p, []), key, norm, fixed)
            if entries:
                rows.add("", entries, -np.inf, most / norm - constant)


def build(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool],
          active: Sequence[int], scale: Sequence[float], *, goal: Goal, integral: bool,
          lower: Mapping[int, float] | None = None, warm: Sequence[float] | None = None,
          fixed: np.ndarray | None = None) -> Model:
    """The model over the ``active`` jobs; ``lower`` holds ``s[p]`` at least that; ``fixed``
    (replicas per offer, relaxed models only) routes load over those replicas alone."""
    lay = _columns(jobs, offers, pools, active, integral, goal)
    rows = Rows()
    _capacity_rows(rows, lay, offers, pools, goal.min_cost, fixed)
    _unit_rows(rows, lay, jobs, offers, scale)
    _link_rows(rows, lay, offers, pools, jobs, goal.min_cost)
    _quota_rows(rows, lay, jobs, offers, fixed)
    _time_share_rows(rows, lay, jobs, offers, pools, fixed)
    lb = np.zeros(lay.size)
    ub = np.full(lay.size, np.inf)
    integrality = np.zeros(lay.size, dtype=np.int8)
    for k, o in enumerate(lay.offers):
        most = float(pools[offers[o].pool].count * offers[o].per_node)
        ub[lay.b(k)] = most if fixed is None else min(most, float(fixed[o]))
        if integral:
            ub[lay.x(k)] = most
            integrality[lay.x(k)] = 1
    for col in lay.choose.values():
        ub[col] = 1.0
        integrality[col] = 1 if integral else 0
    for i, p in enumerate(lay.jobs):
        lb[lay.s(i)] = (lower or {}).get(p, 0.0)
    c = np.zeros(lay.size)
    sense = -1.0
    if goal.fair and lay.z is not None:
        for i, p in enumerate(lay.jobs):
            rows.add("", [(lay.s(i), 1.0), (lay.z, -jobs[p].weight)], 0.0, np.inf)
        if goal.z_floor is not None:
            lb[lay.z] = goal.z_floor
        else:
            c[lay.z] = -1.0
    if goal.min_cost and lay.y0 is not None:
        sense = 1.0
        for n, pool in enumerate(pools):
            ub[lay.y0 + n] = pool.count
            integrality[lay.y0 + n] = 1 if integral else 0
            c[lay.y0 + n] = pool.price_per_hour
    elif goal.s_floor is not None:
        rows.add("", [(lay.s(i), goal.s_weight.get(p, 0.0)) for i, p in enumerate(lay.jobs)],
                 goal.s_floor, np.inf)
        for k, o in enumerate(lay.offers):  # the least load on offers not running now
            if warm is not None and warm[o] <= 0:
                c[lay.b(k)] += 1.0 / max(1.0, ub[lay.b(k)])
                if lay.integral:  # and no replicas there either
                    c[lay.x(k)] += 1.0 / max(1.0, ub[lay.x(k)])
    elif not (goal.fair and goal.z_floor is None):
        for i, p in enumerate(lay.jobs):
            c[lay.s(i)] -= goal.s_weight.get(p, 0.0)
    return Model(lay, c, integrality, lb, ub, rows.matrix(lay.size), np.array(rows.lo),
                 np.array(rows.hi), sense)


def solve(model: Model, *, time_limit: float, mip_gap: float) -> Outcome:
    """One HiGHS call (time_limit and mip_rel_gap always passed), timed."""
    constraints = ([LinearConstraint(model.a, model.row_lb, model.row_ub)]
                   if model.rows else [])
    start = time.perf_counter()
    res = milp(c=model.c, integrality=model.integrality, bounds=Bounds(model.lb, model.ub),
               constraints=constraints,
               options={"time_limit": time_limit, "mip_rel_gap": mip_gap})
    seconds = time.perf_counter() - start
    v = None if res.x is None else np.asarray(res.x, dtype=float)
    objective = None if res.fun is None else float(res.fun)
    bound = getattr(res, "mip_dual_bound", None)
    if bound is None or not np.isfinite(bound):
        bound = objective if int(res.status) == 0 and not model.integers else None
    return Outcome(int(res.status), str(res.message), v, objective,
                   None if bound is None else float(bound), seconds)
