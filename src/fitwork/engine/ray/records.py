"""What Ray replicas and tasks tell the driver: hellos, counter readings and call summaries.

Typed records in place of dicts read by key: `Hello` (where a replica runs, or why its
unit could not start), `Reading` (a replica's cumulative counters, numbered, so the driver
keeps the newest of readings that arrive out of order), `Stats` (a reading with the busy
intervals since the last one) and `Summary` (what one call settled, all the way down the
pipeline).  They cross processes pickled by Ray, as the dicts did.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from fitwork.engine.core.events import Counters
from fitwork.engine.parts import Sink, Written
from fitwork.engine.segment import Return
from fitwork.failure import Failure
from fitwork.workload.allotment import Allotment
from fitwork.workload.unit import Unit

Interval = tuple[float, float]


class ReplicaSpec(NamedTuple):
    """What a replica is built from.  ``unit`` crosses pickled and is loaded in the
    replica's own process, so a unit that cannot load there is said, not a crash."""

    unit: Unit | bytes
    stage: int
    names: list[str]
    limits: list[int]
    """Calls in flight per replica of each unit (the bound a router keeps)."""
    given: Allotment
    """What the replica gets (`fitwork.placement.allot`): its batch, its calls at once."""
    cores: float = 1.0
    """Cores Ray holds for it (its ask): its thread pools are held to them."""
    timeout: float = 30.0
    replicas: int = 1
    """Replicas of its unit: each holds an even share of the unit's gate."""
    sink: tuple[Sink, str, int] | None = None
    """The last unit's, in a run with a sink: the sink, the run id, the worker id."""
    forked: bool = False
    """Run the unit in a child process the actor forks (`fitwork.engine.ray.forked`): a
    unit that lost a replica, so that its next deaths cost a fork, not an actor."""
    spares: int = 1
    """`RayOptions.spares`: 0, no forked child is kept built behind the one that runs."""


class Hello(NamedTuple):
    """A replica is up: its process and node, or why its unit could not start (``load``:
    the unit's code could not even be loaded there); ``build_cpu_s``: the CPU seconds it
    spent starting and building its unit, which its counters leave out."""

    pid: int
    node: str | None
    actor: str | None = None
    error: str | None = None
    load: bool = False
    build_cpu_s: float = 0.0


class Reading(NamedTuple):
    """A replica's cumulative counters; ``seq`` numbers its readings."""

    seq: int
    counters: Counters


class Stats(NamedTuple):
    """A reading, the busy intervals since the last one, and items waiting in calls."""

    reading: Reading
    intervals: list[Interval]
    waiting: int = 0


class LostFrame(NamedTuple):
    """A frame whose items died with a process: a replica downstream, or the forked child
    running a replica's own unit; its stage, the cause, and the items it held (feed frame
    and offsets per segment).  ``named``: the one item the child died in, the rest of its
    frame having gone on (`fitwork.engine.ray.forked`)."""

    stage: int
    cause: str
    parts: list[tuple[int, list[int]]]
    named: bool = False


@dataclass(slots=True)
class Summary:
    """What one call settled: references to the last unit's outputs, parts written, the
    weight returned, failures, replicas seen dead (by key) and what they held, and the
    counters of every replica the frame went through (by key).

    ``busy``: a retry that could not run alone there, sent back.  ``carries``: the call's
    second object holds outputs (the last unit's, returned by value), so its caller passes
    that reference up; a call that wrote them to a part, or had none, returns None there,
    and a reference to it would be lost with its owner for nothing.  A task's call also
    carries its busy intervals and process id, or why its unit could not start.
    """

    outputs: list[Any] = field(default_factory=list)
    returns: list[Return] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    written: list[Written] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    lost: list[LostFrame] = field(default_factory=list)
    counters: dict[str, Reading] = field(default_factory=dict)
    entered: dict[str, int] = field(default_factory=dict)
    """Items this call brought into each replica (by key) that are not sent again: an
    item lost below a replica is counted where its retry runs (the driver's items in)."""
    exited: dict[str, int] = field(default_factory=dict)
    """Items each replica (by key) sent on in this call that are not sent again: its
    outputs less those lost below it (the driver's items out)."""
    made: int = 0
    """Outputs this call's own replica sent on (not merged from the calls below)."""
    busy: bool = False
    carries: bool = False
    graced: int = 0
    """A retry's number in its replica (`fitwork.engine.serve.Alone.ack`): its caller acks
    it once it holds this summary, and the replica takes its next call (0: no retry)."""
    forks: list[tuple[int, str, int]] = field(default_factory=list)
    """Each forked unit process that died while it held this call's frame (its actor lived
    and a spare took over): its stage, its replica (by key), and which of that replica's
    deaths it was (several calls may report the same one)."""
    intervals: Sequence[Interval] = ()
    pid: int = 0
    error: str | None = None
    load: bool = False

    def merge(self, child: Summary) -> None:
        """Take in a downstream call's summary (each replica's newest counters kept)."""
        self.outputs.extend(child.outputs)
        self.returns.extend(child.returns)
        self.failures.extend(child.failures)
        self.written.extend(child.written)
        self.dead.extend(child.dead)
        self.lost.extend(child.lost)
        self.forks.extend(child.forks)
        newest(self.counters, child.counters)
        for actor, count in child.entered.items():
            self.entered[actor] = self.entered.get(actor, 0) + count
        for actor, count in child.exited.items():
            self.exited[actor] = self.exited.get(actor, 0) + count


def newest(into: dict[str, Reading], more: dict[str, Reading]) -> None:
    """Keep each replica's newest reading (the highest ``seq``)."""
    for actor, reading in more.items():
        held = into.get(actor)
        if held is None or reading.seq > held.seq:
            into[actor] = reading


def difference(after: Counters, before: Counters) -> Counters:
    """What was added to the counters between two readings."""
    return Counters._make(a - b for a, b in zip(after, before, strict=True))


def total(into: Counters, delta: Counters) -> Counters:
    """Counters with ``delta`` added."""
    return Counters._make(a + b for a, b in zip(into, delta, strict=True))


LOAD_FIX = ("every module a unit's code imports must be importable on the cluster's nodes "
            "(install it there, or pass a runtime_env to ray.init); a unit defined in the "
            "pipeline's own file or script travels with it")


def death_cause(exc: BaseException) -> str:
    """The line of a Ray death report that names the exception behind it (Ray's reports
    run to dozens of lines), else the report's type."""
    named = [line.strip() for line in str(exc).splitlines()
             if re.match(r"^[\w.]*(Error|Exception|Exit|Interrupt)\b:?", line.strip())
             and not line.strip().startswith(("ray.exceptions.", "RayTaskError"))]
    cause = named[-1] if named else type(exc).__name__
    return cause[:300]


__all__ = ["LOAD_FIX", "Hello", "LostFrame", "Reading", "ReplicaSpec", "Stats", "Summary",
           "death_cause", "difference", "newest", "total"]
