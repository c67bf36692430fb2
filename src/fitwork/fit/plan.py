"""Plans: a pipeline's profile fitted to a fleet, shown beside its monolithic baseline.

``fit`` turns a profile and a fleet into solver inputs (rates from the cost model at every
measured batch size, consumption from the measured CPU and device seconds, held demands from
the units' declarations and measured memory, multiplicities from measured output ratios),
solves the fitted pipeline and the fused baseline on the same fleet under the same fluid
model, and adds the figures the solver does not know: model-FLOPs utilization per device
class and server-capacity utilization (throughput over the most these servers sustain for
this workload, the fitted plan's bound).  ``refit`` re-solves a plan with rates measured
during a run.

Each side also states a predicted RANGE, because its rates rest on transfers that miss by
tens of percent (``cost.py`` states each rate's error): every transferred rate at the low
(then high) end of its range (the p10 and p90 of measured / predicted on its kind of
transfer), measured rates as they are.  The fitted side is solved again at each end (its
replicas are only what its load needs, so the same replicas would not show the high end);
the fused baseline keeps its replica counts and gives the bottleneck-limited throughput at
each end.  The side lists which units' rates were measured and which transferred.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from fitwork.document import Document
from fitwork.errors import FitworkError, InputError
from fitwork.fit.candidates import format_bytes
from fitwork.fit.cost import Precision, RateEstimate, peak_flops
from fitwork.fit.errors import FitInputError, TargetUnreachable
from fitwork.fit.inputs import (
    HOP_SECONDS,
    core_ceiling,
    demands,
    fleet_classes,
    sequential,
    solver_nodes,
)
from fitwork.fit.monolithic import FUSED, monolithic
from fitwork.fit.result import FitResult, Objective
from fitwork.fit.result import Placement as Replicas
from fitwork.fit.solver import solve
from fitwork.fit.spec import ClassDemand, UnitDemand, is_cpu_class
from fitwork.fit.spec import NodeType as SolverNode
from fitwork.hardware.catalog import Catalog, catalog
from fitwork.hardware.fleet import Fleet
from fitwork.placement import Group, Placement
from fitwork.profiling.record import PipelineProfile
from fitwork.resources import Resources
from fitwork.version import __version__

RAY_STEP = 1e-4
"""Ray counts resources in steps of 1e-4: a replica's fluid cores are rounded up to one."""

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
    """Replicas per unit, device class and node type, with the figures that justify them.

    ``demands`` and ``nodes`` are the solver inputs the fitted side was solved from (what
    `refit` re-solves), ``core_ceiling`` the oversubscription ceiling they carry,
    ``hop_seconds`` the engine's work per item per channel they include, and ``max_latency``,
    ``time_limit`` and ``mip_gap`` the options it was solved with.
    """

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
    batch_rates: list[RateEstimate] = Field(default_factory=list)
    demands: list[UnitDemand] = Field(default_factory=list)
    nodes: list[SolverNode] = Field(default_factory=list)
    core_ceiling: float = 1.0
    hop_seconds: float = 0.0
    max_latency: float | None = None
    time_limit: float = 10.0
    mip_gap: float = 0.01
    fused: bool = False
    split: PlanSide | None = None

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

        Each group carries its batch size, the predicted rate of one replica, the resources
        one replica asks an engine for (`group_resources`) and the node index of each replica
        within its node type.  With ``node_type``, only the groups planned on that node type
        (for running one host's share of a plan locally).  ``side="monolithic"`` gives the
        fused baseline's.
        """
        chosen = self.fitted if side == "fitted" else self.monolithic
        rates = {(r.unit, r.device_class): r.rate for r in self.rates}
        groups = [_group(p, rates) for p in chosen.result.replicas
                  if p.replicas and (node_type is None or p.node_type == node_type)]
        if node_type is not None and not groups:
            used = sorted({p.node_type for p in chosen.result.replicas if p.replicas})
            raise InputError(f"plan places nothing on node type {node_type!r}; it uses "
                             f"{', '.join(used) or 'none'}")
        fused = side == "monolithic" or self.fused
        return Placement(tuple(groups), "plan",
                         fusion=(tuple(self.units),) if fused else ())


def group_resources(p: Replicas) -> Resources:
    """What one replica of a planned group asks an engine for.

    Cores: the reservation when the unit reserves them, else the cores its share of the load
    is planned to use (rounded up to Ray's step, so a group never asks for 0).  GPU: its slot
    on a device (whole devices above 1).  Memory: what it holds.
    """
    cores = p.cores if p.reserved else math.ceil(p.cores / RAY_STEP - 1e-9) * RAY_STEP
    gpu = 0.0
    if not is_cpu_class(p.device_class) and p.device_share > 0:
        gpu = p.device_share if p.device_share <= 1 else float(math.ceil(p.device_share))
    return Resources(cpu=max(cores, RAY_STEP), gpu=gpu, memory=int(p.memory))


def _group(p: Replicas, rates: dict[tuple[str, str], float]) -> Group:
    rate = p.rate or rates.get((p.unit, p.device_class))
    resources = group_resources(p) if p.rate else None  # plans before fluid cores: none
    return Group(p.unit, p.replicas, device_class=p.device_class, node_type=p.node_type,
                 batch_size=p.batch_size, rate=rate, resources=resources,
                 nodes=tuple(p.nodes))


def refit(plan: Plan, measured: Mapping[str, float],
          cpu: Mapping[str, float] | None = None) -> Placement:
    """Re-solve ``plan`` with measured rates; the new placement (source ``refit``).

    ``measured`` maps a unit to the items/s ONE of its replicas sustained on the class it
    ran on (its largest planned group's class and batch size).  That unit's rate there is
    replaced by the measurement, and its rates on every other class and batch size are
    scaled by the same ratio (the measurement says how far its profile was off, not that
    its classes rank differently).  ``cpu`` gives the CPU seconds per item a unit was
    measured to use; without it, what a unit consumes per item stays as profiled.  Same
    solver, fleet, objective and options; a ``min_cost`` target the measured rates can no
    longer reach falls back to the most throughput, with a note saying so.
    """
    if not plan.demands or not plan.nodes:
        raise InputError("this plan predates live re-fitting (it has no solver inputs); "
                         "re-plan it with `fitwork plan`")
    unknown = sorted(set(measured) - set(plan.units))
    if unknown:
        raise InputError(f"refit: {', '.join(unknown)} not in the plan; its units are "
                         f"{', '.join(plan.units)}")
    for name, rate in measured.items():
        if not rate > 0:
            raise InputError(f"refit: unit {name!r} measured {rate} items/s; give a rate > 0")
    ran = _ran_on(plan.fitted.result)
    cpu = cpu or {}
    units = [_rescaled(u, measured[u.name], ran.get(u.name), cpu.get(u.name))
             if u.name in measured else u for u in plan.demands]
    notes: tuple[str, ...] = ()
    try:
        result = solve(units, plan.nodes, objective=plan.objective, target=plan.target,
                       time_limit=plan.time_limit, mip_gap=plan.mip_gap,
                       max_latency=plan.max_latency)
    except TargetUnreachable as unreachable:
        result = solve(units, plan.nodes, time_limit=plan.time_limit, mip_gap=plan.mip_gap,
                       max_latency=plan.max_latency)
        notes = (f"refit: {unreachable}; planned for the most throughput instead",)
    groups = tuple(_group(p, {}) for p in result.replicas if p.replicas)
    return Placement(groups, "refit", notes)


def _ran_on(result: FitResult) -> dict[str, Replicas]:
    """Each unit's largest group: the class and batch size a measured rate is for."""
    out: dict[str, Replicas] = {}
    for p in result.replicas:
        if p.replicas and (p.unit not in out or p.replicas > out[p.unit].replicas):
            out[p.unit] = p
    return out


def _pinned(demand: ClassDemand, device_class: str, ratio: float,
            cpu: float | None = None) -> ClassDemand:
    """``demand`` at ``ratio`` times its rate, consuming what it did per item (or ``cpu``
    core-seconds per item, as measured)."""
    seconds = demand.device_seconds
    if seconds is None and not is_cpu_class(device_class) and demand.device_share <= 1:
        seconds = demand.device_share / demand.rate if demand.rate > 0 else 0.0
    return demand.model_copy(update={
        "rate": demand.rate * ratio,
        "cpu_seconds": cpu if cpu is not None else demand.core_seconds(),
        "device_seconds": seconds,
        "latency": None if demand.latency is None else demand.latency / ratio})


def _rescaled(unit: UnitDemand, rate: float, ran: Replicas | None,
              cpu: float | None = None) -> UnitDemand:
    # The rates the plan ran at: each option within what one replica can carry.
    unit = unit.model_copy(update={
        "classes": {c: d.within_parallelism() for c, d in unit.classes.items()},
        "alternatives": {c: [d.within_parallelism() for d in ds]
                         for c, ds in unit.alternatives.items()}})
    planned = None
    if ran is not None:
        options = unit.options(ran.device_class) if ran.device_class in unit.classes else []
        planned = next((d.rate for d in options if d.batch_size == ran.batch_size), None)
    if not planned:
        planned = max(d.rate for d in unit.classes.values())
    ratio = rate / planned
    return unit.model_copy(update={
        "classes": {c: _pinned(d, c, ratio, cpu) for c, d in unit.classes.items()},
        "alternatives": {c: [_pinned(d, c, ratio, cpu) for d in ds]
                         for c, ds in unit.alternatives.items()}})


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


def _no_plan(fleet: Fleet, units: Sequence[UnitDemand]) -> FitInputError:
    """Why no plan holds one replica of every unit at once, resource by resource."""
    def least(u: UnitDemand, key: str) -> float:
        options = [d for c in u.classes for d in u.options(c) if d.rate > 0]
        if key == "memory":
            return min(float(d.memory) for d in options)
        return min(d.cores if d.reserve else 0.0 for d in options)

    for key, label, most, fmt in (
            ("memory", "memory", max(n.memory for n in fleet.node_types), format_bytes),
            ("cores", "reserved cores", max(n.cores for n in fleet.node_types),
             lambda v: f"{v:g}")):
        needs = {u.name: least(u, key) for u in units}
        if sum(needs.values()) > most:
            shown = ", ".join(f"{name} {fmt(v)}" for name, v in needs.items() if v)
            return FitInputError(
                f"fleet {fleet.name!r} gives no plan: one replica of every unit holds "
                f"{label} ({shown}) beyond what one node holds (at most {fmt(most)}); lower "
                "the units' demands, or plan for a larger fleet")
    return FitInputError(
        f"fleet {fleet.name!r} gives no plan: its nodes cannot hold one replica of every unit "
        "at once (device slots or the units' limits); plan for a larger fleet")


def fit(profile: PipelineProfile, fleet: Fleet, *, objective: Objective = "max_throughput",
        target: float | None = None, precision: Precision = "fp16",
        efficiency: float | None = None, time_limit: float = 10.0,
        mip_gap: float = 0.01, known: Catalog | None = None,
        max_latency: float | None = None, hop_seconds: float = HOP_SECONDS,
        fuse: bool = True) -> Plan:
    """Fit a profiled pipeline to ``fleet``; the plan carries its monolithic baseline.

    ``max_latency`` (seconds) bounds each unit's call: batch sizes whose batch takes longer
    are not planned.  ``hop_seconds`` is the engine's work per frame per channel crossed
    (`HOP_SECONDS`, spread over a frame's items by `crossing_seconds`; a fitted chain of n
    units crosses n + 1, the fused baseline 2).
    ``fuse=False`` keeps the units split even where running them fused would sustain more.
    """
    known = known or catalog()
    classes = fleet_classes(fleet, known)
    units, rates, multiplicity, swept = demands(profile, classes, known, precision=precision,
                                                efficiency=efficiency, hop=hop_seconds,
                                                fleet=fleet)
    stages, _, _, _ = demands(profile, classes, known, precision=precision,
                              efficiency=efficiency, hop=0.0, fleet=fleet)
    ceiling = core_ceiling(profile)
    nodes = solver_nodes(fleet, known, ceiling)
    fitted = solve(units, nodes, objective=objective, target=target, time_limit=time_limit,
                   mip_gap=mip_gap, max_latency=max_latency)
    if fitted.throughput <= 0:
        raise _no_plan(fleet, units)
    best = fitted if objective == "max_throughput" else solve(
        units, nodes, time_limit=time_limit, mip_gap=mip_gap, max_latency=max_latency)
    base = monolithic(sequential(stages, [*rates, *swept], profile), nodes, time_limit=time_limit,
                      mip_gap=mip_gap,
                      hop_seconds=hop_seconds)
    flops = {u.name: u.flops for u in profile.units}
    fused_flops = sum(multiplicity[n] * f for n, f in flops.items() if f)
    most = max(best.bound, best.throughput, base.throughput)
    estimates = {(r.unit, r.device_class): r for r in rates}
    batched = {(r.unit, r.device_class, r.batch_size): r for r in [*rates, *swept]}
    fitted_range = _fitted_range(
        fitted, batched, multiplicity, units, nodes,
        {"objective": objective, "target": target, "time_limit": time_limit,
         "mip_gap": mip_gap, "max_latency": max_latency})
    base_range = _monolithic_range(base, estimates, multiplicity, fleet)
    split = PlanSide(label="fitted", result=fitted,
                     mfu=_mfu(fitted, {k: v for k, v in flops.items() if v}, precision, known),
                     capacity_utilization=fitted.throughput / most, **fitted_range)
    whole = PlanSide(label="monolithic", result=base,
                     mfu=_mfu(base, {FUSED: fused_flops} if fused_flops else {}, precision,
                              known),
                     capacity_utilization=base.throughput / most, **base_range)
    # Not splitting is one of the layouts a plan may choose: where running the stages in
    # turn in one unit clearly sustains more (every stage trivial beside the cost of moving
    # items), the fitted side IS the fused layout, and the split one is kept for the record.
    # Near a tie the split layout stays where it overlaps waiting or batches (the model does
    # not credit either in full); where it does neither, a tie goes to the fused layout,
    # whose fewer crossings cost less than the model charges them.
    margin = FUSE_MARGIN if any(_overlaps(u) for u in units) else 1.0
    fuse = (fuse and objective == "max_throughput"
            and base.throughput >= margin * fitted.throughput)
    return Plan(
        fitwork_version=__version__, pipeline=profile.pipeline, units=[u.name for u in units],
        fleet=fleet, objective=objective, target=target, rates=rates,
        multiplicity=multiplicity, flops=flops,
        fitted=whole.model_copy(update={"label": "fitted"}) if fuse else split,
        monolithic=whole, fused=fuse, split=split if fuse else None,
        batch_rates=swept, demands=units, nodes=nodes, core_ceiling=ceiling,
        hop_seconds=hop_seconds, max_latency=max_latency, time_limit=time_limit,
        mip_gap=mip_gap,
    )


def _overlaps(unit: UnitDemand) -> bool:
    """Whether splitting ``unit`` out gains what the model does not credit in full: several
    calls in flight (I/O), batches, or waiting (a call that spends most of its time off
    the CPU, which a replica of its own hides beside the others' work)."""
    batches = bool(unit.alternatives) or any(d.batch_size for d in unit.classes.values())
    waits = any(d.rate > 0 and d.cpu_seconds * d.rate < 0.5
                for name, d in unit.classes.items() if is_cpu_class(name))
    return unit.concurrency > 1 or batches or waits


Estimates = dict[tuple[str, str], RateEstimate]
FUSE_MARGIN = 1.05
"""How much more the fused layout must sustain before a plan runs the units fused, where the
split layout overlaps waiting or batches (elsewhere a tie is enough)."""


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


def _fitted_range(result: FitResult,
                  estimates: dict[tuple[str, str, int | None], RateEstimate],
                  multiplicity: dict[str, float], units: list[UnitDemand],
                  nodes: list[SolverNode], options: dict[str, Any]) -> dict[str, Any]:
    """The fitted side's range: the fit solved again with every transferred rate at the low
    (then high) end of its range, measured rates as they are.  Replicas are what the load
    needs (none idle), so the same replicas at other rates would say nothing at the high
    end; the range is what a plan for those rates would carry."""
    kinds: dict[str, set[bool]] = {}
    for p in result.replicas:
        e = estimates.get((p.unit, p.device_class, p.batch_size))
        if p.replicas and e is not None:
            kinds.setdefault(p.unit, set()).add(e.transferred)
    ends = []
    for end in (0, 1):
        moved = [_at_end(u, estimates, end) for u in units]
        if moved == units or result.throughput <= 0:
            ends.append(result.throughput)
            continue
        try:
            ends.append(solve(moved, nodes, **options).throughput)
        except FitworkError:  # e.g. a min-cost target out of reach at the low end
            ends.append(0.0 if end == 0 else result.throughput)
    low, high = min(ends[0], result.throughput), max(ends[1], result.throughput)
    return {"throughput_low": low, "throughput_high": high,
            **_sources(kinds, list(multiplicity))}


def _at_end(unit: UnitDemand, estimates: dict[tuple[str, str, int | None], RateEstimate],
            end: int) -> UnitDemand:
    """``unit`` with each transferred rate at its low (``end`` 0) or high (1) end."""
    def moved(name: str, d: ClassDemand) -> ClassDemand:
        e = estimates.get((unit.name, name, d.batch_size))
        if e is None or not e.transferred or e.rate <= 0:
            return d
        bound = e.bounds()[end]
        return d.model_copy(update={"rate": d.rate * bound / e.rate}) if bound > 0 else d

    classes = {c: moved(c, d) for c, d in unit.classes.items()}
    alternatives = {c: [moved(c, d) for d in ds] for c, ds in unit.alternatives.items()}
    if classes == unit.classes and alternatives == unit.alternatives:
        return unit
    return unit.model_copy(update={"classes": classes, "alternatives": alternatives})


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


plan_for = fit
"""`fit` under the name the top-level package exports it by (``fitwork.fit`` is the package)."""
