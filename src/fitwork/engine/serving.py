"""One replica's serving loop, written once for every engine, over a small transport.

The local worker (pipes), the Ray actor and the Ray task differ only in how frames reach a
replica and how its outputs leave; each is a `Transport`, and `Serving` runs the unit's
items between the two the same way for all of them::

    transport.take() ─frame─▶ Serving ─calls─▶ Runner: plain | batches | concurrent (io=)
                                 │
                                 └─ a frame's every result in ─▶ transport.finish(...)

The rules live here and nowhere else:

- *A retried frame runs alone* (a segment with attempt > 0: the run core charges a death
  to a retried item only, so nothing may run beside it).  It starts once no call of this
  replica runs, before anything taken after it, and no call starts while it runs.  A
  concurrent replica with calls in flight takes no frame while a retry is next in its inbox
  (`Transport.retry_next`): the retry goes to a replica with nothing running, and a death
  while it waits cannot be laid on it.  A batch unit runs a retried item in a batch of its
  own, at once (items waiting for a batch are not running).
- *Batches*: ``size`` items, or what came within ``wait`` seconds of the first; the
  transport's `DRAIN` (nothing more comes but retries) ends the wait.
- A frame is finished, all its segments at once, when its last item's result is in.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from queue import Empty, SimpleQueue
from typing import Any, NamedTuple, Protocol

from fitwork.engine.segment import Segment
from fitwork.engine.serve import Batches, Runner, failed_count
from fitwork.workload.kernel import Failed

STOP = "stop"
"""What `Transport.take` returns when the replica is to stop (after what it holds)."""
DRAIN = "drain"
"""What `Transport.take` returns once nothing more comes but retries (batches wait no more)."""
IDLE = 1.0
"""Seconds a loop with nothing to do waits for a frame before looking again."""


class Frame(NamedTuple):
    """A frame as a transport hands it in: its own key for it, and its segments."""

    key: Any
    segments: list[Segment]


class Finished(NamedTuple):
    """A frame whose items all have results: per segment, the results and how many failed."""

    key: Any
    segments: list[Segment]
    results: list[list[Any]]
    failed: list[int]


class Transport(Protocol):
    """How frames reach one replica and how its results leave (pipes, Ray calls)."""

    def take(self, timeout: float | None) -> Frame | str | None:
        """The next frame, `STOP`, `DRAIN`, or None when ``timeout`` passed or `wake` was
        called (``timeout`` None: nothing is due; return None after about `IDLE` seconds)."""

    def finish(self, frames: list[Finished]) -> None:
        """Send these frames' outputs on and report them done."""

    def wake(self) -> None:
        """Make a `take` waiting now (or the next one) return (any thread may call it)."""

    def retry_next(self) -> bool:
        """Whether the next frame to take is a retry (False where one cannot be waiting
        behind calls in flight: a transport that lets a retry in only to an empty replica)."""


def is_retry(segments: list[Segment]) -> bool:
    """Whether a frame holds a retried item (it runs alone)."""
    return any(s.attempt > 0 for s in segments)


def _empty(frame: Frame, transport: Transport) -> bool:
    """Finish a frame with no items at once (no result will ever come to finish it)."""
    if any(s.values for s in frame.segments):
        return False
    transport.finish([Finished(frame.key, frame.segments, [[] for _ in frame.segments],
                               [0] * len(frame.segments))])
    return True


class _Pending:
    """Frames whose items finish one at a time (in batches, or as concurrent calls)."""

    def __init__(self) -> None:
        self.frames: dict[int, tuple[Frame, list[list[Any]], list[int]]] = {}
        self.next = 0

    def add(self, frame: Frame) -> int:
        """Start waiting for a frame's items; its number here."""
        self.next += 1
        count = sum(len(s.values) for s in frame.segments)
        self.frames[self.next] = (frame, [[None] * len(s.values) for s in frame.segments],
                                  [count])
        return self.next

    def value(self, number: int, segment: int, item: int) -> Any:
        """One item's input value."""
        return self.frames[number][0].segments[segment].values[item]

    def put(self, number: int, segment: int, item: int, result: Any) -> Finished | None:
        """One item's result; the frame, finished, when it was its last."""
        frame, slots, left = self.frames[number]
        slots[segment][item] = result
        left[0] -= 1
        if left[0]:
            return None
        del self.frames[number]
        return Finished(frame.key, frame.segments, slots, [failed_count(r) for r in slots])


class _Told(list[Any]):
    """A segment's values that tell ``each`` the place in the frame of every value taken."""

    def __init__(self, values: list[Any], start: int, each: Callable[[int], None]) -> None:
        super().__init__(values)
        self.start, self.each = start, each

    def __iter__(self) -> Iterator[Any]:
        each, place = self.each, self.start
        for value in super().__iter__():
            each(place)
            place += 1
            yield value


class Serving:
    """One replica's loop: frames from a transport through the unit's calls, results back.

    A batch size (a batch unit) or calls at once (an io unit) are what this replica was
    allotted (its kernel's `fitwork.placement.Allotment`); neither: items run one call
    after another.
    """

    def __init__(self, runner: Runner, each: Callable[[int], None] | None = None) -> None:
        self.runner = runner
        self.each = each  # told each item's place in its frame as it starts (one at a time)
        self.pending = _Pending()
        given = runner.kernel.given
        self.batches: Batches[tuple[int, int, int]] | None = (
            Batches(given.batch_size, given.batch_wait)
            if given.batch_size and not runner.concurrent else None)
        self.done: SimpleQueue[tuple[int, int, int, Any]] = SimpleQueue()
        self.in_flight = 0
        self.stopping = False

    def serve(self, transport: Transport) -> None:
        """Run until the transport says stop and every item taken has its result."""
        if self.runner.concurrent:
            self._concurrent(transport)
        elif self.batches is not None:
            self._batched(transport, self.batches)
        else:
            self._plain(transport)

    # -- one call after another ------------------------------------------------------------

    def _plain(self, transport: Transport) -> None:
        """A frame at a time: every segment's items, then finish it (a retry is alone by
        construction: nothing else runs here)."""
        runner = self.runner
        while True:
            message = transport.take(None)
            if message is None or message == DRAIN:
                continue
            if message == STOP:
                return
            assert isinstance(message, Frame)
            results, failed, start = [], [], 0
            for segment in message.segments:
                values = segment.values if self.each is None else \
                    _Told(segment.values, start, self.each)
                out, count = runner.results(values)
                results.append(out)
                failed.append(count)
                start += len(segment.values)
            transport.finish([Finished(message.key, message.segments, results, failed)])

    # -- batches ---------------------------------------------------------------------------

    def _batched(self, transport: Transport, batches: Batches[tuple[int, int, int]]) -> None:
        """Fill batches to their size or until their wait passes, then call once; a retried
        item runs at once in a batch of its own."""
        while True:
            message = transport.take(batches.timeout())
            if message == STOP:
                while len(batches):
                    self._batch(transport, batches.take())
                return
            if message == DRAIN:
                batches.drain()
            elif isinstance(message, Frame) and not _empty(message, transport):
                number = self.pending.add(message)
                alone = is_retry(message.segments)
                for s, segment in enumerate(message.segments):
                    for i in range(len(segment.values)):
                        if alone:  # nothing else runs while it does: a poison hurts no other
                            self._batch(transport, [(number, s, i)])
                        else:
                            batches.put((number, s, i))
            while batches.due():
                self._batch(transport, batches.take())

    def _batch(self, transport: Transport, batch: list[tuple[int, int, int]]) -> None:
        """One batch call; finish the frames it completed."""
        results = self.runner.batch([self.pending.value(*place) for place in batch])
        finished = [f for place, result in zip(batch, results, strict=True)
                    if (f := self.pending.put(*place, result)) is not None]
        if finished:
            transport.finish(finished)

    # -- calls side by side (io=) ----------------------------------------------------------

    def _concurrent(self, transport: Transport) -> None:
        """Keep up to ``io`` calls in flight; a retry waits for them all to end, runs with
        nothing beside it, and no frame is taken until it has ended."""
        limit = max(1, self.runner.concurrency)
        woken = [False]  # a wake is on its way: calls ending before it is seen add none
        on_done = functools.partial(self._on_done, transport, woken)
        while not (self.stopping and self.in_flight == 0):
            self._collect(transport, woken)
            if self.stopping:
                self._wait_calls(transport, woken)
                continue
            if self.in_flight >= limit or (self.in_flight and transport.retry_next()):
                self._wait_calls(transport, woken)
                continue
            message = transport.take(None)
            if message == STOP:
                self.stopping = True
            elif isinstance(message, Frame) and not _empty(message, transport):
                alone = is_retry(message.segments)
                if alone:  # the calls in flight end first: nothing runs beside a retry
                    while self.in_flight:
                        self._wait_calls(transport, woken)
                self._submit(message, on_done)
                if alone:  # and nothing starts beside it until it has ended
                    while self.in_flight:
                        self._wait_calls(transport, woken)

    def _submit(self, frame: Frame, on_done: Callable[..., None]) -> None:
        number = self.pending.add(frame)
        for s, segment in enumerate(frame.segments):
            for i, value in enumerate(segment.values):
                self.in_flight += 1
                self.runner.submit(value).add_done_callback(
                    functools.partial(on_done, number, s, i))

    def _on_done(self, transport: Transport, woken: list[bool], number: int, s: int, i: int,
                 future: Future[Any]) -> None:
        """A call ended (on its thread): queue its result and wake the loop."""
        error = future.exception()
        self.done.put((number, s, i, future.result() if error is None else
                       Failed(error, getattr(error, "__fitwork_attempts__", 1))))
        if not woken[0]:
            woken[0] = True
            transport.wake()

    def _wait_calls(self, transport: Transport, woken: list[bool]) -> None:
        """Wait for one call to end (or a while), and finish what ended."""
        with contextlib.suppress(Empty):
            self.done.put(self.done.get(timeout=IDLE))  # back in line for `_collect`
        self._collect(transport, woken)

    def _collect(self, transport: Transport, woken: list[bool]) -> None:
        """Finish the frames whose last calls ended."""
        woken[0] = False  # before draining: a call ending after the drain wakes again
        finished = []
        while True:
            try:
                number, s, i, result = self.done.get_nowait()
            except Empty:
                break
            self.in_flight -= 1
            frame = self.pending.put(number, s, i, result)
            if frame is not None:
                finished.append(frame)
        if finished:
            transport.finish(finished)


class Calls:
    """The transport of a replica whose frames come as calls on threads (a Ray actor's,
    a Ray task's): a call hands its frame in (`call`) and waits for it to be finished;
    the replica's loop runs on a thread of its own (`start`)."""

    _WAKE = "wake"

    def __init__(self) -> None:
        self.queue: SimpleQueue[Frame | str] = SimpleQueue()

    def start(self, serving: Serving) -> None:
        """Run ``serving`` over these calls on a daemon thread."""
        threading.Thread(target=serving.serve, args=(self,), daemon=True,
                         name="fitwork-serving").start()

    def call(self, segments: list[Segment]) -> Future[Finished]:
        """Hand a frame in; its future holds it finished."""
        future: Future[Finished] = Future()
        self.queue.put(Frame(future, segments))
        return future

    def drain(self) -> None:
        """Nothing more comes but retries: batches wait no longer."""
        self.queue.put(DRAIN)

    def close(self) -> None:
        """No more calls: the loop ends once what it holds is finished."""
        self.queue.put(STOP)

    def take(self, timeout: float | None) -> Frame | str | None:
        try:
            message = self.queue.get(timeout=IDLE if timeout is None else timeout)
        except Empty:
            return None
        return None if message == self._WAKE else message

    def finish(self, frames: list[Finished]) -> None:
        for frame in frames:
            frame.key.set_result(frame)

    def wake(self) -> None:
        self.queue.put(self._WAKE)

    def retry_next(self) -> bool:
        """False: a retry's call comes in only to a process with no call in it
        (`fitwork.engine.serve.Alone`), so none waits behind calls in flight."""
        return False


__all__ = ["DRAIN", "IDLE", "STOP", "Calls", "Finished", "Frame", "Serving", "Transport",
           "is_retry"]
