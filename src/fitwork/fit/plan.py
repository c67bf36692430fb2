"""Plans: a pipeline's profile fitted to a fleet, shown beside its monolithic baseline.

``plan_for`` turns a profile and a fleet into solver inputs (rates from the cost model at every
measured batch size, consumption from the measured CPU and device seconds, held demands from
the units' declarations and measured memory, multiplicities from measured output ratios),
solves the fitted pipeline and the fused baseline on the same fleet under the same fluid
model, and adds the figures the solver does not know: model-FLOPs utilization per device
class and server-capacity utilization (throughput over the most these servers sustain for
this workload, the fitted plan's bound).  ``refit`` re-solves a plan with rates measured
during a run.

Each side also states a predicted RANGE: its units' rate ranges (transferred rates
their held-out error, measured ones their profile's spread and host load) carried
through the solution, bottleneck and shared cores (`fitwork.fit.ranges`).  The side
lists which units' rates were measured and which transferred.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from fitwork.document import Document
from fitwork.errors import InputError
from fitwork.fit import ranges
from fitwork.fit.candidates import format_bytes
from fitwork.fit.ceiling import settled_ceiling, trimmed_threads
from fitwork.fit.cost import Precision, RateEstimate, peak_flops
from fitwork.fit.errors import FitInputError, TargetUnreachable
from fitwork.fit.heldout import widened
from fitwork.fit.inputs import (
    HOP_SECONDS,
    demands,
    edge_seconds,
    fleet_classes,
    fused_memory,
    sequential,
    solver_nodes,
    waiting_seconds,
)
from fitwork.fit.layout_error import layout_spread, profiled_busy
from fitwork.fit.monolithic import FUSED, carried_rates, monolithic
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
    ``time_limit`` and ``mip_gap`` the options it was solved with.  ``uncertainty`` is the
    share by which one layout's prediction may miss against another's (`TIE_MARGIN`, plus
    how much wider one side's range is than the other's: what moves both alike, the host's
    load or the same units' spread, does not tell them apart); where the split and fused
    layouts predict within it of each other, ``tie`` says so and which runs by the rule
    (`tie_rule`): fused, unless split predicts more than ``1 + uncertainty`` times it or
    holds at most 1 / `MEMORY_MARGIN` of its memory where that is a real share of the
    nodes' (`MEMORY_SHARE`).  Live
    re-fitting takes it as the plan's range for a unit's rate and CPU per item.
    ``layout_error`` is the log half-width both sides' ranges were widened by for the
    model's own miss on whole plans (`fitwork.fit.layout_error`).  ``build_cpu_s`` and
    ``build_wall_s`` are, per unit, what a replica spends building it, as profiled: what a
    short run pays beyond the steady rate (`fitwork.fit.startup`).
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
    uncertainty: float = 0.0
    tie: str | None = None
    layout_error: float = 0.0
    build_cpu_s: dict[str, float] = Field(default_factory=dict)
    build_wall_s: dict[str, float] = Field(default_factory=dict)
    profiled_speed: float | None = None
    """The host's speed when the profile was taken (`PipelineProfile.host_speed`)."""

    def run_rate(self, items: int, side: str = "fitted") -> float:
        """Items/s ``side`` is predicted to realize over a run of ``items`` source items,
        its replicas' start-up and the first item's way through included
        (`fitwork.fit.startup`); the steady rate as ``items`` grows."""
        from fitwork.fit.startup import run_rate

        return run_rate(self, items, side)

    def run_overhead(self, side: str = "fitted") -> tuple[float, float]:
        """(start-up, first item) seconds a run of ``side`` pays before its steady rate."""
        from fitwork.fit.startup import first_item_seconds, startup_seconds

        return startup_seconds(self, side), first_item_seconds(self, side)

    def placement(self, node_type: str | None = None, side: str = "fitted") -> Placement:
        """The plan as engines take it: replica groups per unit, device class and node type.

        Each group carries its batch size, the predicted rate of one replica, the resources
        one replica asks an engine for (`group_resources`) and the node index of each replica
        within its node type.  With ``node_type``, only the groups planned on that node type
        (for running one host's share of a plan locally).  ``side="monolithic"`` gives the
        fused baseline's, ``side="split"`` the split layout's (the fitted side where the plan
        runs split; the side it set aside where it runs fused), so either side of a tie can
        be run.
        """
        if side not in ("fitted", "monolithic", "split"):
            raise InputError(f"side={side!r}: a plan's sides are 'fitted', 'monolithic' and "
                             "'split'")
        chosen = self.monolithic if side == "monolithic" else self.fitted
        if side == "split" and self.fused:
            if self.split is None:
                raise InputError("this plan runs fused and kept no split side; fit it again "
                                 "to run the split one")
            chosen = self.split
        rates = {(r.unit, r.device_class): r.rate for r in self.rates}
        groups = [planned_group(p, rates) for p in chosen.result.replicas
                  if p.replicas and (node_type is None or p.node_type == node_type)]
        if node_type is not None and not groups:
            used = sorted({p.node_type for p in chosen.result.replicas if p.replicas})
            raise InputError(f"plan places nothing on node type {node_type!r}; it uses "
                             f"{', '.join(used) or 'none'}")
        fused = side == "monolithic" or (side == "fitted" and self.fused)
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


def planned_group(p: Replicas, rates: dict[tuple[str, str], float]) -> Group:
    """A solved group of replicas as an engine takes it (its rate, else the profile's)."""
    rate = p.rate or rates.get((p.unit, p.device_class))
    resources = group_resources(p) if p.rate else None  # plans before fluid cores: none
    return Group(p.unit, p.replicas, device_class=p.device_class, node_type=p.node_type,
                 batch_size=p.batch_size, rate=rate, resources=resources,
                 nodes=tuple(p.nodes), io=p.threads if p.unit == FUSED else None)


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
    ran = largest_groups(plan.fitted.result)
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
    groups = tuple(planned_group(p, {}) for p in result.replicas if p.replicas)
    return Placement(groups, "refit", notes)


def largest_groups(result: FitResult) -> dict[str, Replicas]:
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


def plan_for(profile: PipelineProfile, fleet: Fleet, *, objective: Objective = "max_throughput",
             target: float | None = None, precision: Precision = "fp16",
             efficiency: float | None = None, time_limit: float = 10.0,
             mip_gap: float = 0.01, known: Catalog | None = None,
             max_latency: float | None = None, hop_seconds: float = HOP_SECONDS,
             fuse: bool = True, layout_error: float | None = None) -> Plan:
    """Fit a profiled pipeline to ``fleet``; the plan carries its monolithic baseline.

    ``max_latency`` (seconds) bounds each unit's call: batch sizes whose batch takes longer
    are not planned.  ``hop_seconds`` is the engine's work per frame per channel crossed
    (`HOP_SECONDS`, spread over a frame's items by `crossing_seconds`; a fitted chain of n
    units crosses n + 1, the fused baseline 2).
    ``fuse=False`` keeps the units split even where running them fused would sustain more.
    ``layout_error`` (a log half-width) widens both sides' ranges by the model's own miss on
    whole plans; None takes the shipped bench pipelines' (`fitwork.fit.layout_error`).
    """
    known = known or catalog()
    profile = profile.under_load()
    classes = fleet_classes(fleet, known)
    units, rates, multiplicity, swept = demands(profile, classes, known, precision=precision,
                                                efficiency=efficiency, hop=hop_seconds,
                                                fleet=fleet)
    stages, _, _, _ = demands(profile, classes, known, precision=precision,
                              efficiency=efficiency, hop=0.0, fleet=fleet)
    # each side at the ceiling its own threads bear out on this host (`settled_ceiling`)
    ceiling, nodes, fitted, best = _split_fit(profile, units, fleet, known, objective, target,
                                              time_limit=time_limit, mip_gap=mip_gap,
                                              max_latency=max_latency)
    whole_ceiling, base = _fused_baseline(profile, stages, [*rates, *swept], fleet, known,
                                          time_limit=time_limit, mip_gap=mip_gap,
                                          hop_seconds=hop_seconds)
    flops = {u.name: u.flops for u in profile.units}
    most = max(best.bound, best.throughput, base.throughput)
    spreads = {u.name: u.ratio_spread() for u in profile.units}
    split, whole = _sides(fitted, base, most, flops, [*rates, *swept], multiplicity,
                          fleet, (precision, known), spreads)
    fuse, uncertainty, tie = _choose(split, whole, objective, fuse)
    # The model's own miss widens both ranges alike, after the tie rule: it does not tell
    # the two layouts apart.
    error = layout_spread(busy=profiled_busy(profile)) if layout_error is None else layout_error
    split, whole = _widened(split, error), _widened(whole, error)
    if fuse:
        ceiling, nodes = whole_ceiling, solver_nodes(fleet, known, whole_ceiling)
    return Plan(
        fitwork_version=__version__, pipeline=profile.pipeline, units=[u.name for u in units],
        fleet=fleet, objective=objective, target=target, rates=rates,
        multiplicity=multiplicity, flops=flops,
        fitted=whole.model_copy(update={"label": "fitted"}) if fuse else split,
        monolithic=whole, fused=fuse, split=split if fuse else None,
        batch_rates=swept, demands=units, nodes=nodes, core_ceiling=ceiling,
        hop_seconds=hop_seconds, max_latency=max_latency, time_limit=time_limit,
        mip_gap=mip_gap, uncertainty=uncertainty, tie=tie, layout_error=error,
        build_cpu_s={u.name: u.build_cpu_s for u in profile.units if u.build_cpu_s},
        build_wall_s={u.name: u.build_wall_s for u in profile.units if u.build_wall_s},
        profiled_speed=profile.host_speed,
    )


def _split_fit(profile: PipelineProfile, units: list[UnitDemand], fleet: Fleet,
               known: Catalog, objective: Objective, target: float | None, *,
               time_limit: float, mip_gap: float, max_latency: float | None
               ) -> tuple[float, list[SolverNode], FitResult, FitResult]:
    """The split side: the ceiling it settles at (`settled_ceiling`), the nodes at that
    ceiling, its fit there, and the most throughput it reaches (that fit where it maximises
    throughput, else a solve that does); refused where no replica of every unit fits."""
    ceiling, fitted = settled_ceiling(profile, lambda c: solve(
        units, solver_nodes(fleet, known, c), objective=objective, target=target,
        time_limit=time_limit, mip_gap=mip_gap, max_latency=max_latency))
    nodes = solver_nodes(fleet, known, ceiling)
    if fitted.throughput <= 0:
        raise _no_plan(fleet, units)
    best = fitted if objective == "max_throughput" else solve(
        units, nodes, time_limit=time_limit, mip_gap=mip_gap, max_latency=max_latency)
    return ceiling, nodes, fitted, best


def _fused_baseline(profile: PipelineProfile, stages: list[UnitDemand],
                    rates: list[RateEstimate], fleet: Fleet, known: Catalog,
                    *, time_limit: float, mip_gap: float, hop_seconds: float
                    ) -> tuple[float, FitResult]:
    """The monolithic baseline and the ceiling it settles at (`settled_ceiling`); its fused
    chain, edge and waiting seconds and its memory built once, not inside the
    ceiling-settling solve each step re-runs.  Its threaded replicas then get the fewest
    threads that carry what each is planned to (`trimmed_threads`)."""
    chain, edge = sequential(stages, rates, profile), edge_seconds(profile)
    waiting, memory = waiting_seconds(profile), fused_memory(profile)

    def solve_at(c: float, carried: dict[str, float] | None = None) -> FitResult:
        return monolithic(chain, solver_nodes(fleet, known, c), time_limit=time_limit,
                          mip_gap=mip_gap, hop_seconds=hop_seconds,
                          edge_seconds=edge if hop_seconds else 0.0, waiting=waiting,
                          memory=memory, carried=carried)

    ceiling, base = settled_ceiling(profile, solve_at)
    return ceiling, trimmed_threads(profile, ceiling, base,
                                    lambda b: solve_at(ceiling, carried_rates(b)), mip_gap)


def _choose(split: PlanSide, whole: PlanSide, objective: Objective,
            fuse: bool) -> tuple[bool, float, str | None]:
    """Whether the plan runs fused, its uncertainty, and its tie line (None: no tie).

    Not splitting is one of the layouts a plan may choose: the fitted side IS the fused
    layout unless the split one predicts more than the plan's own uncertainty above it
    (`tie_rule`), or the two predict within it and the split one holds at most
    1 / `MEMORY_MARGIN` of the fused one's memory where that is a real share of the nodes'
    (`MEMORY_SHARE`); the split one is then kept for the record.  Both sides run the same units
    on the same host: a range the host's load or a unit's spread widens widens both alike,
    and only the difference between them is uncertainty about which is faster (on a host at
    load 12 both ranges reached +700%).
    """
    uncertainty = TIE_MARGIN + abs(_spread(split) - _spread(whole))
    tied = objective == "max_throughput" and split.throughput > 0 and \
        whole.throughput > 0 and abs(split.throughput / whole.throughput - 1) <= uncertainty
    memory = (_memory(split), _memory(whole), _owned(whole))
    fuse = fuse and objective == "max_throughput" and not (tied and _lighter(memory)) and \
        split.throughput <= (1 + uncertainty) * whole.throughput
    tie = tie_rule(split.throughput, whole.throughput, uncertainty, fuse, memory) \
        if tied else None
    return fuse, uncertainty, tie


def _widened(side: PlanSide, spread: float) -> PlanSide:
    """``side`` with its range widened in quadrature by ``spread`` (a log half-width)."""
    if spread <= 0 or side.throughput <= 0 or side.throughput_low is None \
            or side.throughput_high is None:
        return side
    low, high = widened(side.throughput_low, side.throughput_high, spread)
    return side.model_copy(update={"throughput_low": min(low, side.throughput),
                                   "throughput_high": max(high, side.throughput)})


def _sides(fitted: FitResult, base: FitResult, most: float, flops: dict[str, float | None],
           rates: list[RateEstimate], multiplicity: dict[str, float], fleet: Fleet,
           peaks: tuple[Precision, Catalog], spreads: dict[str, float]
           ) -> tuple[PlanSide, PlanSide]:
    """The split and fused sides of a plan: each solved result with its MFU, its share of
    ``most`` (the fleet's bound for this work) and its predicted range.  ``rates`` holds
    every estimate, the units' own batch sizes' first; ``spreads`` each unit's output
    ratio's log standard deviation."""
    precision, known = peaks
    fused_flops = sum(multiplicity[n] * f for n, f in flops.items() if f)
    estimates: dict[tuple[str, str], RateEstimate] = {}
    for r in rates:
        estimates.setdefault((r.unit, r.device_class), r)
    batched = {(r.unit, r.device_class, r.batch_size): r for r in rates}
    split = PlanSide(label="fitted", result=fitted,
                     mfu=_mfu(fitted, {k: v for k, v in flops.items() if v}, precision, known),
                     capacity_utilization=fitted.throughput / most,
                     **ranges.fitted_range(fitted, batched, multiplicity, spreads))
    whole = PlanSide(label="monolithic", result=base,
                     mfu=_mfu(base, {FUSED: fused_flops} if fused_flops else {}, precision,
                              known),
                     capacity_utilization=base.throughput / most,
                     **ranges.monolithic_range(base, estimates, multiplicity, fleet,
                                               spreads))
    return split, whole


TIE_MARGIN = 0.10
"""The least uncertainty a plan's prediction carries, its rates measured or not: a plan's
realized ÷ predicted throughput spreads by about this much on ``bench/fit_quality.py``'s
pipelines on a shared 2-core host.  Wider where one side's range is wider than the other's
(transferred rates on one side only)."""
MEMORY_MARGIN = 2.0
"""Where the two layouts tie on throughput, the split one runs if the fused one is predicted
to hold at least this many times its memory: a tie is no evidence either way on items/s,
and the memory a plan predicts misses by up to about this much (the OCR demo's fused plan
of 3 processes x 8 threads predicted 2.07 GiB and held 1.29 GiB of PSS on the 2-core host;
its split layout predicted 414 MiB and a hand layout like it held 396 MiB).  Where both
hold about the same, the fused layout runs: no items move between units."""
MEMORY_SHARE = 0.10
"""The memory clause of the tie rule counts only where the fused layout is predicted to hold
at least this share of the memory of the nodes it runs on: below it, halving it frees under
a twentieth of a node, which buys nothing a tie could be broken for.  Beside a busy core on
the 2-core, 24 GiB host, the demo's fused plan held 730 MiB (3%) and its tie went to the
split layout for its 360 MiB; the split then used 0.167 CPU-s a page against the 0.138
planned (the fused one 0.141 against 0.140) and reached 0.74-0.88x the best monolith."""
PROCESS_MEMORY = 4 << 20
"""Bytes a replica's process holds of its own beside its unit's (which the profile
measures): a forked local-engine worker of three trivial units held 3.9 MiB that no other
process shares (USS) on this repository's 2-core host.  Counted where the tie rule compares
the two layouts' memory, so a split of light units is not chosen for its few MiB."""
FUSE_MARGIN = 1 + TIE_MARGIN
"""How much more than the fused layout the split one must predict, at the least, to run
split (more where the plan's range is wider)."""


def _spread(side: PlanSide) -> float:
    """How far a side's predicted range reaches from its point, as a share of it."""
    low, high = side.throughput_range
    point = side.throughput
    return max(point - low, high - point) / point if point > 0 else 0.0


def tie_rule(split: float, fused: float, uncertainty: float, fused_chosen: bool,
             memory: tuple[float, float, float] | None = None) -> str:
    """One line: the two layouts are within the plan's uncertainty, and which runs, by what
    rule; with ``memory`` (bytes the split and the fused layout hold, and the nodes the
    fused one runs on own), what each holds."""
    chosen = "fused" if fused_chosen else "split (it holds less memory)" \
        if memory is not None and _lighter(memory) else "split (--no-fuse)"
    held = (f"; the split layout holds {format_bytes(memory[0])}, the fused one "
            f"{format_bytes(memory[1])} of {format_bytes(memory[2])}" if memory else "")
    return (f"split {split:,.1f} and fused {fused:,.1f} items/s are within the plan's "
            f"uncertainty (±{uncertainty:.0%}): runs {chosen}; the rule: the fused layout "
            "(no items moved between units, one process per replica) unless the split one "
            f"predicts more than {1 + uncertainty:.2f}x it or holds at most "
            f"1/{MEMORY_MARGIN:g} of its memory where that is {MEMORY_SHARE:.0%} or more of "
            f"the nodes'{held}")


def _lighter(memory: tuple[float, float, float]) -> bool:
    """Whether the split layout holds at most 1 / `MEMORY_MARGIN` of what the fused one
    does, and the fused one at least `MEMORY_SHARE` of its nodes' memory (``memory``: the
    split's and the fused one's bytes, and the bytes those nodes own)."""
    split, fused, owned = memory
    return split * MEMORY_MARGIN <= fused and fused >= MEMORY_SHARE * owned


def _owned(side: PlanSide) -> float:
    """Bytes of memory the nodes a side's replicas run on own."""
    return sum(n.memory_capacity / n.count * n.nodes_used for n in side.result.nodes
               if n.count)


def _memory(side: PlanSide) -> float:
    """Bytes a side's replicas hold, over all its nodes, each process's own included
    (`PROCESS_MEMORY`)."""
    processes = sum(p.replicas for p in side.result.replicas)
    return sum(n.memory_used for n in side.result.nodes) + processes * PROCESS_MEMORY


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

