"""`PlanReplanner`: what live re-fitting needs of a plan (its rates, predictions, re-solve)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from fitwork.errors import InputError
from fitwork.fit.ceiling import FLOOR
from fitwork.fit.monolithic import FUSED, unit_limits
from fitwork.fit.plan import Plan, PlanSide, largest_groups, planned_group, refit
from fitwork.fit.result import Placement as Replicas
from fitwork.fit.solver import solve
from fitwork.fit.spec import ClassDemand, UnitDemand
from fitwork.placement import Placement
from fitwork.profiling.record import host_busy_seconds, usable_cores


class PlanReplanner:
    """A plan and the placement a run started from, as `fitwork.engine.adapt` uses them.

    Predictions follow the plan's own rule for a chain: a unit sustains its replicas times
    one replica's rate, divided by how many items it sees per source item; the pipeline
    sustains the least of those, and no more than the fleet's core budget (its cores under
    the plan's ceiling) divided by the CPU seconds one source item costs in all.  A unit
    slowed by waiting for a core (a busier host) then shows no gain from more replicas.

    A fused placement (the plan chose to run its units as one) is re-fitted as the one unit
    it runs: its replica count re-solved at the fused unit's measured rate and CPU per item,
    its threads per replica kept (`refit_fused`).
    """

    def __init__(self, plan: Plan, placement: Placement) -> None:
        self.plan = plan
        self.placement = placement
        self.fused = bool(placement.fusion)
        self.units = list(placement.units) if self.fused else list(plan.units)
        self.multiplicity = {FUSED: 1.0} if self.fused else dict(plan.multiplicity)

    def planned_rates(self) -> dict[str, float]:
        """Items/s of one replica of each unit: its groups' rates, weighted by replicas."""
        rates = {}
        for name in self.placement.units:
            groups = [(rate, g.replicas) for g in self.placement.of(name)
                      if (rate := g.rate) and g.replicas]
            count = sum(replicas for _, replicas in groups)
            if count:
                rates[name] = sum(rate * replicas for rate, replicas in groups) / count
        return rates

    def predict(self, counts: Mapping[str, int], rates: Mapping[str, float],
                cpu: Mapping[str, float] | None = None, cores: float | None = None) -> float:
        """Source items/s these counts sustain at these per-replica rates (and, with
        ``cpu`` seconds per item measured, within the core budget: the fleet's, or
        ``cores`` where fewer were to be had)."""
        sustained = [counts.get(name, 0) * rates[name] / max(self.multiplicity.get(name, 1.0),
                                                              1e-12)
                     for name in self.units if name in rates]
        best = min(sustained) if sustained else 0.0
        per_item = sum(self.multiplicity.get(name, 1.0) * seconds
                       for name, seconds in (cpu or {}).items())
        if per_item > 0:
            budget = sum(n.count * n.cores * n.core_ceiling for n in self.plan.nodes)
            if cores is not None:
                budget = min(budget, cores)
            best = min(best, budget / per_item)
        return best

    def planned_cpu(self) -> dict[str, float]:
        """CPU seconds per item the plan assumed one replica of each unit spends: its
        demand on the class and batch size its largest group runs at (the engine's work on
        the item and the driver's share of its frames included)."""
        if self.fused:
            ran = largest_groups(fused_side(self.plan).result).get(FUSED)
            return {FUSED: _cpu_per_item(ran)} if ran is not None else {}
        largest: dict[str, tuple[int, str, int | None]] = {}
        for g in self.placement.groups:
            if g.replicas and g.replicas > largest.get(g.unit, (0, "", None))[0]:
                largest[g.unit] = (g.replicas, g.device_class or "", g.batch_size)
        out = {}
        for unit in self.plan.demands:
            if unit.name not in largest:
                continue
            _, device_class, batch = largest[unit.name]
            options = unit.options(device_class) if device_class in unit.classes else []
            chosen = next((d for d in options if d.batch_size == batch), None)
            if chosen is not None and chosen.cpu_seconds:
                out[unit.name] = chosen.cpu_seconds
        return out

    def ceiling(self) -> float:
        """The core ceiling the plan is solved at now (the profile's, until `set_ceiling`)."""
        return self.plan.core_ceiling

    def host_reading(self) -> tuple[float, float, float, int] | None:
        """(seconds, the host's busy CPU seconds, this process's CPU seconds, cores) now, for
        a plan of one node (the host the run is on); None for a larger fleet, whose other
        nodes this process cannot read, or where the platform does not say."""
        if sum(n.count for n in self.plan.nodes) != 1:
            return None
        busy = host_busy_seconds()
        if busy is None:
            return None
        return (time.perf_counter(), busy, time.process_time(), usable_cores())

    def set_ceiling(self, ceiling: float) -> None:
        """Predict and re-solve from now on with ``ceiling`` of each node's cores (the share
        of the host a run measured others left)."""
        ceiling = min(1.0, max(FLOOR, ceiling))
        nodes = [n.model_copy(update={"core_ceiling": ceiling}) for n in self.plan.nodes]
        self.plan = self.plan.model_copy(update={"nodes": nodes, "core_ceiling": ceiling})

    def tolerance(self) -> float:
        """How far a unit may run from the plan before it is re-solved: the plan's own
        uncertainty (0 for a plan that predates it: the adapter's default then)."""
        return self.plan.uncertainty

    def refit(self, rates: Mapping[str, float],
              cpu: Mapping[str, float] | None = None) -> Placement:
        """The plan re-solved with these measured rates (same solver, same fleet)."""
        if self.fused:
            return refit_fused(self.plan, rates.get(FUSED), (cpu or {}).get(FUSED))
        return refit(self.plan, dict(rates), dict(cpu or {}))


def fused_side(plan: Plan) -> PlanSide:
    """The side of ``plan`` a fused run runs: the fitted one where the plan fused, else its
    monolithic baseline (a ``--monolithic`` run)."""
    return plan.fitted if plan.fused else plan.monolithic


def _cpu_per_item(ran: Replicas) -> float:
    """CPU seconds per item a solved group was planned to spend."""
    return ran.cores * ran.replicas / ran.items_per_s if ran.items_per_s > 0 else 0.0


def refit_fused(plan: Plan, rate: float | None, cpu: float | None = None) -> Placement:
    """The fused replicas of ``plan`` (`fused_side`) re-solved at the fused unit's measured
    ``rate`` (items/s of one busy replica) and ``cpu`` seconds per item (as planned where
    not measured): the same fleet, class, threads per replica and memory; the replica count
    is what changes."""
    ran = largest_groups(fused_side(plan).result).get(FUSED)
    if ran is None or not plan.nodes:
        raise InputError("this plan has no fused replicas to re-fit; re-plan it with "
                         "`fitwork plan`")
    rate = rate if rate is not None and rate > 0 else ran.rate or 0.0
    demand = ClassDemand(rate=rate, memory=int(ran.memory),
                         cpu_seconds=cpu if cpu is not None else _cpu_per_item(ran))
    most, per_s = unit_limits(plan.demands)
    unit = UnitDemand(name=FUSED, classes={ran.device_class: demand},
                      concurrency=ran.threads or 1, max_concurrency=most, rate_limit=per_s)
    result = solve([unit], plan.nodes, time_limit=plan.time_limit, mip_gap=plan.mip_gap)
    groups = tuple(planned_group(p, {}) for p in result.replicas if p.replicas)
    return Placement(groups, "refit", fusion=(tuple(plan.units),))
