"""A worker process: pulls frames from its unit's channel, runs the unit, pushes results on.

A frame is ``(frame id, [segment, ...])`` (see `fitwork.engine.segment`).  The unit's
semantics come from the `Kernel`; this module only moves frames and keeps time::

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

import asyncio
import contextlib
import ctypes
import itertools
import os
import pickle
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import Any, NamedTuple

from fitwork.engine.core.events import Counters, Done, Measured, Ready, Taken
from fitwork.engine.local.channel import STOP, Channel
from fitwork.engine.local.wire import Wire
from fitwork.engine.parts import PartWriter, Sink, Written
from fitwork.engine.segment import Return, Segment, settle
from fitwork.engine.threads import limit_torch
from fitwork.failure import Failure, describe
from fitwork.telemetry.schedstat import run_queue_seconds
from fitwork.workload.kernel import Failed, Kernel
from fitwork.workload.unit import Unit

_MERGE_GAP = 0.001
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
        count = sum(len(s[5]) for s in segments)
        self.frames[frame_id] = (segments, [[None] * len(s[5]) for s in segments], [count])
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
        self.intervals: list[tuple[float, float]] = []
        self.items_in = self.items_out = self.bytes_in = self.bytes_out = 0
        self.busy_s = self.blocked_s = 0.0
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
                        self.busy_s, self.blocked_s, time.process_time(), run_queue_seconds())

    def report(self, finished: list[int]) -> None:
        """Tell the driver these frames are done, with what they returned and cost (and
        first, how far the part holding their outputs goes)."""
        if self.written:
            assert self.part is not None
            self.items_out += sum(len(s[5]) for s in self.written)
            self.send(Written(self.written))
            self.written = []
        self.send(Done(self.id, finished, self.returns, self.failures, time.monotonic(),
                       self.counters(), self.intervals))
        self.returns, self.failures, self.intervals = [], [], []

    def mark_busy(self, start: float, end: float) -> None:
        """Record a busy interval, joined to the previous one when they nearly touch."""
        self.busy_s += end - start
        if self.intervals and start - self.intervals[-1][1] <= _MERGE_GAP:
            self.intervals[-1] = (self.intervals[-1][0], end)
        else:
            self.intervals.append((start, end))

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
        (frame_id, segments), size = self.wire.loads(data)
        self.send(Taken(self.id, frame_id, [(s[0], s[2]) for s in segments],
                        time.monotonic()))
        self.items_in += sum(len(s[5]) for s in segments)
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
            while segment[5]:
                piece, segment = _head(segment, limit - count)
                frame.append(piece)
                count += len(piece[5])
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
            data, size = self.wire.dumps((next(self.frame_ids), segments), held=True)
        except Exception:
            segments = self.drop_unpicklable(segments)
            if not segments:
                return
            data, size = self.wire.dumps((next(self.frame_ids), segments), held=True)
        start = time.monotonic()
        while not self.spec.outbox.put(data, timeout=1.0, ready=self.wire.ready):
            if os.getppid() != self.spec.parent_pid:
                os._exit(4)
        self.blocked_s += time.monotonic() - start
        self.items_out += sum(len(s[5]) for s in segments)
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
                encoded = [part.encode(value) for value in segment[5]]
            except (TypeError, ValueError):
                segment = self.drop_unwritable(segment)
                encoded = [part.encode(value) for value in segment[5]]
            if not encoded:
                continue
            self.bytes_out += sum(map(len, encoded))
            self.written.append((*segment[:5], part.write(encoded)))
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
        return [s for s in kept if s[5]]

    def drop_failing(self, segment: Segment, check: Callable[[Any], Any],
                     what: str) -> Segment:
        """``segment`` without the outputs ``check`` raises on: each is dead-lettered (the
        unit returned a value that ``what``) and its weight returned."""
        frame, attempt, offsets, paths, exps, values = segment
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
                self.returns.append((frame, [offsets[j]], [exps[j]] if exps else None))
                continue
            keep.append(j)
        return (frame, attempt, [offsets[j] for j in keep],
                [paths[j] for j in keep] if paths else None,
                [exps[j] for j in keep] if exps else None, [values[j] for j in keep])

    # -- the loops -------------------------------------------------------------------------

    def serve(self, kernel: Kernel) -> None:
        """Say hello, run the loop that fits the unit, and report final counters on stop."""
        self.send(Ready(self.id, os.getpid(), time.monotonic()))
        if kernel.unit.is_io:
            self.serve_concurrent(kernel)
        elif self.spec.batch_size:
            self.serve_batched(kernel, self.spec.batch_size)
        else:
            self.serve_plain(kernel)
        self.send(Final(self.id, self.counters(), self.intervals))

    def serve_plain(self, kernel: Kernel) -> None:
        """One frame at a time: every segment's items, then one busy interval, then send."""
        limiter = self.spec.gate
        while True:
            message = self.receive(timeout=1.0)
            if message is None:
                continue
            if message == STOP:
                return
            frame_id, segments = message
            start = time.monotonic()
            for segment in segments:
                values = segment[5]
                if limiter is not None:
                    results, failed = _limited(limiter, kernel, values)
                else:
                    results, failed = kernel.results(values)
                self.settle(kernel, segment, results, failed)
            self.mark_busy(start, time.monotonic())
            self.flush()
            self.report([frame_id])

    def serve_batched(self, kernel: Kernel, size: int) -> None:
        """Fill batches to ``size`` or until ``batch_wait`` passes, then call once."""
        wait = kernel.unit.batch_wait
        waiting: list[tuple[int, int, int]] = []   # (frame id, segment index, item index)
        frames = Waiting(self, kernel)
        deadline = 0.0

        def run(batch: list[tuple[int, int, int]]) -> None:
            values = [frames.value(*place) for place in batch]
            start = time.monotonic()
            if self.spec.gate is not None:
                with self.spec.gate:
                    results, _ = kernel.call_batch(values)
            else:
                results, _ = kernel.call_batch(values)
            self.mark_busy(start, time.monotonic())
            finished = [place[0] for place, result in zip(batch, results, strict=True)
                        if frames.put(*place, result)]
            self.flush()
            if finished:
                self.report(finished)

        while True:
            timeout = max(0.0, deadline - time.monotonic()) if waiting else 1.0
            message = self.receive(timeout)
            if message == STOP:
                while waiting:
                    run(waiting[:size])
                    waiting = waiting[size:]
                return
            if isinstance(message, tuple):
                frame_id, segments = message
                frames.add(frame_id, segments)
                for s, segment in enumerate(segments):
                    for i in range(len(segment[5])):
                        if segment[1]:  # a retried item runs alone: poison hurts no other
                            run([(frame_id, s, i)])
                            continue
                        if not waiting:
                            deadline = time.monotonic() + wait
                        waiting.append((frame_id, s, i))
            while len(waiting) >= size:
                run(waiting[:size])
                waiting = waiting[size:]
                deadline = time.monotonic() + wait
            if waiting and time.monotonic() >= deadline:
                run(waiting)
                waiting = []

    def serve_concurrent(self, kernel: Kernel) -> None:
        """Keep up to ``io`` calls in flight (threads, or an event loop for async units)."""
        limit = kernel.unit.io
        submit = _async_submitter(kernel) if kernel.is_async else \
            _thread_submitter(kernel, limit)
        limiter = self.spec.gate
        finished: SimpleQueue[tuple[int, int, int, Any]] = SimpleQueue()
        wake_read, wake_write = os.pipe()
        selector = selectors.DefaultSelector()
        selector.register(wake_read, selectors.EVENT_READ, "wake")
        inbox = self.spec.inbox.recv_end
        frames = Waiting(self, kernel)
        in_flight, busy_since, stopping, listening = 0, 0.0, False, False

        def on_done(frame_id: int, s: int, i: int, future: Future[Any]) -> None:
            error = future.exception()
            finished.put((frame_id, s, i, Failed(error, getattr(error, "__fitwork_attempts__",
                                                                  1))
                          if error is not None else future.result()))
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
                    count = frames.add(frame_id, segments)
                    if in_flight == 0:
                        busy_since = time.monotonic()
                    in_flight += count
                    for s, segment in enumerate(segments):
                        for i, value in enumerate(segment[5]):
                            future = submit(value, limiter)
                            future.add_done_callback(
                                lambda f, a=frame_id, b=s, c=i: on_done(a, b, c, f))
            if "wake" in ready:
                os.read(wake_read, 4096)
            done_frames = []
            while not finished.empty():
                frame_id, s, i, result = finished.get()
                in_flight -= 1
                if frames.put(frame_id, s, i, result):
                    done_frames.append(frame_id)
            if in_flight == 0 and busy_since:
                self.mark_busy(busy_since, time.monotonic())
                busy_since = 0.0
            if done_frames:
                self.flush()
                self.report(done_frames)


def _head(segment: Segment, size: int) -> tuple[Segment, Segment]:
    """The first ``size`` items of ``segment``, and the rest (empty values when none)."""
    frame, attempt, offsets, paths, exps, values = segment
    if len(values) <= size:
        return segment, (frame, attempt, range(0), None, None, [])
    return ((frame, attempt, offsets[:size], paths[:size] if paths else None,
             exps[:size] if exps else None, values[:size]),
            (frame, attempt, offsets[size:], paths[size:] if paths else None,
             exps[size:] if exps else None, values[size:]))


def _limited(limiter: Any, kernel: Kernel, values: list[Any]) -> tuple[list[Any], int]:
    """Results one item at a time, each call passing the unit's shared gate."""
    results = []
    for value in values:
        with limiter:
            results.append(kernel.result(value))
    return results, sum(1 for r in results if type(r) is Failed)


def _thread_submitter(kernel: Kernel, limit: int) -> Callable[[Any, Any], Future[Any]]:
    pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix=f"fitwork-{kernel.name}")

    def call(value: Any, limiter: Any) -> Any:
        if limiter is None:
            return kernel.call(value)
        with limiter:
            return kernel.call(value)

    return lambda value, limiter: pool.submit(call, value, limiter)


def _async_submitter(kernel: Kernel) -> Callable[[Any, Any], Future[Any]]:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="fitwork-loop", daemon=True).start()

    async def call(value: Any, limiter: Any) -> Any:
        if limiter is None:
            return await kernel.call_async(value)
        await asyncio.to_thread(limiter.acquire)
        try:
            return await kernel.call_async(value)
        finally:
            limiter.release()

    return lambda value, limiter: asyncio.run_coroutine_threadsafe(call(value, limiter), loop)


__all__ = ["Fatal", "Final", "Measured", "Worker", "WorkerSpec", "worker_main"]
