"""`CoreLog`: the run core's last steps, what it was told and what it said, to replay a run.

As Dask's worker keeps a ``stimulus_log``, the core keeps a ring of its last `LOG_STEPS`
steps: each stimulus (an event, or its start) with the instructions it gave, and the inputs
it was built from (`CoreConfig`).  Everything that moves the core comes in by a step: time
only as an event's ``now``, no randomness, and a re-fit's new allotment as a `Regroup`.  So
a fresh core built from the config and handed the same stimuli gives the same instructions.
A failed run's record carries the log as JSON (`fitwork.engine.core.codec`).

The log keeps the books, not the data: each item or output a step carries is kept as
``None`` (a retried piece as its rows, an unreadable line whole), and a failure without its
input and traceback, so the ring holds no item alive.  A run longer than the ring keeps its
last steps (``dropped`` says how many went); only a whole log replays from the start.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from fitwork.engine.core.codec import (
    CoreConfig,
    Entry,
    Stimulus,
    encode,
    encode_config,
)
from fitwork.engine.core.events import Arrived, Done, Fed
from fitwork.engine.core.instructions import DeadLetter, Emit, Instruction, Send
from fitwork.engine.segment import Segment
from fitwork.shards import Slice
from fitwork.unreadable import Unreadable

LOG_STEPS = 10_000
"""Steps a core keeps (the last ones)."""
E = TypeVar("E", bound=Entry)


class Step(NamedTuple):
    """One stimulus and the instructions the core gave for it, in order."""

    stimulus: Stimulus
    out: tuple[Instruction, ...]


class CoreLog:
    """The ring of a core's last steps, and what the core was built from."""

    __slots__ = ("config", "steps", "taken")

    def __init__(self, config: CoreConfig, size: int = LOG_STEPS) -> None:
        self.config = config
        self.steps: deque[Step] = deque(maxlen=size)
        self.taken = 0

    def add(self, stimulus: Stimulus, out: Sequence[Instruction]) -> None:
        """Keep one step (its items as ``None``: see the module docstring)."""
        self.taken += 1
        kept = tuple(stripped(i) for i in out) if out else ()
        self.steps.append(Step(stripped(stimulus), kept))

    @property
    def dropped(self) -> int:
        """Steps that fell off the front of the ring."""
        return self.taken - len(self.steps)

    def to_json(self) -> dict[str, Any]:
        """The log as JSON-ready data: ``config``, ``dropped`` and ``steps``, each step
        ``{"stimulus": ENTRY, "out": [ENTRY, ...]}`` (see `fitwork.engine.core.codec`)."""
        return {"config": encode_config(self.config), "dropped": self.dropped,
                "steps": [{"stimulus": encode(step.stimulus),
                           "out": [encode(i) for i in step.out]} for step in self.steps]}


def stripped(entry: E) -> E:
    """``entry`` as the log keeps it: its books, without the items or outputs it carries."""
    strip = _STRIP.get(type(entry))
    if strip is None:
        return entry
    kept: E = strip(entry)
    return kept


def _blank(values: Sequence[Any]) -> list[Any]:
    """``None`` for each value; a piece's `Slice` keeps its rows, an `Unreadable` itself."""
    if values and type(values[0]) is Slice:
        return [Slice(None, v.lo, v.hi) for v in values]
    if values and type(values[0]) is Unreadable:
        return list(values)
    return [None] * len(values)


def _segment(segment: Segment) -> Segment:
    return segment.with_values(_blank(segment.values))


def _fed(event: Fed) -> Fed:
    return event._replace(items=_blank(event.items))


def _arrived(event: Arrived) -> Arrived:
    return event._replace(segments=[_segment(s) for s in event.segments],
                          failures=[f.summary() for f in event.failures])


def _done(event: Done) -> Done:
    return event._replace(failures=[f.summary() for f in event.failures]) if event.failures \
        else event


_STRIP: dict[type[Any], Callable[[Any], Any]] = {
    Fed: _fed, Arrived: _arrived, Done: _done,
    Send: lambda i: Send(i.frame, _segment(i.segment), i.retry),
    Emit: lambda i: Emit(_blank(i.values), i.span),
    DeadLetter: lambda i: DeadLetter(i.failure.summary()),
}


__all__ = ["LOG_STEPS", "CoreLog", "Step", "stripped"]
