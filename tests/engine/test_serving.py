"""The one replica loop (`fitwork.engine.serving`): a retried frame runs alone whatever way
the unit runs, batches fill and drain, and frames are cut by one rule on every engine.

Driven through `Calls`, the transport the Ray replica uses, with real units and kernels."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from fitwork import unit
from fitwork.engine.framing import FRAME_BYTES, MAX_FRAME, first_sizes, outputs_per_frame
from fitwork.engine.segment import Segment, fresh
from fitwork.engine.serve import Busy, Runner
from fitwork.engine.serving import Calls, Finished, Serving
from fitwork.workload.kernel import Kernel


class Log:
    """What the unit saw: each call's values, and the calls running beside each one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[int] = set()
        self.beside: dict[int, set[int]] = {}
        self.order: list[int] = []

    def enter(self, n: int) -> None:
        with self.lock:
            self.order.append(n)
            self.beside[n] = set(self.running)
            for other in self.running:
                self.beside[other].add(n)
            self.running.add(n)

    def leave(self, n: int) -> None:
        with self.lock:
            self.running.discard(n)


def serving_of(fn: Any, **declared: Any) -> tuple[Calls, Log]:
    """A replica loop running ``fn`` (declared as ``declared``) on a thread, and its log."""
    log = Log()
    made = unit(name="u", **declared)(fn(log))
    runner = Runner(Kernel(made), None, Busy())  # as its allotment says: unplanned, its own
    calls = Calls()
    calls.start(Serving(runner))
    return calls, log


def slow(log: Log) -> Any:
    def call(n: int) -> int:
        log.enter(n)
        time.sleep(0.05)
        log.leave(n)
        return n * 10
    return call


def batched(log: Log) -> Any:
    def call(ns: list[int]) -> list[int]:
        for n in ns:
            log.enter(n)
        time.sleep(0.02)
        for n in ns:
            log.leave(n)
        return [n * 10 for n in ns]
    return call


def frame(frame_id: int, values: list[int], attempt: int = 0) -> list[Segment]:
    return [fresh(frame_id, values, attempt)]


def test_an_io_replica_runs_a_retry_with_nothing_beside_it() -> None:
    """Calls in flight end before the retry starts, and none taken after it starts before
    it ends; the others run side by side as ``io`` allows."""
    calls, log = serving_of(slow, io=4)
    first = calls.call(frame(1, [1, 2, 3]))
    retry = calls.call(frame(2, [99], attempt=1))
    after = calls.call(frame(3, [4, 5, 6]))
    done = [f.result(timeout=10) for f in (first, retry, after)]
    assert [d.results for d in done] == [[[10, 20, 30]], [[990]], [[40, 50, 60]]]
    assert log.beside[99] == set()  # alone
    assert log.beside[1] >= {2, 3} and log.beside[4] >= {5, 6}  # the rest side by side
    assert log.order.index(99) > max(log.order.index(n) for n in (1, 2, 3))
    assert log.order.index(99) < min(log.order.index(n) for n in (4, 5, 6))
    calls.close()


def test_a_batch_replica_runs_a_retried_item_in_a_batch_of_its_own() -> None:
    calls, log = serving_of(batched, batch_size=4, batch_wait=0.05)
    fresh_items = calls.call(frame(1, [1, 2, 3]))  # waits for a fuller batch
    retry = calls.call(frame(2, [99, 98], attempt=1))
    assert retry.result(timeout=10).results == [[990, 980]]
    assert fresh_items.result(timeout=10).results == [[10, 20, 30]]
    assert log.beside[99] == set() and log.beside[98] == set()
    assert log.beside[1] == {2, 3}
    calls.close()


def test_a_drain_ends_the_batch_wait() -> None:
    calls, _ = serving_of(batched, batch_size=64, batch_wait=60.0)
    waiting = calls.call(frame(1, [1, 2]))
    time.sleep(0.05)
    assert not waiting.done()  # a minute's wait for a fuller batch
    calls.drain()
    assert waiting.result(timeout=5).results == [[10, 20]]
    calls.close()


def test_a_plain_replica_finishes_frames_in_turn_with_failures_counted() -> None:
    def call(log: Log) -> Any:
        def inner(n: int) -> int:
            log.enter(n)
            log.leave(n)
            if n == 3:
                raise ValueError("three")
            return n
        return inner

    calls, log = serving_of(call)
    done: list[Finished] = [calls.call(frame(i, [i * 2, i * 2 + 1])).result(timeout=5)
                            for i in range(3)]
    assert [d.failed for d in done] == [[0], [1], [0]]
    assert done[1].results[0][0] == 2 and type(done[1].results[0][1]).__name__ == "Failed"
    assert all(not beside for beside in log.beside.values())
    calls.close()


@pytest.mark.parametrize(("total", "size", "replicas", "sent", "sent_bytes", "expected"), [
    (100, 0, 2, 0, 0, 25),  # not measured: a frame per replica downstream, twice over
    (100, 10, 2, 0, 0, 10),  # the core's size
    (10_000, 1, 1, 0, 0, 157),  # never more than 64 frames a call
    (100, 50, 1, 10, 10 * FRAME_BYTES // 5, 5),  # about FRAME_BYTES a frame at most
    (10**6, 10**6, 1, 0, 0, MAX_FRAME),  # MAX_FRAME at most
])
def test_one_rule_cuts_every_engines_frames(total: int, size: int, replicas: int, sent: int,
                                            sent_bytes: int, expected: int) -> None:
    assert outputs_per_frame(total, size, replicas, sent, sent_bytes) == expected


def test_frames_start_at_a_stages_batch_else_unmeasured() -> None:
    assert first_sizes([None, 32, 10**6]) == [0, 32, MAX_FRAME]


@pytest.mark.parametrize("declared", [{}, {"io": 2}, {"batch_size": 4, "batch_wait": 60.0}])
def test_a_frame_with_no_items_is_finished_at_once(declared: dict[str, Any]) -> None:
    calls, _ = serving_of(slow if "batch_size" not in declared else batched, **declared)
    assert calls.call(frame(1, [])).result(timeout=5).results == [[]]
    calls.close()
