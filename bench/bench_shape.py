"""A held-out shape's description (pipeline, run size, sweeps) and a CPU-spin helper."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fitwork import Pipeline


@dataclass(frozen=True)
class Shape:
    """One held-out pipeline: what it is, items per full bench run, the monolith's process
    sweep and the hand grid (replicas per unit a person tuning by hand would try)."""

    pipeline: Pipeline
    shape: str
    items: int
    monolith: tuple[int, ...]
    grid: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The pipeline's name."""
        return self.pipeline.name


def spin(seconds: float) -> None:
    """Keep this thread's CPU busy for ``seconds`` of its own CPU time (pure Python), as a
    device driver's synchronise or a JIT compiler holds a core."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
