"""A unit's kind (cpu, io, gpu) and resources: the hint when there is one, else the measurement.

Measured: accelerator time (CUDA events, when torch sees a GPU) makes ``gpu``.  A piece is
``io`` when it mostly waits: CPU seconds under ``IO_SHARE_BELOW`` of its wall seconds (stricter
than the profiler's one half, so that a CPU-bound piece slowed down by a busy host is not
taken for I/O) and at least ``MIN_WAIT_S`` of waiting per item (a shorter wait is not worth
overlapping, and is mostly the scheduler's noise).  A piece whose source makes a waiting call
(``time.sleep``, ``asyncio.sleep``, a socket or file read: see `waits`) is ``io`` under the
profiler's own half (``WAITS_SHARE_BELOW``): its wait is not a busy host's doing.  Anything
else is ``cpu``.  Without a sample, a piece that makes a waiting call is ``io`` by its source.
"""

from __future__ import annotations

from typing import Literal

from fitwork.decomposition.fuse import MIN_WAIT_S
from fitwork.decomposition.hints import Demand, HintKind, resources_for
from fitwork.profiling.record import UnitProfile

KindSource = Literal["hint", "measured", "source", "default"]
IO_SHARE_BELOW = 0.3
"""CPU seconds per wall second under which a piece that waits long enough is I/O-bound."""
WAITS_SHARE_BELOW = 0.5
"""The same, for a piece whose source makes a waiting call."""


def measured_kind(profile: UnitProfile, waits: str | None = None) -> HintKind:
    """The kind a profile shows (``waits``: the waiting call the piece's source makes)."""
    if profile.accel_s:
        return "gpu"
    below = WAITS_SHARE_BELOW if waits else IO_SHARE_BELOW
    if profile.cpu_share < below and profile.waiting_s >= MIN_WAIT_S:
        return "io"
    return "cpu"


def choose(hinted: HintKind | None, profile: UnitProfile | None, waits: str | None = None
           ) -> tuple[HintKind | None, KindSource, Demand]:
    """Kind, where it came from, and the resources one replica holds."""
    share = profile.cpu_share if profile is not None else None
    if hinted is not None:
        return hinted, "hint", resources_for(hinted, share)
    if profile is not None:
        kind = measured_kind(profile, waits)
        return kind, "measured", resources_for(kind, share)
    if waits:
        return "io", "source", resources_for("io")
    return None, "default", Demand()
