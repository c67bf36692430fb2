"""Co-fit the units of many jobs onto one fleet of pools: one model, shared capacity rows.

Generic: it knows pools (node types with per-node capacity per resource key), offers
(replicas of unit u of job p on a device class of a pool: a rate, what a replica holds,
what each item consumes, how many one node holds) and jobs (multiplicities, weight,
min_rate, quota, team). With ``b_c`` busy replicas (``f_c = rate_c·b_c`` items/s) and
``x_c`` replicas of offer c::

    sum_c held_k(c)·x_c + sum_c consumed_k(c)·f_c <= count_n·capacity_nk   every pool n, key k
    f_c <= rate_c·x_c,  x_c <= count_n·per_node_c                         every offer c
    sum_{c of p, u} f_c >= m_pu·T_p                                       every job p, unit u
    sum_{c of p} held_k(c)·x_c + consumed_k(c)·f_c <= quota_pk            every quota

Objectives (T*_p: what job p gets alone on the whole fleet within its quota, `alone_rates`):

- ``fair``: maximise z with T_p >= z·w_p·T*_p; then, z held at its optimum (less 1e-6 of
  it), maximise sum w_p·T_p/T*_p so no capacity idles for nothing;
- ``max_throughput``: maximise sum w_p·T_p/T*_p;
- ``min_cost``: minimise sum price_n·y_n, integer nodes in use y_n <= count_n replacing
  count_n in the capacity rows, x_c <= per_node_c·y_n (jobs without min_rate get nothing).

Every admitted job keeps T_p >= min_rate_p. Admission runs first, in the order given: a job
is rejected when it gets nothing alone or its min_rate is above what it gets alone; it is
queued when admitting it would break an admitted job's min_rate or its own; else admitted.

``integral=False`` solves the LP relaxation (x = b there, losing nothing) and rounds each
offer's replicas up where every row still fits, else down (a job placed whole kept on its
busiest pool): a fast plan with its gap against the relaxation's bound. Either way the load
is then routed again over the whole replicas by an LP with them fixed (HiGHS stops a MILP
within ``mip_gap``, so its flows can sit a little short of what its replicas carry).
``fractional=True`` keeps the relaxation's fractional replicas (a fluid model, for simulation).
``warm`` (replicas per offer of a running plan) adds a last stage: the objective held (less
1e-6 of it), the least load on offers the running plan does not use, so replicas stay where
they run when that is as good. scipy's HiGHS interface takes no starting point, so this is not
a warm start: it costs one more solve, and min_cost ignores it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fitwork.fit.errors import SolverError
from fitwork.jobs import cofit_model as cm
from fitwork.jobs.cofit_admission import admit, alone_rates, stage
from fitwork.jobs.cofit_result import (
    chargeback,
    job_rates,
    job_use,
    pool_use,
    round_replicas,
    trim,
)
from fitwork.jobs.cofit_types import (
    GAP_ZERO,
    OBJECTIVES,
    CoFit,
    CoFitInputError,
    JobResult,
    JobSpec,
    ModelSize,
    Objective,
    Offer,
    Pool,
    PoolUse,
    Stage,
    check,
)

__all__ = ["CoFit", "CoFitInputError", "JobResult", "JobSpec", "ModelSize", "Offer", "Pool",
           "PoolUse", "SolverError", "Stage", "alone_rates", "cofit"]

Z_TOLERANCE = 1e-6
"""The fair second stage holds z at least (1 - this) of the first stage's optimum."""


def _goals(objective: Objective, jobs: Sequence[JobSpec],
           active: Sequence[int]) -> list[tuple[str, cm.Goal]]:
    """The stages the objective solves, first stage's goal first."""
    weights = {p: jobs[p].weight * jobs[p].count for p in active}
    if objective == "fair":
        return [("fair z", cm.Goal(fair=True)), ("fair fill", cm.Goal(s_weight=weights))]
    if objective == "max_throughput":
        return [("max_throughput", cm.Goal(s_weight=weights))]
    return [("min_cost", cm.Goal(min_cost=True))]


def _solve_stages(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool],
                  active: list[int], alone: Sequence[float], objective: Objective,
                  integral: bool, lower: dict[int, float], warm: Sequence[float] | None,
                  time_limit: float, mip_gap: float,
                  fixed: np.ndarray | None = None) -> tuple[cm.Model, np.ndarray, list[Stage]]:
    """Solve the objective's stages; the last model and solution, and each stage's figures."""
    stages: list[Stage] = []
    z_floor: float | None = None
    model: cm.Model | None = None
    v: np.ndarray | None = None
    for name, goal in _goals(objective, jobs, active):
        if z_floor is not None:
            goal = cm.Goal(s_weight=goal.s_weight, fair=True, z_floor=z_floor)
        built = cm.build(jobs, offers, pools, active, alone, goal=goal, integral=integral,
                         lower=lower, fixed=fixed)
        try:
            figures, v = stage(name if fixed is None else f"{name} (replicas fixed)", built,
                               time_limit, mip_gap)
        except SolverError:
            if model is None:
                raise
            break  # the fill found nothing (tolerances, time): keep the first stage's plan
        model = built
        stages.append(figures)
        if goal.fair and goal.z_floor is None and model.layout.z is not None:
            z_floor = max(0.0, float(v[model.layout.z]) * (1.0 - Z_TOLERANCE))
    assert model is not None and v is not None
    if warm is not None and fixed is None and objective != "min_cost":
        model, v = _keep(jobs, offers, pools, active, alone, objective, integral, lower, warm,
                         z_floor, stages, model, v, time_limit, mip_gap)
    return model, v, stages


def _keep(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool],
          active: list[int], alone: Sequence[float], objective: Objective, integral: bool,
          lower: dict[int, float], warm: Sequence[float], z_floor: float | None,
          stages: list[Stage], model: cm.Model,
          v: np.ndarray, time_limit: float, mip_gap: float) -> tuple[cm.Model, np.ndarray]:
    """A last stage: the objective held (less Z_TOLERANCE of it), the least load on offers
    the running plan does not use; the plan before it where it finds none."""
    weights = {p: jobs[p].weight * jobs[p].count for p in active}
    floor = sum(weights[p] * float(v[model.layout.s(i)]) for i, p in enumerate(active))
    goal = cm.Goal(s_weight=weights, fair=objective == "fair", z_floor=z_floor,
                   s_floor=floor * (1.0 - Z_TOLERANCE))
    built = cm.build(jobs, offers, pools, active, alone, goal=goal, integral=integral,
                     lower=lower, warm=warm)
    try:
        figures, kept = stage("keep running", built, time_limit, mip_gap)
    except SolverError:
        return model, v
    stages.append(figures)
    return built, kept


def _primary(objective: Objective, jobs: Sequence[JobSpec], pools: Sequence[Pool],
             shares: dict[int, float], nodes: Sequence[float]) -> float:
    """The first stage's objective, evaluated on the final plan."""
    if objective == "fair":
        return min((s / jobs[p].weight for p, s in shares.items()), default=0.0)
    if objective == "max_throughput":
        return sum(jobs[p].weight * s for p, s in shares.items())
    return sum(pool.price_per_hour * y for pool, y in zip(pools, nodes, strict=True))


def _gap(objective: Objective, value: float, bound: float) -> float:
    """Relative gap of ``value`` to ``bound`` (0 when the value reaches the bound)."""
    lost = value - bound if objective == "min_cost" else bound - value
    if lost <= 0:
        return 0.0
    return min(1.0, lost / max(abs(bound), abs(value), 1e-12))


def _check_options(objective: str, time_limit: float, mip_gap: float,
                   alone: Sequence[float] | None, n_jobs: int) -> None:
    """Raise `CoFitInputError` on an option the co-fit cannot use."""
    if objective not in OBJECTIVES:
        raise CoFitInputError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    if not (time_limit > 0 and 0 <= mip_gap < 1):
        raise CoFitInputError("time_limit must be > 0 and mip_gap in [0, 1)")
    if alone is not None and len(alone) != n_jobs:
        raise CoFitInputError(f"alone has {len(alone)} rates for {n_jobs} jobs; give one per job")


def cofit(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool], *,
          objective: Objective = "fair", alone: Sequence[float] | None = None,
          integral: bool = True, time_limit: float = 10.0, mip_gap: float = 1e-3,
          warm: Sequence[float] | None = None, fractional: bool = False) -> CoFit:
    """Admit and co-fit ``jobs`` (arrival order) onto ``pools``; see the module docstring.

    ``alone``: T*_p per job when cached (else solved here); ``warm``: replicas per offer of
    the running plan. Raises `CoFitInputError` on bad input, `SolverError` when HiGHS finds
    no plan within ``time_limit``.
    """
    _check_options(objective, time_limit, mip_gap, alone, len(jobs))
    check(jobs, offers, pools)
    if integral and any(job.count > 1 for job in jobs):
        raise CoFitInputError("a job with count > 1 needs integral=False (copies share whole "
                              "replicas only in the relaxation); give each copy its own JobSpec")
    if warm is not None and len(warm) != len(offers):
        raise CoFitInputError(f"warm has {len(warm)} entries for {len(offers)} offers")
    if alone is None:
        alone = alone_rates(jobs, offers, pools, integral=integral, time_limit=time_limit,
                            mip_gap=mip_gap)
    status, reasons, admit_seconds = admit(jobs, offers, pools, alone, integral=integral,
                                           time_limit=time_limit, mip_gap=mip_gap)
    active = [p for p, s in enumerate(status) if s == "admitted"]
    lower = {p: (jobs[p].min_rate or 0.0) / alone[p] for p in active}
    b = np.zeros(len(offers))
    x = np.zeros(len(offers))
    stages: list[Stage] = []
    nodes = [float(pool.count) for pool in pools]
    size = ModelSize(0, 0, 0)
    if active:
        model, v, stages = _solve_stages(jobs, offers, pools, active, alone, objective,
                                         integral, lower, warm, time_limit, mip_gap)
        lay = model.layout
        size = ModelSize(lay.size, model.integers, model.rows)
        for k, o in enumerate(lay.offers):
            b[o] = max(0.0, v[lay.b(k)])
            x[o] = max(0.0, v[lay.x(k)])
        if objective == "min_cost" and lay.y0 is not None:
            nodes = [float(v[lay.y0 + n]) for n in range(len(pools))]
            if not integral and not fractional:
                nodes = [float(math.ceil(y - 1e-9)) for y in nodes]
        if fractional and not integral:
            trim(jobs, offers, active, b)
            x = b.copy()
        else:
            if integral:
                x = np.round(x)
                np.minimum(b, x, out=b)
                trim(jobs, offers, active, b)
            else:
                _one_pool(jobs, offers, b)
                x = round_replicas(jobs, offers, pools, active, b, nodes)
            x, more = _reroute(jobs, offers, pools, active, alone, objective, lower, warm, b,
                               x, time_limit, mip_gap)
            stages += more
    x = np.maximum(x, 0.0) + 0.0
    return _assemble(jobs, offers, pools, alone, objective, status, reasons, active, x, b,
                     nodes, stages, size, admit_seconds, integral, fractional)


def _one_pool(jobs: Sequence[JobSpec], offers: Sequence[Offer], b: np.ndarray) -> None:
    """Each job placed whole keeps its load on the one pool whose replicas carried the most
    items/s (summed over its units); its load elsewhere is dropped, in place."""
    carried: dict[tuple[int, int], float] = {}
    for k, o in enumerate(offers):
        if jobs[o.job].whole and b[k] > 0:
            carried[(o.job, o.pool)] = carried.get((o.job, o.pool), 0.0) + o.rate * b[k]
    best: dict[int, tuple[float, int]] = {}
    for (p, n), got in carried.items():
        best[p] = max(best.get(p, (-1.0, -1)), (got, n))
    for k, o in enumerate(offers):
        if o.job in best and best[o.job][1] != o.pool:
            b[k] = 0.0


def _reroute(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool],
             active: list[int], alone: Sequence[float], objective: Objective,
             lower: dict[int, float], warm: Sequence[float] | None, b: np.ndarray,
             x: np.ndarray, time_limit: float,
             mip_gap: float) -> tuple[np.ndarray, list[Stage]]:
    """The load routed again over the whole replicas ``x`` alone (the stages re-solved as an
    LP with the replicas fixed), kept where it carries more; ``b`` is updated in place.
    Returns the replicas that carry load, and the stages."""
    if objective == "min_cost":
        return np.minimum(x, np.ceil(b - 1e-6)), []
    try:
        model, v, stages = _solve_stages(jobs, offers, pools, active, alone, objective, False,
                                         lower, warm, time_limit, mip_gap, fixed=x)
    except SolverError:
        return np.minimum(x, np.ceil(b - 1e-6)), []
    again = np.zeros(len(offers))
    for k, o in enumerate(model.layout.offers):
        again[o] = min(x[o], max(0.0, v[model.layout.b(k)]))
    trim(jobs, offers, active, again)
    if sum(job_rates(jobs, offers, active, again).values()) >= sum(
            job_rates(jobs, offers, active, b).values()):
        b[:] = again
    return np.minimum(x, np.ceil(b - 1e-6)), stages


def _assemble(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool],
              alone: Sequence[float], objective: Objective, status: list[str],
              reasons: list[str], active: list[int], x: np.ndarray, b: np.ndarray,
              nodes: list[float], stages: list[Stage], size: ModelSize, admit_seconds: float,
              integral: bool, fractional: bool) -> CoFit:
    """The `CoFit` from a rounded solution."""
    rates = job_rates(jobs, offers, active, b)
    shares = {p: rates[p] / alone[p] for p in active}
    uses = job_use(offers, x, b)
    results = tuple(
        JobResult(job.name, job.team, status[p], reasons[p],  # type: ignore[arg-type]
                  float(rates.get(p, 0.0)), float(alone[p]), float(shares.get(p, 0.0)),
                  uses.get(p, {}))
        for p, job in enumerate(jobs))
    value = _primary(objective, jobs, pools, shares, nodes)
    bound = stages[0].bound if stages else value
    gap = _gap(objective, value, bound)
    teams, idle = chargeback(jobs, offers, pools, x, b, nodes)
    return CoFit(
        objective=objective, jobs=results, x=tuple(float(v) for v in x),
        f=tuple(float(o.rate * b[k]) + 0.0 for k, o in enumerate(offers)),
        status="optimal" if gap <= GAP_ZERO else "feasible", gap=gap, bound=bound,
        objective_value=value, seconds=sum(s.seconds for s in stages),
        admission_seconds=admit_seconds, size=size, stages=tuple(stages),
        use=pool_use(offers, pools, x, b), nodes_paid=tuple(nodes),
        cost_per_hour={t: float(c) for t, c in teams.items()},
        idle_cost_per_hour=float(idle), integral=integral, fractional=fractional and not integral)

