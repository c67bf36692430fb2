"""A retry leases the process it is sent to: nothing enters between the lease and the call."""

from __future__ import annotations

import threading
import time

from fitwork.engine.serve import Alone


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_lease_holds_the_empty_process_for_its_own_call_only() -> None:
    clock = Clock()
    alone = Alone(clock)
    token = alone.lease()
    assert token
    assert alone.lease() == 0 and not alone.claim()  # held: no other retry enters
    assert not alone.take(token + 1) and not alone.take(0)  # not this lease's call
    assert alone.take(token)
    assert not alone.take(token)  # taken once
    alone.release()  # the retry's call ends
    assert alone.lease() == 0  # the grace after a retry
    clock.now += Alone.GRACE
    assert alone.lease() > token


def test_a_lease_its_call_never_takes_lapses_and_a_busy_process_gives_none() -> None:
    clock = Clock()
    alone = Alone(clock)
    token = alone.lease(seconds=1.0)
    clock.now += 1.0
    renewed = alone.lease()  # the first lapsed: the process is free again
    assert renewed and renewed != token
    assert not alone.take(token)
    alone.drop(renewed)  # its retry could not be sent
    with alone.hold(False):  # a call runs: no lease now
        assert alone.lease() == 0
    assert alone.lease()


def test_calls_wait_while_a_lease_holds_the_process_and_go_when_it_lapses() -> None:
    alone = Alone()
    token = alone.lease(seconds=0.3)
    started: list[float] = []

    def call() -> None:
        with alone.hold(False):
            started.append(time.monotonic())

    t0 = time.monotonic()
    thread = threading.Thread(target=call)
    thread.start()
    thread.join(2.0)
    assert started and started[0] - t0 >= 0.25  # held back until the lease lapsed
    assert not alone.take(token)
    token = alone.lease(seconds=30.0)
    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.1)
    assert len(started) == 1  # still held
    alone.drop(token)
    thread.join(2.0)
    assert len(started) == 2


def test_the_caller_s_ack_ends_a_retry_s_grace_and_a_stale_ack_ends_none() -> None:
    clock = Clock()
    alone = Alone(clock)
    assert alone.claim()
    alone.release()  # retry 1 ends; its reply is on its way
    first = alone.seq
    assert alone.lease() == 0  # in its grace
    alone.ack(first)  # its caller holds the reply
    token = alone.lease()
    assert token and alone.take(token)
    alone.release()  # retry 2 ends
    alone.ack(first)  # retry 1's ack, late: not retry 2's grace to end
    assert alone.lease() == 0 and not alone.claim()
    alone.ack(alone.seq)
    assert alone.claim()
    alone.ack(alone.seq)  # a retry holds the process: an ack does not let others in
    assert alone.lease() == 0


class LongGrace(Alone):
    GRACE = 10.0  # long enough that a call let in before it ends was let in by the ack


def test_a_call_waiting_out_a_grace_starts_when_the_ack_comes() -> None:
    alone = LongGrace()
    with alone.hold(True):
        pass
    started: list[float] = []

    def call() -> None:
        with alone.hold(False):
            started.append(time.monotonic())

    began = time.monotonic()
    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.2)
    assert not started  # held by the grace
    alone.ack(alone.seq)
    caller.join(timeout=8)
    assert started and started[0] - began < LongGrace.GRACE / 2
