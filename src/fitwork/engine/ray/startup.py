"""A Ray run's start-up: its replicas' hellos, and when frames may start going out.

`StartUp` is the part of `RayRun` (`fitwork.engine.ray.driver`) that takes each replica's
hello (its process, its node, or why its unit could not start), tells the run core it is
up, and starts feeding once every unit has a replica up; a replica started with the run
that has not said hello within the start-up timeout fails the run, naming what it asked
for and what the cluster has.

A run's end gives Ray's worker pool back what its actors took (`fitwork.engine.ray.refill`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import ray

from fitwork.engine.core import Exited, Ready
from fitwork.engine.options import RayOptions
from fitwork.engine.ray.records import LOAD_FIX, Hello, death_cause
from fitwork.engine.ray.replica import DEATH
from fitwork.errors import EngineError

STATS_WAIT_S = 5.0
"""The most a run's end waits for its started replicas' last counters."""
LATE_HELLO_S = 1.0
"""The most a run's end waits for a replica that has not said hello: one Ray never placed
(no room on the cluster) never does, and waiting `STATS_WAIT_S` for it ended a run of 1.5 s
of work at 5.07 s; one that comes up in this time is recorded where it ran (and can be kept
warm)."""

if TYPE_CHECKING:
    from collections.abc import Callable

    from fitwork.engine.ray.driver import Actor
    from fitwork.workload.unit import Unit


class StartUp:
    """Hellos and the start of feeding (a part of `RayRun`, whose books these are)."""

    units: list[Unit]
    names: list[str]
    actors: dict[int, Actor]
    hellos: dict[Any, int]
    initial: set[int]
    started: bool
    ready_by: float
    ray_options: RayOptions
    timeout: float
    clock: Callable[[], float]

    if TYPE_CHECKING:  # the sibling parts' (`RayRun`, `Placing`, `NodeFit`, `WarmPool`)
        def publish(self) -> None: ...
        def mark(self, phase: str, again: bool = False) -> None: ...
        def handle(self, event: Any) -> None: ...
        def _ask(self, stage: int) -> str: ...
        def _available(self) -> Any: ...
        def _node_died(self, worker: int, exc: BaseException) -> bool: ...

    def _check_started(self) -> None:
        """Every unit has a replica that said hello: publish those and start feeding (the
        rest join as they say hello, so a replica that starts late holds no frame back);
        every replica started with the run must say hello within the start-up timeout."""
        if not self.started and all(
                any(a.ready and not a.ended for a in self.actors.values() if a.stage == stage)
                for stage in range(len(self.units))):
            self.publish()
            self.started = True
            self.mark("feeding")
        late = [w for w in self.hellos.values() if w in self.initial]
        if not late:
            self.initial.clear()
            return
        if self.clock() > self.ready_by:
            startup = self.ray_options.startup_timeout
            stuck = {self.names[self.actors[w].stage]: self.actors[w].stage for w in late}
            asks = "; ".join(f"{name} asks {self._ask(stage)} a replica"
                             for name, stage in sorted(stuck.items()))
            raise EngineError(
                f"replicas of {', '.join(sorted(stuck))} were not placed within "
                f"{startup:.0f} s: the cluster has {self._available()} (other jobs may hold "
                f"some), and {asks}; lower their asks (@unit(cpu=...), --cpus UNIT=N), run "
                "fewer replicas (--workers UNIT=N), add nodes, or check --ray-address")

    def _read_hellos(self) -> None:
        """Wait (to the start-up deadline) for the replicas started with the run to say
        hello and note their pids; the run's own loop still takes each hello as an event,
        so this reads only, and may be called from another thread."""
        pending = list(self.hellos.items())
        if not pending:
            return
        refs = [ref for ref, _ in pending]
        ready, _ = ray.wait(refs, num_returns=len(refs),
                            timeout=max(0.0, self.ready_by - self.clock()))
        for ref, worker in pending:
            if ref in ready:
                with contextlib.suppress(Exception):
                    info: Hello = ray.get(ref, timeout=self.timeout)
                    if not info.error:
                        self.actors[worker].pid = info.pid
                        self.actors[worker].node = info.node

    def _hello(self, ref: Any) -> None:
        worker = self.hellos.pop(ref)
        try:
            info: Hello = ray.get(ref)
        except DEATH as exc:
            if self._node_died(worker, exc):
                return
            name = self.names[self.actors[worker].stage]
            raise EngineError(
                f"unit {name!r}: its Ray replica's process died while starting "
                f"({death_cause(exc)}); if the unit's constructor or a module it imports "
                "crashes the process, fix that, else see the worker's log (ray logs "
                "worker-*.err)") from None
        if info.load:  # not the unit's constructor: its code is not loadable there
            raise EngineError(f"{info.error}; {LOAD_FIX}")
        if info.error:  # the core aborts the run, naming the unit and the cause
            self.handle(Exited(worker, clean=False, now=self.clock(),
                               cause="its unit could not start", fatal=info.error))
            return
        self._up(worker, info)
        if self.started:  # a replacement, one more, or one that started late: it joins now
            self.publish()

    def _up(self, worker: int, info: Hello) -> None:
        """A replica said hello with its unit built: note where it runs, tell the core."""
        actor = self.actors[worker]
        actor.pid, actor.node, actor.ready = info.pid, info.node, True
        self.mark("first hello")
        self.mark("last hello", again=not self.started)
        self.handle(Ready(worker, info.pid, self.clock(), info.node, info.build_cpu_s))



__all__ = ["LATE_HELLO_S", "STATS_WAIT_S", "StartUp"]
