"""Plans: a pipeline's profile fitted to a fleet, shown beside its monolithic baseline.

``fit`` turns a profile and a fleet into solver inputs (rates from the cost model, demands
from the units' declarations and measured memory, multiplicities from measured output
ratios), solves the fitted pipeline and the fused baseline on the same fleet, and adds the
figures the solver does not know: model-FLOPs utilization per device class and
server-capacity utilization (throughput over the most these servers sustain for this
workload, the fitted plan's bound).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from fitwork.document import Document
from fitwork.errors import InputError
from fitwork.fit.cost import DEFAULT_EFFICIENCY, Precision, RateEstimate, peak_flops, unit_rates
from fitwork.fit.errors import FitInputError
from fitwork.fit.monolithic import FUSED, monolithic
from fitwork.fit.result import FitResult, Objective
from fitwork.fit.solver import solve
from fitwork.fit.spec import ClassDemand, UnitDemand
from fitwork.fit.spec import NodeType as SolverNode
from fitwork.hardware.catalog import Catalog, DeviceClass, catalog
from fitwork.hardware.fleet import Fleet
from fitwork.profiling.record import PipelineProfile


class PlanSide(BaseModel):
    """One way of running the work (fitted, or monolithic) and its predicted figures."""

    label: Literal["fitted", "monolithic"]
    result: FitResult
    mfu: dict[str, float]
    capacity_utilization: float

    @property
    def throughput(self) -> float:
        """Predicted source items per second."""
        return self.result.throughput


class Plan(Document):
    """Replicas per unit, device class and node type, with the figures that justify them."""

    document_kind: ClassVar[str] = "plan"
    document_maker: ClassVar[str] = "`fitwork plan`"

    fitwork_version: str
    pipeline: str
    units: list[str]
    fleet: Fleet
    objective: Objective
    target: float | None
    rates: list[RateEstimate]
    multiplicity: dict[str, float]
    flops: dict[str, float | None]
    fitted: PlanSide
    monolithic: PlanSide

    def workers_for(self, node_type: str | None = None) -> dict[str, int]:
        """Replicas per unit on one node type (the only one used, when not named)."""
        used = sorted({p.node_type for p in self.fitted.result.replicas if p.replicas})
        if node_type is None:
            if len(used) > 1:
                raise InputError(f"plan places units on node types {', '.join(used)}; pick "
                                 "the one this host is with --node-type")
            node_type = used[0] if used else None
        elif node_type not in used:
            raise InputError(f"plan places nothing on node type {node_type!r}; it uses "
                             f"{', '.join(used) or 'none'}")
        workers: dict[str, int] = {}
        for p in self.fitted.result.replicas:
            if p.node_type == node_type and p.replicas:
                workers[p.unit] = workers.get(p.unit, 0) + p.replicas
        return workers

    def placements(self) -> dict[str, list[tuple[str, str, int]]]:
        """Per unit, ``(device class, node type, replicas)`` for engines that place them."""
        placed: dict[str, list[tuple[str, str, int]]] = {}
        for p in self.fitted.result.replicas:
            if p.replicas:
                placed.setdefault(p.unit, []).append((p.device_class, p.node_type, p.replicas))
        return placed



def fleet_classes(fleet: Fleet, known: Catalog) -> list[DeviceClass]:
    """Every device class the fleet offers: its nodes' CPU classes and accelerators."""
    names = {n.cpu_class for n in fleet.node_types if n.cores}
    names |= {d for n in fleet.node_types for d, count in n.devices.items() if count}
    return [known.get(name) for name in sorted(names)]


def solver_nodes(fleet: Fleet, known: Catalog) -> list[SolverNode]:
    """The fleet's node types as the solver takes them."""
    return [
        SolverNode(name=n.name, count=n.count, cores=n.cores, memory=n.memory,
                   cpu_class=n.cpu_class, devices=dict(n.devices),
                   network=n.network_bandwidth, price_per_hour=n.hourly_price(known) or 0.0)
        for n in fleet.node_types
    ]


def demands(profile: PipelineProfile, classes: Iterable[DeviceClass], known: Catalog, *,
            precision: Precision = "fp16", efficiency: float = DEFAULT_EFFICIENCY
            ) -> tuple[list[UnitDemand], list[RateEstimate], dict[str, float]]:
    """Solver inputs for each profiled unit: rates per class, demands, multiplicity."""
    classes = list(classes)
    units, rates, multiplicity = [], [], {}
    m = 1.0
    for u in profile.units:
        measured = known.get(u.device_class)
        estimates = unit_rates(u, classes, measured, precision=precision,
                               efficiency=efficiency)
        rates.extend(estimates)
        memory = max(int(u.resources.get("memory", 0)), u.peak_rss)
        share = u.resources.get("gpu", 0.0)
        units.append(UnitDemand(name=u.name, multiplicity=max(m, 1e-9), classes={
            e.device_class: ClassDemand(
                rate=e.rate, cores=u.resources.get("cpu", 1.0), memory=memory,
                device_share=0.0 if e.device_class.startswith("cpu-") else share,
                bytes_out_per_item=u.bytes_out)
            for e in estimates}))
        multiplicity[u.name] = m
        m *= u.output_ratio
    return units, rates, multiplicity


def sequential(units: list[UnitDemand], rates: list[RateEstimate]) -> list[UnitDemand]:
    """The units as one container runs them today: a call at a time, whole devices.

    A fused process calls each stage in turn, so an I/O stage overlaps nothing; and a
    container that asks the orchestrator for a GPU is given a whole one (fractional shares
    need MPS, MIG or time-slicing set up for them, which is what fitwork brings).
    """
    seconds = {(r.unit, r.device_class): r.seconds_per_item for r in rates}
    return [u.model_copy(update={"classes": {
        name: d.model_copy(update={
            "rate": 1 / seconds[u.name, name] if seconds.get((u.name, name)) else d.rate,
            "device_share": float(math.ceil(d.device_share))})
        for name, d in u.classes.items()}}) for u in units]


def _mfu(result: FitResult, flops_per_item: dict[str, float], precision: Precision,
         known: Catalog) -> dict[str, float]:
    allocated = {u.device_class: u.allocated for u in result.utilization}
    used: dict[str, float] = {}
    for p in result.replicas:
        flops = flops_per_item.get(p.unit)
        if flops and p.replicas:
            used[p.device_class] = used.get(p.device_class, 0.0) + p.items_per_s * flops
    figures = {}
    for name, flop_rate in used.items():
        device = known.get(name)
        peak = (device.fp32_flops if device.is_cpu else peak_flops(device, precision))
        if allocated.get(name):
            figures[name] = flop_rate / (peak * allocated[name])
    return figures


def fit(profile: PipelineProfile, fleet: Fleet, *, objective: Objective = "max_throughput",
        target: float | None = None, precision: Precision = "fp16",
        efficiency: float = DEFAULT_EFFICIENCY, time_limit: float = 10.0,
        mip_gap: float = 0.01, known: Catalog | None = None) -> Plan:
    """Fit a profiled pipeline to ``fleet``; the plan carries its monolithic baseline."""
    from fitwork.engine.books import version as _version

    known = known or catalog()
    units, rates, multiplicity = demands(profile, fleet_classes(fleet, known), known,
                                         precision=precision, efficiency=efficiency)
    nodes = solver_nodes(fleet, known)
    fitted = solve(units, nodes, objective=objective, target=target, time_limit=time_limit,
                   mip_gap=mip_gap)
    if fitted.throughput <= 0:
        need = ", ".join(f"{u.name} {min(d.cores for d in u.classes.values()):g}"
                         for u in units)
        most = max(n.cores for n in fleet.node_types)
        raise FitInputError(
            f"fleet {fleet.name!r} gives no plan: one replica of every unit needs cores "
            f"({need}) beyond what its nodes hold (at most {most:g} per node); declare "
            "smaller cpu= on light units, e.g. @unit(cpu=0.25), or plan for a larger fleet")
    best = fitted if objective == "max_throughput" else solve(
        units, nodes, time_limit=time_limit, mip_gap=mip_gap)
    base = monolithic(sequential(units, rates), nodes, time_limit=time_limit, mip_gap=mip_gap)
    flops = {u.name: u.flops for u in profile.units}
    fused_flops = sum(multiplicity[n] * f for n, f in flops.items() if f)
    most = max(best.bound, best.throughput, base.throughput)
    return Plan(
        fitwork_version=_version(), pipeline=profile.pipeline, units=[u.name for u in units],
        fleet=fleet, objective=objective, target=target, rates=rates,
        multiplicity=multiplicity, flops=flops,
        fitted=PlanSide(label="fitted", result=fitted,
                        mfu=_mfu(fitted, {k: v for k, v in flops.items() if v}, precision,
                                 known),
                        capacity_utilization=fitted.throughput / most),
        monolithic=PlanSide(label="monolithic", result=base,
                            mfu=_mfu(base, {FUSED: fused_flops} if fused_flops else {},
                                     precision, known),
                            capacity_utilization=base.throughput / most),
    )


def capacity_line(plan: Plan) -> str:
    """One line: the capacity each side pays for and the share of it that it keeps busy."""
    parts = []
    for side in (plan.monolithic, plan.fitted):
        busy = sum(u.busy for u in side.result.utilization)
        paid = sum(u.allocated for u in side.result.utilization)
        share = busy / paid if paid else math.nan
        parts.append(f"{side.label} keeps {busy:.2f} of {paid:g} devices and cores busy "
                     f"({share:.0%}) for {side.throughput:,.1f} items/s")
    return "; ".join(parts)


def describe(plan: Plan) -> dict[str, Any]:
    """A compact dict of the headline figures (for logs and tests)."""
    return {side.label: {"throughput": side.throughput,
                         "cost_per_million": side.result.cost_per_million,
                         "capacity_utilization": side.capacity_utilization}
            for side in (plan.fitted, plan.monolithic)}
