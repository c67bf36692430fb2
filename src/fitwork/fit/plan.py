"""Plans: a pipeline's profile fitted to a fleet, shown beside its monolithic baseline.

``fit`` turns a profile and a fleet into solver inputs (rates from the cost model, demands
from the units' declarations and measured memory, multiplicities from measured output
ratios), solves the fitted pipeline and the fused baseline on the same fleet, and adds the
figures the solver does not know: model-FLOPs utilization per device class and
server-capacity utilization (throughput over the most these servers sustain for this
workload, the fitted plan's bound).

Each side also states a predicted RANGE, because its rates rest on transfers that miss by
tens of percent (``cost.py`` states each rate's error): the same replica counts, with every
transferred rate at the low (then high) end of its range (the p10 and p90 of measured /
predicted on its kind of transfer), give the bottleneck-limited throughput at each end.
Measured rates keep their value.  Limits other than the rates (network, a min-cost target)
are kept as solved.  The side lists which units' rates were measured and which transferred.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from fitwork.document import Document
from fitwork.errors import InputError
from fitwork.fit.cost import Precision, RateEstimate, peak_flops, unit_rates
from fitwork.fit.errors import FitInputError
from fitwork.fit.monolithic import FUSED, monolithic
from fitwork.fit.result import FitResult, Objective
from fitwork.fit.result import Placement as Replicas
from fitwork.fit.solver import solve
from fitwork.fit.spec import ClassDemand, UnitDemand
from fitwork.fit.spec import NodeType as SolverNode
from fitwork.hardware.catalog import Catalog, DeviceClass, catalog
from fitwork.hardware.fleet import Fleet
from fitwork.placement import Group, Placement
from fitwork.profiling.record import PipelineProfile
from fitwork.version import __version__


class PlanSide(BaseModel):
    """One way of running the work (fitted, or monolithic) and its predicted figures."""

    label: Literal["fitted", "monolithic"]
    result: FitResult
    mfu: dict[str, float]
    capacity_utilization: float
    throughput_low: float | None = None
    throughput_high: float | None = None
    measured: list[str] = Field(default_factory=list)
    transferred: list[str] = Field(default_factory=list)

    @property
    def throughput(self) -> float:
        """Predicted source items per second."""
        return self.result.throughput

    @property
    def throughput_range(self) -> tuple[float, float]:
        """(low, high) items/s with transferred rates at the ends of their ranges."""
        low = self.throughput if self.throughput_low is None else self.throughput_low
        high = self.throughput if self.throughput_high is None else self.throughput_high
        return low, high


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

    def placement(self, node_type: str | None = None, side: str = "fitted") -> Placement:
        """The plan as engines take it: replica groups per unit, device class and node type.

        With ``node_type``, only the groups planned on that node type (for running one
        host's share of a plan locally).  ``side="monolithic"`` gives the fused baseline's.
        """
        chosen = self.fitted if side == "fitted" else self.monolithic
        rates = {(r.unit, r.device_class): r.rate for r in self.rates}
        groups = [Group(p.unit, p.replicas, device_class=p.device_class,
                        node_type=p.node_type, rate=rates.get((p.unit, p.device_class)))
                  for p in chosen.result.replicas
                  if p.replicas and (node_type is None or p.node_type == node_type)]
        if node_type is not None and not groups:
            used = sorted({p.node_type for p in chosen.result.replicas if p.replicas})
            raise InputError(f"plan places nothing on node type {node_type!r}; it uses "
                             f"{', '.join(used) or 'none'}")
        return Placement.of_groups(groups)



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
            precision: Precision = "fp16", efficiency: float | None = None
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
        efficiency: float | None = None, time_limit: float = 10.0,
        mip_gap: float = 0.01, known: Catalog | None = None) -> Plan:
    """Fit a profiled pipeline to ``fleet``; the plan carries its monolithic baseline."""
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
    estimates = {(r.unit, r.device_class): r for r in rates}
    fitted_range = _fitted_range(fitted, estimates, multiplicity)
    base_range = _monolithic_range(base, estimates, multiplicity, fleet)
    return Plan(
        fitwork_version=__version__, pipeline=profile.pipeline, units=[u.name for u in units],
        fleet=fleet, objective=objective, target=target, rates=rates,
        multiplicity=multiplicity, flops=flops,
        fitted=PlanSide(label="fitted", result=fitted,
                        mfu=_mfu(fitted, {k: v for k, v in flops.items() if v}, precision,
                                 known),
                        capacity_utilization=fitted.throughput / most, **fitted_range),
        monolithic=PlanSide(label="monolithic", result=base,
                            mfu=_mfu(base, {FUSED: fused_flops} if fused_flops else {},
                                     precision, known),
                            capacity_utilization=base.throughput / most, **base_range),
    )


Estimates = dict[tuple[str, str], RateEstimate]


def _ends(throughput: float, caps: dict[str, tuple[float, float, float]],
          multiplicity: dict[str, float]) -> tuple[float, float]:
    """Throughput with every unit's capacity at its low and its high end.

    ``caps`` maps a unit to its (point, low, high) items/s.  A plan held below its rate limit
    by something else (network, a target) keeps that limit at the high end.
    """
    if not caps or throughput <= 0:
        return throughput, throughput
    per = {u: [c / max(multiplicity.get(u, 1.0), 1e-9) for c in v] for u, v in caps.items()}
    limit = min(v[0] for v in per.values())
    low = min(throughput, min(v[1] for v in per.values()))
    high = min(v[2] for v in per.values())
    if throughput < limit * (1 - 1e-6):
        high = min(high, throughput)
    return low, high


def _sources(units: dict[str, set[bool]], order: list[str]) -> dict[str, list[str]]:
    return {"measured": [u for u in order if units.get(u) == {False}],
            "transferred": [u for u in order if True in units.get(u, set())]}


def _fitted_range(result: FitResult, estimates: Estimates,
                  multiplicity: dict[str, float]) -> dict[str, Any]:
    caps: dict[str, tuple[float, float, float]] = {}
    kinds: dict[str, set[bool]] = {}
    for p in result.replicas:
        e = estimates.get((p.unit, p.device_class))
        if not p.replicas or e is None:
            continue
        low, high = e.bounds()
        point, lo, hi = caps.get(p.unit, (0.0, 0.0, 0.0))
        caps[p.unit] = (point + p.replicas * e.rate, lo + p.replicas * low,
                        hi + p.replicas * high)
        kinds.setdefault(p.unit, set()).add(e.transferred)
    low, high = _ends(result.throughput, caps, multiplicity)
    return {"throughput_low": low, "throughput_high": high,
            **_sources(kinds, list(multiplicity))}


def _stage(unit: str, classes: list[str | None],
           estimates: Estimates) -> RateEstimate | None:
    """The estimate a fused replica uses for ``unit``: the faster of ``classes``."""
    options = [e for c in classes if c is not None
               and (e := estimates.get((unit, c))) is not None and e.seconds_per_item > 0]
    return min(options, key=lambda e: e.seconds_per_item, default=None)


def _monolithic_range(result: FitResult, estimates: Estimates, multiplicity: dict[str, float],
                      fleet: Fleet) -> dict[str, Any]:
    """The fused unit's range: each stage at its ends, stages run in turn (``monolithic``)."""
    cpu_of = {n.name: n.cpu_class if n.cores else None for n in fleet.node_types}
    cap = [0.0, 0.0, 0.0]
    kinds: dict[str, set[bool]] = {}
    for p in result.replicas:
        if not p.replicas:
            continue
        seconds = _fused_seconds(p, cpu_of.get(p.node_type), estimates, multiplicity, kinds)
        if seconds is None:
            return {"throughput_low": None, "throughput_high": None}
        for i, s in enumerate(seconds):
            cap[i] += p.replicas / s if s > 0 else 0.0
    low, high = _ends(result.throughput, {FUSED: (cap[0], cap[1], cap[2])}, {FUSED: 1.0})
    return {"throughput_low": low, "throughput_high": high,
            **_sources(kinds, list(multiplicity))}


def _fused_seconds(p: Replicas, cpu: str | None, estimates: Estimates,
                   multiplicity: dict[str, float],
                   kinds: dict[str, set[bool]]) -> tuple[float, float, float] | None:
    accel = None if p.device_class.startswith("cpu-") else p.device_class
    point = low = high = 0.0
    for unit, m in multiplicity.items():
        e = _stage(unit, [accel, cpu], estimates)
        if e is None:
            return None
        lo, hi = e.bounds()
        point += m * e.seconds_per_item
        low += m * e.seconds_per_item * (e.rate / lo if lo > 0 else math.inf)
        high += m * e.seconds_per_item * (e.rate / hi if hi > 0 else math.inf)
        kinds.setdefault(unit, set()).add(e.transferred)
    return point, low, high


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
