"""Events and instructions to JSON and back, by type name (no pickle): the core log's form.

An entry is ``{"type": NAME, FIELD: VALUE, ...}`` with ``NAME`` one of `KINDS`.  Fields
that carry other typed values (segments, returns, failures, counters, groups, a
placement, a progress snapshot, an error) have a codec each, chosen by the field's name;
the rest are plain JSON.  The log keeps the run's books, not its data: a list of items or
outputs is written as its length (a retried piece as its rows, an unreadable line as its
place), and a failure without its input and traceback, so decoding gives ``None`` for each
item: enough for the core, which counts and routes items but never reads them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from fitwork.engine.core.events import EVENTS, Counters, Event, Stage
from fitwork.engine.core.instructions import INSTRUCTIONS, Instruction
from fitwork.engine.core.policy import Policy
from fitwork.engine.segment import Return, Segment
from fitwork.failure import Failure
from fitwork.io.shards import Slice
from fitwork.io.unreadable import Unreadable
from fitwork.placement import Group, Placement
from fitwork.telemetry.record import Progress, UnitProgress


class Started(NamedTuple):
    """The stimulus of `RunCore.start`: the run began, and the core spawned its replicas."""


class Regroup(NamedTuple):
    """The stimulus of setting `RunCore.placement` (the adapter does, with a live re-fit's
    new allotment): replicas started from then on take their groups from ``placement``."""

    placement: Placement


Stimulus = Event | Started | Regroup
Entry = Stimulus | Instruction
KINDS: dict[str, type[Any]] = {kind.__name__: kind
                               for kind in (*EVENTS, *INSTRUCTIONS, Started, Regroup)}
"""Every type an entry can be, by the name its JSON carries."""


class Raised(Exception):
    """An error read back from a log: its type's name and its message, not the error."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class CoreConfig(NamedTuple):
    """What a `RunCore` is built from (``RunCore(*config)`` builds it again)."""

    stages: tuple[Stage, ...]
    placement: Placement
    policy: Policy
    run_id: str
    now: float


def encode(entry: Entry) -> dict[str, Any]:
    """``entry`` as JSON-ready data (see the module docstring)."""
    data: dict[str, Any] = {"type": type(entry).__name__}
    for name in _names(type(entry)):
        value = getattr(entry, name)
        codec = FIELDS.get(name)
        data[name] = codec[0](value) if codec is not None else _plain(value)
    return data


def decode(data: Mapping[str, Any]) -> Entry:
    """The entry `encode` wrote (items as ``None``, errors as `Raised`)."""
    kind = KINDS.get(data.get("type", ""))
    if kind is None:
        raise ValueError(f"core log entry of unknown type {data.get('type')!r}; known: "
                         f"{', '.join(sorted(KINDS))}")
    fields = {}
    for name in _names(kind):
        if name in data:
            codec = FIELDS.get(name)
            fields[name] = codec[1](data[name]) if codec is not None else data[name]
    entry: Entry = kind(**fields)
    return entry


def encode_config(config: CoreConfig) -> dict[str, Any]:
    """A core's construction inputs as JSON-ready data."""
    return {"stages": [dataclasses.asdict(stage) for stage in config.stages],
            "placement": config.placement.to_json(),
            "policy": dataclasses.asdict(config.policy),
            "run_id": config.run_id, "now": config.now}


def decode_config(data: Mapping[str, Any]) -> CoreConfig:
    """The inverse of `encode_config`."""
    return CoreConfig(tuple(Stage(**stage) for stage in data["stages"]),
                      Placement.from_json(data["placement"]), Policy(**data["policy"]),
                      data["run_id"], data["now"])


def _names(kind: type[Any]) -> tuple[str, ...]:
    if dataclasses.is_dataclass(kind):
        return tuple(f.name for f in dataclasses.fields(kind))
    names: tuple[str, ...] = kind._fields
    return names


def _plain(value: Any) -> Any:
    """Plain data as JSON types (tuples as lists, a range spelled out)."""
    if value is None or isinstance(value, int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_plain(v) for v in value]
    raise TypeError(f"core log: cannot write a {type(value).__name__} as JSON")


def _values(values: Sequence[Any]) -> Any:
    """A list of items or outputs: its length; a piece's rows, an unreadable line's place."""
    if values and type(values[0]) is Slice:
        return {"slices": [[v.lo, v.hi] for v in values]}
    if values and type(values[0]) is Unreadable:
        return {"unreadable": [_plain(dataclasses.asdict(v)) for v in values]}
    return len(values)


def _unvalues(data: Any) -> list[Any]:
    if isinstance(data, int):
        return [None] * data
    if "slices" in data:
        return [Slice(None, lo, hi) for lo, hi in data["slices"]]
    return [Unreadable(**{**v, "rows": tuple(v["rows"]) if v.get("rows") else None})
            for v in data["unreadable"]]


def _offsets(offsets: Sequence[int]) -> Any:
    if type(offsets) is range:
        return {"range": [offsets.start, offsets.stop, offsets.step]}
    return list(offsets)


def _unoffsets(data: Any) -> Sequence[int]:
    return range(*data["range"]) if isinstance(data, Mapping) else list(data)


def _segment(segment: Segment) -> dict[str, Any]:
    return {"frame": segment.frame, "attempt": segment.attempt,
            "offsets": _offsets(segment.offsets), "paths": _plain(segment.paths),
            "exps": _plain(segment.exps), "values": _values(segment.values)}


def _unsegment(data: Mapping[str, Any]) -> Segment:
    paths = data["paths"]
    return Segment(data["frame"], data["attempt"], _unoffsets(data["offsets"]),
                   [tuple(p) for p in paths] if paths is not None else None, data["exps"],
                   _unvalues(data["values"]))


def _return(back: Return) -> dict[str, Any]:
    return {"frame": back.frame, "offsets": _offsets(back.offsets), "exps": _plain(back.exps)}


def _unreturn(data: Mapping[str, Any]) -> Return:
    return Return(data["frame"], _unoffsets(data["offsets"]), data["exps"])


def _failure(failure: Failure) -> dict[str, Any]:
    data = {f.name: getattr(failure, f.name) for f in dataclasses.fields(failure)}
    del data["input"], data["traceback"]
    data["path"] = list(failure.path)
    return data


def _unfailure(data: Mapping[str, Any]) -> Failure:
    return Failure(**{**data, "path": tuple(data["path"])})


def _error(error: BaseException | None) -> dict[str, str] | None:
    if error is None:
        return None
    kind = error.kind if isinstance(error, Raised) else type(error).__name__
    return {"kind": kind, "message": str(error)}


def _unerror(data: Mapping[str, str] | None) -> Raised | None:
    return None if data is None else Raised(data["kind"], data["message"])


def _parts(parts: Sequence[tuple[int, Sequence[int]]] | None) -> Any:
    return None if parts is None else [[frame, _offsets(o)] for frame, o in parts]


def _unparts(data: Any) -> list[tuple[int, Sequence[int]]] | None:
    return None if data is None else [(frame, _unoffsets(o)) for frame, o in data]


def _progress(progress: Progress) -> dict[str, Any]:
    return _plain(dataclasses.asdict(progress))  # type: ignore[no-any-return]


def _unprogress(data: Mapping[str, Any]) -> Progress:
    units = {name: UnitProgress(**unit) for name, unit in data["units"].items()}
    return Progress(**{**data, "units": units})


def _many(one: Callable[[Any], Any]) -> Callable[[Sequence[Any]], list[Any]]:
    return lambda values: [one(v) for v in values]


def _optional(one: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else one(value)


def _tuple(data: Any) -> Any:
    return None if data is None else tuple(data)


FIELDS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "items": (_values, _unvalues), "values": (_values, _unvalues),
    "segment": (_segment, _unsegment), "segments": (_many(_segment), _many(_unsegment)),
    "returns": (_many(_return), _many(_unreturn)),
    "failure": (_failure, _unfailure), "failures": (_many(_failure), _many(_unfailure)),
    "counters": (_optional(lambda c: c._asdict()), _optional(lambda d: Counters(**d))),
    "intervals": (_plain, _many(tuple)),
    "group": (_optional(Group.to_json), _optional(Group.from_json)),
    "placement": (Placement.to_json, Placement.from_json),
    "progress": (_progress, _unprogress), "error": (_error, _unerror),
    "parts": (_parts, _unparts),
    "sizes": (_plain, tuple), "measured": (_plain, tuple), "span": (_plain, _tuple),
}
"""Per field name, how its value is written and read (other fields are plain JSON)."""


__all__ = ["KINDS", "CoreConfig", "Entry", "Raised", "Regroup", "Started", "Stimulus", "decode",
           "decode_config", "encode", "encode_config"]
