"""Read a Ray cluster's live nodes into a fleet, so `fitwork plan` can fit to it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from fitwork.hardware.catalog import Catalog, catalog
from fitwork.hardware.fleet import Fleet, NodeType
from fitwork.hardware.ray_cluster import NODE_TYPE_LABEL, connect, live_nodes

_ACCELERATOR = "accelerator_type:"


def node_shape(node: dict[str, Any], known: Catalog) -> tuple[str | None, float, int,
                                                            tuple[tuple[str, int], ...]]:
    """(label, cores, memory, devices) of one entry of ``ray.nodes()``.

    Devices are custom resources named after catalog classes (``{"H100-SXM": 8}``), plus
    ``GPU`` counted under the class its ``accelerator_type:`` resource names.
    """
    resources: dict[str, float] = node.get("Resources", {})
    devices: Counter[str] = Counter()
    for name, amount in resources.items():
        if name in known and not known.get(name).is_cpu:
            devices[known.get(name).name] += int(amount)
    if resources.get("GPU") and not devices:
        kinds = [k[len(_ACCELERATOR):] for k in resources if k.startswith(_ACCELERATOR)]
        matched = accelerator_class(kinds[0], known) if kinds else None
        if matched is not None:
            devices[matched] += int(resources["GPU"])
    label = (node.get("Labels") or {}).get(NODE_TYPE_LABEL)
    return (label, float(resources.get("CPU", 0.0)), int(resources.get("memory", 0)),
            tuple(sorted(devices.items())))


def accelerator_class(kind: str, known: Catalog) -> str | None:
    """The catalog class for Ray's ``accelerator_type`` (``H100`` reads as ``H100-SXM``)."""
    matched = known.match(kind)
    if matched is not None:
        return matched.name
    prefixed = [n for n in known.names if n.upper().startswith(kind.upper())]
    prefixed.sort(key=lambda n: ("SXM" not in n, n))  # cloud nodes of 8 are SXM boards
    return prefixed[0] if prefixed else None


def fleet_from_nodes(nodes: list[dict[str, Any]], name: str = "ray",
                     known: Catalog | None = None) -> Fleet:
    """Group live nodes into node types: those that share a ``fitwork.node-type`` label
    form that type (the engine places by the label), each unlabelled group of the same cores
    and devices one type of its own.  Memory is the least any of a type's nodes has (Ray
    reads each node's free memory as it starts, so two nodes of one machine type differ a
    little), and so are a labelled type's cores and devices where its nodes differ: every
    node of a type holds what a plan puts on one."""
    known = known or catalog()
    groups: dict[tuple[Any, ...], list[tuple[float, int, dict[str, int]]]] = {}
    for node in nodes:
        if not node.get("Alive", True):
            continue
        label, cores, memory, devices = node_shape(node, known)
        key = (label,) if label else (None, cores, devices)
        groups.setdefault(key, []).append((cores, memory, dict(devices)))
    node_types = []
    ordered = sorted(groups.items(), key=lambda item: (item[0][0] or "", -item[1][0][0]))
    for index, (key, shapes) in enumerate(ordered):
        classes = set.intersection(*(set(d) for _, _, d in shapes))
        node_types.append(NodeType(
            name=key[0] or f"ray-{index}", count=len(shapes),
            cores=min(c for c, _, _ in shapes), memory=min(m for _, m, _ in shapes),
            devices={c: min(d[c] for _, _, d in shapes) for c in sorted(classes)},
            discovered_from={"cores": "Ray node resources: CPU (the least of the type's)",
                             "memory": "Ray node resources: memory (the least of the "
                                       "type's nodes)",
                             "devices": "custom resources named after catalog classes, "
                                        "or GPU with its accelerator_type"}))
    return Fleet(name=name, node_types=node_types)


def discover_ray(address: str | None = None) -> Fleet:
    """The fleet of the Ray cluster at ``address`` (or ``RAY_ADDRESS``)."""
    connect(address)
    return fleet_from_nodes(live_nodes())
