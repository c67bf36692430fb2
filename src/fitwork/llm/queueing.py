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


def erlang_c(servers: int, rho: float) -> float:
    """Probability that an arrival waits in an M/M/c queue at utilization ``rho`` per server."""
    if rho <= 0:
        return 0.0
    if rho >= 1:
        return 1.0
    a = servers * rho
    b = 1.0
    for k in range(1, servers + 1):
        b = a * b / (k + a * b)
    return servers * b / (servers - a * (1 - b))


def mgc_wait_quantile(rho: float, mean_s: float, second_moment: float, servers: int = 1,
                      q: float = QUANTILE) -> float:
    """The ``q``-quantile of the wait in an M/G/c queue (one FCFS queue, ``servers`` servers).

    Allen-Cunneen: P(W > 0) = C (Erlang C), mean wait W = C E[S] / (c (1 - rho)) x
    (1 + cs^2) / 2, and a wait, given there is one, exponential with mean W / C.  With one
    server this is `mg1_wait_quantile`.
    """
    if servers <= 1:
        return mg1_wait_quantile(rho, mean_s, second_moment, q)
    if rho >= 1:
        return math.inf
    c = erlang_c(servers, rho)
    if c <= 1 - q:
        return 0.0
    scv = second_moment / mean_s ** 2 - 1
    w = c * mean_s / (servers * (1 - rho)) * (1 + scv) / 2
    return w / c * math.log(c / (1 - q))


def max_utilization(service: np.ndarray, slo: float, extra: float = 0.0,
                    q: float = QUANTILE, servers: int = 1) -> float:
    """The highest utilization of ``servers`` FCFS servers sharing one queue of these service
    times (one per request, Poisson arrivals) at which the ``q``-quantile service + wait +
    ``extra`` stays within ``slo``.

    The quantile of the sum is bounded by the sum of the quantiles (conservative).  0 when
    the service alone misses the SLO.
    """
    base = float(np.quantile(service, q)) + extra
    if base > slo:
        return 0.0
    mean, second = float(service.mean()), float((service ** 2).mean())

    def wait(rho: float) -> float:
        return mgc_wait_quantile(rho, mean, second, servers, q)

    lo, hi = 0.0, 0.999
    if base + wait(hi) <= slo:
        return hi
    for _ in range(50):
        mid = (lo + hi) / 2
        if base + wait(mid) <= slo:
            lo = mid
        else:
            hi = mid
    return lo
