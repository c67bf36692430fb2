"""A worker process: pulls frames from its unit's channel, runs the unit, pushes results on.

A record is ``(source id, generation, path, weight exponent, attempt, value)``.  The path
names a flat-map child (``()`` for a source item); the weight exponent ``e`` stands for a
weight of 2**-e that a source item (weight 1) shares among its descendants, so the driver
knows a source item is finished when the weights returned for it add up to 1, whatever
order reports arrive in.  A map passes its weight on, a filter that drops returns it, and a
flat-map gives its j-th child 2**-(e+j+1) and returns the remainder.

Control messages to the driver (tuples, tag first):
``hello``, ``took`` (frame id and its source ids), ``done`` (frame ids finished, weights
returned, failures, counters, busy intervals), ``fatal`` (the unit could not start), and
``final`` (counters at a clean stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import inspect
import itertools
import json
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
from typing import Any

from fitwork.engine.local.channel import STOP, Channel
from fitwork.engine.local.wire import Wire
from fitwork.workload.unit import Kind, Unit

Record = tuple[int, int, tuple[int, ...], int, int, Any]
_MERGE_GAP = 0.001
FRAME_BYTES = 4 << 20
_INPUT_LIMIT = 16 * 1024
_TRACE_LIMIT = 8 * 1024


@dataclass
class WorkerSpec:
    """Everything a worker needs, inherited across fork."""

    worker_id: int
    stage: int
    unit: Unit
    inbox: Channel
    outbox: Channel
    control: socket.socket
    wire_prefix: str
    hints: Any
    parent_pid: int
    env: dict[str, str] = field(default_factory=dict)


def worker_main(spec: WorkerSpec) -> None:
    """Process entry point: detach from the terminal's signals and run until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()
    os.environ.update(spec.env)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - a fresh lock after fork
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    worker = Worker(spec)
    try:
        fn = spec.unit.instantiate()
    except Exception as exc:
        worker.send(("fatal", spec.worker_id, _describe(exc), traceback.format_exc()))
        os._exit(3)
    worker.serve(fn)


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _portable(value: Any) -> Any:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        return {"repr": repr(value)[:1000]}
    return value if len(text) <= _INPUT_LIMIT else {"repr": text[:1000]}


class Worker:
    """The per-process loop; which loop runs depends on the unit (plain, batched, I/O)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.unit = spec.unit
        self.wire = Wire(spec.wire_prefix)
        self.frame_ids = itertools.count(spec.worker_id << 32)
        self.out: list[Record] = []
        self.returns: list[tuple[int, int, int]] = []
        self.failures: list[dict[str, Any]] = []
        self.intervals: list[list[float]] = []
        self.items_in = self.items_out = self.bytes_in = self.bytes_out = 0
        self.busy_s = 0.0
        self.limit = 1

    # -- talking to the driver -------------------------------------------------------------

    def send(self, message: tuple[Any, ...]) -> None:
        """One control message to the driver."""
        data, _ = self.wire.dumps(message)
        self.spec.control.send(data)

    def counters(self) -> tuple[int, int, int, int, float, float]:
        """Cumulative counters: items and bytes in and out, busy s, CPU s."""
        return (self.items_in, self.items_out, self.bytes_in, self.bytes_out, self.busy_s,
                time.process_time())

    def report(self, finished: list[int]) -> None:
        """Tell the driver these frames are done, with what they returned and cost."""
        self.send(("done", self.spec.worker_id, finished, self.returns, self.failures,
                   self.counters(), self.intervals))
        self.returns, self.failures, self.intervals = [], [], []

    def mark_busy(self, start: float, end: float) -> None:
        """Record a busy interval, joined to the previous one when they nearly touch."""
        self.busy_s += end - start
        if self.intervals and start - self.intervals[-1][1] <= _MERGE_GAP:
            self.intervals[-1][1] = end
        else:
            self.intervals.append([start, end])

    # -- frames in and out -----------------------------------------------------------------

    def receive(self, timeout: float | None) -> tuple[int, list[Record]] | bytes | None:
        """A frame, the stop marker, or None on timeout (exits if the driver is gone)."""
        data = self.spec.inbox.get(timeout)
        if data is None:
            if os.getppid() != self.spec.parent_pid:
                os._exit(4)
            return None
        if data == STOP:
            return STOP
        (frame_id, records), size = self.wire.loads(data)
        self.send(("took", self.spec.worker_id, frame_id, [(r[0], r[1]) for r in records]))
        self.items_in += len(records)
        self.bytes_in += size
        return frame_id, records

    def frame_limit(self) -> int:
        """Outputs per frame: the downstream's hint, kept near FRAME_BYTES per frame."""
        limit = self.spec.hints[self.spec.stage + 1]
        if self.items_out:
            limit = min(limit, int(FRAME_BYTES * self.items_out / max(1, self.bytes_out)))
        return max(1, limit)

    def emit(self, record: Record) -> None:
        """Queue one output; send a frame once the frame limit is reached."""
        self.out.append(record)
        if len(self.out) >= self.limit:
            self.flush()

    def flush(self) -> None:
        """Send queued outputs downstream as one frame, waiting for a credit if need be."""
        if not self.out:
            return
        try:
            data, size = self.wire.dumps((next(self.frame_ids), self.out))
        except Exception:
            self.out = self.drop_unpicklable(self.out)
            if not self.out:
                return
            data, size = self.wire.dumps((next(self.frame_ids), self.out))
        while not self.spec.outbox.put(data, timeout=1.0):
            if os.getppid() != self.spec.parent_pid:
                os._exit(4)
        self.items_out += len(self.out)
        self.bytes_out += size
        self.out = []
        self.limit = self.frame_limit()

    def drop_unpicklable(self, records: list[Record]) -> list[Record]:
        """Dead-letter the outputs that cannot be pickled; keep the rest."""
        kept = []
        for record in records:
            try:
                pickle.dumps(record[5], protocol=5)
            except Exception as exc:
                error = TypeError(f"unit {self.unit.name!r} returned a value that cannot cross "
                                  f"processes ({_describe(exc)}); return plain data")
                self.fail(record, error, record[3])
            else:
                kept.append(record)
        return kept

    # -- applying the unit -----------------------------------------------------------------

    def settle(self, record: Record, result: Any) -> None:
        """Turn one call's result into outputs and returned weight, by the unit's kind."""
        src, gen, path, weight, attempt, _ = record
        kind = self.unit.kind
        if kind is Kind.MAP:
            self.emit((src, gen, path, weight, attempt, result))
            return
        if kind is Kind.FILTER:
            if result:
                self.emit(record)
            else:
                self.returns.append((src, gen, weight))
            return
        children = 0
        try:
            for child in result:
                self.emit((src, gen, (*path, children), weight + children + 1, attempt, child))
                children += 1
        except Exception as exc:
            self.fail(record, exc, weight + children)
            return
        self.returns.append((src, gen, weight + children))

    def fail(self, record: Record, exc: BaseException, weight: int) -> None:
        """Send an item to the dead letters and return its remaining weight."""
        src, gen, path, _, attempt, value = record
        trace = "".join(traceback.format_exception(exc))[-_TRACE_LIMIT:]
        self.failures.append({
            "item": src, "path": list(path), "unit": self.unit.name, "kind": "error",
            "error": _describe(exc), "traceback": trace, "attempt": attempt,
            "input": _portable(value),
        })
        self.returns.append((src, gen, weight))

    def call_batch(self, fn: Callable[[list[Any]], Any], batch: list[Record]) -> None:
        """Run the unit on a batch; if the batch raises, retry item by item to isolate it."""
        start = time.monotonic()
        try:
            results = list(fn([r[5] for r in batch]))
            if len(results) != len(batch):
                raise ValueError(f"batched unit {self.unit.name!r} returned {len(results)} "
                                 f"results for {len(batch)} items; return one per item")
        except Exception as exc:
            self.mark_busy(start, time.monotonic())
            if len(batch) == 1:
                self.fail(batch[0], exc, batch[0][3])
            else:
                for record in batch:
                    self.call_batch(fn, [record])
            return
        for record, result in zip(batch, results, strict=True):
            self.settle(record, result)
        self.mark_busy(start, time.monotonic())

    # -- the loops -------------------------------------------------------------------------

    def serve(self, fn: Callable[..., Any]) -> None:
        """Say hello, run the loop that fits the unit, and report final counters on stop."""
        self.send(("hello", self.spec.worker_id, os.getpid()))
        if self.unit.is_io:
            self.serve_concurrent(fn)
        elif self.unit.batch_size:
            self.serve_batched(fn)
        else:
            self.serve_plain(fn)
        self.send(("final", self.spec.worker_id, self.counters(), self.intervals))

    def serve_plain(self, fn: Callable[[Any], Any]) -> None:
        """One item at a time, frame by frame; one busy interval per frame."""
        kind = self.unit.kind
        while True:
            message = self.receive(timeout=1.0)
            if message is None:
                continue
            if message == STOP:
                return
            frame_id, records = message
            self.limit = self.frame_limit()
            out, returns = self.out, self.returns
            start = time.monotonic()
            for record in records:
                try:
                    result = fn(record[5])
                except Exception as exc:
                    self.fail(record, exc, record[3])
                    continue
                if kind is Kind.MAP:
                    out.append((record[0], record[1], record[2], record[3], record[4], result))
                elif kind is Kind.FILTER:
                    if result:
                        out.append(record)
                    else:
                        returns.append((record[0], record[1], record[3]))
                else:
                    self.settle(record, result)
                if len(out) >= self.limit:
                    self.flush()
                    out = self.out
            self.mark_busy(start, time.monotonic())
            self.flush()
            self.report([frame_id])

    def serve_batched(self, fn: Callable[[list[Any]], Any]) -> None:
        """Fill batches to ``batch_size`` or until ``batch_wait`` passes, then call once."""
        size, wait = self.unit.batch_size or 1, self.unit.batch_wait
        waiting: list[tuple[int, Record]] = []
        left: dict[int, int] = {}
        deadline = 0.0

        def run(batch: list[tuple[int, Record]]) -> None:
            self.call_batch(fn, [r for _, r in batch])
            self.flush()
            finished = []
            for frame_id, _ in batch:
                left[frame_id] -= 1
                if not left[frame_id]:
                    del left[frame_id]
                    finished.append(frame_id)
            self.report(finished)

        while True:
            timeout = max(0.0, deadline - time.monotonic()) if waiting else 1.0
            message = self.receive(timeout)
            if message == STOP:
                while waiting:
                    run(waiting[:size])
                    waiting = waiting[size:]
                return
            if message is not None:
                frame_id, records = message
                left[frame_id] = len(records)
                for record in records:
                    if record[4]:  # a retried item runs alone, so a poison item hurts no other
                        run([(frame_id, record)])
                    else:
                        if not waiting:
                            deadline = time.monotonic() + wait
                        waiting.append((frame_id, record))
            while len(waiting) >= size:
                run(waiting[:size])
                waiting = waiting[size:]
                deadline = time.monotonic() + wait
            if waiting and time.monotonic() >= deadline:
                run(waiting)
                waiting = []

    def serve_concurrent(self, fn: Callable[[Any], Any]) -> None:
        """Keep up to ``io`` calls in flight (threads, or an event loop for async units)."""
        limit = self.unit.resources.io
        submit = _async_submitter(fn, self.unit) if self.unit.is_async else \
            _thread_submitter(fn, self.unit, limit)
        finished: SimpleQueue[tuple[int, Record, Future[Any]]] = SimpleQueue()
        wake_read, wake_write = os.pipe()
        selector = selectors.DefaultSelector()
        selector.register(wake_read, selectors.EVENT_READ, "wake")
        inbox = self.spec.inbox.recv_end
        left: dict[int, int] = {}
        in_flight, busy_since, stopping, listening = 0, 0.0, False, False

        def on_done(frame_id: int, record: Record, future: Future[Any]) -> None:
            finished.put((frame_id, record, future))
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
                elif message is not None:
                    frame_id, records = message
                    left[frame_id] = len(records)
                    if in_flight == 0:
                        busy_since = time.monotonic()
                    in_flight += len(records)
                    for record in records:
                        future = submit(record[5])
                        future.add_done_callback(
                            lambda f, i=frame_id, r=record: on_done(i, r, f))
            if "wake" in ready:
                os.read(wake_read, 4096)
            done_frames = []
            while not finished.empty():
                frame_id, record, future = finished.get()
                in_flight -= 1
                error = future.exception()
                if error is not None:
                    self.fail(record, error, record[3])
                else:
                    self.settle(record, future.result())
                left[frame_id] -= 1
                if not left[frame_id]:
                    del left[frame_id]
                    done_frames.append(frame_id)
            if in_flight == 0 and busy_since:
                self.mark_busy(busy_since, time.monotonic())
                busy_since = 0.0
            if done_frames:
                self.flush()
                self.report(done_frames)


def _materialize(unit: Unit, result: Any) -> Any:
    return list(result) if unit.kind is Kind.FLAT_MAP else result


def _thread_submitter(fn: Callable[[Any], Any], unit: Unit,
                      limit: int) -> Callable[[Any], Future[Any]]:
    pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix=f"fitwork-{unit.name}")
    return lambda value: pool.submit(lambda: _materialize(unit, fn(value)))


def _async_submitter(fn: Callable[[Any], Any], unit: Unit) -> Callable[[Any], Future[Any]]:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="fitwork-loop", daemon=True).start()

    async def call(value: Any) -> Any:
        result = fn(value)
        if inspect.isasyncgen(result):
            return [child async for child in result]
        return _materialize(unit, await result)

    return lambda value: asyncio.run_coroutine_threadsafe(call(value), loop)
