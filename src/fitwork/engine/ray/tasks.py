"""Task replicas: each frame of a one-unit pipeline runs as a Ray task on Ray's worker pool.

A replica actor costs a fresh worker process and ~0.3-0.5 s of start-up before its first
call; a task takes a worker Ray keeps warm and starts in milliseconds, which is what a
short run of light work is decided by.  So with ``task_replicas=True`` a pipeline of one
stateless stage (a plan that fused every stage, say) gets *slots* instead of actors: a slot
is a name the driver routes frames to, with the same bound on calls in flight, and each
call is a task.  The unit is built once per worker process and run (a class unit: once per
process per run), and a task returns the frame's outputs, the same summary an actor's call
does, and what the call added to its counters, which the driver sums per slot.

A task whose worker dies loses its frame, not the slot: the run core retries the frame's
items (alone, as after any death) and makes an item that keeps killing workers poison.
"""

from __future__ import annotations

import os
from typing import Any

import ray

from fitwork.engine.core.events import Counters, Stage
from fitwork.engine.ray.records import Reading, ReplicaSpec, Summary, difference, total
from fitwork.engine.ray.replica import Replica
from fitwork.engine.segment import Segment
from fitwork.workload.allotment import Allotment
from fitwork.workload.unit import Unit

_built: dict[str, Replica] = {}
"""The replica each worker process built for the run it last served (by run id); it stays
built, a class unit's state with it, until that process serves another run's first task."""


def eligible(units: list[Unit], stages: list[Stage], sink: bool) -> bool:
    """Whether a pipeline can run on task replicas: one synchronous unit on cores, with no
    gate shared by its replicas and no sink (a part needs a writer that outlives one
    call), whose replicas are allotted neither batches nor calls at once (``stages``)."""
    return (len(units) == 1 and not sink and units[0].is_plain
            and not stages[0].batch_size and not stages[0].io)


def run_frame(box: list[Any], run: str, slot: str, given: Allotment, cores: float,
              segments: list[Segment], version: int) -> tuple[Summary, Any]:
    """One call: the frame through the unit (as ``given``, its slot's allotment, on
    ``cores``), with the summary an actor's call returns and what this call added to the
    counters (keyed by ``slot``, numbered 0: the driver sums them per slot)."""
    replica = _built.get(run)
    if replica is None:
        blob: bytes = ray.get(box[0])  # the unit pickled (loaded by the replica: see hello)
        for old in _built.values():  # one run's replica per process: an earlier run's goes
            old.serving.close()
        _built.clear()
        replica = _built[run] = Replica(ReplicaSpec(blob, 0, [box[1]], [1], given, cores))
    if replica.error is not None or replica.load_error is not None:
        return Summary(error=replica.load_error or replica.error,
                       load=replica.load_error is not None), None
    before = replica.counters()
    summary, outputs = replica.run(segments, [0], version)
    after = replica.counters()
    summary.counters = {slot: Reading(0, difference(after.counters, before.counters))}
    summary.intervals = replica.busy.take()
    summary.pid = os.getpid()
    return summary, outputs


_remote: Any = None


def remote_frame() -> Any:
    """``run_frame`` as a Ray task that returns its summary and outputs apart."""
    global _remote
    if _remote is None:
        _remote = ray.remote(num_returns=2, max_retries=0)(run_frame)
    return _remote


class SlotTotals:
    """A slot's counters, summed over its calls, numbered as a replica numbers its own."""

    def __init__(self) -> None:
        self.totals = Counters()
        self.seq = 0

    def add(self, delta: Counters) -> Reading:
        """The totals with one call's ``delta`` added."""
        self.totals = total(self.totals, delta)
        self.seq += 1
        return Reading(self.seq, self.totals)


__all__ = ["SlotTotals", "eligible", "remote_frame", "run_frame"]
