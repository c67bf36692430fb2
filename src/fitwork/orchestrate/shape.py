"""What a plan asks of each node type it uses: nodes, per-node cores, memory, devices, Ray."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from fitwork.fit.plan import Plan, group_resources
from fitwork.fit.spec import is_cpu_class
from fitwork.hardware.catalog import Catalog, catalog
from fitwork.hardware.fleet import NodeType
from fitwork.hardware.ray_cluster import NODE_TYPE_LABEL
from fitwork.orchestrate.cluster import ClusterError, ClusterFleet, ClusterNodeType

MEMORY_MARGIN = 2 * 2**30
"""Memory a Ray worker node needs beside its replicas (raylet, object store, workers)."""


@dataclass
class NodeShape:
    """One node type of a plan: how many nodes, and what one node of it runs.

    ``cores``, ``memory`` and ``devices`` are the node type's own (what the plan was fitted
    against, and what Ray is told the node has, so the plan's bundles fit as planned);
    ``cores_used`` and ``memory_used`` are the most any one node's replicas are planned to
    use; ``device_slots`` the whole devices one node needs (its replicas' shares packed
    per device, rounded up) and ``shares`` the fractional shares (< 1) of the replicas on
    the node that has most of them; ``slots`` the whole devices one node needs of each
    device class (a node with GPUs of several types: its classes' slots add up to
    ``device_slots``).
    """

    node_type: NodeType
    nodes: int
    cores_used: float
    memory_used: int
    device_class: str | None = None
    device_slots: int = 0
    shares: list[float] = field(default_factory=list)
    whole_asks: int = 0
    units: list[str] = field(default_factory=list)
    slots: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The node type's name (the Ray label value)."""
        return self.node_type.name

    @property
    def cores(self) -> int:
        """Whole cores Ray is told one node has (Ray counts CPUs in whole numbers)."""
        return max(1, math.floor(self.node_type.cores + 1e-9))

    def ray_params(self) -> dict[str, str]:
        """``ray start`` options (without dashes) that make a node of this type as planned."""
        params = {"num-cpus": str(self.cores), "num-gpus": str(self.device_slots),
                  "labels": f"{NODE_TYPE_LABEL}={self.name}"}
        slots = {name: n for name, n in self.slots.items() if n}
        if slots:
            params["resources"] = json.dumps(slots)
        return params

    def memory_request(self) -> int:
        """Bytes one node's worker asks for: its replicas' plus Ray's margin, within the node."""
        return min(self.node_type.memory, self.memory_used + MEMORY_MARGIN)

    def hourly_price(self, known: Catalog | None = None) -> float | None:
        """USD per hour for this node type's nodes at the fleet's prices."""
        price = self.node_type.hourly_price(known or catalog())
        return None if price is None else price * self.nodes


def plan_shapes(plan: Plan) -> list[NodeShape]:
    """One `NodeShape` per node type the plan's fitted side places replicas on."""
    by_name = {n.name: n for n in plan.fleet.node_types}
    usage = {u.node_type: u for u in plan.fitted.result.nodes}
    per_node: dict[str, dict[int, list[float]]] = {}
    shares: dict[str, dict[int, list[float]]] = {}
    by_class: dict[str, dict[str, dict[int, float]]] = {}
    shapes: dict[str, NodeShape] = {}
    for p in plan.fitted.result.replicas:
        if not p.replicas:
            continue
        node = by_name[p.node_type]
        shape = shapes.get(p.node_type)
        if shape is None:
            shape = shapes[p.node_type] = NodeShape(node, 0, 0.0, 0)
            per_node[p.node_type] = {}
            shares[p.node_type] = {}
        asked = group_resources(p)
        indices = list(p.nodes) if len(p.nodes) == p.replicas else \
            [i % max(1, usage[p.node_type].nodes_used if p.node_type in usage else 1)
             for i in range(p.replicas)]
        device = not is_cpu_class(p.device_class) and asked.gpu > 0
        for index in indices:
            row = per_node[p.node_type].setdefault(index, [0.0, 0.0, 0.0])
            row[0] += asked.cpu
            row[1] += asked.memory
            row[2] += asked.gpu
            if device:
                used = by_class.setdefault(p.node_type, {}).setdefault(p.device_class, {})
                used[index] = used.get(index, 0.0) + asked.gpu
            if device and asked.gpu < 1:
                shares[p.node_type].setdefault(index, []).append(asked.gpu)
        if device:
            shape.device_class = p.device_class
            if asked.gpu >= 1:
                shape.whole_asks += p.replicas
        if p.unit not in shape.units:
            shape.units.append(p.unit)
    for name, shape in shapes.items():
        rows = per_node[name].values()
        shape.nodes = min(shape.node_type.count,
                          max(len(per_node[name]),
                              usage[name].nodes_used if name in usage else 0))
        shape.cores_used = max(r[0] for r in rows)
        shape.memory_used = int(max(r[1] for r in rows))
        shape.shares = max(shares[name].values(), key=len, default=[])
        for device_class, used in by_class.get(name, {}).items():
            slots = max(math.ceil(g - 1e-9) for g in used.values())
            shape.slots[device_class] = min(shape.node_type.devices.get(device_class, 0), slots)
        shape.device_slots = sum(shape.slots.values())
    order = [n.name for n in plan.fleet.node_types]
    return sorted(shapes.values(), key=lambda s: order.index(s.name))


def matched(plan: Plan, cluster: ClusterFleet) -> list[tuple[NodeShape, ClusterNodeType]]:
    """Each node type the plan uses, beside the cluster's node type of that name.

    A `ClusterError` (one line) when the cluster lacks the node type, has fewer nodes of it
    than the plan uses, or other devices per node.
    """
    pairs = []
    for shape in plan_shapes(plan):
        have = cluster.get(shape.name)
        if shape.nodes > have.count:
            raise ClusterError(f"the plan uses {shape.nodes} nodes of type {shape.name}; "
                               f"{cluster.kind} cluster {cluster.name!r} has {have.count}; "
                               "re-plan for this cluster's fleet")
        planned, offered = shape.node_type.devices, have.node_type().devices
        if planned != offered:
            raise ClusterError(f"node type {shape.name}: the plan has "
                               f"{planned or 'no devices'} per node, {cluster.kind} cluster "
                               f"{cluster.name!r} {offered or 'no devices'}; re-plan for this "
                               "cluster's fleet")
        pairs.append((shape, have))
    return pairs


def summary(plan: Plan, shapes: list[NodeShape]) -> list[str]:
    """Lines for the terminal: what the allocation costs per hour, and what it should do."""
    lines = []
    total: float | None = 0.0
    for s in shapes:
        price = s.hourly_price()
        devices = f", {s.device_slots} x {s.device_class}" if s.device_slots else ""
        lines.append(f"  {s.name}: {s.nodes} node(s), {s.cores} cores{devices} each, "
                     f"units {', '.join(s.units)}"
                     + (f", ${price:,.2f}/h" if price is not None else ", price unknown"))
        total = None if total is None or price is None else total + price
    low, high = plan.fitted.throughput_range
    spread = f" (range {low:,.1f} to {high:,.1f})" if (low, high) != (
        plan.fitted.throughput, plan.fitted.throughput) else ""
    cost = f"${total:,.2f} per hour" if total is not None else \
        "an unknown price per hour (a node type has no price; give price_per_hour)"
    lines.append(f"allocation: {sum(s.nodes for s in shapes)} node(s) at {cost} at the "
                 f"fleet's prices; plan predicts {plan.fitted.throughput:,.1f} items/s{spread}")
    return lines
