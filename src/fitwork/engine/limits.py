"""`Gate`: the bound a unit declares on the calls of ALL its replicas together.

``max_concurrency`` caps calls in flight (a semaphore) and ``rate_limit`` spaces calls at
least ``1 / rate_limit`` seconds apart (the moment the next call may start is one shared
number: each call takes the later of now and that moment, and moves it on).  A batch is
one call.  The local engine shares one gate among its forked replicas (process-shared
primitives); the Ray engine, whose replicas share no memory, gives each replica an even
share of both bounds.
"""

from __future__ import annotations

import time
from typing import Any


class Gate:
    """Acquire before a call, release after; ``with gate:`` does both."""

    def __init__(self, slots: Any = None, interval: float = 0.0, moment: Any = None,
                 lock: Any = None) -> None:
        self.slots, self.interval, self.moment, self.lock = slots, interval, moment, lock

    def acquire(self) -> None:
        """Wait for a slot, then for the call's turn under the rate limit."""
        if self.slots is not None:
            self.slots.acquire()
        if self.interval:
            with self.lock:
                now = time.monotonic()
                start = max(now, self.moment.value)
                self.moment.value = start + self.interval
            if start > now:
                time.sleep(start - now)

    def release(self) -> None:
        """Free the slot."""
        if self.slots is not None:
            self.slots.release()

    def __enter__(self) -> Gate:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def shared_gate(ctx: Any, max_concurrency: int | None, rate_limit: float | None
                ) -> Gate | None:
    """A gate for forked replicas (``ctx`` a multiprocessing context), or None if unbounded."""
    if max_concurrency is None and rate_limit is None:
        return None
    slots = ctx.BoundedSemaphore(max_concurrency) if max_concurrency else None
    if not rate_limit:
        return Gate(slots)
    return Gate(slots, 1.0 / rate_limit, ctx.Value("d", 0.0, lock=False), ctx.Lock())


def local_gate(max_concurrency: int | None, rate_limit: float | None,
               replicas: int) -> Gate | None:
    """One replica's even share of the bounds, for replicas that share no memory."""
    import threading
    from types import SimpleNamespace

    if max_concurrency is None and rate_limit is None:
        return None
    share = max(1, replicas)
    slots = threading.BoundedSemaphore(max(1, max_concurrency // share)) \
        if max_concurrency else None
    if not rate_limit:
        return Gate(slots)
    return Gate(slots, share / rate_limit, SimpleNamespace(value=0.0), threading.Lock())
