"""`Resources`: what a replica holds or a node offers (cores, GPUs, memory, named devices).

One value type serves every layer: a unit's demand, a fit's per-class demand, a node type's
capacity, and the request an engine makes of Ray.  Amounts may be fractional (a quarter of
a GPU, half a core); ``devices`` counts accelerators by catalog class (``{"H100-SXM": 1}``)
where the class matters, while ``gpu`` counts devices of whatever class the replica lands on.
`allotted_threads` is the rule every engine, and the profiler, sizes a replica's thread
pools by from its cores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

_EPSILON = 1e-9


def _frozen(mapping: Mapping[str, float] | None) -> Mapping[str, float]:
    return MappingProxyType({k: float(v) for k, v in (mapping or {}).items() if v})


@dataclass(frozen=True, slots=True)
class Resources:
    """Cores, GPUs, bytes of memory and devices by class; adds, scales and compares."""

    cpu: float = 0.0
    gpu: float = 0.0
    memory: int = 0
    devices: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", _frozen(self.devices))
        for name, value in (("cpu", self.cpu), ("gpu", self.gpu), ("memory", self.memory),
                            *self.devices.items()):
            if value < 0:
                raise ValueError(f"resources: {name}={value} must be >= 0")

    def __add__(self, other: Resources) -> Resources:
        devices = dict(self.devices)
        for name, amount in other.devices.items():
            devices[name] = devices.get(name, 0.0) + amount
        return Resources(self.cpu + other.cpu, self.gpu + other.gpu,
                         self.memory + other.memory, devices)

    def __mul__(self, factor: float) -> Resources:
        return Resources(self.cpu * factor, self.gpu * factor, int(self.memory * factor),
                         {k: v * factor for k, v in self.devices.items()})

    __rmul__ = __mul__

    def shortfall(self, capacity: Resources) -> dict[str, tuple[float, float]]:
        """Each amount this demand needs beyond ``capacity``: name -> (needed, available)."""
        short = {}
        for name, needed, have in (("cpu", self.cpu, capacity.cpu),
                                   ("gpu", self.gpu, capacity.gpu),
                                   ("memory", float(self.memory), float(capacity.memory))):
            if needed > have + _EPSILON:
                short[name] = (needed, have)
        for name, needed in self.devices.items():
            have = capacity.devices.get(name, 0.0)
            if needed > have + _EPSILON:
                short[name] = (needed, have)
        return short

    def as_dict(self) -> dict[str, float]:
        """The non-zero amounts by name (``cpu``, ``gpu``, ``memory``, device classes)."""
        amounts = {"cpu": self.cpu, "gpu": self.gpu, "memory": float(self.memory),
                   **self.devices}
        return {k: v for k, v in amounts.items() if v}

    @classmethod
    def from_dict(cls, amounts: Mapping[str, float]) -> Resources:
        """The inverse of `as_dict` (keys other than cpu, gpu and memory are devices)."""
        rest = {k: v for k, v in amounts.items() if k not in ("cpu", "gpu", "memory", "io")}
        return cls(float(amounts.get("cpu", 0.0)), float(amounts.get("gpu", 0.0)),
                   int(amounts.get("memory", 0)), rest)

    def to_ray(self) -> dict[str, Any]:
        """Actor options for Ray: ``num_cpus``, ``num_gpus``, ``memory`` and custom resources.

        A device class becomes a custom resource of that name, so a replica asking for a
        share of an ``H100-SXM`` lands only on a node that advertises one.
        """
        options: dict[str, Any] = {"num_cpus": self.cpu}
        if self.gpu:
            options["num_gpus"] = self.gpu
        if self.memory:
            options["memory"] = self.memory
        if self.devices:
            options["resources"] = dict(self.devices)
        return options

    def __repr__(self) -> str:
        parts = [f"{k}={v:g}" for k, v in self.as_dict().items()]
        return f"Resources({', '.join(parts)})"

    def __hash__(self) -> int:
        return hash((self.cpu, self.gpu, self.memory, tuple(sorted(self.devices.items()))))

    def __reduce__(self) -> tuple[Any, ...]:
        return Resources, (self.cpu, self.gpu, self.memory, dict(self.devices))


THREAD_SLACK = 0.1
"""Cores a replica may hold over a whole number before it gets another thread.  A plan's
cores per replica carry the engine's work on each item and the driver's share beside the
unit's, which run in turn with it, not beside it: a fused BLAS replica planned at 1.015
cores got two BLAS threads, which spent 1.7x the CPU per item of one on a quiet 2-core host
for 1.2x the items/s, and with one core kept busy did 0.38x its prediction (threads that
wait for each other while one has no core)."""


def allotted_threads(cores: float) -> int:
    """Threads a replica holding ``cores`` cores may run: at least one, rounded up past
    `THREAD_SLACK` (1.05 cores: one thread; 1.3: two)."""
    return max(1, math.ceil(cores - THREAD_SLACK))
