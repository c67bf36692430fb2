"""Candidates: every (unit, device class, batch option, node type) where one replica fits."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fitwork.fit.errors import FitInputError, UnitFitsNowhere
from fitwork.fit.spec import ClassDemand, NodeType, UnitDemand, is_cpu_class

_EPS = 1e-9
MOST_PER_NODE = 10_000
"""Cap on replicas of one candidate per node when nothing it holds bounds them (a bound for
HiGHS; a plan holds only the replicas its load needs)."""
TIMES = "\u00d7"  # the multiplication sign, as in "1.0 x H100" but printed properly


@dataclass(frozen=True, slots=True)
class Candidate:
    """Replicas of unit ``unit`` on ``device_class`` of node type ``node`` at one batch option.

    Held per replica (reserved): ``cores`` (0 unless the unit reserves them), ``memory`` and
    ``devices``, the device slot as packed (a share above 1 rounded up to whole devices).
    Consumed per item processed (fluid): ``cpu`` core-seconds and ``device_time``
    device-seconds.  ``per_node`` is the most replicas one node holds on its own; ``busy`` is
    busy seconds per item per class, for utilization.  ``choice`` numbers the (unit, class,
    batch option) it belongs to, ``group`` the (unit, class): a group with several choices
    runs one of them (a unit whose demands are not ``exclusive`` has a group per choice).
    ``option`` is which of the class's demands it is (0: ``classes``, k: ``alternatives``
    k - 1).  ``calls`` is calls per item (a batch is one call) and ``concurrency``
    calls one replica holds in flight.
    """

    unit: int
    node: int
    device_class: str
    rate: float
    cores: float
    memory: float
    devices: float
    cpu: float
    device_time: float
    bytes_out: float
    bytes_in: float
    per_node: int
    busy: tuple[tuple[str, float], ...]
    choice: int = 0
    group: int = 0
    batch_size: int | None = None
    latency: float = 0.0
    calls: float = 1.0
    concurrency: int = 1
    reserve: bool = False
    declared_cores: float = 0.0
    share: float = 0.0
    option: int = 0


@dataclass(frozen=True, slots=True)
class Problem:
    """Units (pipeline order), the node types that have nodes, and the candidates between them.

    ``max_concurrency`` and ``rate_limit`` are per unit (``None``: unbounded).
    """

    unit_names: tuple[str, ...]
    multiplicity: tuple[float, ...]
    node_types: tuple[NodeType, ...]
    candidates: tuple[Candidate, ...]
    max_concurrency: tuple[int | None, ...] = ()
    rate_limit: tuple[float | None, ...] = ()

    def limits(self, u: int) -> tuple[int | None, float | None]:
        """Unit ``u``'s (max_concurrency, rate_limit)."""
        conc = self.max_concurrency[u] if self.max_concurrency else None
        rate = self.rate_limit[u] if self.rate_limit else None
        return conc, rate


def packed_share(share: float) -> float:
    """Devices one replica holds as packed: a fraction of one device, or whole devices above 1."""
    return share if share <= 1.0 else float(math.ceil(share - _EPS))


def fluid(demand: ClassDemand, device_class: str) -> tuple[float, float]:
    """(core-seconds, device-seconds) one item consumes from the shared pools (0 if held)."""
    if demand.reserve:
        return 0.0, 0.0
    cpu = demand.core_seconds()
    if is_cpu_class(device_class) or demand.device_share > 1.0:
        return cpu, 0.0
    if demand.device_seconds is not None:
        return cpu, demand.device_seconds
    return cpu, demand.device_share / demand.rate if demand.rate > 0 else 0.0


def per_node(node: NodeType, device_class: str, *, cores: float, memory: float,
             share: float, load_cores: float = 0.0, load_device: float = 0.0) -> int:
    """How many replicas one node of ``node`` holds (0: not even one).

    ``cores``, ``memory`` and ``share`` are held per replica and bound the count;
    ``load_cores`` and ``load_device`` are what one fully busy replica consumes of the fluid
    pools: they need the pool to exist but do not bound the count (replicas may outnumber
    cores), so a replica that holds nothing is capped at ``MOST_PER_NODE``.
    """
    if not node.offers(device_class):
        return 0
    if load_cores > 0 and node.core_ceiling * (node.cores - cores) <= 0:
        return 0
    devices = node.devices.get(device_class, 0)
    if load_device > 0 and devices <= 0:
        return 0
    limits: list[int] = [MOST_PER_NODE]
    if cores > 0:
        limits.append(math.floor(node.cores / cores + _EPS))
    if memory > 0:
        limits.append(math.floor(node.memory / memory + _EPS))
    if share > 0:
        if share <= 1.0:
            limits.append(devices * math.floor(1.0 / share + _EPS))
        else:
            limits.append(math.floor(devices / packed_share(share) + _EPS))
    if len(limits) == 1 and load_cores <= 0 and load_device <= 0:
        return 0
    return min(limits)


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
        for name in runnable:
            for demand in unit.options(name):
                _check_demand(unit.name, name, demand)


def _check_demand(unit: str, name: str, demand: ClassDemand) -> None:
    if is_cpu_class(name) and demand.device_share > 0:
        raise FitInputError(
            f"unit {unit!r} on {name}: device_share={demand.device_share} on a CPU class; a CPU "
            "replica holds cores, so give cores and device_share=0"
        )
    if is_cpu_class(name) and demand.cores <= 0 and demand.core_seconds() <= 0:
        raise FitInputError(f"unit {unit!r} on {name}: a CPU-class replica needs cores > 0")
    load = sum(fluid(demand, name)) * demand.rate
    if demand.cores <= 0 and demand.memory <= 0 and demand.device_share <= 0 and load <= 0:
        raise FitInputError(
            f"unit {unit!r} on {name} demands nothing (cores, memory and device_share are 0), "
            "so its replicas would be unbounded; give its demand"
        )


def _options(unit: UnitDemand, name: str,
             max_latency: float | None) -> list[tuple[int, ClassDemand]]:
    """The unit's runnable options on ``name`` within the latency bound, with their index,
    each at the rate one replica can carry (`ClassDemand.within_parallelism`)."""
    options = [(k, d.within_parallelism()) for k, d in enumerate(unit.options(name))]
    return [(k, d) for k, d in options if d.rate > 0
            and (max_latency is None or d.call_latency() <= max_latency * (1 + 1e-9))]


def _latency_error(unit: UnitDemand, max_latency: float) -> FitInputError:
    least = min((d.call_latency(), d.batch_size or 1, name)
                for name in unit.classes for d in unit.options(name) if d.rate > 0)
    return FitInputError(
        f"unit {unit.name!r} cannot meet max_latency={max_latency:g}s: its quickest call takes "
        f"{least[0]:.3g}s (batch {least[1]} on {least[2]}); raise max_latency or measure "
        "smaller batches")


def build_problem(units: Sequence[UnitDemand], node_types: Sequence[NodeType], *,
                  max_latency: float | None = None) -> Problem:
    """Every candidate of every unit; raises `UnitFitsNowhere` for a unit without one.

    With ``max_latency``, options whose one call (a batch) takes longer are left out.
    """
    check_inputs(units, node_types)
    if max_latency is not None and not max_latency > 0:
        raise FitInputError(f"max_latency={max_latency}: must be > 0 seconds")
    fleet = tuple(n for n in node_types if n.count > 0)
    candidates: list[Candidate] = []
    choice = group = 0
    for u, unit in enumerate(units):
        bytes_in = _bytes_in(units, u)
        found = within = False
        for name in unit.classes:
            options = _options(unit, name, max_latency)
            within = within or bool(options)
            for k, demand in options:
                for n, node in enumerate(fleet):
                    cand = candidate(u, n, node, name, demand, unit, bytes_in,
                                      last=u + 1 == len(units), choice=choice, group=group,
                                      option=k)
                    if cand is not None:
                        found = True
                        candidates.append(cand)
                choice += 1
                group += 0 if unit.exclusive else 1
            group += 1 if unit.exclusive else 0
        if not within:
            assert max_latency is not None
            raise _latency_error(unit, max_latency)
        if not found:
            raise UnitFitsNowhere(unit.name, fits_nowhere_message(unit.name, unit.classes, fleet))
    return Problem(
        unit_names=tuple(u.name for u in units),
        multiplicity=tuple(u.multiplicity for u in units),
        node_types=fleet,
        candidates=tuple(candidates),
        max_concurrency=tuple(u.max_concurrency for u in units),
        rate_limit=tuple(u.rate_limit for u in units),
    )


def candidate(u: int, n: int, node: NodeType, name: str, demand: ClassDemand,
               unit: UnitDemand, bytes_in: float, *, last: bool, choice: int,
               group: int, option: int = 0) -> Candidate | None:
    """Replicas of ``demand`` on ``node`` (``None``: not one fits), at the rate one replica
    can carry within its parallelism (`ClassDemand.within_parallelism`), its calls in
    threads where it has more than one in flight (`ClassDemand.threaded`)."""
    demand = (demand.threaded() if unit.concurrency > 1 else demand).within_parallelism()
    cpu, device_time = fluid(demand, name)
    share = packed_share(demand.device_share)
    held = demand.cores if demand.reserve else 0.0
    memory = demand.held_memory(unit.concurrency)
    fits = per_node(node, name, cores=held, memory=memory,
                    share=demand.device_share, load_cores=cpu * demand.rate,
                    load_device=device_time * demand.rate)
    if fits <= 0:
        return None
    used = demand.core_seconds()
    if is_cpu_class(name):
        busy: tuple[tuple[str, float], ...] = ((name, used),)
    else:
        gpu = device_time if device_time > 0 else share / demand.rate
        busy = ((name, gpu),) + (((node.cpu_class, used),) if node.cpu_class else ())
    return Candidate(
        unit=u, node=n, device_class=name, rate=demand.rate, cores=held,
        memory=float(memory), devices=0.0 if is_cpu_class(name) else share,
        cpu=cpu, device_time=device_time,
        bytes_out=0.0 if last else demand.bytes_out_per_item, bytes_in=bytes_in,
        per_node=fits, busy=busy, choice=choice, group=group, batch_size=demand.batch_size,
        latency=demand.call_latency(), calls=1.0 / (demand.batch_size or 1),
        concurrency=unit.concurrency, reserve=demand.reserve, declared_cores=demand.cores,
        share=demand.device_share, option=option)


def _bytes_in(units: Sequence[UnitDemand], u: int) -> float:
    """Bytes unit ``u`` receives per item it processes: the most its upstream unit may send."""
    if u == 0:
        return 0.0
    up = units[u - 1]
    sent = max((d.bytes_out_per_item for name in up.classes for d in up.options(name)
                if d.rate > 0), default=0.0)
    return sent * up.multiplicity / units[u].multiplicity


def format_number(value: float) -> str:
    """A figure for a message: ``18,432`` from a thousand up, else 4 significant digits."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def format_bytes(value: float) -> str:
    """A byte count in GiB (or MiB below one GiB), e.g. ``100 GiB``."""
    if value >= 2**30 or value == 0:
        return f"{format_number(value / 2**30)} GiB"
    return f"{format_number(value / 2**20)} MiB"


def format_demand(device_class: str, demand: ClassDemand) -> str:
    """What one replica holds, e.g. ``2 reserved cores, 16 GiB memory, 0.25 x H100``."""
    parts = [f"{demand.cores:g} reserved cores"] if demand.reserve else []
    if demand.memory:
        parts.append(f"{format_bytes(demand.memory)} memory")
    if is_cpu_class(device_class):
        return (", ".join(parts) or "cores") + f" on {device_class}"
    parts.append(f"{float(demand.device_share)} {TIMES} {device_class}")
    return ", ".join(parts)


def format_node(node: NodeType) -> str:
    """A node's capacity, e.g. ``64 cores, 512 GiB, 8 x A100-80GB``."""
    parts = [f"{node.cores:g} cores", format_bytes(node.memory)]
    parts += [f"{count} {TIMES} {name}" for name, count in node.devices.items() if count > 0]
    return ", ".join(parts)


def fits_nowhere_message(unit: str, classes: dict[str, ClassDemand],
                         fleet: Sequence[NodeType]) -> str:
    """Say what one replica holds on each class it can run on, beside the largest node."""
    options = [(name, d) for name, d in sorted(classes.items(), key=lambda kv: -kv[1].rate)
               if d.rate > 0]
    needs = format_demand(*options[0])
    if len(options) > 1:
        needs += " (or " + "; or ".join(format_demand(*o) for o in options[1:]) + ")"
    largest = max(fleet, key=lambda n: (n.memory, n.cores, sum(n.devices.values())))
    return (
        f"unit {unit!r} fits no node: needs {needs}; the largest node offers "
        f"{format_node(largest)} (node type {largest.name!r}); add a node type that offers "
        "this, or lower the unit's demand"
    )
