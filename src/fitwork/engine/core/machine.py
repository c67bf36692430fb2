"""`RunCore`: the decisions that make a run correct, as a pure state machine.

Events in, instructions out, no I/O and no clock of its own: every event carries the
driver's ``now``.  Both engines' drivers (and the simulated engine) are shells around it::

    driver I/O ──events──▶ RunCore.handle ──instructions──▶ driver I/O
      (source, channels,      (books per frame,            (send, spawn, retire,
       worker messages,        retries, order,              dead-letter, emit,
       Ray calls, clocks)      frame sizes, replicas)       abort, finish)

Invariants (each checked by a Hypothesis property in ``tests/engine/test_core.py``):

1. Every source item fed is settled exactly once: its outputs emitted, or dead-lettered.
2. An output is emitted at most once per (source item, path), however often the item is
   retried; every output of a settled item was emitted.
3. With ``ordered``, outputs are emitted in source order (flat-map children in order).
4. An item is fed at most ``max_attempts`` times; the last death makes it poison.
5. Fresh frames in flight never exceed ``max_frames``, nor items ahead of the oldest
   unemitted one ``ordered_window`` when ordered.
6. Replicas alive (less those retiring) equal the target of each stage once spawns land.
7. With ``spans``, every source item is in exactly one emitted span, emitted once it has
   settled and together with all its outputs.
8. A worker's death costs only the rows that kill: what it held is narrowed down before
   anything is dead-lettered, and only a row that died alone is poison.

Narrowing a death, and the items of a sharded reader: see `fitwork.engine.core.retries`.

Progress is an item settled: the restart-storm rule aborts only when workers keep dying
and no item (single, piece or frame) completes in between, and it counts only the deaths
of workers that held no rows: a death holding rows narrows them down, so dense rows that
kill once (20 in a shard) cannot read as a storm, and rows that kill every time end as
poison.  A row isolated as poison
accounts for the deaths it took, but only up to ``POISON_STREAK`` rows in a row: a unit
that kills every worker on every item (out of memory at any input) stops the run instead
of dead-lettering all of it.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from fitwork.engine.core.codec import CoreConfig, Regroup, Started
from fitwork.engine.core.events import (
    Arrived,
    Counters,
    Done,
    Event,
    Exited,
    Fed,
    Lost,
    Measured,
    Ready,
    Resize,
    Stage,
    Taken,
    Tick,
)
from fitwork.engine.core.frames import Frame
from fitwork.engine.core.instructions import (
    Drain,
    Finished,
    FrameSizes,
    Instruction,
    Report,
    RestoreCredits,
    Retire,
    Send,
    Spawn,
)
from fitwork.engine.core.log import LOG_ENTRIES, CoreLog
from fitwork.engine.core.policy import Policy
from fitwork.engine.core.settle import Settling
from fitwork.engine.core.sizing import frame_size
from fitwork.engine.core.workers import WorkerBooks
from fitwork.engine.segment import fresh
from fitwork.errors import EngineError
from fitwork.failure import Failure
from fitwork.io.unreadable import Unreadable
from fitwork.placement import Group, Placement
from fitwork.telemetry.record import Progress, UnitProgress

POISON_STREAK = 16
"""Rows isolated as poison with no item completed in between before a run gives up."""
SLICE_WIDTH = 256
"""Rows of the first piece of a shard whose worker died, before the run has seen a shard's
rows (then half the rows a shard had)."""


class RunCore(Settling):
    """The run's books and rules; see the module docstring."""

    def __init__(self, stages: Sequence[Stage], placement: Placement, policy: Policy,
                 run_id: str, now: float, log_size: int = LOG_ENTRIES) -> None:
        self.stages = list(stages)
        self.names = [s.name for s in self.stages]
        self._placement = placement
        self.log = CoreLog(CoreConfig(tuple(stages), placement, policy, run_id, now), log_size)
        self.policy = policy
        self.run_id = run_id
        self.t0 = now
        self.out: list[Instruction] = []
        self.frames: dict[int, Frame] = {}
        self.frame_ids = itertools.count(1)
        self.worker_ids = itertools.count(1)
        self.workers: dict[int, WorkerBooks] = {}
        self.order: deque[Frame] = deque()
        self.in_flight = 0
        self.fed = self.fed_records = self.released = 0
        self.completed = self.outputs = self.retries = self.restarts = 0
        self.failures = self.poisoned = 0
        self.failures_by_unit: dict[str, int] = {}
        self.failed_items: list[Failure] = []
        self.deaths_since_progress = self.poisoned_since_progress = 0
        self.slices = self.stages[0].slices
        self.shard_rows = 2 * SLICE_WIDTH  # about how many rows a shard has (a power of 2)
        self.rows_seen = False  # shard_rows is from rows seen (the largest shard's so far)
        self.source_done = False
        self.source_error: BaseException | None = None
        self.aborted: BaseException | None = None
        self.finished = False
        self.stopping = False
        # a batched unit's frames hold a batch at least: a smaller frame would wait its
        # batch_wait for items from other frames (on Ray, from other calls)
        self.sizes = [min(s.batch_size or 1, policy.max_frame) for s in self.stages]
        # a plain first unit is probed with one frame a replica before frames are sized; one
        # that batches or runs calls side by side needs many items at once from the start
        self.probe = not (self.stages[0].io or self.stages[0].batch_size)
        self.measured = tuple(bool(s.batch_size) for s in self.stages)
        self.drained = [not s.batch_size for s in self.stages]  # told nothing more comes
        self.stage_items = [0] * len(self.stages)
        self.stage_busy = [0.0] * len(self.stages)
        self.stage_deaths = [0] * len(self.stages)  # workers of the stage that died unasked
        self.named_deaths = [0] * len(self.stages)  # of them, those that lost only their item
        self.stage_cpu = [0.0] * len(self.stages)
        self.stage_queued = [0.0] * len(self.stages)
        self.targets = [placement.replicas(name) for name in self.names]
        self.latencies: list[tuple[float, int]] = []
        self.completions: list[tuple[float, int]] = []
        self.samples: list[tuple[float, list[int]]] = []
        self.replica_series: list[tuple[float, list[int]]] = []
        self.last_activity = self.last_sample = now
        self.last_progress = -1e18
        self.handlers: dict[type, Callable[[Any], None]] = {
            Fed: self._fed, Ready: self._ready, Taken: self._taken, Done: self._done,
            Measured: self._measured, Arrived: self._arrived, Exited: self._exited,
            Lost: self._lost, Tick: self._tick, Resize: self._resize,
        }

    # -- the interface ---------------------------------------------------------------------

    def start(self) -> list[Instruction]:
        """Spawn every planned replica."""
        for stage, name in enumerate(self.names):
            for group in self.placement.of(name):
                for _ in range(group.replicas):
                    self._spawn(stage, group, self.t0)
        self._note_replicas(self.t0)
        return self._take(Started())

    def handle(self, event: Event) -> list[Instruction]:
        """Take one event; return what the driver must do, in order."""
        self.handlers[type(event)](event)
        if self.source_done and not all(self.drained):
            self._drain()
        return self._take(event)

    @property
    def placement(self) -> Placement:
        """The groups replicas are started in."""
        return self._placement

    @placement.setter
    def placement(self, placement: Placement) -> None:
        """A re-fit's new allotment, set by the adapter: an input, logged as a `Regroup`."""
        self._placement = placement
        self.log.add(Regroup(placement), ())

    def room(self) -> int:
        """How many new source items the driver may feed now (0: wait)."""
        if self.source_done or self.aborted is not None or self.stopping:
            return 0
        if self.in_flight >= self.policy.max_frames:
            return 0
        if self.probe and not self.stage_items[0] and self.in_flight >= max(1, self.live(0)):
            return 0  # one frame a replica until the first unit reports: that sizes the next
        size = self.sizes[0]
        if self.policy.ordered:
            size = min(size, self.policy.ordered_window - (self.fed - self.released))
        return max(0, size)

    @property
    def settled(self) -> bool:
        """True once the source is exhausted and every item fed is settled."""
        return self.source_done and not self.frames

    def live(self, stage: int) -> int:
        """Replicas of ``stage`` running and not on their way out."""
        return sum(1 for w in self.workers.values()
                   if w.stage == stage and w.ended is None and not w.retiring)

    def progress(self, now: float) -> Progress:
        """A snapshot for progress callbacks and metrics."""
        units = {name: self._unit_progress(i) for i, name in enumerate(self.names)}
        return Progress(elapsed_s=now - self.t0, fed=self.fed, completed=self.completed,
                        outputs=self.outputs, failures=self.failures,
                        depths=dict(zip(self.names, self.depths(), strict=True)), units=units)

    def _unit_progress(self, stage: int) -> UnitProgress:
        """Stage ``stage``'s live replicas and its workers' counters, summed."""
        counters = [w.counters for w in self.workers.values() if w.stage == stage]
        return UnitProgress(replicas=self.live(stage),
                            items_in=sum(c.items_in for c in counters),
                            items_out=sum(c.items_out for c in counters),
                            busy_s=sum(c.busy_s for c in counters),
                            cpu_s=sum(c.cpu_s for c in counters))

    def depths(self) -> list[int]:
        """Items sent into each stage and not yet taken by one of its replicas."""
        sent = [self.fed_records] + [0] * len(self.stages)
        taken = [0] * len(self.stages)
        for worker in self.workers.values():
            taken[worker.stage] += worker.counters.items_in
            sent[worker.stage + 1] += worker.counters.items_out
        return [max(0, sent[i] - taken[i]) for i in range(len(self.stages))]

    # -- events ----------------------------------------------------------------------------

    def _fed(self, event: Fed) -> None:
        self.last_activity = event.now
        if event.items and type(event.items[0]) is Unreadable:  # the shell feeds it alone
            self._unreadable(event.items[0], event.now)
        elif event.items:
            frame = Frame(next(self.frame_ids), self.fed, event.items, event.now)
            self.fed += frame.count
            self.fed_records += frame.count
            self.frames[frame.id] = frame
            self.in_flight += 1
            if self.policy.ordered:
                self.order.append(frame)
            self.out.append(Send(frame.id, fresh(frame.id, event.items)))
        if event.end:
            self.source_done = True
            self.source_error = event.error
        self._maybe_finish()

    def _unreadable(self, bad: Unreadable, now: float) -> None:
        """A line the tolerant reader could not read: it takes its source index, as a frame
        of its own that is dead-lettered and settled at once (no worker sees it)."""
        frame = Frame(next(self.frame_ids), self.fed, [bad], now)
        self.fed += 1
        self.frames[frame.id] = frame
        self.in_flight += 1
        if self.policy.ordered:
            self.order.append(frame)
        self._dead_letter(bad.failure(frame.src, self.run_id))
        self._complete(frame, now)

    def _ready(self, event: Ready) -> None:
        self.last_activity = event.now
        worker = self.workers.get(event.worker)
        if worker is not None:
            worker.ready, worker.pid, worker.node = True, event.pid, event.node
            worker.build_cpu_s = event.build_cpu_s

    def _taken(self, event: Taken) -> None:
        self.last_activity = event.now
        worker = self.workers.get(event.worker)
        if worker is not None and worker.ended is None:
            worker.held[event.frame] = event.parts

    def _done(self, event: Done) -> None:
        self.last_activity = event.now
        worker = self.workers.get(event.worker)
        if worker is not None:
            for frame_id in event.frames:
                worker.held.pop(frame_id, None)
            if event.counters is not None:
                self._count(worker, event.counters, event.intervals)
        self._settle(event.now, (), event.returns, event.failures)

    def _measured(self, event: Measured) -> None:
        worker = self.workers.get(event.worker)
        if worker is not None:
            self._count(worker, event.counters, event.intervals)

    def _arrived(self, event: Arrived) -> None:
        self.last_activity = event.now
        self._settle(event.now, event.segments, event.returns, event.failures)

    def _exited(self, event: Exited) -> None:
        self.last_activity = event.now
        worker = self.workers.get(event.worker)
        if worker is None or worker.ended is not None:
            return
        worker.ended, worker.clean = event.now, event.clean
        worker.code, worker.cause = event.code, event.cause
        name = self.names[worker.stage]
        if event.fatal is not None:
            self._abort(EngineError(f"unit {name!r} could not start in its worker: "
                                    f"{event.fatal}; fix its constructor (it runs once per "
                                    "replica)"))
            return
        if event.clean or self.stopping:
            worker.held.clear()
            if event.clean and not worker.retiring:
                self._reassign_retirement(worker.stage)
        else:
            self.restarts += 1
            self.stage_deaths[worker.stage] += 1
            if not any(worker.held.values()):
                # A death holding rows narrows them down (a smaller group, piece or single,
                # then poison, which the poison streak bounds); one holding none narrows
                # nothing, and only such deaths run toward the restart-storm limit.
                self.deaths_since_progress += 1
            why = f"worker died ({event.cause or 'exited unasked'})"
            named = self._named_item(worker, event.died_in)
            self.named_deaths[worker.stage] += named is not None
            self._retry_held(list(worker.held.values()), name, why, event.now, named)
            worker.held.clear()
            per_row = self.policy.max_attempts
            if self.slices:
                per_row += 2 * self.shard_rows.bit_length()  # deaths that bisect a shard
            limit = (3 * self.policy.max_attempts + 2 * max(1, sum(self.targets))
                     + per_row * self.poisoned_since_progress)
            if (self.deaths_since_progress > limit
                    or self.poisoned_since_progress > POISON_STREAK):
                self._abort(EngineError(
                    f"workers of unit {name!r} keep dying ({event.cause}) and no item has "
                    f"finished in {self.deaths_since_progress} restarts ({self.poisoned} "
                    "rows isolated as poison before that); check its memory demand and "
                    "native code"))
                return
        if not self.stopping and self.live(worker.stage) < self.targets[worker.stage]:
            self._spawn(worker.stage, worker.group, event.now)
        self._note_replicas(event.now)

    def _named_item(self, worker: WorkerBooks,
                    died_in: Sequence[int] | None) -> tuple[int, int, int] | None:
        """The item (feed frame, offset, and a shard's row, else -1) a dead worker was
        running, from where its engine saw it die (`Exited.died_in`); None where not known,
        or where a shard's row is not (its rows are narrowed down by row ranges)."""
        if died_in is None:
            return None
        key, place, row = died_in
        parts = worker.held.get(key)
        if parts is None or place < 0 or (self.slices and row < 0):
            return None
        for frame_id, offsets in parts:
            if place < len(offsets):
                return frame_id, offsets[place], row
            place -= len(offsets)
        return None

    def _lost(self, event: Lost) -> None:
        self.last_activity = event.now
        worker = self.workers.get(event.worker)
        if event.parts is not None:  # some items of a call its worker still holds
            stage = event.stage if event.stage is not None else 0
            if event.died:  # a process of the stage died; its worker lives on
                self.restarts += 1
                self.stage_deaths[stage] += 1
                self.named_deaths[stage] += event.named
            for frame_id, offsets in event.parts:
                self._retry_part(frame_id, offsets, self.names[stage], event.cause,
                                 event.now, event.blame)
            return
        parts = worker.held.pop(event.frame, None) if worker is not None else None
        if worker is None or parts is None:
            return
        for frame_id, offsets in parts:
            self._retry_part(frame_id, offsets, self.names[worker.stage], event.cause,
                             event.now, event.blame)

    def _tick(self, event: Tick) -> None:
        now = event.now
        if now - self.last_sample >= self.policy.sample_interval:
            self.last_sample = now
            self.samples.append((now - self.t0, self.depths()))
        interval = self.policy.progress_interval
        if interval is not None and now - self.last_progress >= interval:
            self.last_progress = now
            self.out.append(Report(self.progress(now)))
        quiet = self.policy.quiet_after
        if (quiet is not None and self.frames and not event.backlog
                and now - self.last_activity > quiet and self._idle()):
            self.last_activity = now
            self.out.append(RestoreCredits())
            for frame in list(self.frames.values()):
                if frame.id in self.frames:
                    self._retry_part(frame.id, range(frame.count), self.names[0],
                                     "frame lost with a killed worker", now)

    def _resize(self, event: Resize) -> None:
        stage, wanted = event.stage, max(1, event.replicas)
        self.targets[stage] = wanted
        live = self.live(stage)
        groups = self.placement.of(self.names[stage])
        for _ in range(wanted - live):
            self._spawn(stage, groups[-1] if groups else None, event.now)
        if live > wanted:
            candidates = sorted((w for w in self.workers.values()
                                 if w.stage == stage and w.ended is None and not w.retiring),
                                key=lambda w: (len(w.held), -w.started))
            for worker in candidates[:live - wanted]:
                worker.retiring = True
                self.out.append(Retire(worker.id, stage))
        self._note_replicas(event.now)

    # -- settling items --------------------------------------------------------------------

    def _drain(self) -> None:
        """Tell each batched stage whose upstream is through (the source read, every
        earlier stage's items taken, and none held) that nothing more comes: at a run's end
        its last, partial batch then runs at once rather than after ``batch_wait``.  With
        ``whole_path`` a first unit's call holds its frame until the frame is through the
        whole pipeline, so holding says nothing there; its replicas count an item in once
        worked on, and the depths alone tell.  Told early, a stage only runs smaller
        batches: nothing is lost."""
        if self.aborted is not None or self.stopping:
            return
        depths = self.depths()
        holding = set() if self.policy.whole_path else {
            w.stage for w in self.workers.values() if w.ended is None and w.held}
        for stage in range(len(self.stages)):
            if not self.drained[stage]:
                self.drained[stage] = True
                self.out.append(Drain(stage))
            if depths[stage] or stage in holding:
                return

    def _maybe_finish(self) -> None:
        if self.source_done and not self.frames and not self.finished and not self.aborted:
            self.finished = self.stopping = True
            self.out.append(Finished())

    # -- workers ---------------------------------------------------------------------------

    def _spawn(self, stage: int, group: Group | None, now: float) -> None:
        worker = WorkerBooks(next(self.worker_ids), stage, group, now)
        self.workers[worker.id] = worker
        self.out.append(Spawn(worker.id, stage, group))

    def _reassign_retirement(self, stage: int) -> None:
        """A worker of ``stage`` left cleanly in another's place (engines that cannot pick)."""
        for worker in self.workers.values():
            if worker.stage == stage and worker.retiring and worker.ended is None:
                worker.retiring = False
                return

    def _count(self, worker: WorkerBooks, counters: Counters,
               intervals: Sequence[tuple[float, float]]) -> None:
        before, worker.counters = worker.counters, counters
        stage = worker.stage
        self.stage_items[stage] += counters.items_in - before.items_in
        self.stage_busy[stage] += counters.busy_s - before.busy_s
        self.stage_cpu[stage] += counters.cpu_s - before.cpu_s
        self.stage_queued[stage] += counters.queued_s - before.queued_s
        if intervals:
            worker.intervals.extend((s - self.t0, e - self.t0) for s, e in intervals)
        sizes = list(self.sizes)
        sizes[stage] = self._frame_size(stage)
        if self.policy.whole_path:
            sizes[0] = self._frame_size(0)
        measured = tuple(bool(self.stage_items[i] or s.batch_size)
                         for i, s in enumerate(self.stages))
        if sizes != self.sizes or measured != self.measured:
            self.sizes, self.measured = sizes, measured
            self.out.append(FrameSizes(tuple(sizes), measured))

    def _idle(self) -> bool:
        """Every live worker is up and holds nothing: nothing can be in flight."""
        live = [w for w in self.workers.values() if w.ended is None]
        return bool(live) and all(w.ready and not w.held for w in live)

    def _frame_size(self, stage: int) -> int:
        """Items per frame into ``stage`` (`sizing.frame_size`).  With ``whole_path``
        (engines whose call into the first unit returns only once its items are through the
        whole pipeline, as Ray's), the first unit's frames are sized by the work of every
        stage per source item, so a call stays ~``frame_time`` long."""
        busy = self.stage_busy[stage]
        if stage == 0 and self.policy.whole_path:
            busy = sum(self.stage_busy)
        deaths = self.stage_deaths[stage]
        if not self.policy.named_shrink:
            deaths -= self.named_deaths[stage]
        return frame_size(self.policy, self.stages[stage], self.sizes[stage],
                          self.stage_items[stage], busy, deaths)

    def _note_replicas(self, now: float) -> None:
        if self.stopping:
            return  # replicas held to the end: stopping them is part of the run
        counts = [self.live(i) for i in range(len(self.stages))]
        if not self.replica_series or self.replica_series[-1][1] != counts:
            self.replica_series.append((now - self.t0, counts))

    def _take(self, stimulus: Event | Started) -> list[Instruction]:
        """The instructions ``stimulus`` gave, kept in the log as they are handed out."""
        out, self.out = self.out, []
        self.log.add(stimulus, out)
        return out

