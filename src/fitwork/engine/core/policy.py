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
    frame_cost: float | None = None
    """Seconds a frame costs beyond its items' work, where the core sends on the rest of a
    frame whose worker died in a named item (the local engine's): a stage's frames are then
    sized against it (`fitwork.engine.core.sizing.frame_size`).  None (Ray: a forked
    replica sends the rest on itself): named deaths do not shrink frames."""
    quiet_after: float | None = 1.0
    whole_path: bool = False
    sample_interval: float = 0.1
    progress_interval: float | None = None
    spans: bool = False
    """Hold a frame's outputs until all its items settle, then emit them together with the
    frame's source span (what a journal needs to say which items are done)."""


__all__ = ["Policy"]
