"""The monolithic baseline: the same work as ONE fused unit, replicated as far as the fleet allows.

On a node type n and one of its accelerator classes d, every stage runs on whichever of d and
n's CPU class gives it the higher rate. The fused replica holds the union of its stages'
demands: cores summed, memory summed, and the largest device share of the stages on d. It
runs the stages in sequence for each source item, so its rate is ``1 / sum_u m_u / rate_u``.
For utilization it keeps its share of d busy only while a stage on d runs
(``share · sum_{u on d} m_u / rate_u`` device-seconds per source item), and its CPU stages
keep ``sum_{u on cpu} cores_u · m_u / rate_u`` core-seconds busy. A fused unit whose stages
all run on CPU is a candidate on the CPU class. The fused unit is then solved by the same
MILP as a plan (a one-unit pipeline: no traffic between units), so the two sit side by side.
"""

from __future__ import annotations

from collections.abc import Sequence

from fitwork.fit.candidates import (
    Candidate,
    Problem,
    check_inputs,
    fits_nowhere_message,
    packed_share,
    per_node,
)
from fitwork.fit.errors import UnitFitsNowhere
from fitwork.fit.result import FitResult, Objective
from fitwork.fit.solver import solve_problem
from fitwork.fit.spec import ClassDemand, NodeType, UnitDemand, is_cpu_class

FUSED = "monolithic"

Stage = tuple[str, ClassDemand, float]


def monolithic(units: Sequence[UnitDemand], node_types: Sequence[NodeType], *,
               objective: Objective = "max_throughput", target: float | None = None,
               time_limit: float = 10.0, mip_gap: float = 0.01) -> FitResult:
    """The baseline plan: ``units`` fused into one unit named ``monolithic``, then fitted."""
    return solve_problem(fused_problem(units, node_types), objective=objective, target=target,
                         time_limit=time_limit, mip_gap=mip_gap)


def _stages(units: Sequence[UnitDemand], accel: str | None,
            cpu: str | None) -> list[Stage] | None:
    """Each unit's faster class among ``accel`` and ``cpu``; ``None`` if one runs on neither."""
    stages: list[Stage] = []
    for unit in units:
        options = [(cls, unit.classes[cls]) for cls in (accel, cpu)
                   if cls is not None and cls in unit.classes and unit.classes[cls].rate > 0]
        if not options:
            return None
        cls, demand = max(options, key=lambda o: o[1].rate)
        stages.append((cls, demand, unit.multiplicity))
    return stages


def _fused(stages: list[Stage],
           accel: str | None) -> tuple[ClassDemand, tuple[tuple[str, float], ...]]:
    """The fused replica's demand and its busy device-seconds per source item, per class."""
    seconds = sum(m / d.rate for _, d, m in stages)
    on_accel = [(d, m) for cls, d, m in stages if cls == accel]
    share = max((d.device_share for d, _ in on_accel), default=0.0)
    demand = ClassDemand(
        rate=1.0 / seconds,
        cores=max(d.cores for _, d, _ in stages),  # the stages run in turn, not at once
        memory=sum(d.memory for _, d, _ in stages),
        device_share=share,
    )
    busy: list[tuple[str, float]] = []
    if on_accel:
        assert accel is not None
        busy.append((accel, packed_share(share) * sum(m / d.rate for d, m in on_accel)))
    cpu = [(cls, d, m) for cls, d, m in stages if is_cpu_class(cls)]
    if cpu:
        busy.append((cpu[0][0], sum(d.cores * m / d.rate for _, d, m in cpu)))
    return demand, tuple(busy)


def fused_problem(units: Sequence[UnitDemand], node_types: Sequence[NodeType]) -> Problem:
    """The baseline as a one-unit `Problem`; raises `UnitFitsNowhere` if it fits no node."""
    check_inputs(units, node_types)
    fleet = tuple(n for n in node_types if n.count > 0)
    candidates: list[Candidate] = []
    for n, node in enumerate(fleet):
        accels: list[str | None] = [None, *(d for d, k in node.devices.items() if k > 0)]
        for accel in accels:
            stages = _stages(units, accel, node.cpu_class)
            if stages is None:
                continue
            uses_accel = any(cls == accel for cls, _, _ in stages)
            if accel is not None and not uses_accel:
                continue
            cls = accel if uses_accel and accel is not None else node.cpu_class
            assert cls is not None
            demand, busy = _fused(stages, accel)
            fits = per_node(node, cls, demand.cores, demand.memory, demand.device_share)
            if fits <= 0:
                continue
            candidates.append(Candidate(
                unit=0, node=n, device_class=cls, rate=demand.rate, cores=demand.cores,
                memory=float(demand.memory),
                devices=packed_share(demand.device_share) if uses_accel else 0.0,
                bytes_out=0.0, bytes_in=0.0, per_node=fits, busy=busy,
            ))
    if not candidates:
        wanted = _wanted(units)
        if not wanted:
            raise UnitFitsNowhere(FUSED, (
                f"unit {FUSED!r} fits no node: its stages run only on different accelerator "
                "classes, and one fused replica uses one accelerator class; give a stage a CPU "
                "class or a class the others share"))
        raise UnitFitsNowhere(FUSED, fits_nowhere_message(FUSED, wanted, fleet))
    return Problem(unit_names=(FUSED,), multiplicity=(1.0,), node_types=fleet,
                   candidates=tuple(candidates))


def _wanted(units: Sequence[UnitDemand]) -> dict[str, ClassDemand]:
    """What the fused replica would need on each class, for the error message."""
    classes = {c for u in units for c, d in u.classes.items() if d.rate > 0}
    cpus: list[str | None] = [*sorted(c for c in classes if is_cpu_class(c))] or [None]
    accels: list[str | None] = [*sorted(c for c in classes if not is_cpu_class(c))] or [None]
    wanted: dict[str, ClassDemand] = {}
    for cpu in cpus:
        for accel in accels:
            stages = _stages(units, accel, cpu)
            if stages is None:
                continue
            uses_accel = any(cls == accel for cls, _, _ in stages)
            key = accel if uses_accel and accel is not None else cpu
            if key is not None and key not in wanted:
                wanted[key] = _fused(stages, accel if uses_accel else None)[0]
    return wanted
