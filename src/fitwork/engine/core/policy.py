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
    quiet_after: float | None = 1.0
    whole_path: bool = False
    sample_interval: float = 0.1
    progress_interval: float | None = None
    spans: bool = False
    """Hold a frame's outputs until all its items settle, then emit them together with the
    frame's source span (what a journal needs to say which items are done)."""
    growth: int | None = None
    """A new frame holds at most this many times the items of the largest first-unit frame
    that has come back (None: no such bound): a size measured on a few items, which may have
    missed the rare slow one, is not committed to, many frames at once, before frames of
    that size have come back."""


__all__ = ["Policy"]
