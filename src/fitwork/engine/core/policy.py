"""`Policy`: how a run behaves (order, attempts, failures allowed, frame sizing, timers)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Policy:
    """How a run behaves: order, attempts, failures allowed, frame sizing, timers."""

    ordered: bool = False
    max_attempts: int = 3
    max_failures: int | None = None
    ordered_window: int = 4096
    max_frames: int = 64
    frame_time: float = 0.005
    max_frame: int = 256
    io_frame_share: float = 0.5
    named_shrink: bool = False
    """Whether a death that lost only the item it died in (a named death) shrinks its
    stage's frames as a death that lost its frame does.  Where the core sends the rest of
    the frame on (the local engine's), such a death still costs a frame's re-send and the
    re-run of the items before it, so it does; where the replica sends the rest on itself
    (a Ray replica's forked unit), it does not."""
    quiet_after: float | None = 1.0
    whole_path: bool = False
    sample_interval: float = 0.1
    progress_interval: float | None = None
    spans: bool = False
    """Hold a frame's outputs until all its items settle, then emit them together with the
    frame's source span (what a journal needs to say which items are done)."""


__all__ = ["Policy"]
