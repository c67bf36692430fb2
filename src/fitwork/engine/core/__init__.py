"""The run core: one pure state machine behind every engine (events in, instructions out)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fitwork.engine.core.events import (
    Arrived,
    Counters,
    Done,
    Event,
    Exited,
    Fed,
    Lost,
    Measured,
    Ready,
    Resize,
    Stage,
    Taken,
    Tick,
)
from fitwork.engine.core.instructions import (
    Abort,
    DeadLetter,
    Drain,
    Emit,
    Finished,
    FrameSizes,
    Instruction,
    Report,
    RestoreCredits,
    Retire,
    Send,
    Spawn,
    Stale,
)
from fitwork.engine.core.policy import Policy
from fitwork.engine.core.workers import WorkerBooks

if TYPE_CHECKING:
    from fitwork.engine.core.machine import RunCore


def __getattr__(name: str) -> Any:
    """`RunCore`, loaded on first use: a replica process reads the events, the sizing rule
    and the policy, never the machine (nor the record it imports)."""
    if name == "RunCore":
        from fitwork.engine.core import machine

        value = getattr(machine, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "Abort", "Arrived", "Counters", "DeadLetter", "Done", "Drain", "Emit", "Event", "Exited",
    "Fed", "Finished", "FrameSizes", "Instruction", "Lost", "Measured", "Policy", "Ready",
    "Report", "Resize", "RestoreCredits", "Retire", "RunCore", "Send", "Spawn", "Stage",
    "Stale", "Taken", "Tick", "WorkerBooks",
]
