"""`CoreLog`: the run core's last entries, what it was told and what it said, to replay a run.

As Dask's worker keeps a ``stimulus_log``, the core keeps a ring of its last `LOG_ENTRIES`
entries: each stimulus (an event, its start, a re-fit's new allotment) followed by the
instructions it gave, and the inputs it was built from (`CoreConfig`).  Everything that moves
the core comes in by a stimulus: time only as an event's ``now``, no randomness, and the
adapter's new placement as a `Regroup`.  So a fresh core built from the config and handed the
same stimuli gives the same instructions.  A failed run's record carries the log as JSON
(`fitwork.engine.core.codec`), grouped in steps: a stimulus and its instructions.

The log keeps the books, not the data: each item or output an entry carries is kept as
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
    Regroup,
    Started,
    Stimulus,
    encode,
    encode_config,
)
from fitwork.engine.core.events import EVENTS, Arrived, Done, Fed
from fitwork.engine.core.instructions import DeadLetter, Emit, Instruction, Send
from fitwork.engine.segment import Segment
from fitwork.io.shards import Slice
from fitwork.io.unreadable import Unreadable

LOG_ENTRIES = 10_000
"""Stimuli and instructions a core keeps (the last ones).  A local or Ray run takes a few
a frame of hundreds of items; the simulated engine's frames are smaller."""
BLANKS = 512
"""Lists of ``None`` up to this long are shared by the entries that blank that many items."""
E = TypeVar("E", bound=Entry)
STIMULI = (*EVENTS, Started, Regroup)


class Step(NamedTuple):
    """One stimulus and the instructions the core gave for it, in order."""

    stimulus: Stimulus
    out: list[Instruction]


class CoreLog:
    """The ring of a core's last entries, and what the core was built from."""

    __slots__ = ("config", "entries", "stimuli")

    def __init__(self, config: CoreConfig, size: int = LOG_ENTRIES) -> None:
        self.config = config
        self.entries: deque[Entry] = deque(maxlen=size)
        self.stimuli = 0

    def add(self, stimulus: Stimulus, out: Sequence[Instruction]) -> None:
        """Keep one stimulus and its instructions (items as ``None``: see the module
        docstring)."""
        self.stimuli += 1
        keep, strips = self.entries.append, _STRIP.get
        strip = strips(type(stimulus))
        keep(stimulus if strip is None else strip(stimulus))
        for instruction in out:
            strip = strips(type(instruction))
            keep(instruction if strip is None else strip(instruction))

    def steps(self) -> list[Step]:
        """The entries kept, in steps (instructions whose stimulus fell off are left out)."""
        steps: list[Step] = []
        for entry in self.entries:
            if isinstance(entry, STIMULI):
                steps.append(Step(entry, []))
            elif steps:
                steps[-1].out.append(entry)
        return steps

    def to_json(self) -> dict[str, Any]:
        """The log as JSON-ready data: ``config``, ``dropped`` (steps that fell off the
        front of the ring) and ``steps``, each ``{"stimulus": ENTRY, "out": [ENTRY, ...]}``
        (see `fitwork.engine.core.codec`)."""
        steps = self.steps()
        return {"config": encode_config(self.config), "dropped": self.stimuli - len(steps),
                "steps": [{"stimulus": encode(step.stimulus),
                           "out": [encode(i) for i in step.out]} for step in steps]}


def stripped(entry: E) -> E:
    """``entry`` as the log keeps it: its books, without the items or outputs it carries."""
    strip = _STRIP.get(type(entry))
    if strip is None:
        return entry
    kept: E = strip(entry)
    return kept


def _blank(values: Sequence[Any]) -> list[Any]:
    """``None`` for each value (a list shared by every entry of as many, when short); a
    piece's `Slice` keeps its rows, an `Unreadable` itself."""
    count = len(values)
    if count <= BLANKS:
        if count and type(values[0]) in (Slice, Unreadable):
            return [Slice(None, v.lo, v.hi) if type(v) is Slice else v for v in values]
        blank = _SHARED.get(count)
        if blank is None:
            blank = _SHARED[count] = [None] * count
        return blank
    return [None] * count


def _segment(segment: Segment) -> Segment:
    """The same books with blank values (checked when it was built: not checked again)."""
    return Segment._make((segment.frame, segment.attempt, segment.offsets, segment.paths,
                          segment.exps, _blank(segment.values)))


def _fed(event: Fed) -> Fed:
    return Fed(_blank(event.items), event.now, event.end, event.error)


def _arrived(event: Arrived) -> Arrived:
    return Arrived([_segment(s) for s in event.segments], event.now, event.returns,
                   [f.summary() for f in event.failures] if event.failures else ())


def _done(event: Done) -> Done:
    if not event.failures:
        return event
    return event._replace(failures=[f.summary() for f in event.failures])


_SHARED: dict[int, list[Any]] = {}
_STRIP: dict[type[Any], Callable[[Any], Any]] = {
    Fed: _fed, Arrived: _arrived, Done: _done,
    Send: lambda i: Send(i.frame, _segment(i.segment), i.retry),
    Emit: lambda i: Emit(_blank(i.values), i.span),
    DeadLetter: lambda i: DeadLetter(i.failure.summary()),
}


__all__ = ["LOG_ENTRIES", "CoreLog", "Step", "stripped"]
