"""The run core: one pure state machine behind every engine (events in, instructions out)."""

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
    Emit,
    Finished,
    FrameSizes,
    Instruction,
    Report,
    RestoreCredits,
    Retire,
    Send,
    Spawn,
)
from fitwork.engine.core.machine import RunCore, WorkerBooks
from fitwork.engine.core.policy import Policy

__all__ = [
    "Abort", "Arrived", "Counters", "DeadLetter", "Done", "Emit", "Event", "Exited", "Fed",
    "Finished", "FrameSizes", "Instruction", "Lost", "Measured", "Policy", "Ready", "Report",
    "Resize", "RestoreCredits", "Retire", "RunCore", "Send", "Spawn", "Stage", "Taken",
    "Tick", "WorkerBooks",
]
