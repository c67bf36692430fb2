"""Random small fit problems for property tests, and an independent check of a plan."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from hypothesis import strategies as st

from fitwork.fit import ClassDemand, FitResult, NodeType, UnitDemand

GIB = 2**30
ACCELERATORS = ("gpu-a", "gpu-b")
EPS = 1e-6


@st.composite
def fleets(draw: st.DrawFn) -> list[NodeType]:
    """1-3 node types of 1-3 nodes; the first always offers cpu-x86 cores."""
    out = []
    for i in range(draw(st.integers(1, 3))):
        devices = {d: draw(st.integers(1, 4)) for d in ACCELERATORS if draw(st.booleans())}
        out.append(NodeType(
            name=f"type-{i}",
            count=draw(st.integers(1, 3)),
            cores=draw(st.sampled_from([4.0, 8.0, 16.0, 32.0])),
            memory=draw(st.sampled_from([16, 64, 256])) * GIB,
            cpu_class="cpu-x86" if i == 0 or draw(st.integers(0, 4)) else None,
            devices=devices,
            network=draw(st.sampled_from([None, 1e6, 1e8, 1e10])),
            price_per_hour=draw(st.sampled_from([0.5, 2.0, 7.5, 20.0])),
        ))
    return out


@st.composite
def pipelines(draw: st.DrawFn) -> list[UnitDemand]:
    """2-4 units; each runs on cpu-x86 (small enough for any node) and maybe accelerators."""
    out = []
    for i in range(draw(st.integers(2, 4))):
        classes = {"cpu-x86": ClassDemand(
            rate=draw(st.sampled_from([1.0, 5.0, 12.5, 40.0, 100.0])),
            cores=draw(st.sampled_from([0.5, 1.0, 2.0, 3.0, 4.0])),
            memory=draw(st.sampled_from([0, 1, 4, 8])) * GIB,
            bytes_out_per_item=draw(st.sampled_from([0.0, 1e3, 1e5])),
        )}
        for d in ACCELERATORS:
            if draw(st.booleans()):
                classes[d] = ClassDemand(
                    rate=draw(st.sampled_from([10.0, 75.0, 300.0, 1000.0])),
                    cores=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
                    memory=draw(st.sampled_from([0, 2, 16])) * GIB,
                    device_share=draw(st.sampled_from([0.25, 0.3, 0.5, 1.0, 2.0])),
                    bytes_out_per_item=draw(st.sampled_from([0.0, 1e3, 1e5])),
                )
        out.append(UnitDemand(name=f"u{i}", multiplicity=draw(st.sampled_from(
            [0.5, 0.8, 1.0, 2.0, 3.0])), classes=classes))
    return out


def per_node_limit(node: NodeType, device_class: str, demand: ClassDemand) -> int:
    """Replicas of one demand that one node can hold, computed from scratch."""
    limit = math.inf
    if demand.cores > 0:
        limit = min(limit, math.floor(node.cores / demand.cores + 1e-9))
    if demand.memory > 0:
        limit = min(limit, node.memory // demand.memory)
    share = demand.device_share
    if share > 0:
        devices = node.devices.get(device_class, 0)
        if share <= 1:
            limit = min(limit, devices * math.floor(1 / share + 1e-9))
        else:
            limit = min(limit, devices // math.ceil(share))
    return int(limit)


def check_plan(result: FitResult, units: Sequence[UnitDemand],
               node_types: Sequence[NodeType]) -> None:
    """Recompute the plan's usage from its replicas and assert it fits the fleet."""
    demand = {(u.name, d): c for u in units for d, c in u.classes.items()}
    order = {u.name: i for i, u in enumerate(units)}
    types = {n.name: n for n in node_types}
    used: dict[tuple[str, str], float] = defaultdict(float)
    capacity_per_unit: dict[str, float] = defaultdict(float)
    routed: dict[str, float] = defaultdict(float)
    for p in result.replicas:
        c, node = demand[(p.unit, p.device_class)], types[p.node_type]
        assert c.rate > 0 and p.replicas > 0
        if p.device_class.startswith("cpu-"):
            assert node.cpu_class == p.device_class
        else:
            assert node.devices.get(p.device_class, 0) > 0
        assert p.replicas <= node.count * per_node_limit(node, p.device_class, c)
        used[(node.name, "cores")] += p.replicas * c.cores
        used[(node.name, "memory")] += p.replicas * c.memory
        share = c.device_share if c.device_share <= 1 else math.ceil(c.device_share)
        used[(node.name, p.device_class)] += p.replicas * share
        assert p.items_per_s <= p.replicas * c.rate * (1 + EPS) + EPS
        capacity_per_unit[p.unit] += p.replicas * c.rate
        routed[p.unit] += p.items_per_s
        i = order[p.unit]
        if i + 1 < len(units):
            used[(node.name, "net_out")] += p.items_per_s * c.bytes_out_per_item
        if i > 0:
            up = units[i - 1]
            sent = max(d.bytes_out_per_item for d in up.classes.values() if d.rate > 0)
            used[(node.name, "net_in")] += (p.items_per_s * sent * up.multiplicity
                                           / units[i].multiplicity)
    for (name, resource), value in used.items():
        node = types[name]
        if resource == "cores":
            cap = node.cores * node.count
        elif resource == "memory":
            cap = float(node.memory * node.count)
        elif resource.startswith("net_"):
            cap = math.inf if node.network is None else node.network * node.count
        elif resource.startswith("cpu-"):
            continue
        else:
            cap = node.devices[resource] * node.count
        assert value <= cap * (1 + EPS) + EPS, (name, resource, value, cap)
    t = result.throughput
    for unit in units:
        need = unit.multiplicity * t
        assert capacity_per_unit[unit.name] >= need * (1 - EPS) - EPS, unit.name
        assert math.isclose(routed[unit.name], need, rel_tol=1e-6, abs_tol=1e-6), unit.name
    for u in result.utilization:
        assert -EPS <= u.utilization <= 1 + EPS, u
