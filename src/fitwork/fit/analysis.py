"""Figures of a solved plan: routing, usage per node type, utilization, bottleneck and cost.

Pure arithmetic over a `Problem` and the replicas chosen for it. Load is routed to the
replicas of a unit in proportion to their rates (how a least-loaded router spreads it),
unless that would break a network row, in which case the solver's own routing is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fitwork.fit.candidates import Problem, format_bytes, format_number
from fitwork.fit.result import ClassUtilization, NodeUsage, Placement
from fitwork.fit.spec import NodeType

_TOL = 1e-6


@dataclass
class Usage:
    """What a plan holds on one node type (all its nodes together)."""

    cores: float = 0.0
    memory: float = 0.0
    devices: dict[str, float] = field(default_factory=dict)
    net_out: float = 0.0
    net_in: float = 0.0


def unit_capacity(problem: Problem, replicas: np.ndarray) -> list[float]:
    """Items/s each unit's replicas can process together."""
    caps = [0.0] * len(problem.unit_names)
    for i, cand in enumerate(problem.candidates):
        caps[cand.unit] += cand.rate * replicas[i]
    return caps


def proportional_flows(problem: Problem, replicas: np.ndarray, t: float) -> np.ndarray:
    """Items/s per candidate when each unit's load is spread in proportion to replica rates."""
    caps = unit_capacity(problem, replicas)
    flows = np.zeros(len(problem.candidates))
    for i, cand in enumerate(problem.candidates):
        if caps[cand.unit] > 0:
            share = problem.multiplicity[cand.unit] * t / caps[cand.unit]
            flows[i] = share * cand.rate * replicas[i]
    return flows


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


def usage(problem: Problem, replicas: np.ndarray, flows: np.ndarray) -> list[Usage]:
    """Cores, memory, devices and network each node type's share of the plan holds."""
    out = [Usage() for _ in problem.node_types]
    for i, cand in enumerate(problem.candidates):
        here = out[cand.node]
        here.cores += cand.cores * replicas[i]
        here.memory += cand.memory * replicas[i]
        if cand.devices > 0:
            here.devices[cand.device_class] = (
                here.devices.get(cand.device_class, 0.0) + cand.devices * replicas[i])
        here.net_out += cand.bytes_out * flows[i]
        here.net_in += cand.bytes_in * flows[i]
    return out


def network_fits(problem: Problem, used: list[Usage], nodes: np.ndarray) -> bool:
    """Whether every node type's traffic stays within ``nodes`` NICs in each direction."""
    for n, node in enumerate(problem.node_types):
        if node.network is None:
            continue
        limit = node.network * nodes[n] * (1 + _TOL) + _TOL
        if used[n].net_out > limit or used[n].net_in > limit:
            return False
    return True


def route(problem: Problem, replicas: np.ndarray, solver_flows: np.ndarray | None, t: float,
          nodes: np.ndarray) -> np.ndarray:
    """Proportional routing if it respects the network, else the solver's (scaled) routing."""
    flows = proportional_flows(problem, replicas, t)
    if solver_flows is None or network_fits(problem, usage(problem, replicas, flows), nodes):
        return flows
    return scaled_flows(problem, solver_flows, t)


def trim(problem: Problem, replicas: np.ndarray, flows: np.ndarray) -> np.ndarray:
    """Drop replicas the routed load does not need (each candidate keeps ceil(load / rate))."""
    need = np.array([math.ceil(flows[i] / cand.rate - _TOL) if flows[i] > 0 else 0
                     for i, cand in enumerate(problem.candidates)], dtype=float)
    return np.minimum(replicas, need)


def nodes_needed(node: NodeType, used: Usage) -> int:
    """Fewest nodes of ``node`` whose summed capacity covers ``used`` (at most ``count``)."""
    ratios = [used.cores / node.cores if node.cores else 0.0,
              used.memory / node.memory if node.memory else 0.0]
    ratios += [v / node.devices[d] for d, v in used.devices.items() if node.devices.get(d)]
    if node.network is not None:
        ratios += [used.net_out / node.network, used.net_in / node.network]
    return min(node.count, max(0, math.ceil(max(ratios) - _TOL)))


def node_usage(problem: Problem, used: list[Usage], nodes: list[int]) -> list[NodeUsage]:
    """The per node type table of a plan."""
    rows = []
    for n, node in enumerate(problem.node_types):
        rows.append(NodeUsage(
            node_type=node.name, count=node.count, nodes_used=nodes[n],
            cores_used=used[n].cores, cores_capacity=node.cores * node.count,
            memory_used=used[n].memory, memory_capacity=float(node.memory * node.count),
            devices_used=dict(used[n].devices),
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
                                        utilization=b / a if a > 0 else 0.0))
    return out


def placements(problem: Problem, replicas: np.ndarray, flows: np.ndarray) -> list[Placement]:
    """The non-zero replica counts, in pipeline order."""
    out = []
    for i, cand in enumerate(problem.candidates):
        if replicas[i] > 0:
            out.append(Placement(
                unit=problem.unit_names[cand.unit], device_class=cand.device_class,
                node_type=problem.node_types[cand.node].name, replicas=int(replicas[i]),
                items_per_s=float(flows[i]),
            ))
    return out


def _shortfall(problem: Problem, c: int, placed: float, used: Usage) -> str | None:
    """The first resource on the candidate's node type too full for one more replica."""
    cand = problem.candidates[c]
    node = problem.node_types[cand.node]
    if placed + 1 > cand.per_node * node.count:
        return (f"{node.name}: {cand.per_node} replicas per node on {node.count} nodes "
                "already")
    checks = [
        ("cores", used.cores, cand.cores, node.cores * node.count, format_number),
        ("memory", used.memory, cand.memory, node.memory * node.count, format_bytes),
    ]
    if cand.devices > 0:
        checks.append((cand.device_class, used.devices.get(cand.device_class, 0.0), cand.devices,
                       node.devices.get(cand.device_class, 0) * node.count, format_number))
    for resource, now, need, capacity, fmt in checks:
        if need > 0 and now + need > capacity * (1 + _TOL) + _TOL:
            return f"{node.name}: {resource} {fmt(now)}/{fmt(capacity)}"
    return None


def bottleneck(problem: Problem, replicas: np.ndarray, flows: np.ndarray, used: list[Usage],
               t: float, target: float | None) -> tuple[str | None, str]:
    """The unit that limits T, and one line on why it cannot grow.

    When every unit's replicas could carry more than T, the network holds T: the unit moving
    the most bytes through a saturated NIC is named. Otherwise it is the unit with the least
    capacity per source item, and the reason lists what stops one more replica of it.
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
    if headroom[u] > t * (1 + 1e-4):
        named, why = _network_bottleneck(problem, flows, used, t, min(headroom))
        return named or name, why
    blocked: dict[str, str] = {}
    room: list[int] = []
    for c, cand in enumerate(problem.candidates):
        if cand.unit != u:
            continue
        short = _shortfall(problem, c, replicas[c], used[cand.node])
        if short is None:
            room.append(cand.node)
        else:
            blocked.setdefault(problem.node_types[cand.node].name, short)
    if not room:
        shown = list(blocked.values())
        full = "; ".join(shown[:3]) + (f"; {len(shown) - 3} more" if len(shown) > 3 else "")
        return name, (f"unit {name!r} limits throughput to {rate} items/s ({held}): no node "
                      f"type it runs on has room for another replica ({full})")
    saturated = sorted({problem.node_types[n].name for n in room
                        if _network_full(problem.node_types[n], used[n])})
    if saturated:
        return name, (f"unit {name!r} limits throughput to {rate} items/s ({held}): the network "
                      f"of {', '.join(saturated)} is saturated")
    spare = sorted({problem.node_types[n].name for n in room})
    return name, (f"unit {name!r} has the least headroom at {rate} items/s ({held}); another "
                  f"replica would fit on {', '.join(spare)}, so T is held by the units sharing "
                  "its resources or by the solver's gap")


def _network_bottleneck(problem: Problem, flows: np.ndarray, used: list[Usage], t: float,
                        least: float) -> tuple[str | None, str]:
    """Name the unit moving the most bytes through the NICs that are full."""
    full = [n for n, node in enumerate(problem.node_types) if _network_full(node, used[n])]
    moved: dict[int, float] = {}
    for i, cand in enumerate(problem.candidates):
        if cand.node in full:
            moved[cand.unit] = moved.get(cand.unit, 0.0) + flows[i] * (
                cand.bytes_out + cand.bytes_in)
    if not moved:
        return None, (f"throughput {format_number(t)} items/s is below what every unit's "
                      f"replicas carry (at least {format_number(least)}): the solver's gap")
    u = max(moved, key=lambda k: moved[k])
    name = problem.unit_names[u]
    nics = ", ".join(
        f"{problem.node_types[n].name} {_bandwidth(max(used[n].net_out, used[n].net_in))} "
        f"of {_bandwidth((problem.node_types[n].network or 0.0) * problem.node_types[n].count)}"
        for n in full)
    return name, (f"the network holds throughput at {format_number(t)} items/s (every unit's "
                  f"replicas could carry {format_number(least)}): NICs full on {nics}; unit "
                  f"{name!r} moves the most bytes through them")


def _bandwidth(value: float) -> str:
    for scale, unit in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if value >= scale:
            return f"{format_number(value / scale)} {unit}"
    return f"{format_number(value)} B/s"


def _network_full(node: NodeType, used: Usage) -> bool:
    if node.network is None:
        return False
    limit = node.network * node.count * (1 - _TOL)
    return used.net_out >= limit or used.net_in >= limit
