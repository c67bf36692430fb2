"""Figures of a solved plan: usage per node type, utilization, bottleneck and replica rows.

Pure arithmetic over a `Problem`, the replicas chosen for it and the load routed to each
candidate (the solver's flows, scaled so each unit carries exactly ``m_u · T``).  Usage
separates what replicas HOLD (reserved cores, memory, device slots) from what their load
CONSUMES (core-seconds and device-seconds per second, network bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fitwork.fit.candidates import Problem, format_bytes, format_number
from fitwork.fit.packing import Packing
from fitwork.fit.result import ClassUtilization, NodeUsage, Placement

_TOL = 1e-6
FULL = 0.98
"""A shared pool counts as full from this share of it up: packing onto nodes may leave a
plan a little short of the solver's fill (see solver.py)."""


@dataclass
class Usage:
    """What a plan holds and consumes on one node type (all its nodes together)."""

    reserved: float = 0.0
    fluid: float = 0.0
    memory: float = 0.0
    devices: dict[str, float] = field(default_factory=dict)
    time: dict[str, float] = field(default_factory=dict)
    net_out: float = 0.0
    net_in: float = 0.0

    @property
    def cores(self) -> float:
        """Cores in use: reserved plus core-seconds per second consumed."""
        return self.reserved + self.fluid


def unit_capacity(problem: Problem, replicas: np.ndarray) -> list[float]:
    """Items/s each unit's replicas can process together (every replica busy)."""
    caps = [0.0] * len(problem.unit_names)
    for i, cand in enumerate(problem.candidates):
        caps[cand.unit] += cand.rate * replicas[i]
    return caps


def scaled_flows(problem: Problem, flows: np.ndarray, t: float) -> np.ndarray:
    """The solver's routing scaled so each unit carries exactly ``m_u · T``."""
    totals = [0.0] * len(problem.unit_names)
    for i, cand in enumerate(problem.candidates):
        totals[cand.unit] += flows[i]
    out = np.zeros_like(flows)
    for i, cand in enumerate(problem.candidates):
        if totals[cand.unit] > 0:
            out[i] = flows[i] * problem.multiplicity[cand.unit] * t / totals[cand.unit]
    return out


def trim(problem: Problem, replicas: np.ndarray, flows: np.ndarray) -> np.ndarray:
    """Drop replicas the routed load does not need (each candidate keeps ceil(load / rate))."""
    need = np.array([math.ceil(flows[i] / cand.rate - _TOL) if flows[i] > _TOL * cand.rate
                     else 0 for i, cand in enumerate(problem.candidates)], dtype=float)
    return np.minimum(replicas, need)


def usage(problem: Problem, replicas: np.ndarray, flows: np.ndarray) -> list[Usage]:
    """What each node type's share of the plan holds and consumes."""
    out = [Usage() for _ in problem.node_types]
    for i, cand in enumerate(problem.candidates):
        here = out[cand.node]
        here.reserved += cand.cores * replicas[i]
        here.fluid += cand.cpu * flows[i]
        here.memory += cand.memory * replicas[i]
        if cand.devices > 0:
            here.devices[cand.device_class] = (
                here.devices.get(cand.device_class, 0.0) + cand.devices * replicas[i])
        if cand.device_time > 0:
            here.time[cand.device_class] = (
                here.time.get(cand.device_class, 0.0) + cand.device_time * flows[i])
        here.net_out += cand.bytes_out * flows[i]
        here.net_in += cand.bytes_in * flows[i]
    return out


def node_usage(problem: Problem, used: list[Usage], nodes: list[int]) -> list[NodeUsage]:
    """The per node type table of a plan."""
    rows = []
    for n, node in enumerate(problem.node_types):
        rows.append(NodeUsage(
            node_type=node.name, count=node.count, nodes_used=nodes[n],
            cores_used=used[n].cores, cores_capacity=node.cores * node.count,
            cores_reserved=used[n].reserved, cores_fluid=used[n].fluid,
            core_ceiling=node.core_ceiling,
            memory_used=used[n].memory, memory_capacity=float(node.memory * node.count),
            devices_used=dict(used[n].devices), devices_time=dict(used[n].time),
            devices_capacity={d: float(k * node.count) for d, k in node.devices.items()},
            network_out=used[n].net_out, network_in=used[n].net_in,
            network_capacity=None if node.network is None else node.network * node.count,
        ))
    return rows


def utilization(problem: Problem, flows: np.ndarray, nodes: list[int]) -> list[ClassUtilization]:
    """Busy device-seconds over the device-seconds of the nodes in use, per device class."""
    busy: dict[str, float] = {}
    for i, cand in enumerate(problem.candidates):
        for device_class, per_item in cand.busy:
            busy[device_class] = busy.get(device_class, 0.0) + flows[i] * per_item
    allocated: dict[str, float] = {}
    for n, node in enumerate(problem.node_types):
        if node.cpu_class is not None:
            allocated[node.cpu_class] = allocated.get(node.cpu_class, 0.0) + nodes[n] * node.cores
        for device_class, count in node.devices.items():
            allocated[device_class] = allocated.get(device_class, 0.0) + nodes[n] * count
    out = []
    for device_class in sorted(set(busy) | set(allocated)):
        b, a = busy.get(device_class, 0.0), allocated.get(device_class, 0.0)
        if a > 0 or b > 0:
            out.append(ClassUtilization(device_class=device_class, busy=b, allocated=a,
                                        utilization=min(1.0, b / a) if a > 0 else 0.0))
    return out


def placements(problem: Problem, replicas: np.ndarray, flows: np.ndarray,
               packing: Packing | None = None) -> list[Placement]:
    """The non-zero replica groups, in pipeline order, with what one replica asks for."""
    out = []
    for i, cand in enumerate(problem.candidates):
        count = int(replicas[i])
        if count <= 0:
            continue
        per = float(flows[i]) / count
        out.append(Placement(
            unit=problem.unit_names[cand.unit], device_class=cand.device_class,
            node_type=problem.node_types[cand.node].name, replicas=count,
            items_per_s=float(flows[i]), batch_size=cand.batch_size, rate=cand.rate,
            cores=cand.cores if cand.reserve else cand.cpu * per, reserved=cand.reserve,
            memory=cand.memory, device_share=cand.share if cand.devices > 0 else 0.0,
            device_time=cand.device_time * per,
            nodes=list(packing.nodes[i]) if packing is not None else [], option=cand.option,
            threads=cand.concurrency if cand.concurrency > 1 else None,
        ))
    return out


def _room_for_one(problem: Problem, c: int, placed: float, used: Usage) -> str | None:
    """The first held resource on the candidate's node type too full for one more replica."""
    cand = problem.candidates[c]
    node = problem.node_types[cand.node]
    if placed + 1 > cand.per_node * node.count:
        return (f"{node.name}: {cand.per_node} replicas per node on {node.count} nodes "
                "already")
    checks = [
        ("cores", used.reserved + used.fluid / node.core_ceiling, cand.cores,
         node.cores * node.count, format_number),
        ("memory", used.memory, cand.memory, node.memory * node.count, format_bytes),
    ]
    if cand.devices > 0:
        checks.append((cand.device_class, used.devices.get(cand.device_class, 0.0),
                       cand.devices, node.devices.get(cand.device_class, 0) * node.count,
                       format_number))
    for resource, now, need, capacity, fmt in checks:
        if need > 0 and now + need > capacity * (1 + _TOL) + _TOL:
            return f"{node.name}: {resource} {fmt(now)}/{fmt(capacity)}"
    return None


def _saturated(problem: Problem, used: list[Usage], flows: np.ndarray,
               replicas: np.ndarray) -> list[tuple[str, dict[int, float]]]:
    """Shared pools the plan fills: (what, load each unit puts on it)."""
    full: list[tuple[str, dict[int, float]]] = []
    cands = problem.candidates
    for n, node in enumerate(problem.node_types):
        here = [(i, k) for i, k in enumerate(cands) if k.node == n]
        budget = node.core_ceiling * (node.cores * node.count - used[n].reserved)
        if used[n].fluid > 0 and used[n].fluid >= budget * FULL:
            load = {k.unit: 0.0 for _, k in here}
            for i, k in here:
                load[k.unit] += k.cpu * flows[i]
            full.append((f"the cores of {node.name} ({format_number(used[n].fluid)} "
                         f"core-seconds/s planned of {format_number(budget)} left after "
                         f"reservations at a {node.core_ceiling:.0%} ceiling)", load))
        for d, t in used[n].time.items():
            cap = node.devices.get(d, 0) * node.count
            if t >= cap * FULL:
                load = {k.unit: 0.0 for _, k in here}
                for i, k in here:
                    load[k.unit] += k.device_time * flows[i]
                full.append((f"the {d} time of {node.name} ({format_number(t)} of "
                             f"{format_number(cap)} device-seconds/s)", load))
        if node.network is not None:
            limit = node.network * node.count * FULL
            if used[n].net_out >= limit or used[n].net_in >= limit:
                load = {k.unit: 0.0 for _, k in here}
                for i, k in here:
                    load[k.unit] += flows[i] * (k.bytes_out + k.bytes_in)
                moved = max(used[n].net_out, used[n].net_in)
                full.append((f"the network of {node.name} ({_bandwidth(moved)} of "
                             f"{_bandwidth(node.network * node.count)})", load))
    for u, name in enumerate(problem.unit_names):
        most, per_s = problem.limits(u)
        mine = [(i, k) for i, k in enumerate(cands) if k.unit == u]
        if per_s is not None and sum(k.calls * flows[i] for i, k in mine) >= per_s * FULL:
            full.append((f"unit {name!r}'s rate_limit of {format_number(per_s)} calls/s",
                         {u: 1.0}))
        step = max((k.concurrency for _, k in mine), default=1)
        if most is not None and sum(k.concurrency * replicas[i] for i, k in mine) + step > most:
            full.append((f"unit {name!r}'s max_concurrency of {most} calls in flight",
                         {u: 1.0}))
    return full


def bottleneck(problem: Problem, replicas: np.ndarray, flows: np.ndarray, used: list[Usage],
               t: float, target: float | None) -> tuple[str | None, str]:
    """The unit that limits T, and one line on why it cannot grow.

    When every unit's replicas could carry more than T, a shared pool (a node type's cores,
    a device's time, a network) or an external limit holds T: the first one full is named,
    with the unit loading it most.  Otherwise it is the unit with the least replica capacity
    per source item, and the reason says what stops one more replica of it.
    """
    caps = unit_capacity(problem, replicas)
    if t <= 0:
        return None, ("the plan carries no load: the fleet cannot hold one replica of every "
                      "unit at once; add nodes or lower the units' demands")
    headroom = [caps[u] / problem.multiplicity[u] for u in range(len(caps))]
    u = int(np.argmin(headroom))
    name = problem.unit_names[u]
    count = int(sum(replicas[i] for i, k in enumerate(problem.candidates) if k.unit == u))
    held = f"its {count} replicas sustain {format_number(headroom[u])} source items/s"
    rate = format_number(t)
    if target is not None:
        return name, f"unit {name!r} has the least headroom: {held} for the target {rate}"
    full = _saturated(problem, used, flows, replicas)
    if headroom[u] > t * (1 + 1e-4):
        if not full:
            return name, (f"throughput {rate} items/s is below what every unit's replicas "
                          f"carry (at least {format_number(min(headroom))}): the solver's gap")
        what, load = full[0]
        top = max(load, key=lambda k: load[k])
        more = f" ({len(full) - 1} more full)" if len(full) > 1 else ""
        return problem.unit_names[top], (
            f"{what} holds throughput at {rate} items/s (every unit's replicas could carry "
            f"{format_number(min(headroom))}){more}; unit {problem.unit_names[top]!r} uses "
            "the most of it")
    blocked: dict[str, str] = {}
    room: list[int] = []
    for c, cand in enumerate(problem.candidates):
        if cand.unit != u:
            continue
        short = _room_for_one(problem, c, replicas[c], used[cand.node])
        if short is None:
            room.append(cand.node)
        else:
            blocked.setdefault(problem.node_types[cand.node].name, short)
    most, _ = problem.limits(u)
    if most is not None and (count + 1) * max(k.concurrency for k in problem.candidates
                                              if k.unit == u) > most:
        return name, (f"unit {name!r} limits throughput to {rate} items/s ({held}): its "
                      f"max_concurrency of {most} calls in flight allows no more replicas")
    if not room:
        shown = list(blocked.values())
        rest = "; ".join(shown[:3]) + (f"; {len(shown) - 3} more" if len(shown) > 3 else "")
        return name, (f"unit {name!r} limits throughput to {rate} items/s ({held}): no node "
                      f"type it runs on has room for another replica ({rest})")
    if full:
        return name, (f"unit {name!r} limits throughput to {rate} items/s ({held}): another "
                      f"replica would fit, but {full[0][0]} is full")
    spare = sorted({problem.node_types[n].name for n in room})
    return name, (f"unit {name!r} has the least headroom at {rate} items/s ({held}); another "
                  f"replica would fit on {', '.join(spare)}, so T is held by the units sharing "
                  "its resources or by the solver's gap")


def _bandwidth(value: float) -> str:
    for scale, unit in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if value >= scale:
            return f"{format_number(value / scale)} {unit}"
    return f"{format_number(value)} B/s"
