"""From a solved co-fit to the plan's figures: rounding a relaxation, use per pool, chargeback."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from fitwork.jobs.cofit_types import JobSpec, Offer, Pool, PoolUse

NOISE = 1e-6
"""Busy replicas below this are solver noise: no replica, no load."""


def usage(offer: Offer, key: str, x: float, b: float) -> float:
    """What ``x`` replicas of ``offer``, ``b`` of them busy, hold plus consume of ``key``."""
    return offer.held.get(key, 0.0) * x + offer.consumed.get(key, 0.0) * offer.rate * b


def _carried(jobs: Sequence[JobSpec], offers: Sequence[Offer],
             b: np.ndarray) -> dict[tuple[int, int, int], float]:
    """Items/s each (job, unit, pool) group carries; pool -1 for a job not placed whole."""
    carried: dict[tuple[int, int, int], float] = {}
    for k, o in enumerate(offers):
        if b[k] > 0:
            key = (o.job, o.unit, o.pool if jobs[o.job].whole else -1)
            carried[key] = carried.get(key, 0.0) + o.rate * b[k]
    return carried


def _rates(jobs: Sequence[JobSpec], active: Sequence[int],
           carried: dict[tuple[int, int, int], float]) -> dict[tuple[int, int], float]:
    """T per (job, pool): its slowest unit there (pool -1 for a job not placed whole)."""
    places: dict[int, set[int]] = {p: set() for p in active}
    for (p, _, n) in carried:
        if p in places:
            places[p].add(n)
    out: dict[tuple[int, int], float] = {}
    for p, pools in places.items():
        units = [(u, m) for u, m in enumerate(jobs[p].multiplicity) if m > 0]
        for n in pools or {-1}:
            out[(p, n)] = min((carried.get((p, u, n), 0.0) / m for u, m in units), default=0.0)
    return out


def job_rates(jobs: Sequence[JobSpec], offers: Sequence[Offer], active: Sequence[int],
              b: np.ndarray) -> dict[int, float]:
    """T_p each active job's flows carry: its slowest unit (per pool, summed, when whole),
    per copy of a job that stands for ``count``."""
    out = {p: 0.0 for p in active}
    for (p, _), t in _rates(jobs, active, _carried(jobs, offers, b)).items():
        out[p] += t / jobs[p].count
    return out


def trim(jobs: Sequence[JobSpec], offers: Sequence[Offer], active: Sequence[int],
         b: np.ndarray) -> None:
    """Scale each unit's flows down to exactly m·T (no unit carries more than the job's rate
    needs), in place."""
    carried = _carried(jobs, offers, b)
    rates = _rates(jobs, active, carried)
    chosen = set(active)
    for k, o in enumerate(offers):
        if b[k] <= 0 or o.job not in chosen:
            continue
        n = o.pool if jobs[o.job].whole else -1
        need = jobs[o.job].multiplicity[o.unit] * rates.get((o.job, n), 0.0)
        have = carried[(o.job, o.unit, n)]
        if have > need:
            b[k] *= need / have


def _busiest(offers: Sequence[Offer], b: np.ndarray) -> set[int]:
    """Per (job, unit), the offer with the most busy replicas."""
    best: dict[tuple[int, int], int] = {}
    for k in map(int, np.flatnonzero(b > 0)):
        group = (offers[k].job, offers[k].unit)
        if group not in best or b[k] > b[best[group]]:
            best[group] = k
    return set(best.values())


def _overfull(rows: list[tuple[list[int], str, float]], offers: Sequence[Offer],
              x: np.ndarray, b: np.ndarray) -> None:
    """Floor rounded-up replicas until every row fits. First to go: replicas whose unit
    keeps others elsewhere, then those that are not their unit's busiest offer, then the
    least busy share lost."""
    kept = _busiest(offers, b)
    total: dict[tuple[int, int], float] = {}
    for k in map(int, np.flatnonzero(x > 0)):
        group = (offers[k].job, offers[k].unit)
        total[group] = total.get(group, 0.0) + x[k]
    for members, key, most in rows:
        used = sum(usage(offers[k], key, x[k], b[k]) for k in members)
        if used <= most * (1 + 1e-9):
            continue
        ups = [k for k in members if offers[k].held.get(key, 0.0) > 0 and x[k] > b[k]]
        for _ in range(len(ups)):
            if used <= most * (1 + 1e-9) or not ups:
                break
            k = min(ups, key=lambda k: (total[(offers[k].job, offers[k].unit)] <= x[k],
                                        k in kept, b[k] - math.floor(b[k])))
            ups.remove(k)
            drop = x[k] - math.floor(b[k] + NOISE)
            used -= offers[k].held[key] * drop
            x[k] -= drop
            total[(offers[k].job, offers[k].unit)] -= drop


def _fits(offer: Offer, free: dict[tuple[int, str], float],
          back: Mapping[str, float]) -> bool:
    """One more replica of ``offer`` fits in what is free (plus ``back`` given back)."""
    return offer.per_node >= 1 and all(
        free.get((offer.pool, key), 0.0) + back.get(key, 0.0) >= v - 1e-9
        for key, v in offer.held.items())


def _refill(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool],
            active: Sequence[int], x: np.ndarray, b: np.ndarray,
            nodes: Sequence[float]) -> None:
    """A unit left with no replica gets one (in job order): on the offer of the highest rate
    that fits in what is left of every row, else in place of one replica of a unit that has
    two or more on that pool. The LP that routes load next uses it. A job with a quota is
    refilled only where the replica keeps what it holds within the quota."""
    free = {(n, key): cap * nodes[n] for n, pool in enumerate(pools)
            for key, cap in pool.capacity.items()}
    total: dict[tuple[int, int], float] = {}
    on_pool: dict[int, list[int]] = {}
    quota = {(p, key): most * jobs[p].count for p in active
             for key, most in (jobs[p].quota or {}).items()}
    for k in map(int, np.flatnonzero(x > 0)):
        o = offers[k]
        total[(o.job, o.unit)] = total.get((o.job, o.unit), 0.0) + x[k]
        on_pool.setdefault(o.pool, []).append(k)
        for key in {*o.held, *o.consumed}:
            free[(o.pool, key)] = free.get((o.pool, key), 0.0) - usage(o, key, x[k], b[k])
            if (o.job, key) in quota:
                quota[(o.job, key)] -= usage(o, key, x[k], b[k])
    chosen = set(active)
    options: dict[tuple[int, int], list[int]] = {}
    for k, o in enumerate(offers):
        if o.job in chosen and (o.job, o.unit) not in total:
            options.setdefault((o.job, o.unit), []).append(k)
    for group in sorted(options):
        ranked = [k for k in sorted(options[group], key=lambda k: -offers[k].rate)
                  if all(quota.get((offers[k].job, key), math.inf) >= v - 1e-9
                         for key, v in offers[k].held.items())]
        pick = next(((k, -1) for k in ranked if _fits(offers[k], free, {})), None)
        pick = pick or next(((k, d) for k in ranked for d in on_pool.get(offers[k].pool, [])
                             if x[d] >= 1 and total[(offers[d].job, offers[d].unit)] >= 2
                             and _fits(offers[k], free, offers[d].held)), None)
        if pick is None:
            continue
        k, d = pick
        if d >= 0:
            x[d] -= 1.0
            b[d] = min(b[d], x[d])
            total[(offers[d].job, offers[d].unit)] -= 1.0
            for key, v in offers[d].held.items():
                free[(offers[d].pool, key)] += v
                if (offers[d].job, key) in quota:
                    quota[(offers[d].job, key)] += v
        x[k] = 1.0
        for key, v in offers[k].held.items():
            free[(offers[k].pool, key)] -= v
            if (offers[k].job, key) in quota:
                quota[(offers[k].job, key)] -= v


def round_replicas(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool],
                   active: Sequence[int], b: np.ndarray, nodes: Sequence[float]) -> np.ndarray:
    """Whole replicas from a relaxation's busy ones: each rounded up where every pool row
    and quota still fits, else down, and a unit left with none given one where it fits;
    ``b`` is cut to the replicas and trimmed in place. Returns the replicas (some may carry
    no load until the load is routed again over them)."""
    b[b < NOISE] = 0.0
    x = np.ceil(b - NOISE)
    x = np.maximum(x, 0.0)
    by_pool: dict[int, list[int]] = {}
    by_job: dict[int, list[int]] = {}
    for k in map(int, np.flatnonzero(x > 0)):
        by_pool.setdefault(offers[k].pool, []).append(k)
        by_job.setdefault(offers[k].job, []).append(k)
    rows: list[tuple[list[int], str, float]] = []
    for n, pool in enumerate(pools):
        rows += [(by_pool.get(n, []), key, cap * nodes[n]) for key, cap in pool.capacity.items()]
    for p in active:
        rows += [(by_job.get(p, []), key, most * jobs[p].count)
                 for key, most in (jobs[p].quota or {}).items()]
    _overfull(rows, offers, x, b)
    _refill(jobs, offers, pools, active, x, b, nodes)
    np.minimum(b, x, out=b)
    trim(jobs, offers, active, b)
    return x


def pool_use(offers: Sequence[Offer], pools: Sequence[Pool], x: np.ndarray,
             b: np.ndarray) -> tuple[PoolUse, ...]:
    """Predicted use per pool and resource against the pool's whole capacity."""
    by_pool: dict[int, list[int]] = {}
    for k in map(int, np.flatnonzero(x > 0)):
        by_pool.setdefault(offers[k].pool, []).append(k)
    out: list[PoolUse] = []
    for n, pool in enumerate(pools):
        mine = by_pool.get(n, [])
        for key, cap in pool.capacity.items():
            used = sum(usage(offers[k], key, x[k], b[k]) for k in mine)
            out.append(PoolUse(pool.name, key, used, cap * pool.count))
    return tuple(out)


def job_use(offers: Sequence[Offer], x: np.ndarray,
            b: np.ndarray) -> dict[int, dict[str, float]]:
    """Per job: resource key -> what its replicas hold plus consume, over every pool."""
    out: dict[int, dict[str, float]] = {}
    for k in map(int, np.flatnonzero(x > 0)):
        o = offers[k]
        mine = out.setdefault(o.job, {})
        for key in {*o.held, *o.consumed}:
            mine[key] = mine.get(key, 0.0) + float(usage(o, key, x[k], b[k]))
    return out


def chargeback(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool],
               x: np.ndarray, b: np.ndarray,
               nodes: Sequence[float]) -> tuple[dict[str, float], float]:
    """Cost per hour per team, and the idle rest. On each pool a job's share is its dominant
    one (the most, over the pool's resources, of its use over what the paid nodes hold);
    shares over 1 in sum are scaled to 1; a team pays its jobs' shares of the pool's price."""
    teams: dict[str, float] = {job.team: 0.0 for job in jobs}
    idle = 0.0
    for n, pool in enumerate(pools):
        paid = pool.price_per_hour * nodes[n]
        held: dict[tuple[int, str], float] = {}
        for k, o in enumerate(offers):
            if o.pool == n and x[k] > 0:
                for key in {*o.held, *o.consumed}:
                    held[(o.job, key)] = held.get((o.job, key), 0.0) + usage(o, key, x[k], b[k])
        share: dict[int, float] = {}
        for (p, key), used in held.items():
            cap = pool.capacity.get(key, 0.0) * nodes[n]
            if cap > 0:
                share[p] = max(share.get(p, 0.0), used / cap)
        total = sum(share.values())
        norm = max(1.0, total)
        for p, part in share.items():
            teams[jobs[p].team] += paid * part / norm
        idle += paid * (1.0 - min(1.0, total))
    return teams, idle
