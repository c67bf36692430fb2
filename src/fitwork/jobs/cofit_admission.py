"""What each job gets alone (T*_p), and admission in arrival order against every min_rate."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from fitwork.fit.errors import SolverError
from fitwork.jobs import cofit_model as cm
from fitwork.jobs.cofit_result import job_use
from fitwork.jobs.cofit_types import (
    GAP_ZERO,
    JobSpec,
    ModelSize,
    Offer,
    Pool,
    Stage,
    check,
)

HOLD_DOWN = 1e-4
"""Weight, in an admission check, that keeps the admitted jobs at their min_rate."""
RATE_TOLERANCE = 1e-7


def stage(name: str, model: cm.Model, time_limit: float,
          mip_gap: float) -> tuple[Stage, np.ndarray]:
    """Solve one model; its figures in the objective's own sense, and the solution."""
    out = cm.solve(model, time_limit=time_limit, mip_gap=mip_gap)
    if out.v is None or out.objective is None:
        raise SolverError(f"co-fit stage {name!r}: HiGHS found no plan ({out.message}); "
                          "raise time_limit or mip_gap")
    value = model.sense * out.objective
    bound = value if out.bound is None else model.sense * out.bound
    lost = (value - bound) if model.sense > 0 else (bound - value)
    gap = 0.0 if lost <= 0 else min(1.0, lost / max(abs(bound), abs(value), 1e-12))
    size = ModelSize(model.layout.size, model.integers, model.rows)
    return Stage(name, "optimal" if gap <= GAP_ZERO else "feasible", value, bound, gap,
                 out.seconds, size), out.v


def _scale(job: JobSpec, offers: Sequence[Offer]) -> float:
    """A job's rate scale for the model's rows: the geometric mean of its offers' rate / m."""
    logs = [math.log(o.rate / job.multiplicity[o.unit]) for o in offers
            if job.multiplicity[o.unit] > 0]
    return math.exp(sum(logs) / len(logs)) if logs else 1.0


def _missing_unit(job: JobSpec, offers: Sequence[Offer]) -> int | None:
    """The first unit (with multiplicity > 0) that has no offer, if any."""
    have = {o.unit for o in offers}
    return next((u for u, m in enumerate(job.multiplicity) if m > 0 and u not in have), None)


def _alone(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool], p: int,
           integral: bool, time_limit: float,
           mip_gap: float) -> tuple[float, dict[str, float], float]:
    """(T*_p, what the job uses alone per key, seconds) for job ``p``."""
    mine = [o for o in offers if o.job == p]
    if _missing_unit(jobs[p], mine) is not None:
        return 0.0, {}, 0.0
    scale = [1.0] * len(jobs)
    scale[p] = _scale(jobs[p], mine)
    model = cm.build(jobs, offers, pools, [p], scale, goal=cm.Goal(s_weight={p: 1.0}),
                     integral=integral)
    figures, v = stage(f"alone {jobs[p].name}", model, time_limit, mip_gap)
    lay = model.layout
    x = np.zeros(len(offers))
    b = np.zeros(len(offers))
    for k, o in enumerate(lay.offers):
        b[o] = max(0.0, v[lay.b(k)])
        x[o] = max(0.0, v[lay.x(k)])
    rate = max(0.0, float(v[lay.s(0)])) * scale[p]
    return rate, job_use(offers, x, b).get(p, {}), figures.seconds


def alone_rates(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool], *,
                integral: bool = True, time_limit: float = 10.0, mip_gap: float = 1e-3,
                quotas: bool = True) -> list[float]:
    """T*_p: each job alone on the whole fleet (within its quota unless ``quotas=False``),
    one solve each; cache them and pass them to `cofit` as ``alone``."""
    check(jobs, offers, pools)
    jobs = [replace(job, count=1, quota=job.quota if quotas else None) for job in jobs]
    return [_alone(jobs, offers, pools, p, integral, time_limit, mip_gap)[0]
            for p in range(len(jobs))]


def _names(jobs: Sequence[JobSpec], idx: Sequence[int]) -> str:
    """Up to three job names, then how many more."""
    names = [jobs[q].name for q in idx[:3]]
    more = f" and {len(idx) - 3} more" if len(idx) > 3 else ""
    return ", ".join(names) + more


def _rejected(job: JobSpec, offers: Sequence[Offer], alone: float) -> str | None:
    """Why the job can never run on this fleet, or None."""
    missing = _missing_unit(job, offers)
    if missing is not None:
        return f"unit {missing} has no offer that fits this fleet"
    if alone <= 0:
        return "gets 0 items/s alone on the whole fleet" + (" within its quota"
                                                           if job.quota else "")
    if job.min_rate is not None and job.min_rate > alone * (1 + RATE_TOLERANCE):
        return (f"its min_rate {job.min_rate:.4g} items/s exceeds the {alone:.4g} items/s it "
                "gets alone on the whole fleet")
    return None


def _short_of(need: dict[str, float], free: dict[str, float]) -> str:
    """The resource the job is shortest of: what it needs against what is free."""
    worst = max(need, key=lambda k: need[k] / max(free.get(k, 0.0), 1e-12), default=None)
    if worst is None:
        return ""
    left = max(0.0, free.get(worst, 0.0))
    return f"; short of {worst} (needs {need[worst]:.3g}, {left:.3g} free)"


def _check(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool], p: int,
           held: list[int], alone: Sequence[float], integral: bool, time_limit: float,
           mip_gap: float) -> tuple[str, float]:
    """Admit ``p`` beside the ``held`` jobs (each at its min_rate)? Empty reason when so."""
    weights = {q: -HOLD_DOWN for q in held}
    weights[p] = 1.0
    lower = {q: (jobs[q].min_rate or 0.0) / alone[q] for q in held}
    model = cm.build(jobs, offers, pools, [*held, p], alone, goal=cm.Goal(s_weight=weights),
                     integral=integral, lower=lower)
    try:
        figures, v = stage(f"admit {jobs[p].name}", model, time_limit, mip_gap)
    except SolverError:
        return (f"no plan keeps the min_rates of {_names(jobs, held)} beside it within the "
                "time limit"), 0.0
    lay = model.layout
    got = max(0.0, float(v[lay.s(len(held))])) * alone[p]
    want = jobs[p].min_rate or 0.0
    if got >= want * (1 - RATE_TOLERANCE):
        return "", figures.seconds
    x = np.zeros(len(offers))
    b = np.zeros(len(offers))
    for k, o in enumerate(lay.offers):
        b[o] = max(0.0, v[lay.b(k)])
        x[o] = max(0.0, v[lay.x(k)])
    ones = [replace(job, count=1) for job in jobs]
    rate, use_alone, more = _alone(ones, offers, pools, p, integral, time_limit, mip_gap)
    need = {key: u * want / rate for key, u in use_alone.items()} if rate > 0 else {}
    free = {key: sum(pool.capacity.get(key, 0.0) * pool.count for pool in pools)
            for key in need}
    for q, used in job_use(offers, x, b).items():
        if q != p:
            for key in free:
                free[key] -= used.get(key, 0.0)
    return (f"needs {want:.4g} items/s; at most {got:.4g} fit while {_names(jobs, held)} keep "
            f"their min_rate{_short_of(need, free)}"), figures.seconds + more


def admit(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool],
          alone: Sequence[float], *, integral: bool, time_limit: float,
          mip_gap: float) -> tuple[list[str], list[str], float]:
    """Status and reason per job, in arrival order, and the seconds the checks took."""
    by_job: dict[int, list[Offer]] = {p: [] for p in range(len(jobs))}
    for o in offers:
        by_job[o.job].append(o)
    status: list[str] = []
    reasons: list[str] = []
    held: list[int] = []
    seconds = 0.0
    for p, job in enumerate(jobs):
        why = _rejected(job, by_job[p], alone[p])
        if why is not None:
            status.append("rejected")
            reasons.append(why)
            continue
        reason = ""
        if job.min_rate and held:
            reason, spent = _check(jobs, offers, pools, p, held, alone, integral,
                                   time_limit, mip_gap)
            seconds += spent
        status.append("queued" if reason else "admitted")
        reasons.append(reason)
        if not reason and job.min_rate:
            held.append(p)
    return status, reasons, seconds
