"""The simulated engine: the run core driven by planned rates and a virtual clock.

Units really run (through the `Kernel`, in this process), so outputs are the real ones,
but time is virtual: a replica holds a frame for ``items / rate`` seconds of simulated
time, where ``rate`` is the plan's predicted items/s of one replica on its class (or
``SimOptions.rates``, or ``1 / default_seconds``).  Frame sizing, retries and resizes
follow the same core as a real run.  Queues between units are not bounded (work in flight
is, by the core's bound on frames fed), so a simulated replica never waits on its send, and
an idle replica is picked at random for the next frame, as whichever reads a socket first.
With ``kill_rate`` replicas die at random (seeded), so the
core's fault handling can be exercised without processes.  A plan's predicted throughput
and the simulated run's can then be compared exactly, without timing noise.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fitwork.engine.contract import RunResult
from fitwork.engine.core import (
    Arrived,
    Counters,
    Done,
    Exited,
    Fed,
    FrameSizes,
    Ready,
    Retire,
    Send,
    Spawn,
    Taken,
)
from fitwork.engine.options import RunOptions, SimOptions
from fitwork.engine.segment import Segment, settle, split
from fitwork.engine.shell import Shell, policy_for
from fitwork.errors import EngineError
from fitwork.placement import Placement, allot
from fitwork.workload.kernel import Failed, Kernel
from fitwork.workload.pipeline import Pipeline

CAPACITY = 8
FRAME_TIME = 0.005
MAX_FRAME = 4096


class SimEngine:
    """Runs a pipeline's units in this process on a virtual clock (see the module docstring)."""

    name = "sim"
    options = SimOptions

    def run(self, pipeline: Pipeline, source: Iterable[Any], placement: Placement,
            options: RunOptions, engine_options: SimOptions) -> RunResult:
        """Start the simulation and return a result that streams outputs as they come."""
        return SimRun(pipeline, source, placement, options, engine_options).start()


@dataclass
class _Worker:
    """One simulated replica."""

    id: int
    stage: int
    kernel: Kernel
    seconds: float
    busy: bool = False
    retiring: bool = False
    dead: bool = False
    frame: tuple[int, list[Segment]] | None = None
    items_in: int = 0
    items_out: int = 0
    busy_s: float = 0.0
    intervals: list[tuple[float, float]] = field(default_factory=list)


class SimRun(Shell):
    """One simulated run: stage queues, virtual replicas, a heap of timed happenings."""

    engine_name = "sim"

    def __init__(self, pipeline: Pipeline, source: Iterable[Any], placement: Placement,
                 options: RunOptions, sim: SimOptions) -> None:
        self.now = 0.0
        stages = len(pipeline.units)
        replicas = sum(placement.replicas(u.name) for u in pipeline.units)
        policy = policy_for(options, max_frames=CAPACITY * (stages + 1) + 4 * replicas,
                            frame_time=FRAME_TIME, max_frame=MAX_FRAME, quiet_after=None)
        super().__init__(pipeline, source, placement, options, policy, clock=lambda: self.now)
        self.sim = sim
        self.queues: list[deque[tuple[int, list[Segment]]]] = [deque() for _ in range(stages)]
        self.workers: dict[int, _Worker] = {}
        self.heap: list[tuple[float, int, Callable[[], None]]] = []
        self.order = itertools.count()
        self.frame_ids = itertools.count(1 << 40)
        self.hints = [1] * stages + [MAX_FRAME]
        self.random = random.Random(sim.seed)
        self.kernels: dict[int, Kernel] = {}

    def describe_host(self) -> dict[str, Any] | None:
        return {"name": "simulated", "cores": None, "memory": None}

    def start_devices(self) -> Any:
        return None  # virtual time: there is no device to read

    # -- time ------------------------------------------------------------------------------

    def at(self, when: float, happening: Callable[[], None]) -> None:
        """Schedule ``happening`` at virtual time ``when``."""
        heapq.heappush(self.heap, (when, next(self.order), happening))

    def wait(self) -> None:
        """Advance the clock to the next happening (or by a sample interval if none)."""
        if self.heap:
            self.now = max(self.now, self.heap[0][0])
        else:
            stalled = (self.core is not None and self.core.frames and not self.retries
                       and not any(self.queues)
                       and not any(w.busy for w in self.workers.values()))
            if stalled:
                raise EngineError("simulation stalled: items are pending but no replica "
                                  "holds or waits for any (a bug in the run core; please "
                                  "report it)")
            self.now += self.policy.sample_interval
        if self.sim.horizon is not None and self.now > self.sim.horizon:
            raise TimeoutError(f"simulation passed its horizon of {self.sim.horizon:g} s")

    def pump(self) -> None:
        while self.heap and self.heap[0][0] <= self.now:
            _, _, happening = heapq.heappop(self.heap)
            happening()
        for stage in range(len(self.queues)):
            self._dispatch(stage)

    # -- the core's instructions -----------------------------------------------------------

    def rate_of(self, stage: int, group_rate: float | None) -> float:
        """Items/s of one replica: the options' rate, else the plan's, else the default."""
        name = self.names[stage]
        given = (self.sim.rates or {}).get(name)
        rate = given if given is not None else group_rate
        return rate if rate and rate > 0 else 1.0 / self.sim.default_seconds

    def spawn(self, instruction: Spawn) -> None:
        stage = instruction.stage
        rate = self.rate_of(stage, instruction.group.rate if instruction.group else None)
        kernel = Kernel(self.units[stage], given=allot(self.units[stage], instruction.group))
        worker = _Worker(instruction.worker, stage, kernel, 1.0 / rate)
        self.workers[worker.id] = worker
        self.handle(Ready(worker.id, 0, self.now, "sim"))
        if self.sim.kill_rate:
            self.at(self.now + self.random.expovariate(self.sim.kill_rate),
                    lambda w=worker: self._kill(w))

    def retire(self, instruction: Retire) -> None:
        worker = self.workers.get(instruction.worker)
        if worker is None or worker.dead:
            return
        worker.retiring = True
        if not worker.busy:
            self._leave(worker)

    def frame_sizes(self, instruction: FrameSizes) -> None:
        self.hints[:len(instruction.sizes)] = list(instruction.sizes)

    def capacity(self, stage: int) -> int:
        """Frames a stage's queue holds: enough for two per replica, as the local channels."""
        if stage >= len(self.queues):
            return CAPACITY
        replicas = sum(1 for w in self.workers.values() if w.stage == stage and not w.dead)
        return max(CAPACITY, 2 * replicas)

    def reserve(self, alone: bool) -> Any:
        return True if len(self.queues[0]) < self.capacity(0) else None

    def take(self, count: int) -> Fed:
        """Up to ``count`` items that have arrived by now (all of them, unpaced)."""
        rate = self.sim.arrival_rate
        if rate is None:
            return super().take(count)
        assert self.core is not None
        arrived = int(self.now * rate + 1e-9) + 1 - self.core.fed
        if arrived <= 0:
            self.at((self.core.fed) / rate, lambda: None)  # wake when the next one is in
            return Fed([], self.now)
        return super().take(min(count, arrived))

    def transmit(self, token: Any, send: Send) -> None:
        frame = (send.frame, [send.segment])
        if send.retry:
            self.queues[0].appendleft(frame)
        else:
            self.queues[0].append(frame)
        self._dispatch(0)


    # -- simulated replicas ----------------------------------------------------------------

    def _dispatch(self, stage: int) -> None:
        queue = self.queues[stage]
        if not queue:
            return
        idle = [w for w in self.workers.values()
                if w.stage == stage and not (w.busy or w.dead or w.retiring)]
        self.random.shuffle(idle)  # whichever idle replica reads first, as on a socket
        for worker in idle:
            if not queue:
                return
            frame_id, segments = queue.popleft()
            worker.busy, worker.frame = True, (frame_id, segments)
            count = sum(len(s.values) for s in segments)
            worker.items_in += count
            self.handle(Taken(worker.id, frame_id, [(s.frame, s.offsets) for s in segments],
                              self.now))
            took = count * self._seconds(worker)
            worker.intervals.append((self.now, self.now + took))
            worker.busy_s += took
            self.at(self.now + took, lambda w=worker: self._finish(w))

    def _seconds(self, worker: _Worker) -> float:
        """Seconds per item for ``worker`` now: its rate, or the schedule's step in force."""
        steps = (self.sim.schedule or {}).get(self.names[worker.stage], ())
        rate = None
        for start, value in sorted(steps):
            if self.now >= start:
                rate = value
        return worker.seconds if rate is None else 1.0 / rate

    def _finish(self, worker: _Worker) -> None:
        if worker.dead or worker.frame is None:
            return
        frame_id, segments = worker.frame
        worker.frame, worker.busy = None, False
        outputs, returns, failures = [], [], []
        for segment in segments:
            results, failed = _results(worker.kernel, segment)
            out, back, failed_items = settle(worker.kernel, segment, results, failed)
            if out is not None:
                outputs.append(out)
            if back is not None:
                returns.append(back)
            failures.extend(failed_items)
        worker.items_out += sum(len(s.values) for s in outputs)
        last = worker.stage == len(self.queues) - 1
        if outputs and not last:
            limit = max(1, self.hints[worker.stage + 1])
            for piece in (p for s in outputs for p in split(s, limit)):
                self.queues[worker.stage + 1].append((next(self.frame_ids), [piece]))
        self.handle(Done(worker.id, [frame_id], returns, failures, self.now,
                         self._counters(worker), _drain(worker.intervals)))
        if outputs and last:
            self.handle(Arrived(outputs, self.now))
        if worker.retiring:
            self._leave(worker)

    def _kill(self, worker: _Worker) -> None:
        if worker.dead or self.core is None or self.core.finished:
            return
        worker.dead, worker.frame, worker.busy = True, None, False
        self.handle(Exited(worker.id, clean=False, now=self.now, cause="killed (simulated)"))

    def _leave(self, worker: _Worker) -> None:
        worker.dead = True
        self.handle(Exited(worker.id, clean=True, now=self.now, cause="retired"))

    @staticmethod
    def _counters(worker: _Worker) -> Counters:
        return Counters(worker.items_in, worker.items_out, 0, 0, worker.busy_s, 0.0,
                        worker.busy_s)

    def stop_workers(self) -> None:
        for worker in self.workers.values():
            if not worker.dead:
                worker.dead = True
                self.handle(Exited(worker.id, clean=True, now=self.now, cause="stopped"))


def _results(kernel: Kernel, segment: Segment) -> tuple[list[Any], int]:
    """A segment's raw results, batched as the replica is allotted."""
    if kernel.batched:
        results: list[Any] = []
        failed = 0
        for value in segment.values:
            (result,), bad = kernel.call_batch([value])
            results.append(result)
            failed += bad
        return results, failed
    results = [kernel.result(v) for v in segment.values]
    return results, sum(1 for r in results if type(r) is Failed)


def _drain(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    taken = list(intervals)
    intervals.clear()
    return taken


__all__ = ["SimEngine", "SimRun"]
