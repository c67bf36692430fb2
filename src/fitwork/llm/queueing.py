"""Queueing approximations the planner turns SLOs into per-replica rates with (M/G/1 waits)."""

from __future__ import annotations

import math

import numpy as np

QUANTILE = 0.9


def mg1_mean_wait(rho: float, mean_s: float, second_moment: float) -> float:
    """Pollaczek-Khinchine mean wait of an M/G/1 queue at utilization ``rho``."""
    if rho <= 0:
        return 0.0
    if rho >= 1:
        return math.inf
    return rho * second_moment / (2 * (1 - rho) * mean_s)


def mg1_wait_quantile(rho: float, mean_s: float, second_moment: float,
                      q: float = QUANTILE) -> float:
    """The ``q``-quantile of the M/G/1 wait: P(W > 0) = rho, and a wait, given there is
    one, taken as exponential with mean W/rho (exact for M/M/1)::

        w_q = (W / rho) ln(rho / (1 - q))   when rho > 1 - q, else 0
    """
    if rho <= 1 - q:
        return 0.0
    w = mg1_mean_wait(rho, mean_s, second_moment)
    return w / rho * math.log(rho / (1 - q))


def max_utilization(service: np.ndarray, slo: float, extra: float = 0.0,
                    q: float = QUANTILE) -> float:
    """The highest utilization of one FCFS server of these service times (one per request,
    Poisson arrivals) at which ``q``-quantile service + wait + ``extra`` stays within ``slo``.

    The quantile of the sum is bounded by the sum of the quantiles (conservative).  0 when
    the service alone misses the SLO.
    """
    base = float(np.quantile(service, q)) + extra
    if base > slo:
        return 0.0
    mean, second = float(service.mean()), float((service ** 2).mean())
    lo, hi = 0.0, 0.999
    if base + mg1_wait_quantile(hi, mean, second, q) <= slo:
        return hi
    for _ in range(50):
        mid = (lo + hi) / 2
        if base + mg1_wait_quantile(mid, mean, second, q) <= slo:
            lo = mid
        else:
            hi = mid
    return lo
