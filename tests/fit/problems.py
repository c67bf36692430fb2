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
def fleets(draw: st.DrawFn, max_count: int = 3) -> list[NodeType]:
    """1-3 node types of 1-``max_count`` nodes; the first always offers cpu-x86 cores."""
    out = []
    for i in range(draw(st.integers(1, 3))):
        devices = {d: draw(st.integers(1, 4)) for d in ACCELERATORS if draw(st.booleans())}
        out.append(NodeType(
            name=f"type-{i}",
            count=draw(st.integers(1, max_count)),
            cores=draw(st.sampled_from([4.0, 8.0, 16.0, 32.0])),
            memory=draw(st.sampled_from([16, 64, 256])) * GIB,
            cpu_class="cpu-x86" if i == 0 or draw(st.integers(0, 4)) else None,
            devices=devices,
            network=draw(st.sampled_from([None, 1e6, 1e8, 1e10])),
            price_per_hour=draw(st.sampled_from([0.5, 2.0, 7.5, 20.0])),
            core_ceiling=draw(st.sampled_from([1.0, 1.0, 0.9, 0.75])),
        ))
    return out


@st.composite
def _cpu_demand(draw: st.DrawFn, batch: int | None = None) -> ClassDemand:
    rate = draw(st.sampled_from([1.0, 5.0, 12.5, 40.0, 100.0]))
    return ClassDemand(
        rate=rate * (batch or 1) ** 0.5,
        cores=draw(st.sampled_from([0.5, 1.0, 2.0, 3.0, 4.0])),
        memory=draw(st.sampled_from([0, 1, 4, 8])) * GIB,
        bytes_out_per_item=draw(st.sampled_from([0.0, 1e3, 1e5])),
        # A busy replica uses from a tenth of a core (it mostly waits) to all it declares,
        # or more than one process can (as measured with spinning pool threads).
        cpu_seconds=draw(st.sampled_from([None, None, 0.1 / rate, 0.5 / rate, 1.0 / rate,
                                          2.0 / rate])),
        parallelism=draw(st.sampled_from([None, 1.0, 1.0, 1.5, 4.0])),
        reserve=draw(st.sampled_from([False, False, False, True])),
        batch_size=batch,
        latency=None if batch is None else batch / (rate * batch ** 0.5),
    )


@st.composite
def pipelines(draw: st.DrawFn) -> list[UnitDemand]:
    """2-4 units; each runs on cpu-x86 (small enough for any node) and maybe accelerators.

    Some reserve their cores, some give their consumption per item, some offer other batch
    sizes, some carry max_concurrency or rate_limit.
    """
    out = []
    for i in range(draw(st.integers(2, 4))):
        batched = draw(st.integers(0, 3)) == 0
        classes = {"cpu-x86": draw(_cpu_demand(4 if batched else None))}
        alternatives = ({"cpu-x86": [draw(_cpu_demand(b)) for b in (1, 16)]} if batched else {})
        for d in ACCELERATORS:
            if draw(st.booleans()):
                rate = draw(st.sampled_from([10.0, 75.0, 300.0, 1000.0]))
                classes[d] = ClassDemand(
                    rate=rate,
                    cores=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
                    memory=draw(st.sampled_from([0, 2, 16])) * GIB,
                    device_share=draw(st.sampled_from([0.25, 0.3, 0.5, 1.0, 2.0])),
                    bytes_out_per_item=draw(st.sampled_from([0.0, 1e3, 1e5])),
                    device_seconds=draw(st.sampled_from([None, 0.5 / rate, 1.0 / rate])),
                    reserve=draw(st.sampled_from([False, False, True])),
                )
        out.append(UnitDemand(
            name=f"u{i}", multiplicity=draw(st.sampled_from([0.5, 0.8, 1.0, 2.0, 3.0])),
            classes=classes, alternatives=alternatives,
            concurrency=draw(st.sampled_from([1, 1, 4])),
            max_concurrency=draw(st.sampled_from([None, None, None, 8, 40])),
            rate_limit=draw(st.sampled_from([None, None, None, 20.0, 500.0]))))
    return out


def packed(share: float) -> float:
    """A device slot as packed: whole devices above 1."""
    return share if share <= 1 else float(math.ceil(share))


def per_node_limit(node: NodeType, device_class: str, demand: ClassDemand) -> int:
    """Replicas of one demand that one node can hold, computed from scratch."""
    limit = math.inf
    if demand.reserve and demand.cores > 0:
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
    return int(limit) if limit < math.inf else 10**9


def consumed(device_class: str, demand: ClassDemand) -> tuple[float, float]:
    """(core-seconds, device-seconds) per item from the pools, computed from scratch."""
    if demand.reserve:
        return 0.0, 0.0
    cpu = demand.cpu_seconds if demand.cpu_seconds is not None else demand.cores / demand.rate
    if device_class.startswith("cpu-") or demand.device_share > 1:
        return cpu, 0.0
    device = (demand.device_seconds if demand.device_seconds is not None
              else demand.device_share / demand.rate)
    return cpu, device


def bounded(device_class: str, demand: ClassDemand) -> ClassDemand:
    """``demand`` at the most items/s one replica carries within its parallelism, computed
    from scratch: its fluid core-seconds per item times its rate at most ``parallelism``."""
    cpu, _ = consumed(device_class, demand)
    if demand.reserve or demand.parallelism is None or cpu * demand.rate <= demand.parallelism:
        return demand
    return demand.model_copy(update={"rate": demand.parallelism / cpu, "cpu_seconds": cpu})


def _option(unit: UnitDemand, device_class: str, batch: int | None,
            rate: float) -> ClassDemand:
    options = [bounded(device_class, d)
               for d in [unit.classes[device_class], *unit.alternatives.get(device_class, [])]]
    found = [d for d in options if d.batch_size == batch and math.isclose(d.rate, rate)]
    assert found, (unit.name, device_class, batch, rate)
    return found[0]


def check_parallelism(result: FitResult, units: Sequence[UnitDemand]) -> None:
    """No planned replica consumes more cores than its unit's parallelism on that class."""
    named = {u.name: u for u in units}
    for p in result.replicas:
        unit = named[p.unit]
        options = [unit.classes[p.device_class], *unit.alternatives.get(p.device_class, [])]
        demand = next(d for d in options if d.batch_size == p.batch_size)
        if demand.parallelism is not None and not p.reserved:
            assert p.cores <= demand.parallelism * (1 + EPS) + EPS, (p, demand)


def check_plan(result: FitResult, units: Sequence[UnitDemand], node_types: Sequence[NodeType],
               max_latency: float | None = None) -> None:
    """Recompute the plan's holdings and consumption node by node and assert they fit.

    Per node: reserved cores plus fluid core-seconds over the ceiling within its cores;
    memory, device slots and device time within what it has; network each way.  Per unit:
    its routed load exactly m_u·T, no replica idle, its limits and one batch size per class.
    """
    order = {u.name: i for i, u in enumerate(units)}
    named = {u.name: u for u in units}
    types = {n.name: n for n in node_types}
    node_use: dict[tuple[str, int, str], float] = defaultdict(float)
    capacity_per_unit: dict[str, float] = defaultdict(float)
    routed: dict[str, float] = defaultdict(float)
    calls: dict[str, float] = defaultdict(float)
    in_flight: dict[str, float] = defaultdict(float)
    batches: dict[tuple[str, str], set[int | None]] = defaultdict(set)
    for p in result.replicas:
        unit, node = named[p.unit], types[p.node_type]
        c = _option(unit, p.device_class, p.batch_size, p.rate)
        assert c.rate > 0 and p.replicas > 0
        if max_latency is not None:
            assert c.call_latency() <= max_latency * (1 + EPS)
        batches[p.unit, p.device_class].add(p.batch_size)
        if p.device_class.startswith("cpu-"):
            assert node.cpu_class == p.device_class
        else:
            assert node.devices.get(p.device_class, 0) > 0
        assert p.replicas <= node.count * per_node_limit(node, p.device_class, c)
        assert p.items_per_s <= p.replicas * c.rate * (1 + EPS) + EPS
        assert p.items_per_s > 0, "replicas that carry no load"
        cpu, device = consumed(p.device_class, c)
        per = p.items_per_s / p.replicas
        if c.reserve:
            assert p.reserved and p.cores == c.cores  # a reservation is honoured exactly
        else:
            assert not p.reserved and math.isclose(p.cores, cpu * per, rel_tol=1e-6,
                                                   abs_tol=1e-12)
        assert len(p.nodes) == p.replicas and all(0 <= j < node.count for j in p.nodes)
        i = order[p.unit]
        sent_in = 0.0
        if i > 0:
            up = units[i - 1]
            sent_in = max(d.bytes_out_per_item for k in up.classes
                          for d in [up.classes[k], *up.alternatives.get(k, [])] if d.rate > 0)
            sent_in *= up.multiplicity / unit.multiplicity
        for j in p.nodes:
            use = node_use
            use[node.name, j, "cores"] += (c.cores if c.reserve else 0.0) + \
                cpu * per / node.core_ceiling
            use[node.name, j, "memory"] += c.memory
            if not p.device_class.startswith("cpu-"):
                use[node.name, j, f"slot:{p.device_class}"] += packed(c.device_share)
                use[node.name, j, f"time:{p.device_class}"] += device * per
            if i + 1 < len(units):
                use[node.name, j, "net_out"] += per * c.bytes_out_per_item
            use[node.name, j, "net_in"] += per * sent_in
        capacity_per_unit[p.unit] += p.replicas * c.rate
        routed[p.unit] += p.items_per_s
        calls[p.unit] += p.items_per_s / (c.batch_size or 1)
        in_flight[p.unit] += p.replicas * unit.concurrency
    for (name, _, resource), value in node_use.items():
        node = types[name]
        if resource == "cores":
            cap = node.cores
        elif resource == "memory":
            cap = float(node.memory)
        elif resource.startswith("net_"):
            cap = math.inf if node.network is None else node.network
        else:
            cap = float(node.devices[resource.split(":", 1)[1]])
        assert value <= cap * (1 + EPS) + EPS, (name, resource, value, cap)
    t = result.throughput
    for unit in units:
        need = unit.multiplicity * t
        assert capacity_per_unit[unit.name] >= need * (1 - EPS) - EPS, unit.name
        assert math.isclose(routed[unit.name], need, rel_tol=1e-6, abs_tol=1e-6), unit.name
        if unit.max_concurrency is not None:
            assert in_flight[unit.name] <= unit.max_concurrency
        if unit.rate_limit is not None:
            assert calls[unit.name] <= unit.rate_limit * (1 + EPS) + EPS
    assert all(len(sizes) == 1 for sizes in batches.values()), batches
    used = {n.node_type: n.nodes_used for n in result.nodes}
    for name, count in used.items():
        holding = {j for p in result.replicas if p.node_type == name for j in p.nodes}
        assert count == len(holding) <= types[name].count
    for u in result.utilization:
        assert -EPS <= u.utilization <= 1 + EPS, u


def replica_counts(result: FitResult) -> dict[tuple[str, str, str], int]:
    """A fit's replicas keyed by ``(unit, device_class, node_type)``."""
    return {(p.unit, p.device_class, p.node_type): p.replicas for p in result.replicas}
