"""What the run core asks a driver to do: typed instructions, carried out in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fitwork.engine.segment import Segment
from fitwork.failure import Failure

if TYPE_CHECKING:  # annotations only: a replica process imports this module, not these
    from fitwork.placement import Group
    from fitwork.telemetry.record import Progress


@dataclass(frozen=True, slots=True)
class Send:
    """Send this segment to the first unit (``retry``: alone, on a worker with nothing else)."""

    frame: int
    segment: Segment
    retry: bool = False


@dataclass(frozen=True, slots=True)
class Spawn:
    """Start worker ``worker`` for stage ``stage`` (in ``group``'s place, when planned)."""

    worker: int
    stage: int
    group: Group | None = None


@dataclass(frozen=True, slots=True)
class Retire:
    """Stop one worker of ``stage`` once it is idle (``worker`` where the engine can pick)."""

    worker: int
    stage: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Write this failure to the dead letters."""

    failure: Failure


@dataclass(frozen=True, slots=True)
class Emit:
    """Hand these outputs to the caller, in this order.  With ``span`` (source index, count),
    they are every output of those source items, which are all settled (``Policy.spans``)."""

    values: list[Any]
    span: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class FrameSizes:
    """Items per frame into each stage, from now on; ``measured``: whether each size is
    measured (or a batch), where an engine whose replicas send their outputs on themselves
    cuts a call's outputs by `sizing.cut`, which treats an unmeasured size as 0."""

    sizes: tuple[int, ...]
    measured: tuple[bool, ...] = ()


@dataclass(frozen=True, slots=True)
class RestoreCredits:
    """The pipeline is quiet: top every channel's credits back up."""


@dataclass(frozen=True, slots=True)
class Abort:
    """Stop the run and raise ``error`` to the caller."""

    error: BaseException


@dataclass(frozen=True, slots=True)
class Report:
    """Hand this snapshot to the progress callback."""

    progress: Progress


@dataclass(frozen=True, slots=True)
class Drain:
    """Nothing more will reach ``stage`` (a batched unit) but retries: its replicas run the
    items they hold at once rather than wait ``batch_wait`` for fuller batches."""

    stage: int


@dataclass(frozen=True, slots=True)
class Stale:
    """Item ``offset`` of frame ``frame`` (a sharded source's shard, or a piece of one) goes
    again as new pieces: a reader still streaming its rows may stop, and send on none more
    (engines whose readers do not stream, or have died with it, go on as they were)."""

    frame: int
    offset: int


@dataclass(frozen=True, slots=True)
class Finished:
    """Every source item is settled: stop the workers and close the run."""


Instruction = (Send | Spawn | Retire | DeadLetter | Emit | FrameSizes | RestoreCredits | Abort
               | Report | Drain | Stale | Finished)
INSTRUCTIONS = (Send, Spawn, Retire, DeadLetter, Emit, FrameSizes, RestoreCredits, Abort, Report,
                Drain, Stale, Finished)
