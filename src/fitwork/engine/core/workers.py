"""`WorkerBooks`: what the run core knows of one worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fitwork.engine.core.events import Counters

if TYPE_CHECKING:
    from fitwork.placement import Group


class WorkerBooks:
    """What the core knows of one worker."""

    __slots__ = ("build_cpu_s", "cause", "clean", "code", "counters", "ended", "group",
                 "held", "id", "intervals", "node", "pid", "ready", "retiring", "stage",
                 "started")

    def __init__(self, worker_id: int, stage: int, group: Group | None, now: float) -> None:
        self.id, self.stage, self.group, self.started = worker_id, stage, group, now
        self.ended: float | None = None
        self.pid = 0
        self.node: str | None = None
        self.ready = False
        self.retiring = False
        self.clean = False
        self.code: int | None = None
        self.cause = ""
        self.held: dict[int, Sequence[tuple[int, Sequence[int]]]] = {}
        self.counters = Counters()
        self.build_cpu_s = 0.0
        self.intervals: list[tuple[float, float]] = []


__all__ = ["WorkerBooks"]
