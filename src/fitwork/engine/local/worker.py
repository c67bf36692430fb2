"""A worker process: the local engine's transport for one replica's loop.

A frame is ``(frame id, [segment, ...])`` (see `fitwork.engine.segment`; on the pipe each
segment is a plain tuple).  How the replica runs its unit's items (plain, batched,
concurrent, a retry alone) is the one replica loop's (`fitwork.engine.serving.Serving`),
which the Ray replica runs too; this module is its `Transport` over the local pipes::

    inbox ──frame──▶ take (Taken) ─▶ Serving ─▶ finish: settle ─▶ segments ─▶ outbox
                                                        └─▶ Done (returns, failures,
                                                            counters)

Control messages to the driver are the run core's own events (`Ready`, `Taken`, `Done`)
plus `Final` (last counters at a clean stop) and `Fatal` (the unit could not start).
``Done`` is sent only after the frame's outputs are in the next channel, so a worker
killed at any point leaves its frames held, and the driver retries them.  Time spent
waiting for room downstream is counted as *blocked*, not busy.  A frame holding a retry
says so in its datagram's first byte, so a worker with calls in flight leaves it in the
channel for one with none (`retry_next`).
"""

from __future__ import annotations

import itertools
import os
import pickle
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from fitwork.engine.core.events import Counters, Done, Measured, Ready, Taken
from fitwork.engine.forking import after_fork
from fitwork.engine.framing import outputs_per_frame
from fitwork.engine.local.channel import STOP, Channel
from fitwork.engine.local.marks import Marks
from fitwork.engine.local.streaming import RowStreams, install
from fitwork.engine.local.wire import Wire
from fitwork.engine.parts import PartWriter, Sink, Written
from fitwork.engine.segment import Return, Segment, rows, settle, typed
from fitwork.engine.serve import Busy, Runner
from fitwork.engine.serving import DRAIN, IDLE, Finished, Frame, Serving, is_retry
from fitwork.engine.serving import STOP as SERVING_STOP
from fitwork.engine.threads import limit_torch
from fitwork.failure import Failure, describe
from fitwork.placement import Allotment
from fitwork.telemetry.cputime import cpu_seconds
from fitwork.telemetry.schedstat import run_queue_seconds
from fitwork.workload.kernel import Kernel
from fitwork.workload.unit import Unit


class Final(NamedTuple):
    """The worker stopped as asked; its last counters."""

    worker: int
    counters: Counters
    intervals: list[tuple[float, float]]


class Fatal(NamedTuple):
    """The unit could not be built in this worker."""

    worker: int
    error: str
    trace: str


@dataclass
class WorkerSpec:
    """Everything a worker needs, inherited across fork."""

    worker_id: int
    stage: int
    unit: Unit
    given: Allotment  # what this replica gets (`fitwork.placement.allot`)
    inbox: Channel
    outbox: Channel
    control: socket.socket
    wire_prefix: str
    hints: Any
    parent_pid: int
    env: dict[str, str] = field(default_factory=dict)
    gate: Any = None
    next_replicas: int = 1  # replicas of the next unit (frames are cut for them)
    sink: tuple[Sink, str] | None = None  # the last unit's: where it writes outputs, run id
    marks: Marks | None = None  # where it marks the item it runs (`marks`)

    @property
    def cores(self) -> float:
        """Cores this replica is allotted (its pools are held to them)."""
        return self.given.cores


def prepare_process(spec: WorkerSpec) -> None:
    """A forked worker's (or spare's) first steps: detach from the terminal's signals, die
    with the driver, take the unit's environment, fresh stdio locks, torch held to its cores."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    after_fork()
    os.environ.update(spec.env)
    limit_torch(spec.cores)


def worker_main(spec: WorkerSpec) -> None:
    """Process entry point: detach from the terminal's signals and run until told to stop."""
    prepare_process(spec)
    worker = Worker(spec)
    try:
        kernel = Kernel(spec.unit, given=spec.given)
    except Exception as exc:
        worker.send(Fatal(spec.worker_id, describe(exc), traceback.format_exc()))
        os._exit(3)
    worker.serve(kernel)
    # Final is sent and every output is downstream (or written and flushed to the part):
    # leave at once, without the interpreter's teardown the driver would wait on.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class Worker:
    """The per-process loop; which loop runs depends on the unit (plain, batched, I/O)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.id = spec.worker_id
        self.wire = Wire(spec.wire_prefix)
        self.frame_ids = itertools.count(spec.worker_id << 32)
        self.out: list[Segment] = []
        self.returns: list[Return] = []
        self.failures: list[Failure] = []
        self.busy = Busy()
        self.items_in = self.items_out = self.bytes_in = self.bytes_out = 0
        self.blocked_s = 0.0
        self.built_cpu = 0.0  # CPU seconds before the first call, set when it serves
        self.part: PartWriter | None = None
        self.written: list[Segment] = []  # outputs in the part the driver has not heard of
        self.kernel: Any = None  # set when it serves
        self.drained = False  # the driver's word that nothing more comes was taken
        self.watch_wake = self.watch_drain = False  # what `take` waits on besides frames
        self.wake_read, self.wake_write = os.pipe()
        self.streams: RowStreams | None = None  # a reader's rows sent on as read
        self.mark = spec.marks.bind(self.id, spec.stage) if spec.marks is not None else None
        self.serving: Serving | None = None  # set when it serves

    # -- talking to the driver -------------------------------------------------------------

    def send(self, message: Any) -> None:
        """One control message to the driver."""
        data, _ = self.wire.dumps(message)
        self.spec.control.send(data)

    def counters(self) -> Counters:
        """Cumulative counters: items and bytes in and out; busy, blocked, CPU seconds, and
        seconds spent waiting for a core."""
        return Counters(self.items_in, self.items_out, self.bytes_in, self.bytes_out,
                        self.busy.so_far(), self.blocked_s, cpu_seconds() - self.built_cpu,
                        run_queue_seconds())

    def report(self, finished: list[int]) -> None:
        """Tell the driver these frames are done, with what they returned and cost (and
        first, how far the part holding their outputs goes)."""
        if self.written:
            assert self.part is not None
            self.items_out += sum(len(s.values) for s in self.written)
            self.send(Written(self.written))
            self.written = []
        self.send(Done(self.id, finished, self.returns, self.failures, time.monotonic(),
                       self.counters(), self.busy.take()))
        self.returns, self.failures = [], []

    # -- frames in and out -----------------------------------------------------------------

    def receive(self, data: bytes) -> tuple[int, list[Segment]]:
        """A frame from its datagram, its `Taken` sent to the driver."""
        (frame_id, crossed), size = self.wire.loads(data)
        segments = typed(crossed)
        if self.mark is not None:
            self.mark_items(frame_id, segments)
        self.send(Taken(self.id, frame_id, [(s.frame, s.offsets) for s in segments],
                        time.monotonic()))
        if self.streams is not None:
            self.streams.note(segments)
        self.items_in += sum(len(s.values) for s in segments)
        self.bytes_in += size
        return frame_id, segments

    def mark_items(self, frame_id: int, segments: list[Segment]) -> None:
        """Mark frame ``frame_id`` taken and, if the driver wants items named (this unit
        has lost a worker), each item as it starts, and a reader's each row.  A row a
        reader handed on is named by its path (the row of its shard): the core reads the
        rest of the shard again as a piece that remembers the row, and the reader still
        streaming the shard stops (`fitwork.engine.core.Stale`)."""
        mark = self.mark
        assert mark is not None
        mark.took(frame_id)
        wanted = mark.wanted()
        if self.streams is not None:
            self.streams.mark_row = mark.row if wanted else None
        if self.serving is None:
            return
        if wanted and self.streams is None and any(s.paths for s in segments):
            rows = [p[0] if s.paths and p else -1 for s in segments
                    for p in (s.paths or [()] * len(s.values))]
            self.serving.each = lambda place: mark.running(place, rows[place])
        else:
            self.serving.each = mark.running if wanted else None

    def frame_limit(self, total: int) -> int:
        """Outputs per frame of ``total`` to send: the one rule (`outputs_per_frame`)."""
        stage = self.spec.stage + 1
        return outputs_per_frame(total, self.spec.hints[stage], self.spec.next_replicas,
                                 self.items_out, self.bytes_out)

    def settle(self, kernel: Kernel, segment: Segment, results: list[Any],
               failed: int) -> None:
        """Queue a segment's outputs; note its returned weight and failures."""
        out, back, failures = settle(kernel, segment, results, failed)
        if out is not None:
            self.out.append(out)
        if back is not None:
            self.returns.append(back)
        if failures:
            self.failures.extend(failures)

    def flush(self) -> None:
        """Send the queued outputs downstream in frames of at most the frame limit (or, for
        the last unit of a run with a sink, write them to this replica's part)."""
        if not self.out:
            return
        if self.spec.sink is not None:
            self.write_part()
            return
        left = sum(len(s.values) for s in self.out)
        limit = self.frame_limit(left)
        frame: list[Segment] = []
        count = 0
        for segment in self.out:
            while segment.values:
                piece, segment = segment.head(limit - count)
                frame.append(piece)
                count += len(piece.values)
                if count >= limit:
                    self.put(frame)
                    left -= count
                    frame, count = [], 0
                    # a long flush (a reader's shard) follows the frame size as it adapts
                    limit = self.frame_limit(left)
        if frame:
            self.put(frame)
        self.out = []

    def put(self, segments: list[Segment]) -> None:
        """Send one frame, waiting for a credit (that wait is blocked time)."""
        retry = is_retry(segments)  # its first byte says so: a busy io worker leaves it
        try:
            data, size = self.wire.dumps((next(self.frame_ids), rows(segments)), held=True,
                                         retry=retry)
        except Exception:
            segments = self.drop_unpicklable(segments)
            if not segments:
                return
            data, size = self.wire.dumps((next(self.frame_ids), rows(segments)), held=True,
                                         retry=retry)
        start = time.monotonic()
        while not self.spec.outbox.put(data, timeout=1.0, ready=self.wire.ready):
            if os.getppid() != self.spec.parent_pid:
                os._exit(4)
        self.blocked_s += time.monotonic() - start
        self.items_out += sum(len(s.values) for s in segments)
        self.bytes_out += size

    def write_part(self) -> None:
        """Append the queued outputs to this replica's part; keep their books (each value
        replaced by its place in the part) for the `Written` message `report` sends.  An
        output the part's format cannot hold fails alone, as an unpicklable one does."""
        if self.part is None:
            assert self.spec.sink is not None
            sink, run_id = self.spec.sink
            self.part = PartWriter(sink, run_id, self.id)
        part = self.part
        for segment in self.out:
            try:
                encoded = [part.encode(value) for value in segment.values]
            except (TypeError, ValueError):
                segment = self.drop_unwritable(segment)
                encoded = [part.encode(value) for value in segment.values]
            if not encoded:
                continue
            self.bytes_out += sum(map(len, encoded))
            self.written.append(segment.with_values(part.write(encoded)))
        self.out = []

    def drop_unwritable(self, segment: Segment) -> Segment:
        """``segment`` without the outputs its part cannot encode, each dead-lettered."""
        assert self.part is not None
        return self.drop_failing(segment, self.part.encode, "its output part cannot hold")

    def drop_unpicklable(self, segments: list[Segment]) -> list[Segment]:
        """``segments`` without the outputs that cannot be pickled, each dead-lettered."""
        def check(value: Any) -> None:
            pickle.dumps(value, protocol=5)

        kept = [self.drop_failing(s, check, "cannot cross processes") for s in segments]
        return [s for s in kept if s.values]

    def drop_failing(self, segment: Segment, check: Callable[[Any], Any],
                     what: str) -> Segment:
        """``segment`` without the outputs ``check`` raises on: each is dead-lettered (the
        unit returned a value that ``what``) and its weight returned."""
        frame, _, offsets, paths, exps, values = segment
        keep: list[int] = []
        for j, value in enumerate(values):
            try:
                check(value)
            except Exception as exc:
                error = TypeError(f"unit {self.spec.unit.name!r} returned a value that {what} "
                                  f"({describe(exc)}); return plain data")
                self.failures.append(Failure.of(self.spec.unit.name, error, repr(value),
                                                path=paths[j] if paths else (), frame=frame,
                                                offset=offsets[j]))
                self.returns.append(Return(frame, [offsets[j]], [exps[j]] if exps else None))
                continue
            keep.append(j)
        return segment.keep(keep)

    # -- the transport the replica's loop runs over (`fitwork.engine.serving`) -------------

    def serve(self, kernel: Kernel) -> None:
        """Say hello, serve frames until told to stop, and report final counters."""
        self.built_cpu = cpu_seconds()  # starting and building: not the unit's work
        self.kernel = kernel
        self.streams = install(self, kernel)
        self.send(Ready(self.id, os.getpid(), time.monotonic(), build_cpu_s=self.built_cpu))
        runner = Runner(kernel, self.spec.gate, self.busy)
        self.watch_wake = runner.concurrent
        self.watch_drain = kernel.batched and not runner.concurrent
        self.serving = Serving(runner)
        self.serving.serve(self)
        self.send(Final(self.id, self.counters(), self.busy.take()))

    def take(self, timeout: float | None) -> Frame | str | None:
        """The next frame (its `Taken` sent), `STOP`, `DRAIN` once, or None after
        ``timeout`` (None: `IDLE`) or a `wake` (exits if the driver is gone).

        A worker that needs no wake waits in the channel's receive, where the kernel wakes
        one waiting worker per frame (waiting in ``select`` woke every worker for each
        frame: 0.85x the items/s of no-op units); a batch waiting for items also watches
        the drain; an io worker also the wake of a call that ended."""
        inbox = self.spec.inbox
        if self.watch_wake:
            return self._take_or_wake(timeout)
        if timeout and self.watch_drain and not self.drained and inbox.drained(timeout):
            self.drained = True
            return DRAIN
        data = inbox.get(IDLE if timeout is None else timeout)
        if data is None:
            if os.getppid() != self.spec.parent_pid:
                os._exit(4)
            return None
        return SERVING_STOP if data == STOP else Frame(*self.receive(data))

    def _take_or_wake(self, timeout: float | None) -> Frame | str | None:
        """`take` for a worker whose calls end on other threads: the inbox or the wake."""
        inbox = self.spec.inbox
        data = inbox.get(0)
        if data is None:
            watch: list[Any] = [inbox.recv_end, self.wake_read]
            ready, _, _ = select.select(watch, [], [], IDLE if timeout is None else timeout)
            if self.wake_read in ready:
                os.read(self.wake_read, 4096)
                return None
            data = inbox.get(0) if ready else None
            if data is None:
                if not ready and os.getppid() != self.spec.parent_pid:
                    os._exit(4)
                return None
        return SERVING_STOP if data == STOP else Frame(*self.receive(data))

    def wake(self) -> None:
        """Make a waiting `take` return (a call ended on another thread)."""
        os.write(self.wake_write, b"x")

    def retry_next(self) -> bool:
        """Whether the frame at the head of the inbox holds a retry (left there)."""
        return self.wire.is_retry(self.spec.inbox.head())

    def finish(self, frames: list[Finished]) -> None:
        """Settle the frames' segments, send their outputs on, and report them done."""
        kernel = self.kernel
        if self.mark is not None:
            self.mark.between()
        if self.streams is not None:
            frames = self.streams.finished(frames)
        for frame in frames:
            for segment, results, failed in zip(frame.segments, frame.results, frame.failed,
                                                strict=True):
                self.settle(kernel, segment, results, failed)
        self.flush()
        self.report([frame.key for frame in frames])


__all__ = ["Fatal", "Final", "Measured", "Worker", "WorkerSpec", "worker_main"]
