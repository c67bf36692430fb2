"""Candidates: every (unit, device class, node type) where one replica fits on one node."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fitwork.fit.errors import FitInputError, UnitFitsNowhere
from fitwork.fit.spec import ClassDemand, NodeType, UnitDemand, is_cpu_class

_EPS = 1e-9
TIMES = "\u00d7"  # the multiplication sign, as in "1.0 x H100" but printed properly


@dataclass(frozen=True, slots=True)
class Candidate:
    """Replicas of unit ``unit`` on ``device_class`` of node type ``node`` (indices).

    ``devices`` is the share of ``device_class`` devices one replica holds, as packed
    (a share above 1 is rounded up to whole devices). ``per_node`` is the most replicas one
    node holds on its own. ``busy`` is device-seconds (core-seconds for a ``cpu-`` class) per
    item processed, per class, for the utilization figures.
    """

    unit: int
    node: int
    device_class: str
    rate: float
    cores: float
    memory: float
    devices: float
    bytes_out: float
    bytes_in: float
    per_node: int
    busy: tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class Problem:
    """Units (pipeline order), the node types that have nodes, and the candidates between them."""

    unit_names: tuple[str, ...]
    multiplicity: tuple[float, ...]
    node_types: tuple[NodeType, ...]
    candidates: tuple[Candidate, ...]


def packed_share(share: float) -> float:
    """Devices one replica holds as packed: a fraction of one device, or whole devices above 1."""
    return share if share <= 1.0 else float(math.ceil(share - _EPS))


def per_node(node: NodeType, device_class: str, cores: float, memory: float,
             share: float) -> int:
    """How many replicas with this demand one node of ``node`` holds (0: not even one)."""
    if not node.offers(device_class):
        return 0
    limits: list[int] = []
    if cores > 0:
        limits.append(math.floor(node.cores / cores + _EPS))
    if memory > 0:
        limits.append(math.floor(node.memory / memory + _EPS))
    if share > 0:
        devices = node.devices.get(device_class, 0)
        if share <= 1.0:
            limits.append(devices * math.floor(1.0 / share + _EPS))
        else:
            limits.append(math.floor(devices / packed_share(share) + _EPS))
    return min(limits) if limits else 0


def check_inputs(units: Sequence[UnitDemand], node_types: Sequence[NodeType]) -> None:
    """Raise `FitInputError` for inputs no plan can be built from."""
    if not units:
        raise FitInputError("no units given: a plan needs at least one unit")
    for label, names in (("unit", [u.name for u in units]),
                         ("node type", [n.name for n in node_types])):
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise FitInputError(f"{label} names must be unique; repeated: {', '.join(dupes)}")
    if not any(n.count > 0 for n in node_types):
        raise FitInputError("the fleet has no nodes: give at least one node type with count > 0")
    for unit in units:
        runnable = {d: c for d, c in unit.classes.items() if c.rate > 0}
        if not runnable:
            raise FitInputError(
                f"unit {unit.name!r} has no device class with rate > 0: give its items/s on "
                "at least one class"
            )
        for name, demand in runnable.items():
            if is_cpu_class(name) and demand.device_share > 0:
                raise FitInputError(
                    f"unit {unit.name!r} on {name}: device_share={demand.device_share} on a CPU "
                    "class; a CPU replica holds cores, so give cores and device_share=0"
                )
            if is_cpu_class(name) and demand.cores <= 0:
                raise FitInputError(
                    f"unit {unit.name!r} on {name}: a CPU-class replica needs cores > 0"
                )
            if demand.cores <= 0 and demand.memory <= 0 and demand.device_share <= 0:
                raise FitInputError(
                    f"unit {unit.name!r} on {name} demands nothing (cores, memory and "
                    "device_share are 0), so its replicas would be unbounded; give its demand"
                )


def build_problem(units: Sequence[UnitDemand], node_types: Sequence[NodeType]) -> Problem:
    """Every candidate of every unit; raises `UnitFitsNowhere` for a unit without one."""
    check_inputs(units, node_types)
    fleet = tuple(n for n in node_types if n.count > 0)
    candidates: list[Candidate] = []
    for u, unit in enumerate(units):
        bytes_in = _bytes_in(units, u)
        found = False
        for name, demand in unit.classes.items():
            if demand.rate <= 0:
                continue
            share = packed_share(demand.device_share)
            busy = demand.cores / demand.rate if is_cpu_class(name) else share / demand.rate
            for n, node in enumerate(fleet):
                fits = per_node(node, name, demand.cores, demand.memory, demand.device_share)
                if fits <= 0:
                    continue
                found = True
                candidates.append(Candidate(
                    unit=u, node=n, device_class=name, rate=demand.rate, cores=demand.cores,
                    memory=float(demand.memory), devices=0.0 if is_cpu_class(name) else share,
                    bytes_out=demand.bytes_out_per_item if u + 1 < len(units) else 0.0,
                    bytes_in=bytes_in, per_node=fits, busy=((name, busy),),
                ))
        if not found:
            raise UnitFitsNowhere(unit.name, fits_nowhere_message(unit.name, unit.classes, fleet))
    return Problem(
        unit_names=tuple(u.name for u in units),
        multiplicity=tuple(u.multiplicity for u in units),
        node_types=fleet,
        candidates=tuple(candidates),
    )


def _bytes_in(units: Sequence[UnitDemand], u: int) -> float:
    """Bytes unit ``u`` receives per item it processes: the most its upstream unit may send."""
    if u == 0:
        return 0.0
    up = units[u - 1]
    sent = max((c.bytes_out_per_item for c in up.classes.values() if c.rate > 0), default=0.0)
    return sent * up.multiplicity / units[u].multiplicity


def format_number(value: float) -> str:
    """A figure for a message: ``18,432`` from a thousand up, else 4 significant digits."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def format_bytes(value: float) -> str:
    """A byte count in GiB (or MiB below one GiB), e.g. ``100 GiB``."""
    if value >= 2**30 or value == 0:
        return f"{format_number(value / 2**30)} GiB"
    return f"{format_number(value / 2**20)} MiB"


def _format_demand(device_class: str, demand: ClassDemand) -> str:
    parts = [f"{demand.cores:g} cores"]
    if demand.memory:
        parts.append(f"{format_bytes(demand.memory)} memory")
    if is_cpu_class(device_class):
        return ", ".join(parts) + f" on {device_class}"
    parts.append(f"{float(demand.device_share)} {TIMES} {device_class}")
    return ", ".join(parts)


def _format_node(node: NodeType) -> str:
    parts = [f"{node.cores:g} cores", format_bytes(node.memory)]
    parts += [f"{count} {TIMES} {name}" for name, count in node.devices.items() if count > 0]
    return ", ".join(parts)


def fits_nowhere_message(unit: str, classes: dict[str, ClassDemand],
                         fleet: Sequence[NodeType]) -> str:
    """Say what one replica needs on each class it can run on, beside the largest node."""
    options = [(name, d) for name, d in sorted(classes.items(), key=lambda kv: -kv[1].rate)
               if d.rate > 0]
    needs = _format_demand(*options[0])
    if len(options) > 1:
        needs += " (or " + "; or ".join(_format_demand(*o) for o in options[1:]) + ")"
    largest = max(fleet, key=lambda n: (n.memory, n.cores, sum(n.devices.values())))
    return (
        f"unit {unit!r} fits no node: needs {needs}; the largest node offers "
        f"{_format_node(largest)} (node type {largest.name!r}); add a node type that offers "
        "this, or lower the unit's demand"
    )
