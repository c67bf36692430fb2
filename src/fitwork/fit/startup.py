"""What a run of N items realizes of a plan's steady rate: start-up and the first item's way.

A plan predicts a steady rate R.  A run of N source items first starts its replicas: each
builds its unit (loads a model, imports its libraries) and pays its first call's extra, as
the profile measured (`UnitProfile.build_cpu_s`, ``build_wall_s``).  Replicas on one node
build side by side on its cores, so start-up lasts the longest build's wall time or the
node's builds' CPU over its cores, whichever is longer (``S``).  The first item then takes
the pipeline's way through (``L``: each unit's call in turn, at its planned batch; a fused
replica's stages in turn, one item each), and the rest come out at the steady rate::

    rate(N) = N / (S + L + (N - 1) / R)

``S`` also holds the engine's own start: the local engine sets the run up (`RUN_START_S`) and
forks its replicas one after another, each set up and saying it is ready before the next
(`REPLICA_START_S` apiece), whatever its unit.  A run of 64 items through 8 replicas of a
threaded monolith took 90 ms where builds and the first item's way said 26.

On this repository's 2-core host the OCR demo's fused plan (3 replicas, each building both
ONNX models, 0.36 CPU-s) does 24 pages in about 2.1 s where its steady rate says 1.2 s: the
builds take 0.54 s of both cores and the first page 0.4 s at 150 ms store latency.  A long
run makes both terms small; a short one is judged against ``rate(N)``, not ``R``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from fitwork.fit.cost import RateEstimate
from fitwork.fit.monolithic import FUSED

if TYPE_CHECKING:  # the plan calls this module: `Plan.run_rate`, `Plan.run_overhead`
    from fitwork.fit.plan import Plan

RUN_START_S = 0.005
"""Seconds the local engine takes to set a run up before its first replica (channels, the
driver's books).  ``bench/startup.py`` measures it and `REPLICA_START_S` with a unit that
does nothing, as the wall time of runs of 4 items a replica at 1, 4 and 16 replicas: 3.6 to
6.5 ms here (a 2-core host, over two sessions), the driver small or holding 600 MB."""
REPLICA_START_S = 0.0045
"""Seconds the local engine takes to start one more replica (fork, set-up, ready), in turn
in the driver: 3.6 to 5.4 ms apiece measured as `RUN_START_S` is, over two sessions (the
more for an ``io`` unit's thread pool and a larger driver), and 6.4 to 7.5 ms an hour later
in the second, with the host slower: a short run's prediction moves with the host as well."""


def _build(plan: Plan, unit: str) -> tuple[float, float]:
    """(CPU, wall) seconds one replica of ``unit`` spends building; a fused replica builds
    every unit's."""
    names = plan.units if unit == FUSED else [unit]
    return (sum(plan.build_cpu_s.get(n, 0.0) for n in names),
            sum(plan.build_wall_s.get(n, 0.0) for n in names))


def startup_seconds(plan: Plan, side: str = "fitted") -> float:
    """Seconds until every replica of ``side`` has started and built its unit (see the
    module docstring)."""
    cores = {n.name: n.cores for n in plan.fleet.node_types}
    cpu: dict[tuple[str | None, int], float] = defaultdict(float)
    longest = 0.0
    groups = plan.placement(side=side).groups
    started = RUN_START_S + REPLICA_START_S * sum(g.replicas for g in groups)
    for group in groups:
        build_cpu, build_wall = _build(plan, group.unit)
        longest = max(longest, build_wall)
        nodes = group.nodes or (0,) * group.replicas
        for node in nodes:
            cpu[(group.node_type, node)] += build_cpu
    spread = max((s / max(cores.get(t or "", 1.0), 1.0) for (t, _), s in cpu.items()),
                 default=0.0)
    return started + max(longest, spread)


def _estimate(plan: Plan, unit: str, device_class: str | None,
              batch: int | None) -> RateEstimate | None:
    """The rate estimate of ``unit`` on ``device_class`` at ``batch`` (the plan's own where
    that batch was not swept)."""
    mine = [r for r in plan.rates if r.unit == unit and
            (device_class is None or r.device_class == device_class)]
    swept = [r for r in plan.batch_rates if r.unit == unit and r.batch_size == batch and
             (device_class is None or r.device_class == device_class)]
    return (swept or mine or [None])[0]


def first_item_seconds(plan: Plan, side: str = "fitted") -> float:
    """Seconds the first source item takes through ``side`` once its replicas are up."""
    groups = plan.placement(side=side).groups
    fused = any(g.unit == FUSED for g in groups)
    total = 0.0
    for unit in plan.units:
        group = next((g for g in groups if g.unit == unit), None)
        if fused or group is None:  # a fused replica calls each stage on one item
            found = _estimate(plan, unit, None, None)
            total += found.seconds_per_item if found else 0.0
            continue
        found = _estimate(plan, unit, group.device_class, group.batch_size)
        if found is not None:
            total += found.batch_latency_s or found.seconds_per_item
    return total


def run_rate(plan: Plan, items: int, side: str = "fitted") -> float:
    """Items/s ``side`` of ``plan`` is predicted to realize over a run of ``items`` source
    items, start-up included: ``items / (S + L + (items - 1) / R)``."""
    steady = plan.fitted.throughput if side == "fitted" else plan.monolithic.throughput
    if items <= 0 or steady <= 0:
        return 0.0
    return items / (startup_seconds(plan, side) + first_item_seconds(plan, side)
                    + (items - 1) / steady)


__all__ = ["REPLICA_START_S", "RUN_START_S", "first_item_seconds", "run_rate",
           "startup_seconds"]
