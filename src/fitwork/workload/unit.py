"""`Unit`: one callable plus what it demands (cores, GPU, I/O concurrency, memory) and its shape."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, overload

from fitwork.errors import UnitDefinitionError


class Kind(StrEnum):
    """How many outputs one input gives: exactly one, zero or more, or zero or one."""

    MAP = "map"
    FLAT_MAP = "flat_map"
    FILTER = "filter"


_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_SCALE = {"": 1, "B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}


def parse_memory(value: int | str | None) -> int:
    """Bytes from an int or a string such as ``"512MiB"`` or ``"2GB"``; ``None`` is 0."""
    if value is None:
        return 0
    if isinstance(value, int):
        if value < 0:
            raise UnitDefinitionError(f"memory={value}: must be >= 0 bytes")
        return value
    match = _MEMORY.match(value)
    if not match:
        raise UnitDefinitionError(
            f"memory={value!r}: not a size; write bytes as an int or a string like '512MiB'"
        )
    number, suffix = match.groups()
    key = (suffix or "").upper().removesuffix("B")
    return int(float(number) * _SCALE[key])


@dataclass(frozen=True, slots=True)
class Resources:
    """What one replica of a unit holds while it runs.

    ``cpu`` cores and ``gpu`` devices may be fractional; ``io`` is the number of calls one
    replica keeps in flight at once (``0`` means a compute unit, one call at a time);
    ``memory`` is bytes.
    """

    cpu: float = 1.0
    gpu: float = 0.0
    io: int = 0
    memory: int = 0

    def as_dict(self) -> dict[str, float]:
        """The non-zero demands, keyed by resource name."""
        return {k: v for k, v in (("cpu", self.cpu), ("gpu", self.gpu), ("io", self.io),
                                  ("memory", self.memory)) if v}


@dataclass(frozen=True)
class Unit:
    """One piece of work: a callable over an item (or a batch of items) and its demands.

    A plain function is called once per item.  A class is instantiated once per replica
    (load a model there) and the instance is called per item.  With ``batch_size`` the
    callable receives a list of items and returns a list of results of the same length
    (for a filter: a list of booleans; for a flat-map: a list of iterables).
    """

    fn: Callable[..., Any]
    name: str
    kind: Kind = Kind.MAP
    resources: Resources = field(default_factory=Resources)
    batch_size: int | None = None
    batch_wait: float = 0.05
    replicas: int = 1
    flops: float | Callable[[Any], float] | None = None

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise UnitDefinitionError(f"unit {self.name!r}: {self.fn!r} is not callable")
        if self.batch_size is not None and self.batch_size < 1:
            raise UnitDefinitionError(f"unit {self.name!r}: batch_size must be >= 1")
        if self.batch_wait < 0:
            raise UnitDefinitionError(f"unit {self.name!r}: batch_wait must be >= 0 seconds")
        if self.replicas < 1:
            raise UnitDefinitionError(f"unit {self.name!r}: replicas must be >= 1")
        if self.resources.io < 0:
            raise UnitDefinitionError(f"unit {self.name!r}: io must be >= 0 concurrent calls")
        if self.resources.io and self.batch_size:
            raise UnitDefinitionError(
                f"unit {self.name!r}: an I/O unit (io={self.resources.io}) calls one item at a "
                "time; drop batch_size, or drop io to batch in one process")
        if self.is_async and not self.resources.io:
            object.__setattr__(self, "resources", replace(self.resources, io=16))

    @property
    def is_io(self) -> bool:
        """True when one replica runs many calls concurrently (threads or asyncio)."""
        return self.resources.io > 0

    @property
    def is_async(self) -> bool:
        """True for an ``async def`` unit (or a class whose ``__call__`` is one)."""
        target = self.fn.__call__ if inspect.isclass(self.fn) else self.fn
        return inspect.iscoroutinefunction(target)

    def instantiate(self) -> Callable[..., Any]:
        """The callable one replica uses: a fresh instance for a class, else the function."""
        return self.fn() if inspect.isclass(self.fn) else self.fn

    def with_replicas(self, replicas: int) -> Unit:
        """A copy of this unit that runs ``replicas`` replicas."""
        return replace(self, replicas=replicas)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # A decorated function's module attribute is this Unit, not the function, so
        # pickle (and cloudpickle, for Ray) could not find the function by name and would
        # copy it by value, globals and all; point them at the module attribute instead.
        fields = (self.name, self.kind, self.resources, self.batch_size, self.batch_wait,
                  self.replicas, self.flops)
        module, qualname = getattr(self.fn, "__module__", None), \
            getattr(self.fn, "__qualname__", "")
        owner = sys.modules.get(module or "")
        if owner is not None and "." not in qualname:
            attribute = getattr(owner, qualname, None)
            if isinstance(attribute, Unit) and attribute.fn is self.fn:
                return _unit_from_module, (module, qualname, fields)
        return _unit_from_fields, (self.fn, fields)


def _unit_from_fields(fn: Callable[..., Any], fields: tuple[Any, ...]) -> Unit:
    return Unit(fn, *fields)


def _unit_from_module(module: str, qualname: str, fields: tuple[Any, ...]) -> Unit:
    return Unit(getattr(importlib.import_module(module), qualname).fn, *fields)


def _infer_kind(fn: Callable[..., Any]) -> Kind:
    target = fn.__call__ if inspect.isclass(fn) else fn
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        return Kind.FLAT_MAP
    return Kind.MAP


@overload
def unit(fn: Callable[..., Any], /) -> Unit: ...
@overload
def unit(
    fn: None = None, /, *, name: str | None = ..., kind: Kind | str | None = ...,
    cpu: float = ..., gpu: float = ..., io: int = ..., memory: int | str | None = ...,
    batch_size: int | None = ..., batch_wait: float = ..., replicas: int = ...,
) -> Callable[[Callable[..., Any]], Unit]: ...


def unit(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    kind: Kind | str | None = None,
    cpu: float = 1.0,
    gpu: float = 0.0,
    io: int = 0,
    memory: int | str | None = None,
    batch_size: int | None = None,
    batch_wait: float = 0.05,
    replicas: int = 1,
    flops: float | Callable[[Any], float] | None = None,
) -> Unit | Callable[[Callable[..., Any]], Unit]:
    """Declare a callable as a unit, as ``@unit`` or ``@unit(cpu=2, batch_size=32)``.

    ``kind`` defaults to ``flat_map`` for generator functions and ``map`` otherwise; pass
    ``kind="filter"`` for a predicate.  ``io=N`` runs N calls at once in one replica.
    ``flops`` declares the floating-point operations one item needs (a number, or a function
    of the item) for model-FLOPs utilization; torch code can be counted by the profiler.
    """

    def wrap(target: Callable[..., Any]) -> Unit:
        if isinstance(target, Unit):
            return target
        if not callable(target):
            raise UnitDefinitionError(f"unit(): {target!r} is not callable")
        try:
            resolved = Kind(kind) if kind is not None else _infer_kind(target)
        except ValueError:
            raise UnitDefinitionError(
                f"unit {name or getattr(target, '__name__', target)!r}: kind={kind!r} is not "
                f"one of {', '.join(k.value for k in Kind)}"
            ) from None
        return Unit(
            fn=target,
            name=name or getattr(target, "__name__", type(target).__name__),
            kind=resolved,
            resources=Resources(cpu=cpu, gpu=gpu, io=io, memory=parse_memory(memory)),
            batch_size=batch_size,
            batch_wait=batch_wait,
            replicas=replicas,
            flops=flops,
        )

    return wrap(fn) if fn is not None else wrap
