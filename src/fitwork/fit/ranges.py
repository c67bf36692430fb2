"""A plan's predicted range: its units' rate ranges carried through the solution it chose.

Every rate a plan uses carries a p10-p90 (``RateEstimate.rate_low``/``rate_high``): a
transferred rate the held-out error of its kind of transfer (`fitwork.fit.calibration`), a
measured one the spread of its profile's calls and the host's load (`UnitProfile.rate_spread`).
A side's range is NOT those ends applied to the point throughput: the plan's replicas stay as
solved and the rates are drawn (`SAMPLES` draws, a fixed seed), and each draw's throughput is
what those replicas sustain (`sustained`):

- the bottleneck: each unit's replicas x rate over the items it gets per source item;
- shared cores: on each node type, fluid core-seconds per item grow as a CPU replica slows
  (and shrink as it speeds up), so a slow unit takes cores from the others;
- anything else that held the point below both (a target, the network) holds every draw.

A unit's items per source item are drawn too, where a filter or flat-map before it had its
output ratio counted over few items (`UnitProfile.ratio_spread`): 17 of 48 samples kept
is 0.35 +- 0.07, and every unit after it gets that much more or less work.

The range is the p10 and p90 of the draws.  Draws are correlated as their errors are: rates
transferred on one basis (one kind of transfer between the same classes) miss together; a
measured rate's draw is half shared by all measured rates (the host's load) and half its own
(its calls' spread), and reaches at least as far as the side's widest measured range (the
host's load is the host's: a unit that mostly waits saw little of it while profiling).
Each rate is log-normal on either side, its p10 and p90 at its ends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fitwork.fit.cost import RateEstimate
from fitwork.fit.monolithic import FUSED
from fitwork.fit.result import FitResult
from fitwork.fit.result import Placement as Replicas
from fitwork.fit.spec import is_cpu_class
from fitwork.hardware.fleet import Fleet

SAMPLES = 4000
SEED = 20231
Z90 = 1.2816
SHARED = 0.5
"""The share of a measured rate's variance common to every measured rate (the host's load)."""
Estimates = dict[tuple[str, str], RateEstimate]
Batched = dict[tuple[str, str, int | None], RateEstimate]


class _Draws:
    """Standard normal draws per correlation key, made once per side."""

    def __init__(self, measured: list[RateEstimate], samples: int = SAMPLES,
                 seed: int = SEED) -> None:
        self.rng = np.random.default_rng(seed)
        self.samples = samples
        self.keys: dict[str, np.ndarray] = {}
        # The host's load is the host's, not one unit's: a unit that mostly waits saw little
        # run-queue time where another saw much.  Every measured rate takes at least the
        # widest measured range of the side (its profile's host, its run's host).
        widths = [_widths(e) for e in measured if not e.transferred and e.rate > 0]
        self.host = (max((w[0] for w in widths), default=0.0),
                     max((w[1] for w in widths), default=0.0))

    def of(self, key: str) -> np.ndarray:
        if key not in self.keys:
            self.keys[key] = self.rng.standard_normal(self.samples)
        return self.keys[key]

    def factor(self, e: RateEstimate) -> np.ndarray:
        """Draws of rate / point rate for estimate ``e`` (1 where it has no range)."""
        if e.rate <= 0:
            return np.ones(self.samples)
        down, up = _widths(e)
        if e.transferred:
            z = self.of(f"transfer:{e.error_basis}")
        else:
            down, up = max(down, self.host[0]), max(up, self.host[1])
            z = (math.sqrt(SHARED) * self.of("measured:host")
                 + math.sqrt(1 - SHARED) * self.of(f"measured:{e.unit}"))
        if down <= 0 and up <= 0:
            return np.ones(self.samples)
        return np.exp(np.where(z < 0, z * down, z * up) / Z90)


def ratio_factors(draws: _Draws, order: Sequence[str],
                  spreads: Mapping[str, float]) -> dict[str, np.ndarray]:
    """Draws of each unit's items per source item over its planned multiplicity: every
    output ratio before it drawn log-normal, by its log standard deviation in
    ``spreads``."""
    factors: dict[str, np.ndarray] = {}
    log = np.zeros(draws.samples)
    for unit in order:
        factors[unit] = np.exp(log)
        spread = spreads.get(unit, 0.0)
        if spread > 0:
            log = log + spread * draws.of(f"ratio:{unit}")
    return factors


def _widths(e: RateEstimate) -> tuple[float, float]:
    """How far ``e``'s range reaches down and up from its rate, in log."""
    low, high = e.bounds()
    down = math.log(e.rate / low) if low > 0 else 0.0
    up = math.log(high / e.rate) if high > 0 else 0.0
    return max(down, 0.0), max(up, 0.0)


def sustained(result: FitResult, slowdown: Mapping[int, np.ndarray],
              multiplicity: Mapping[str, float], samples: int) -> np.ndarray:
    """Source items/s the solution's replicas sustain when placement ``i``'s seconds per item
    are ``slowdown[i]`` times the planned ones (one figure per draw)."""
    point = result.throughput
    placed = [(i, p) for i, p in enumerate(result.replicas) if p.replicas and p.rate > 0]
    ones = np.ones(samples)
    capacity: dict[str, np.ndarray] = {}
    capacity_1: dict[str, float] = {}
    for i, p in placed:
        m = max(multiplicity.get(p.unit, 1.0), 1e-9)
        capacity[p.unit] = capacity.get(p.unit, 0.0) + p.replicas * p.rate / m / slowdown.get(
            i, ones)
        capacity_1[p.unit] = capacity_1.get(p.unit, 0.0) + p.replicas * p.rate / m
    limit = np.full(samples, np.inf)
    for c in capacity.values():
        limit = np.minimum(limit, c)
    limit_1 = min(capacity_1.values(), default=math.inf)
    for usage in result.nodes:
        cap = usage.core_ceiling * max(usage.cores_capacity - usage.cores_reserved, 0.0)
        fluid = [(i, p) for i, p in placed if p.node_type == usage.node_type and not p.reserved]
        used_1 = sum(p.cores * p.replicas for _, p in fluid)
        if cap <= 0 or used_1 <= 0 or point <= 0:
            continue
        used = sum(p.cores * p.replicas * (slowdown.get(i, ones) if is_cpu_class(p.device_class)
                                           else ones) for i, p in fluid)
        limit = np.minimum(limit, point * cap / used)
        limit_1 = min(limit_1, point * cap / used_1)
    if point < limit_1 * (1 - 1e-6):  # something else held the point (target, network)
        limit = np.minimum(limit, point)
    return np.where(np.isfinite(limit), limit, point)


def _range(result: FitResult, slowdown: Mapping[int, np.ndarray],
           multiplicity: Mapping[str, float]) -> tuple[float, float]:
    point = result.throughput
    if point <= 0 or not slowdown:
        return point, point
    draws = sustained(result, slowdown, multiplicity, SAMPLES)
    low, high = (float(q) for q in np.quantile(draws, [0.1, 0.9]))
    return min(low, point), max(high, point)


def _sources(units: dict[str, set[bool]], order: list[str]) -> dict[str, list[str]]:
    return {"measured": [u for u in order if units.get(u) == {False}],
            "transferred": [u for u in order if True in units.get(u, set())]}


def fitted_range(result: FitResult, estimates: Batched, multiplicity: dict[str, float],
                 spreads: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The fitted side's ``throughput_low``/``throughput_high`` and which units' rates were
    measured and which transferred; ``spreads``: each unit's output ratio's log standard
    deviation (`ratio_factors`)."""
    draws = _Draws(list(estimates.values()))
    more = ratio_factors(draws, list(multiplicity), spreads or {})
    kinds: dict[str, set[bool]] = {}
    slowdown: dict[int, np.ndarray] = {}
    for i, p in enumerate(result.replicas):
        e = estimates.get((p.unit, p.device_class, p.batch_size))
        if p.replicas and e is not None:
            kinds.setdefault(p.unit, set()).add(e.transferred)
            slowdown[i] = more.get(p.unit, 1.0) / draws.factor(e)
    low, high = _range(result, slowdown, multiplicity)
    return {"throughput_low": low, "throughput_high": high,
            **_sources(kinds, list(multiplicity))}


def _stage(unit: str, classes: list[str | None],
           estimates: Estimates) -> RateEstimate | None:
    """The estimate a fused replica uses for ``unit``: the faster of ``classes``."""
    options = [e for c in classes if c is not None
               and (e := estimates.get((unit, c))) is not None and e.seconds_per_item > 0]
    return min(options, key=lambda e: e.seconds_per_item, default=None)


def monolithic_range(result: FitResult, estimates: Estimates, multiplicity: dict[str, float],
                     fleet: Fleet, spreads: Mapping[str, float] | None = None
                     ) -> dict[str, Any]:
    """The fused side's range: each stage's rate (and items per source item) drawn, stages
    run in turn in one replica."""
    cpu_of = {n.name: n.cpu_class if n.cores else None for n in fleet.node_types}
    draws = _Draws(list(estimates.values()))
    more = ratio_factors(draws, list(multiplicity), spreads or {})
    kinds: dict[str, set[bool]] = {}
    slowdown: dict[int, np.ndarray] = {}
    for i, p in enumerate(result.replicas):
        if not p.replicas:
            continue
        seconds = _fused_seconds(p, cpu_of.get(p.node_type), estimates, multiplicity, kinds,
                                 draws, more)
        if seconds is None:
            return {"throughput_low": None, "throughput_high": None}
        slowdown[i] = seconds
    low, high = _range(result, slowdown, {FUSED: 1.0})
    return {"throughput_low": low, "throughput_high": high,
            **_sources(kinds, list(multiplicity))}


def _fused_seconds(p: Replicas, cpu: str | None, estimates: Estimates,
                   multiplicity: dict[str, float], kinds: dict[str, set[bool]],
                   draws: _Draws, more: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Draws of a fused replica's seconds per item over its planned seconds (``more``:
    each stage's items per source item over its planned multiplicity)."""
    accel = None if is_cpu_class(p.device_class) else p.device_class
    point = 0.0
    drawn = np.zeros(draws.samples)
    for unit, m in multiplicity.items():
        e = _stage(unit, [accel, cpu], estimates)
        if e is None:
            return None
        point += m * e.seconds_per_item
        drawn = drawn + m * e.seconds_per_item * more.get(unit, 1.0) / draws.factor(e)
        kinds.setdefault(unit, set()).add(e.transferred)
    return drawn / point if point > 0 else None
