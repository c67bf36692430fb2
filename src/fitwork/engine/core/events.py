"""What a driver tells the run core: typed events, each stamped with the driver's clock.

Events are named tuples: typed, immutable, and cheap to pickle, since the local engine's
workers send `Ready`, `Taken` and `Done` to the driver as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from fitwork.engine.segment import Return, Segment
from fitwork.failure import Failure


class Counters(NamedTuple):
    """A worker's cumulative counters (seconds are its own measurements)."""

    items_in: int = 0
    items_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    busy_s: float = 0.0
    blocked_s: float = 0.0
    cpu_s: float = 0.0
    queued_s: float = 0.0


class Fed(NamedTuple):
    """Items pulled from the source (``end`` once it is exhausted, ``error`` if it raised)."""

    items: list[Any]
    now: float
    end: bool = False
    error: BaseException | None = None


class Ready(NamedTuple):
    """A worker is up: its process id, the node it runs on, and the CPU seconds it spent
    before its first call (starting, building its unit), which its counters leave out."""

    worker: int
    pid: int
    now: float
    node: str | None = None
    build_cpu_s: float = 0.0


class Taken(NamedTuple):
    """A worker holds a frame: for each segment, its feed frame and offsets."""

    worker: int
    frame: int
    parts: Sequence[tuple[int, Sequence[int]]]
    now: float


class Done(NamedTuple):
    """A worker finished frames: the weight they returned, their failures, its counters."""

    worker: int
    frames: Sequence[int]
    returns: Sequence[Return]
    failures: Sequence[Failure]
    now: float
    counters: Counters | None = None
    intervals: Sequence[tuple[float, float]] = ()


class Measured(NamedTuple):
    """A worker's latest counters and the busy intervals it has not reported yet."""

    worker: int
    counters: Counters
    now: float
    intervals: Sequence[tuple[float, float]] = ()


class Arrived(NamedTuple):
    """Outputs of the last unit reached the driver."""

    segments: Sequence[Segment]
    now: float
    returns: Sequence[Return] = ()
    failures: Sequence[Failure] = ()


class Exited(NamedTuple):
    """A worker is gone: ``clean`` when it stopped as asked; ``fatal`` if it never started.

    ``died_in``: where its engine saw it die, ``(frame, place, row)``: the frame it had
    taken (as its `Taken` said), the place in it of the item it was running, counted across
    the frame's segments, and for a sharded source's reader the row of that shard it was
    reading (-1: none); None where not known (a batch, calls at once, between items)."""

    worker: int
    clean: bool
    now: float
    cause: str = ""
    code: int | None = None
    fatal: str | None = None
    died_in: tuple[int, int, int] | None = None


class Lost(NamedTuple):
    """A frame a worker held is gone though the worker lives (its outputs were lost).

    With ``parts`` (feed frame, offsets), only those items of it are gone: a replica of
    stage ``stage`` died holding them (on Ray, the replica that was sent them says so).
    ``blame`` False: the items ran, but their outputs went with a process that died of
    something else (on Ray, the owner of the last unit's outputs); they are sent again and
    the loss does not count toward making any of them poison.  ``died``: the items went
    with a process of stage ``stage`` that died while its worker lives on (a Ray replica's
    forked unit process): counted once as a death of that stage, as an `Exited` would be,
    for the record and the frame sizes (one `Lost` per death says so).  ``named``: the
    engine names the one item the process died in, the rest of its frame having gone on:
    the death took no other item with it, so the stage's frames need not shrink for it."""

    worker: int
    frame: int
    now: float
    cause: str = "outputs lost"
    parts: Sequence[tuple[int, Sequence[int]]] | None = None
    stage: int | None = None
    blame: bool = True
    died: bool = False
    named: bool = False


class Tick(NamedTuple):
    """Time passed; ``backlog`` is how many sends the driver still holds back."""

    now: float
    backlog: int = 0


class Resize(NamedTuple):
    """Run ``replicas`` replicas of stage ``stage`` from now on."""

    stage: int
    replicas: int
    now: float
    reason: str = ""


Event = Fed | Ready | Taken | Done | Measured | Arrived | Exited | Lost | Tick | Resize
EVENTS = (Fed, Ready, Taken, Done, Measured, Arrived, Exited, Lost, Tick, Resize)


@dataclass(frozen=True, slots=True)
class Stage:
    """What the core knows of one unit: no callable, only its shape."""

    name: str
    kind: str = "map"
    io: int = 0
    batch_size: int | None = None
    demand: dict[str, float] = field(default_factory=dict)
    slices: bool = False
    """A sharded source's reader: an item whose worker died is retried as `Slice`s of it."""
