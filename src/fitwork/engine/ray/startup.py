"""A Ray run's start-up: its replicas' hellos, and when frames may start going out.

`StartUp` is the part of `RayRun` (`fitwork.engine.ray.driver`) that takes each replica's
hello (its process, its node, or why its unit could not start), tells the run core it is
up, and starts feeding once every unit has a replica up; a replica started with the run
that has not said hello within the start-up timeout fails the run, naming what it asked
for and what the cluster has.

A run's end gives Ray's worker pool back what its actors took (`refill`): Ray starts as
many idle workers as a node has cores once, and an actor takes one for good (its process
ends with it), so after a run of actors the next run's task replicas (or any Ray task)
waited 1.5-2.7 s for fresh worker processes where one served by idle workers had its first
frame in 15 ms (``bench/ray_start.py``, a 2-core host at load 11-13).  The refill starts
those workers in the background, each importing the task replicas' module, as the run
releases its actors.  They serve tasks, not the next run's actors: on Ray 2.60 here, actors
asked for after a refill still started fresh processes (only the workers Ray prestarted
itself, which never ran a task, went to actors).
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

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



def _preload() -> tuple[int, str]:
    """In a pooled Ray worker: import what a task replica runs on (so its first frame does
    not wait on it); this process's id and its node's.  A worker without fitwork just stays
    idle."""
    with contextlib.suppress(ImportError):
        import fitwork.engine.ray.tasks  # noqa: F401
    return os.getpid(), ray.get_runtime_context().get_node_id()


_preloader: Any = None


def refill(nodes: Iterable[str | None]) -> list[Any]:
    """Ask Ray for an idle worker on each node of ``nodes`` (a node once per worker its
    actors took; ``None``: wherever Ray starts it), at most as many on a node as it has
    CPUs, each with the task replicas' module imported; references to their process and
    node ids (nobody need wait on them: the workers start in the background and stay in
    Ray's pool, idle).  Each is pinned to its node: left to Ray, they all started on the
    driver's, and a task replica on another node of a three-node cluster still started
    cold (tasks right after a released warm pool: 1,009 items/s against 12,166 after Ray
    Data, ``bench/ray_nodes.py``)."""
    global _preloader
    wanted = Counter(nodes)
    if not wanted:
        return []
    if _preloader is None:  # no cores asked: it runs now, beside the next run's replicas
        _preloader = ray.remote(num_cpus=0, max_retries=0)(_preload)
    cpus = {n["NodeID"]: int(n["Resources"].get("CPU", 0.0)) for n in ray.nodes()
            if n.get("Alive")}
    refs = []
    for node, count in wanted.items():
        if node is None:
            refs += [_preloader.remote() for _ in range(min(count, max(cpus.values(),
                                                                      default=0)))]
            continue
        pinned = _preloader.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node, soft=False))
        refs += [pinned.remote() for _ in range(min(count, cpus.get(node, 0)))]
    return refs


__all__ = ["LATE_HELLO_S", "STATS_WAIT_S", "StartUp", "refill"]
