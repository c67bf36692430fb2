"""Whole-pipeline bundles for the simulator's job-level and static policies (Gavel's placement).

A bundle is what a job-level scheduler such as Gavel allocates: one container on one node type
holding the pipeline's GPU(s) and the cores and memory that come with them on that node type
(the node's cores and memory per device). Every unit of the pipeline runs inside it, its CPU
stages overlapped with the GPU (data-loader workers), so the units share the bundle's cores,
device time and memory. With ``d_k = sum_u m_u·held_k(u) / r_u`` (what one source item/s takes
of resource k: unit u's multiplicity, what one replica holds, one replica's rate on the class
the bundle gives it), the share of the bundle that maximises the slowest unit gives each unit
``c_u ∝ m_u·held_k(u) / r_u`` of it, and the bundle's rate is, in closed form,

    rate = min over k of  bundle_k / d_k

Device k is then busy ``rate·d_k`` of its ``bundle_k``: below 1 where the bundle is
unbalanced (e.g. input decoding that needs more cores per GPU than the node type has). A unit
replica's own core (the training loop's) counts while the replica is busy, as a fluid replica.

Bundle sizes: on a node type with devices, a bundle of pipeline p holds the most devices one
replica of any of its GPU units needs (at least 1) of one class, plus the node's cores and
memory per device times that count. A pipeline with no GPU unit gets, on any node type, a
CPU bundle of the cores one replica of each unit holds (the sum of their ``cpu``), with the
node's memory per core for each. A pipeline fits a node type whole only when every GPU unit
has a rate on the bundle's device class and every CPU unit one on the node's CPU class.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fitwork.hardware.fleet import Fleet, NodeType
from fitwork.jobs.cofit import Offer
from fitwork.jobs.sim_inputs import GPUS, TraceLine


@dataclass(frozen=True)
class Bundle:
    """One bundle of a pipeline on one node type: its co-fit offer (one unit, the pipeline's
    source rate) and, per device class, what one bundle holds and keeps busy."""

    offer: Offer
    allocated: dict[str, float]
    """Device class -> devices one bundle holds (CPU class: cores)."""
    busy: dict[str, float]
    """Device class -> devices one bundle keeps busy at its rate (CPU class: cores)."""


def _classes(line: TraceLine, node: NodeType, device: str | None) -> list[str] | None:
    """The class each unit runs on inside a bundle on ``node`` (``device``: the bundle's
    device class, None for a CPU bundle); None when some unit has no rate there."""
    out = []
    for unit in line.units:
        cls = device if unit.gpu > 0 else node.cpu_class
        if cls is None or cls not in unit.rates:
            return None
        out.append(cls)
    return out


def demand(line: TraceLine, classes: Sequence[str], device: str | None) -> dict[str, float]:
    """Resource key -> what one source item/s of ``line`` takes of it inside a bundle
    (``cores``, ``memory``, ``slot:CLASS`` device-seconds per second)."""
    need: dict[str, float] = {}
    for unit, cls in zip(line.units, classes, strict=True):
        per = unit.multiplicity / unit.rates[cls]
        held = {"cores": unit.cpu, "memory": float(unit.memory)}
        if device is not None and unit.gpu > 0:
            held[f"slot:{device}"] = unit.gpu
        for key, v in held.items():
            if v > 0:
                need[key] = need.get(key, 0.0) + per * v
    return need


def bundle_rate(capacity: dict[str, float], need: dict[str, float]) -> float:
    """The closed form: the least over resources of what the bundle has over what one source
    item/s takes (the units sharing each resource in the proportion that maximises the min)."""
    return min((capacity.get(k, 0.0) / v for k, v in need.items() if v > 0), default=0.0)


def _capacity(line: TraceLine, node: NodeType,
              device: str | None) -> tuple[dict[str, float], int] | None:
    """A bundle's resources on ``node`` and how many one node holds; None if none fits."""
    if device is not None:
        gpus = max(1, math.ceil(max(u.gpu for u in line.units) - 1e-9))
        per_device = gpus / sum(node.devices.values())
        fits = node.devices[device] // gpus
        capacity = {f"slot:{device}": float(gpus), GPUS: float(gpus),
                    "cores": node.cores * per_device, "memory": float(node.memory) * per_device}
    else:
        cores = sum(u.cpu for u in line.units)
        if cores <= 0:
            return None
        fits = math.floor(node.cores / cores + 1e-9)
        capacity = {"cores": cores, "memory": float(node.memory) * cores / node.cores}
    return (capacity, fits) if fits >= 1 else None


def bundles_of(line: TraceLine, fleet: Fleet) -> tuple[Bundle, ...]:
    """Every bundle of ``line`` on ``fleet``: per GPU node type and device class (per node
    type when the pipeline has no GPU unit)."""
    out: list[Bundle] = []
    gpu_units = any(u.gpu > 0 for u in line.units)
    for n, node in enumerate(fleet.node_types):
        devices: list[str | None] = list(node.devices) if gpu_units else [None]
        for device in devices:
            classes = _classes(line, node, device)
            sized = _capacity(line, node, device) if classes is not None else None
            if classes is None or sized is None:
                continue
            capacity, fits = sized
            need = demand(line, classes, device)
            rate = bundle_rate(capacity, need)
            if not rate > 0:
                continue
            cls = device if device is not None else node.cpu_class
            allocated = {node.cpu_class: capacity["cores"]}
            busy = {node.cpu_class: rate * need.get("cores", 0.0)}
            if device is not None:
                allocated[device] = capacity[f"slot:{device}"]
                busy[device] = rate * need.get(f"slot:{device}", 0.0)
            offer = Offer(0, 0, n, cls, rate, capacity, {}, int(fits))
            out.append(Bundle(offer, allocated, busy))
    return tuple(out)


def bundle_use(bundles: Sequence[Bundle],
               amounts: Sequence[float]) -> tuple[dict[str, float], dict[str, float]]:
    """(allocated, busy) per device class of ``amounts`` bundles of each of ``bundles``."""
    allocated: dict[str, float] = {}
    busy: dict[str, float] = {}
    for bundle, amount in zip(bundles, amounts, strict=True):
        if amount <= 0:
            continue
        for cls, v in bundle.allocated.items():
            allocated[cls] = allocated.get(cls, 0.0) + amount * v
        for cls, v in bundle.busy.items():
            busy[cls] = busy.get(cls, 0.0) + amount * v
    return allocated, busy
