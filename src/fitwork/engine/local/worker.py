"""A worker process: pulls frames from its unit's channel, runs the unit, pushes results on.

A frame is ``(frame id, [segment, ...])`` (see `fitwork.engine.segment`; on the pipe each
segment is a plain tuple).  The unit's semantics come from the `Kernel`, its calls (gate,
batches, concurrency, busy time) from the replica runtime (`fitwork.engine.serve`), which
the Ray replica shares; this module moves frames and runs the loops that feed it::

    inbox ──frame──▶ Taken ─▶ kernel (plain | batched | concurrent) ─▶ segments ─▶ outbox
                                                                   └─▶ Done (returns,
                                                                       failures, counters)

Control messages to the driver are the run core's own events (`Ready`, `Taken`, `Done`)
plus `Final` (last counters at a clean stop) and `Fatal` (the unit could not start).
``Done`` is sent only after the frame's outputs are in the next channel, so a worker
killed at any point leaves its frames held, and the driver retries them.  Time spent
waiting for room downstream is counted as *blocked*, not busy.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import os
import pickle
import selectors
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import Any, NamedTuple

from fitwork.engine.core.events import Counters, Done, Measured, Ready, Taken
from fitwork.engine.local.channel import STOP, Channel
from fitwork.engine.local.wire import Wire
from fitwork.engine.parts import PartWriter, Sink, Written
from fitwork.engine.segment import Return, Segment, rows, settle, typed
from fitwork.engine.serve import Batches, Busy, Runner
from fitwork.engine.threads import limit_torch
from fitwork.failure import Failure, describe
from fitwork.telemetry.schedstat import run_queue_seconds
from fitwork.workload.kernel import Failed, Kernel
from fitwork.workload.unit import Unit

FRAME_BYTES = 4 << 20


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
    batch_size: int | None
    inbox: Channel
    outbox: Channel
    control: socket.socket
    wire_prefix: str
    hints: Any
    parent_pid: int
    env: dict[str, str] = field(default_factory=dict)
    cores: float = 1.0
    gate: Any = None
    sink: tuple[Sink, str] | None = None  # the last unit's: where it writes outputs, run id


def worker_main(spec: WorkerSpec) -> None:
    """Process entry point: detach from the terminal's signals and run until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()
    os.environ.update(spec.env)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - a fresh lock after fork
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    limit_torch(spec.cores)
    worker = Worker(spec)
    try:
        kernel = Kernel(spec.unit)
    except Exception as exc:
        worker.send(Fatal(spec.worker_id, describe(exc), traceback.format_exc()))
        os._exit(3)
    worker.serve(kernel)
    # Final is sent and every output is downstream (or written and flushed to the part):
    # leave at once, without the interpreter's teardown the driver would wait on.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Waiting:
    """Frames whose items finish one at a time (in batches, or as concurrent calls).

    A frame is settled, every segment at once, when its last item's result comes in.
    """

    def __init__(self, worker: Worker, kernel: Kernel) -> None:
        self.worker, self.kernel = worker, kernel
        self.frames: dict[int, tuple[list[Segment], list[list[Any]], list[int]]] = {}

    def add(self, frame_id: int, segments: list[Segment]) -> int:
        """Start waiting for a frame's items; returns how many there are."""
        count = sum(len(s.values) for s in segments)
        self.frames[frame_id] = (segments, [[None] * len(s.values) for s in segments], [count])
        return count

    def value(self, frame_id: int, segment: int, item: int) -> Any:
        """The input value of one item."""
        return self.frames[frame_id][0][segment][5][item]

    def put(self, frame_id: int, segment: int, item: int, result: Any) -> bool:
        """One item's result; True (and the frame settled) when it was the frame's last."""
        segments, slots, left = self.frames[frame_id]
        slots[segment][item] = result
        left[0] -= 1
        if left[0]:
            return False
        for index, settled in enumerate(segments):
            failed = sum(1 for r in slots[index] if type(r) is Failed)
            self.worker.settle(self.kernel, settled, slots[index], failed)
        del self.frames[frame_id]
        return True


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

    # -- talking to the driver -------------------------------------------------------------

    def send(self, message: Any) -> None:
        """One control message to the driver."""
        data, _ = self.wire.dumps(message)
        self.spec.control.send(data)

    def counters(self) -> Counters:
        """Cumulative counters: items and bytes in and out; busy, blocked, CPU seconds, and
        seconds spent waiting for a core."""
        return Counters(self.items_in, self.items_out, self.bytes_in, self.bytes_out,
                        self.busy.so_far(), self.blocked_s, time.process_time() - self.built_cpu,
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

    def receive(self, timeout: float | None) -> tuple[int, list[Segment]] | bytes | None:
        """A frame, the stop marker, or None on timeout (exits if the driver is gone)."""
        data = self.spec.inbox.get(timeout)
        if data is None:
            if os.getppid() != self.spec.parent_pid:
                os._exit(4)
            return None
        if data == STOP:
            return STOP
        (frame_id, crossed), size = self.wire.loads(data)
        segments = typed(crossed)
        self.send(Taken(self.id, frame_id, [(s.frame, s.offsets) for s in segments],
                        time.monotonic()))
        self.items_in += sum(len(s.values) for s in segments)
        self.bytes_in += size
        return frame_id, segments

    def frame_limit(self) -> int:
        """Outputs per frame: the downstream's hint, kept near FRAME_BYTES per frame."""
        limit = self.spec.hints[self.spec.stage + 1]
        if self.items_out:
            limit = min(limit, int(FRAME_BYTES * self.items_out / max(1, self.bytes_out)))
        return max(1, limit)

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
        limit = self.frame_limit()
        frame: list[Segment] = []
        count = 0
        for segment in self.out:
            while segment.values:
                piece, segment = segment.head(limit - count)
                frame.append(piece)
                count += len(piece.values)
                if count >= limit:
                    self.put(frame)
                    frame, count = [], 0
                    # a long flush (a reader's shard) follows the frame size as it adapts
                    limit = self.frame_limit()
        if frame:
            self.put(frame)
        self.out = []

    def put(self, segments: list[Segment]) -> None:
        """Send one frame, waiting for a credit (that wait is blocked time)."""
        try:
            data, size = self.wire.dumps((next(self.frame_ids), rows(segments)), held=True)
        except Exception:
            segments = self.drop_unpicklable(segments)
            if not segments:
                return
            data, size = self.wire.dumps((next(self.frame_ids), rows(segments)), held=True)
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

    # -- the loops (the calls themselves: `fitwork.engine.serve`) -------------------------

    def serve(self, kernel: Kernel) -> None:
        """Say hello, run the loop that fits the unit, and report final counters on stop."""
        self.built_cpu = time.process_time()  # starting and building: not the unit's work
        self.send(Ready(self.id, os.getpid(), time.monotonic(), build_cpu_s=self.built_cpu))
        unit = kernel.unit
        runner = Runner(kernel, self.spec.gate, self.busy, unit.io if unit.is_io else 0)
        if runner.concurrent:
            self.serve_concurrent(runner)
        elif self.spec.batch_size:
            self.serve_batched(runner, self.spec.batch_size)
        else:
            self.serve_plain(runner)
        self.send(Final(self.id, self.counters(), self.busy.take()))

    def serve_plain(self, runner: Runner) -> None:
        """One frame at a time: every segment's items, then send."""
        kernel = runner.kernel
        while True:
            message = self.receive(timeout=1.0)
            if message is None:
                continue
            if not isinstance(message, tuple):  # the stop marker
                return
            frame_id, segments = message
            for segment in segments:
                results, failed = runner.results(segment.values)
                self.settle(kernel, segment, results, failed)
            self.flush()
            self.report([frame_id])

    def serve_batched(self, runner: Runner, size: int) -> None:
        """Fill batches to ``size`` or until ``batch_wait`` passes, then call once."""
        batches: Batches[tuple[int, int, int]] = Batches(size, runner.kernel.unit.batch_wait)
        frames = Waiting(self, runner.kernel)

        def run(batch: list[tuple[int, int, int]]) -> None:
            results = runner.batch([frames.value(*place) for place in batch])
            finished = [place[0] for place, result in zip(batch, results, strict=True)
                        if frames.put(*place, result)]
            self.flush()
            if finished:
                self.report(finished)

        drained = False
        while True:
            timeout = batches.timeout()
            # items wait for a fuller batch: the driver's word that nothing more comes
            # (`Channel.put_drain`) ends the wait, so a run's last batch does not sit out
            # batch_wait
            if timeout and not drained and self.spec.inbox.drained(timeout):
                drained = True
                batches.drain()
            timeout = batches.timeout()
            message = self.receive(1.0 if timeout is None else timeout)
            if message == STOP:
                while len(batches):
                    run(batches.take())
                return
            if isinstance(message, tuple):
                frame_id, segments = message
                frames.add(frame_id, segments)
                for s, segment in enumerate(segments):
                    for i in range(len(segment.values)):
                        if segment.attempt:  # a retried item runs alone: poison hurts no other
                            run([(frame_id, s, i)])
                        else:
                            batches.put((frame_id, s, i))
            while batches.due():
                run(batches.take())

    def serve_concurrent(self, runner: Runner) -> None:
        """Keep up to ``io`` calls in flight (threads, or an event loop for async units)."""
        limit = runner.kernel.unit.io
        finished: SimpleQueue[tuple[int, int, int, Any]] = SimpleQueue()
        wake_read, wake_write = os.pipe()
        selector = selectors.DefaultSelector()
        selector.register(wake_read, selectors.EVENT_READ, "wake")
        inbox = self.spec.inbox.recv_end
        frames = Waiting(self, runner.kernel)
        in_flight, stopping, listening = 0, False, False
        woken = [False]  # a wake byte is on its way: later calls need not write another

        def on_done(frame_id: int, s: int, i: int, future: Future[Any]) -> None:
            error = future.exception()
            finished.put((frame_id, s, i, Failed(error, getattr(error, "__fitwork_attempts__",
                                                                  1))
                          if error is not None else future.result()))
            if not woken[0]:
                woken[0] = True
                os.write(wake_write, b"x")

        while not (stopping and in_flight == 0):
            want = not stopping and in_flight < limit
            if want != listening:
                (selector.register if want else selector.unregister)(
                    inbox, *((selectors.EVENT_READ, "inbox") if want else ()))
                listening = want
            ready = {key.data for key, _ in selector.select(timeout=1.0)}
            if not ready and os.getppid() != self.spec.parent_pid:
                os._exit(4)
            if "inbox" in ready:
                message = self.receive(timeout=0)
                if message == STOP:
                    stopping = True
                elif isinstance(message, tuple):
                    frame_id, segments = message
                    in_flight += frames.add(frame_id, segments)
                    for s, segment in enumerate(segments):
                        for i, value in enumerate(segment.values):
                            runner.submit(value).add_done_callback(
                                functools.partial(on_done, frame_id, s, i))
            if "wake" in ready:
                os.read(wake_read, 4096)
                woken[0] = False  # before draining: a call done after the drain writes again
            done_frames = []
            while not finished.empty():
                frame_id, s, i, result = finished.get()
                in_flight -= 1
                if frames.put(frame_id, s, i, result):
                    done_frames.append(frame_id)
            if done_frames:
                self.flush()
                self.report(done_frames)


__all__ = ["Fatal", "Final", "Measured", "Worker", "WorkerSpec", "worker_main"]
