"""The simulator's inputs: a pipeline trace (JSON lines) read and checked, and the fleet's pools
and each pipeline shape's offers on them."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from fitwork.errors import InputError
from fitwork.hardware.catalog import UnknownDeviceClass, catalog
from fitwork.hardware.fleet import Fleet, NodeType
from fitwork.hardware.units import parse_bytes
from fitwork.hardware.validation import one_line
from fitwork.jobs.cofit import Offer, Pool

Memory = Annotated[int, BeforeValidator(parse_bytes), Field(ge=0)]
GPUS = "gpus"
"""Resource key: devices of any class (a pool's sum over its classes; what a GPU replica or
bundle holds), so one quota row caps a pipeline's devices over every class at once."""


class TraceError(InputError):
    """A trace line the simulator cannot use; one line naming the file, line and field."""


class UnitLine(BaseModel):
    """One unit of a traced pipeline: per-replica rates per device class, and its needs."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    rates: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(min_length=1)
    cpu: float = Field(ge=0, allow_inf_nan=False)
    gpu: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    memory: Memory = 0
    multiplicity: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    basis: Any = None
    """Where the rates come from (measured, transferred, assumed): carried, not used."""


class TraceLine(BaseModel):
    """One pipeline of the trace."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    team: str = "default"
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    arrival_s: float = Field(ge=0, allow_inf_nan=False)
    items: float = Field(gt=0, allow_inf_nan=False)
    units: list[UnitLine] = Field(min_length=1)
    job_type: str | None = None
    max_gpus: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """The most devices its replicas hold at once, over every class: the GPUs the job asked
    for (the Philly trace's scale factor, as Gavel caps a job); none: no cap."""


def _canonical(line: TraceLine, place: str) -> TraceLine:
    """The line with every rate's class under its catalog name."""
    known = catalog()
    units = []
    for u, unit in enumerate(line.units):
        rates: dict[str, float] = {}
        for name, rate in unit.rates.items():
            try:
                rates[known.get(name).name] = rate
            except UnknownDeviceClass as exc:
                raise TraceError(f"{place}: units[{u}].rates: {exc}") from None
        units.append(unit.model_copy(update={"rates": rates}))
    return line.model_copy(update={"units": units})


def load_trace(path: Path) -> list[TraceLine]:
    """Every pipeline of the trace at ``path``, in file order; `TraceError` on the first bad
    line (``trace PATH:LINE: field: problem``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"trace {path}: cannot read: {exc}") from None
    out: list[TraceLine] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        place = f"trace {path}:{number}"
        try:
            line = TraceLine.model_validate(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise TraceError(f"{place}: not JSON ({exc.msg}, column {exc.colno})") from None
        except ValidationError as exc:
            raise TraceError(f"{place}: {one_line(exc)}") from None
        if line.id in seen:
            raise TraceError(f"{place}: id: {line.id!r} is used twice; give each line its own")
        seen.add(line.id)
        out.append(_canonical(line, place))
    if not out:
        raise TraceError(f"trace {path}: no pipelines; write one JSON object per line")
    return out


def pools(fleet: Fleet, share: float = 1.0) -> list[Pool]:
    """One pool per node type: cores, memory and a slot per device class, times ``share``."""
    out = []
    for node in fleet.node_types:
        capacity = {"cores": node.cores * share, "memory": float(node.memory) * share}
        capacity.update({f"slot:{cls}": n * share for cls, n in node.devices.items()})
        if node.devices:  # every class's devices together, for a pipeline's GPU cap
            capacity[GPUS] = sum(node.devices.values()) * share
        out.append(Pool(node.name, node.count, capacity, node.hourly_price() or 0.0))
    return out


def _offer(unit: UnitLine, u: int, n: int, node: NodeType, cls: str,
           rate: float) -> Offer | None:
    """Unit ``u`` on class ``cls`` of node type ``node`` (pool ``n``), if one replica fits."""
    held = {"cores": unit.cpu, "memory": float(unit.memory)}
    if cls in node.devices and unit.gpu > 0:
        held[f"slot:{cls}"] = unit.gpu
        caps = {"cores": node.cores, "memory": float(node.memory),
                f"slot:{cls}": float(node.devices[cls])}
    elif cls == node.cpu_class and unit.gpu == 0:
        caps = {"cores": node.cores, "memory": float(node.memory)}
    else:
        return None
    fits = min((math.floor(caps[k] / v + 1e-9) for k, v in held.items() if v > 0), default=64)
    if fits < 1:
        return None
    if f"slot:{cls}" in held:
        held[GPUS] = unit.gpu
    return Offer(0, u, n, cls, rate, {k: v for k, v in held.items() if v > 0}, {}, int(fits))


@dataclass(frozen=True)
class Shape:
    """Pipelines alike in every unit and weight: one spec in the co-fit, with a count."""

    key: str
    multiplicity: tuple[float, ...]
    weight: float
    offers: tuple[Offer, ...]
    """On every pool, job index 0 (set per re-fit)."""
    quota: dict[str, float] | None = None
    """{GPUS: the line's max_gpus} when capped (the co-fit's quota row), else None."""


def shape_of(line: TraceLine, fleet: Fleet, gpu_cap: bool = True) -> Shape:
    """The shape of a pipeline and its offers on the fleet (empty when a unit fits nowhere);
    ``gpu_cap``: hold its devices to its ``max_gpus`` (when the line has one)."""
    cap = line.max_gpus if gpu_cap else None
    key = json.dumps([line.weight, cap,
                      [u.model_dump(exclude={"name", "basis"}) for u in line.units]],
                     sort_keys=True)
    offers: list[Offer] = []
    for u, unit in enumerate(line.units):
        for n, node in enumerate(fleet.node_types):
            for cls, rate in unit.rates.items():
                offer = _offer(unit, u, n, node, cls, rate)
                if offer is not None:
                    offers.append(offer)
    return Shape(key, tuple(u.multiplicity for u in line.units), line.weight, tuple(offers),
                 None if cap is None else {GPUS: cap})


def scale_cpu_cost(lines: Sequence[TraceLine], factor: float) -> list[TraceLine]:
    """``lines`` with every CPU unit's cost per item ``factor`` times (its rates divided by
    it): the sensitivity sweep over the trace's assumed pre-/post-processing rates."""
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError(f"CPU cost factor {factor!r}: give a finite number > 0")
    out = []
    for line in lines:
        units = [u.model_copy(update={"rates": {c: r / factor for c, r in u.rates.items()}})
                 if u.gpu == 0 else u for u in line.units]
        out.append(line.model_copy(update={"units": units}))
    return out


def missing_unit(line: TraceLine, shape: Shape) -> str | None:
    """The name of the first unit that fits no node type, if any."""
    have = {o.unit for o in shape.offers}
    return next((u.name for i, u in enumerate(line.units) if i not in have), None)


def owned(fleet: Fleet) -> dict[str, float]:
    """Device class -> devices owned (CPU classes: cores)."""
    out: dict[str, float] = {}
    for node in fleet.node_types:
        out[node.cpu_class] = out.get(node.cpu_class, 0.0) + node.cores * node.count
        for cls, n in node.devices.items():
            out[cls] = out.get(cls, 0.0) + n * node.count
    return out


def class_use(offers: Sequence[Offer], amounts: Sequence[float], fleet: Fleet) -> dict[str, float]:
    """Device class -> devices (CPU: cores) that ``amounts`` replicas of ``offers`` hold."""
    out: dict[str, float] = {}
    for offer, amount in zip(offers, amounts, strict=True):
        if amount <= 0:
            continue
        node = fleet.node_types[offer.pool]
        cpu = node.cpu_class
        out[cpu] = out.get(cpu, 0.0) + amount * offer.held.get("cores", 0.0)
        slot = offer.held.get(f"slot:{offer.device_class}", 0.0)
        if slot:
            out[offer.device_class] = out.get(offer.device_class, 0.0) + amount * slot
    return out
