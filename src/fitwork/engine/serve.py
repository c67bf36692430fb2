"""The replica runtime's parts: a replica's calls, busy time, batches, and retries alone.

The one loop that runs a replica's frames on every engine is `fitwork.engine.serving`;
these are what it (and the Ray replica, for what crosses processes) is made of:

- `Runner`: the unit's calls by its way of running (plain, a batch, concurrent I/O calls
  on threads, or ``async def`` calls on an event loop), each call through the unit's shared
  `Gate` and timed as busy (a wait at the gate is not busy);
- `Busy`: busy time and busy intervals, counted while at least one call runs, an interval
  joined to the previous one when they nearly touch (``MERGE_GAP``);
- `Batches`: the batching rule (a batch of ``size`` items, or what came within ``wait``
  seconds of the first one waiting);
- `Alone`: a process that takes calls side by side (a Ray actor) lets a retry in only
  when nothing else runs there, and holds new calls back while it runs; within a replica,
  the loop (`fitwork.engine.serving.Serving`) keeps the same rule.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from fitwork.engine.limits import Gate
from fitwork.workload.kernel import Failed, Kernel

MERGE_GAP = 0.001
"""Busy intervals closer than this are one interval."""

Clock = Callable[[], float]
T = TypeVar("T")


class Busy:
    """A replica's busy time: seconds with at least one call running, and the intervals."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.active = 0
        self.since = 0.0
        self.seconds = 0.0
        self.intervals: list[tuple[float, float]] = []

    def begin(self) -> None:
        """A call starts."""
        with self.lock:
            if not self.active:
                self.since = self.clock()
            self.active += 1

    def end(self) -> None:
        """A call ended: the replica's busy interval closes with its last call."""
        with self.lock:
            self.active -= 1
            if not self.active:
                self._mark(self.since, self.clock())

    def so_far(self) -> float:
        """Busy seconds up to now, the interval still open included: a replica whose calls
        overlap without a gap (an ``io`` replica kept full) closes no interval while it runs,
        and a count of closed ones alone stood still for seconds while its items went on."""
        with self.lock:
            return self.seconds + (self.clock() - self.since if self.active else 0.0)

    def _mark(self, start: float, end: float) -> None:
        self.seconds += end - start
        if self.intervals and start - self.intervals[-1][1] <= MERGE_GAP:
            self.intervals[-1] = (self.intervals[-1][0], end)
        else:
            self.intervals.append((start, end))

    def add(self, intervals: list[tuple[float, float]]) -> None:
        """Busy intervals measured elsewhere (a forked child's, on the same clock)."""
        with self.lock:
            for start, end in intervals:
                self._mark(start, end)

    def take(self) -> list[tuple[float, float]]:
        """The intervals not taken yet."""
        with self.lock:
            intervals, self.intervals = self.intervals, []
        return intervals

    @contextmanager
    def timing(self) -> Iterator[None]:
        """``begin`` ... ``end`` around a block."""
        self.begin()
        try:
            yield
        finally:
            self.end()


def failed_count(results: list[Any]) -> int:
    """How many of ``results`` are `Failed`."""
    return sum(1 for r in results if type(r) is Failed)


class Runner:
    """One replica's calls into its unit: through the shared gate, timed as busy.

    A replica allotted calls at once (``kernel.given.io`` > 0: an I/O unit) runs them side
    by side through `submit`: on threads, or on an event loop of its own for an ``async
    def`` unit.
    """

    def __init__(self, kernel: Kernel, gate: Gate | None, busy: Busy) -> None:
        self.kernel, self.gate, self.busy = kernel, gate, busy
        self.concurrency = concurrency = kernel.given.io
        self.pool: ThreadPoolExecutor | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        if concurrency and kernel.is_async:
            self.loop = event_loop()
        elif concurrency:
            self.pool = ThreadPoolExecutor(concurrency,
                                           thread_name_prefix=f"fitwork-{kernel.name}")

    @property
    def concurrent(self) -> bool:
        """Whether calls run side by side (`submit`)."""
        return self.pool is not None or self.loop is not None

    def results(self, values: list[Any]) -> tuple[list[Any], int]:
        """Each value's result (or `Failed`), one call after another, and how many failed.
        Without a gate the values are one busy stretch; with one, each call passes it."""
        if self.gate is None:
            with self.busy.timing():
                return self.kernel.results(values)
        results = [self.one(value) for value in values]
        return results, failed_count(results)

    def one(self, value: Any) -> Any:
        """One value's result (or `Failed`), through the gate."""
        if self.gate is None:
            with self.busy.timing():
                return self.kernel.result(value)
        with self.gate, self.busy.timing():
            return self.kernel.result(value)

    def batch(self, values: list[Any]) -> list[Any]:
        """One batch call: a result (or `Failed`) per value (a failing batch is retried
        item by item by the kernel, to isolate the bad item)."""
        if self.gate is None:
            with self.busy.timing():
                return self.kernel.call_batch(values)[0]
        with self.gate, self.busy.timing():
            return self.kernel.call_batch(values)[0]

    def submit(self, value: Any) -> Future[Any]:
        """Start one call side by side with others; its future holds the result or `Failed`."""
        if self.loop is not None:
            return asyncio.run_coroutine_threadsafe(self._async(value), self.loop)
        assert self.pool is not None, "submit needs concurrency"
        return self.pool.submit(self.one, value)

    async def _async(self, value: Any) -> Any:
        gate = self.gate
        if gate is not None:
            await asyncio.to_thread(gate.acquire)
        try:
            self.busy.begin()
            try:
                return await self.kernel.call_async(value)
            except Exception as error:
                return Failed(error, getattr(error, "__fitwork_attempts__", 1))
            finally:
                self.busy.end()
        finally:
            if gate is not None:
                gate.release()


def event_loop() -> asyncio.AbstractEventLoop:
    """An event loop running on a daemon thread of its own."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="fitwork-loop", daemon=True).start()
    return loop


class Batches(Generic[T]):
    """The batching rule: items wait until ``size`` of them are there, or ``wait`` seconds
    have passed since the first of them came (or since the last batch left)."""

    def __init__(self, size: int, wait: float, clock: Clock = time.monotonic) -> None:
        self.size, self.wait, self.clock = size, wait, clock
        self.items: list[T] = []
        self.deadline = 0.0

    def __len__(self) -> int:
        return len(self.items)

    def put(self, item: T) -> None:
        """One more item waits."""
        if not self.items:
            self.deadline = self.clock() + self.wait
        self.items.append(item)

    def due(self) -> bool:
        """Whether a batch should run now."""
        return bool(self.items) and (len(self.items) >= self.size
                                     or self.clock() >= self.deadline)

    def timeout(self) -> float | None:
        """Seconds until a batch is due on time alone; None when nothing waits."""
        if not self.items:
            return None
        return max(0.0, self.deadline - self.clock())

    def drain(self) -> None:
        """Nothing more comes (but retries): a batch is due as soon as an item waits."""
        self.wait = self.deadline = 0.0

    def take(self) -> list[T]:
        """The next batch (at most ``size`` items); the wait starts again for the rest."""
        batch, self.items = self.items[:self.size], self.items[self.size:]
        self.deadline = self.clock() + self.wait
        return batch


class Alone:
    """Calls side by side, except a retry (a segment with attempt > 0), which runs alone in
    the process: it waits for the calls in it to end and holds new ones back, so a death
    while it runs is that retry's alone, as the run core counts it (each replica upstream
    has a router of its own: picking an idle replica cannot promise that).  The next call
    starts ``GRACE`` seconds after a retry returns: Ray sends a call's reply after the
    method returns, and a process killed by the next call before that loses the reply,
    which would blame the retry that had finished for the next one's death.  A caller
    that holds the reply says so (`ack`, with the retry's number, ``seq``, its summary
    carries), which ends the grace at once: one message, where a fixed grace cost a
    replica ``GRACE`` after every retry (a Ray run of 2% killing rows spent most of its
    wall time in these graces).

    A sender of a retry first takes a *lease* (`lease`): the process, empty, is held for
    that retry before it is sent, and its call takes the hold over (`take`).  Without it a
    retry could be sent to a process that another retry was killing at that moment, fail
    as if it had killed it, and be blamed (a Ray run of sharded rows saw 7 of 71 retries
    that died never start, and a good row dead-lettered as poison).  A lease its call does
    not take within ``LEASE`` seconds lapses."""

    GRACE = 0.05
    LEASE = 5.0

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.cond = threading.Condition()
        self.running = self.waiting = 0
        self.held = False
        self.after = 0.0  # no call starts before this (monotonic): a retry's reply is out
        self.leased = 0  # the token of the lease holding the process (0: none)
        self.lapses = 0.0  # when that lease lapses (monotonic)
        self.tokens = 0
        self.seq = 0  # retries released so far: the last one's grace is acked by number

    def _let_go(self) -> None:
        """End the lease holding the process (the caller holds the condition)."""
        self.leased, self.held = 0, False
        self.cond.notify_all()

    def _lapse(self) -> None:
        """Let a lease its call never took go (the caller holds the condition)."""
        if self.leased and self.clock() >= self.lapses:
            self._let_go()

    def _open(self) -> bool:
        self._lapse()
        return (not self.running and not self.held and not self.waiting
                and self.clock() >= self.after)

    def _wait(self, ready: Callable[[], bool]) -> None:
        """Wait until ``ready`` (holding the condition), letting a lapsed lease go."""
        while True:
            self._lapse()
            if ready():
                return
            self.cond.wait(max(0.0, self.lapses - self.clock()) if self.leased else None)

    def lease(self, seconds: float | None = None) -> int:
        """Hold the empty process for a retry on its way; the token its call hands `take`
        (0: not now: something runs there, or a grace is pending)."""
        with self.cond:
            if not self._open():
                return 0
            self.tokens += 1
            self.held, self.leased = True, self.tokens
            self.lapses = self.clock() + (self.LEASE if seconds is None else seconds)
            return self.leased

    def take(self, token: int) -> bool:
        """The retry's call arrived: the hold of lease ``token`` is its own now (False: that
        lease lapsed, or is not this call's)."""
        with self.cond:
            self._lapse()
            if not token or token != self.leased:
                return False
            self.leased = 0
            return True

    def drop(self, token: int) -> None:
        """A lease whose call will not come (it could not be sent): let the process go."""
        with self.cond:
            if token and token == self.leased:
                self._let_go()

    def claim(self) -> bool:
        """Hold the process for a retry now if nothing else is in it and no grace is pending
        (checked and held at once: two retries that both saw it free would otherwise both
        enter, one waiting inside a process the other kills, and be blamed for it)."""
        with self.cond:
            if not self._open():
                return False
            self.held = True
            return True

    def release(self, grace: bool = True) -> None:
        """End a retry's hold (taken by `claim` or `hold`); without ``grace`` (a process a
        unit cannot kill: its unit runs in a forked child) the next call may start at once."""
        with self.cond:
            self.held = False
            self.seq += 1
            self.after = self.clock() + (self.GRACE if grace else 0.0)
            self.cond.notify_all()

    def ack(self, seq: int) -> None:
        """The caller of retry ``seq`` holds its reply: end that retry's grace (a later
        retry's, or one running now, is not its to end)."""
        with self.cond:
            if seq == self.seq and not self.held:
                self.after = min(self.after, self.clock())
                self.cond.notify_all()

    def _graced(self) -> None:
        while (delay := self.after - self.clock()) > 0:
            self.cond.wait(delay)

    @contextmanager
    def hold(self, alone: bool, grace: bool = True) -> Iterator[None]:
        """Run a call: a retry (``alone``) once the process is empty, any other once no
        retry holds it or waits for it (``grace``: see `release`)."""
        with self.cond:
            if alone:
                self.waiting += 1
                self._wait(lambda: not self.running and not self.held)
                self.waiting -= 1
                self.held = True
                self._graced()
            else:
                while True:
                    self._wait(lambda: not self.held and not self.waiting)
                    self._graced()
                    if not self.held and not self.waiting:
                        break
                self.running += 1
        try:
            yield
        finally:
            if alone:
                self.release(grace)
            else:
                with self.cond:
                    self.running -= 1
                    self.cond.notify_all()


__all__ = ["MERGE_GAP", "Alone", "Batches", "Busy", "Runner", "event_loop", "failed_count"]
