"""`Unit`: one callable, what one replica of it holds, and how its calls behave."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, cast, overload

from fitwork.errors import UnitDefinitionError
from fitwork.resources import Resources
from fitwork.workload.retry import Retry, retry_policy


class Kind(StrEnum):
    """How many outputs one input gives: exactly one, zero or more, or zero or one."""

    MAP = "map"
    FLAT_MAP = "flat_map"
    FILTER = "filter"


def _bytes_of(label: str, field: str, value: int | str | None) -> int:
    """A declared size in bytes (`fitwork.hardware.units.parse_bytes`); ``None`` is 0."""
    from fitwork.hardware.units import parse_bytes  # its package reads the catalog: on use

    if value is None:
        return 0
    try:
        return parse_bytes(value)
    except ValueError as exc:
        raise UnitDefinitionError(f"unit {label!r}: {field}={value!r}: {exc}") from None


PerItem = float | Callable[[Any], float] | None

_DEFAULT_RESOURCES = Resources(cpu=1.0)
"""What a unit that declares no resources holds (`Unit.cpu_given` is then False)."""

BATCH_FORMATS = ("numpy", "pandas", "arrow")
"""What a batched unit may ask to receive instead of a list: see `Unit.batch_format`."""
_FORMAT_LIBRARY = {"numpy": ("numpy", "numpy"), "pandas": ("pandas", "pandas"),
                   "arrow": ("pyarrow", "parquet")}


def batch_format_missing(name: str, batch_format: str, installed: bool) -> str | None:
    """The one-line error for a unit whose batch format's library is not installed (``None``
    when ``installed``): it names the unit, the library and the extra that brings it."""
    if installed:
        return None
    library, extra = _FORMAT_LIBRARY[batch_format]
    return (f"unit {name!r}: batch_format={batch_format!r} needs {library}, which is missing; "
            f"install it: pip install 'fitwork[{extra}]'")


def _format_installed(batch_format: str) -> bool:
    """Whether the library a batch format needs can be imported (found, not imported)."""
    library = _FORMAT_LIBRARY[batch_format][0]
    try:
        return importlib.util.find_spec(library) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Unit:
    """One piece of work: a callable over an item (or a batch of items) and its demands.

    A plain function is called once per item.  A class is instantiated once per replica
    (load a model there) and the instance is called per item.  With ``batch_size`` the
    callable receives a list of items and returns a list of results of the same length
    (for a filter: a list of booleans; for a flat-map: a list of iterables).  With
    ``batch_format`` (``"numpy"``, ``"pandas"`` or ``"arrow"``) it receives the batch as
    columns instead: dict items (all with the same keys) as a ``dict`` of arrays, a
    ``DataFrame`` or a ``pyarrow.Table``; other items as one stacked array, or a table with
    one column ``value``.  It returns the same kind of object (or a list) with one row per
    item, and each row becomes one result: a dict per table row, a plain value per element
    of a single array or column.

    ``resources`` is what one replica uses while it runs: the fit treats its cores as
    consumed in proportion to load unless ``reserve`` asks for a hard reservation.  ``io``
    calls run at once in one replica (threads, or an event loop for ``async def``).
    ``max_concurrency`` and ``rate_limit`` bound the calls of ALL replicas together (a
    service this unit calls can take only so much); ``retry`` and ``timeout`` say how one
    call may fail.  ``flops``, ``device_bytes`` and ``device_memory`` describe the work for
    the cost model: FLOPs and bytes moved through device memory per item, and the device
    memory one replica needs.

    ``cpu_given`` says whether ``cpu`` was declared (``None``: whether ``resources`` was
    passed at all; a copy that sets ``cpu`` for the user passes ``cpu_given=True``, an
    estimate, as decomposition makes, ``False``).  An engine that must reserve cores (Ray)
    holds a declared ``cpu`` to its figure and shares out the cores among the other units.
    """

    fn: Callable[..., Any]
    name: str
    kind: Kind = Kind.MAP
    resources: Resources = field(default_factory=lambda: _DEFAULT_RESOURCES)
    io: int = 0
    batch_size: int | None = None
    batch_wait: float = 0.05
    replicas: int = 1
    flops: PerItem = None
    retry: Retry | None = None
    timeout: float | None = None
    reserve: bool = False
    max_concurrency: int | None = None
    rate_limit: float | None = None
    device_bytes: PerItem = None
    device_memory: int | None = None
    batch_format: str | None = None
    cpu_given: bool | None = None

    def __post_init__(self) -> None:
        name = self.name
        if self.cpu_given is None:  # resources left at their default: cpu= was not given
            object.__setattr__(self, "cpu_given", self.resources is not _DEFAULT_RESOURCES)
        if not callable(self.fn):
            raise UnitDefinitionError(f"unit {name!r}: {self.fn!r} is not callable")
        if self.batch_size is not None and self.batch_size < 1:
            raise UnitDefinitionError(f"unit {name!r}: batch_size must be >= 1")
        if self.batch_wait < 0:
            raise UnitDefinitionError(f"unit {name!r}: batch_wait must be >= 0 seconds")
        if self.batch_format is not None:
            self._check_batch_format()
        if self.replicas < 1:
            raise UnitDefinitionError(f"unit {name!r}: replicas must be >= 1")
        if self.io < 0:
            raise UnitDefinitionError(f"unit {name!r}: io must be >= 0 concurrent calls")
        if self.io and self.batch_size:
            raise UnitDefinitionError(
                f"unit {name!r}: an I/O unit (io={self.io}) calls one item at a "
                "time; drop batch_size, or drop io to batch in one process")
        if self.timeout is not None and self.timeout <= 0:
            raise UnitDefinitionError(f"unit {name!r}: timeout must be > 0 seconds")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise UnitDefinitionError(f"unit {name!r}: max_concurrency must be >= 1 calls")
        if self.rate_limit is not None and self.rate_limit <= 0:
            raise UnitDefinitionError(f"unit {name!r}: rate_limit must be > 0 calls per second")
        if self.is_async and not self.io:
            object.__setattr__(self, "io", 16)
        if self.retry is None or not isinstance(self.retry, Retry):
            object.__setattr__(self, "retry", retry_policy(self.retry, self.io > 0))

    def _check_batch_format(self) -> None:
        name, batch_format = self.name, self.batch_format
        if batch_format not in BATCH_FORMATS:
            raise UnitDefinitionError(
                f"unit {name!r}: batch_format={batch_format!r} is not one of "
                f"{', '.join(BATCH_FORMATS)}; pick one, or leave it out to get a list")
        if self.batch_size is None:
            raise UnitDefinitionError(
                f"unit {name!r}: batch_format={batch_format!r} shapes a batch; add "
                "batch_size=N, or drop batch_format")
        missing = batch_format_missing(name, batch_format, _format_installed(batch_format))
        if missing:
            raise UnitDefinitionError(missing)

    @property
    def is_io(self) -> bool:
        """True when one replica runs many calls concurrently (threads or asyncio)."""
        return self.io > 0

    @property
    def is_async(self) -> bool:
        """True for an ``async def`` unit (or a class whose ``__call__`` is one)."""
        return _is_async(self.fn)

    @property
    def is_plain(self) -> bool:
        """True for a synchronous, unbatched unit on cores alone (no GPU or other device),
        with no gate its replicas share: one that can run inside another replica (a shard
        reader) or as a task of its own, call by call."""
        return (not self.batch_size and not self.is_io and not self.is_async
                and not self.resources.gpu and not self.resources.devices
                and not self.device_memory and self.max_concurrency is None
                and self.rate_limit is None)

    @property
    def policy(self) -> Retry:
        """The retry policy in force (declared, or the default for this kind of unit)."""
        assert self.retry is not None
        return self.retry

    def demand(self, asked: Resources | None = None) -> dict[str, float]:
        """The non-zero per-replica figures as a dict (``asked``, what an engine asks for
        one replica, else the unit's resources; plus ``io`` concurrency)."""
        resources = self.resources if asked is None else asked
        return {**resources.as_dict(), **({"io": float(self.io)} if self.io else {})}

    def instantiate(self) -> Callable[..., Any]:
        """The callable one replica uses: a fresh instance for a class, else the function."""
        if inspect.isclass(self.fn):
            return cast("Callable[..., Any]", self.fn())
        return self.fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # A decorated function's module attribute is this Unit, not the function, so
        # pickle (and cloudpickle, for Ray) could not find the function by name and would
        # copy it by value, globals and all; point them at the module attribute instead.
        # A unit no other process can import goes by value: one defined in ``__main__``
        # (a script's, a notebook's) or in a module loaded from a file path or the current
        # directory (marked ``__fitwork_by_value__``, see `fitwork.workload.loader`).
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "fn"}
        module, qualname = getattr(self.fn, "__module__", None), \
            getattr(self.fn, "__qualname__", "")
        owner = sys.modules.get(module or "")
        if owner is not None and by_value(owner):
            _register_by_value(owner)
            return _unit_from_fields, (self.fn, values)
        if owner is not None and "." not in qualname:
            attribute = getattr(owner, qualname, None)
            if isinstance(attribute, Unit) and attribute.fn is self.fn:
                return _unit_from_module, (module, qualname, values)
        return _unit_from_fields, (self.fn, values)


def by_value(module: Any) -> bool:
    """Whether ``module``'s functions and classes must travel by value: no other process
    can import it by its name (``__main__``, or a module fitwork loaded from a path)."""
    return module.__name__ in ("__main__", "__mp_main__") or \
        bool(getattr(module, "__fitwork_by_value__", False))


def _register_by_value(module: Any) -> None:
    """Have every loaded cloudpickle (Ray's copy, the package) copy ``module``'s functions
    and classes by value, so the helpers a unit calls travel with it (cloudpickle already
    does so for ``__main__``)."""
    if module.__name__ in ("__main__", "__mp_main__"):
        return
    for name in ("ray.cloudpickle", "cloudpickle"):
        pickler = sys.modules.get(name)
        register = getattr(pickler, "register_pickle_by_value", None)
        if register is not None:
            register(module)


def _unit_from_fields(fn: Callable[..., Any], values: dict[str, Any]) -> Unit:
    return Unit(fn, **values)


def _unit_from_module(module: str, qualname: str, values: dict[str, Any]) -> Unit:
    return Unit(getattr(importlib.import_module(module), qualname).fn, **values)


def _infer_kind(fn: Callable[..., Any]) -> Kind:
    target = fn.__call__ if inspect.isclass(fn) else fn
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        return Kind.FLAT_MAP
    return Kind.MAP


@overload
def unit(
    fn: Callable[..., Any], /, *, name: str | None = ..., kind: Kind | str | None = ...,
    cpu: float | None = ..., gpu: float = ..., io: int = ..., memory: int | str | None = ...,
    batch_size: int | None = ..., batch_wait: float = ..., batch_format: str | None = ...,
    replicas: int = ...,
    flops: PerItem = ..., retry: int | Retry | None = ..., timeout: float | None = ...,
    reserve: bool = ..., max_concurrency: int | None = ..., rate_limit: float | None = ...,
    device_bytes: PerItem = ..., device_memory: int | str | None = ...,
) -> Unit: ...
@overload
def unit(
    fn: None = None, /, *, name: str | None = ..., kind: Kind | str | None = ...,
    cpu: float | None = ..., gpu: float = ..., io: int = ..., memory: int | str | None = ...,
    batch_size: int | None = ..., batch_wait: float = ..., batch_format: str | None = ...,
    replicas: int = ...,
    flops: PerItem = ..., retry: int | Retry | None = ..., timeout: float | None = ...,
    reserve: bool = ..., max_concurrency: int | None = ..., rate_limit: float | None = ...,
    device_bytes: PerItem = ..., device_memory: int | str | None = ...,
) -> Callable[[Callable[..., Any]], Unit]: ...


def unit(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    kind: Kind | str | None = None,
    cpu: float | None = None,
    gpu: float = 0.0,
    io: int = 0,
    memory: int | str | None = None,
    batch_size: int | None = None,
    batch_wait: float = 0.05,
    batch_format: str | None = None,
    replicas: int = 1,
    flops: PerItem = None,
    retry: int | Retry | None = None,
    timeout: float | None = None,
    reserve: bool = False,
    max_concurrency: int | None = None,
    rate_limit: float | None = None,
    device_bytes: PerItem = None,
    device_memory: int | str | None = None,
) -> Unit | Callable[[Callable[..., Any]], Unit]:
    """Declare a callable as a unit, as ``@unit`` or ``@unit(cpu=2, batch_size=32)``.

    ``kind`` defaults to ``flat_map`` for generator functions and ``map`` otherwise; pass
    ``kind="filter"`` for a predicate.  ``io=N`` runs N calls at once in one replica.
    ``batch_size=N`` calls it with a list of up to N items; ``batch_format`` (``"numpy"``,
    ``"pandas"``, ``"arrow"``) hands it that batch as columns instead (see `Unit`).
    ``retry`` is tries per item (or a `fitwork.Retry`); by default an I/O unit retries
    ``OSError`` and ``TimeoutError`` three times in all and a compute unit does not retry.
    ``timeout`` bounds one call (a call past it fails with ``TimeoutError``; a synchronous
    call is abandoned, not interrupted).  ``reserve=True`` holds ``cpu`` cores whole for
    each replica instead of counting what it measurably uses.  ``max_concurrency`` and
    ``rate_limit`` (calls per second) bound the calls of all replicas together.
    ``flops`` and ``device_bytes`` declare the FLOPs and device-memory bytes one item needs
    (a number, or a function of the item); ``device_memory`` the device memory one replica
    holds (weights, caches).  ``cpu`` left out counts as one core, which a Ray run may share
    out to fit its cluster (see `Unit`); a declared ``cpu`` is held to.
    """

    def wrap(target: Callable[..., Any]) -> Unit:
        if isinstance(target, Unit):
            return target
        if not callable(target):
            raise UnitDefinitionError(f"unit(): {target!r} is not callable")
        resolved = _kind_of(target, name, kind)
        label: str = name if name else getattr(target, "__name__", type(target).__name__)
        resources = _resources_of(label, cpu, gpu, memory)
        policy = retry_policy(retry, io > 0 or _is_async(target))
        held = None if device_memory is None else _bytes_of(label, "device_memory", device_memory)
        return Unit(fn=target, name=label, kind=resolved, resources=resources, io=io,
                    batch_size=batch_size, batch_wait=batch_wait, replicas=replicas, flops=flops,
                    retry=policy, timeout=timeout, reserve=reserve, rate_limit=rate_limit,
                    max_concurrency=max_concurrency, device_bytes=device_bytes,
                    device_memory=held, batch_format=batch_format, cpu_given=cpu is not None)

    return wrap(fn) if fn is not None else wrap


def _kind_of(target: Callable[..., Any], name: str | None, kind: Kind | str | None) -> Kind:
    """The kind declared, else the one the callable implies; an error naming the unit."""
    try:
        return Kind(kind) if kind is not None else _infer_kind(target)
    except ValueError:
        raise UnitDefinitionError(
            f"unit {name or getattr(target, '__name__', target)!r}: kind={kind!r} is not "
            f"one of {', '.join(k.value for k in Kind)}"
        ) from None


def _resources_of(label: str, cpu: float | None, gpu: float, memory: int | str | None
                  ) -> Resources:
    """What one replica declares (one core where ``cpu`` is left out); an error naming it."""
    try:
        return Resources(cpu=1.0 if cpu is None else cpu, gpu=gpu,
                         memory=_bytes_of(label, "memory", memory))
    except ValueError as exc:
        raise UnitDefinitionError(f"unit {label!r}: {exc}") from None


def _is_async(fn: Callable[..., Any]) -> bool:
    target = fn.__call__ if inspect.isclass(fn) else fn
    return inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target)
