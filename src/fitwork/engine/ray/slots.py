"""Task slots: a Ray run whose replicas are slots on Ray's worker pool, not actors.

A slot is a name the driver routes frames to, with the same bound on calls in flight as
an actor; each call is a Ray task (`fitwork.engine.ray.tasks`, which says when a pipeline
is eligible and why).  `TaskRun` is `RayRun` with its replica handling replaced: a slot is
up at once, its counters come summed from its calls (there is no process to ask), a
retiring slot leaves once its calls are back, and a task whose worker dies loses its
frame, not the slot (the core retries the frame's items, as after any death).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import ray
from ray.exceptions import RayError, RayTaskError

from fitwork.engine.core import Exited, Lost, Retire, Spawn
from fitwork.engine.ray.asks import CPU_STEP
from fitwork.engine.ray.driver import LOAD_FIX, Actor, RayRun
from fitwork.engine.ray.records import Hello, Summary
from fitwork.engine.ray.tasks import SlotTotals, remote_frame
from fitwork.engine.ray.transport import pack
from fitwork.engine.segment import Segment
from fitwork.errors import EngineError
from fitwork.placement import Allotment, allot


class TaskRun(RayRun):
    """A Ray run of one stateless unit on task slots."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unit_ref: Any = None
        self.slots: dict[int, SlotTotals] = {}
        self.task_options: dict[str, Any] = {}
        self.task_given: Allotment | None = None  # what each slot's tasks run as
        self.ray_options = replace(self.ray_options, keep_warm=0.0)  # no process to park

    def check_nodes(self) -> None:
        """Nothing to re-fit: Ray places each task where cores are free, and a task whose
        node died comes back as a lost frame (`summary`)."""

    def prepare(self) -> None:
        """Ray places each task where cores are free: nothing to reserve; the unit is put
        in the object store once, for every task to load."""
        self.unit_ref = ray.put(self.blobs[0])

    def spawn(self, instruction: Spawn) -> None:
        """A slot: a name to route to, up at once (its hello is already there)."""
        worker = instruction.worker
        wanted = self.demand(instruction.stage, instruction.group)
        name = f"slot-{self.run_id}-{worker}"
        self.actors[worker] = Actor(worker, 0, name, None)
        self.by_key[name] = worker
        self.slots[worker] = SlotTotals()
        # A plan's fluid cores (a fraction each) let Ray run more of a slot's tasks at once
        # than there are slots, each in a worker process of its own that starts and builds
        # the unit (3 slots at 0.29 cores: 5-6 processes, 0.8-7 s for 6,000 items here; at
        # 2/3 of a core: the 2 warm ones, 0.25 s): ask at least a slot's share of a node.
        cores = max((n["Resources"].get("CPU", 0.0) for n in self.nodes), default=0.0)
        slots = max(1, self.placement.replicas(self.names[0]))
        share = math.floor(min(1.0, cores / slots) / CPU_STEP + 1e-9) * CPU_STEP
        self.task_options = {"num_cpus": max(wanted.cpu, share)}
        self.task_given = allot(self.units[0], instruction.group)
        self.hellos[ray.put(Hello(0, None))] = worker
        if not self.started:
            self.initial.add(worker)

    def retire(self, instruction: Retire) -> None:
        """A slot stops taking frames; it is gone once its calls are back."""
        actor = self.actors.get(instruction.worker)
        if actor is None or actor.ended:
            return
        actor.retiring = True
        self.publish()
        self.router.drop(actor.handle)
        self._slot_gone(actor.worker)

    def call(self, token: Any, segment: Segment) -> tuple[Any, Any]:
        """One call: a task on Ray's pool."""
        ref, outputs = remote_frame().options(**self.task_options).remote(
            [self.unit_ref, self.names[0]], self.run_id, token, self.task_given,
            self.task_options["num_cpus"], pack([segment]), self.version)
        return ref, outputs

    def summary(self, ref: Any, worker: int, call: int, now: float) -> Summary | None:
        """A task's summary; None when the task died (its frame lost, to be retried) or
        its unit could not be built (the run stops, naming why)."""
        try:
            summary: Summary = ray.get(ref)
        except RayTaskError as exc:  # fitwork's own code failed in the task: no retry helps
            raise EngineError(f"a task replica failed: {exc.cause!r}") from None
        except RayError as exc:  # the worker process died under the task
            self.handle(Lost(worker, call, now, f"its task's worker died ({type(exc).__name__})"))
            return None
        if summary.load:
            raise EngineError(f"{summary.error}; {LOAD_FIX}")
        if summary.error is not None:
            self.handle(Exited(worker, clean=False, now=now, cause="its unit could not start",
                               fatal=summary.error))
            return None
        self.actors[worker].pid = summary.pid
        return summary

    def measure_call(self, summary: Summary) -> None:
        """What one task added to its slot's counters, summed, to the core."""
        for slot, reading in summary.counters.items():
            seen = self.by_key.get(slot)
            if seen is not None:
                self._measure(seen, self.slots[seen].add(reading.counters), summary.intervals)

    def _settle(self, ref: Any) -> None:
        worker = self.calls[ref].worker
        super()._settle(ref)
        if self.actors[worker].retiring:
            self._slot_gone(worker)

    def _slot_gone(self, worker: int) -> None:
        """A retiring slot leaves once no call of it is still out."""
        actor = self.actors[worker]
        if actor.ended or any(c.worker == worker for c in self.calls.values()):
            return
        actor.ended = True
        self.handle(Exited(worker, clean=True, now=self.clock(), cause="retired"))

    def live_actors(self, ended: bool = False) -> list[Actor]:
        """None: a slot's counters come with its calls, and there is nothing to kill."""
        return []


__all__ = ["TaskRun"]
