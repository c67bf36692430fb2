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


def test_a_retry_after_a_forked_retry_needs_no_grace() -> None:
    clock = Clock()
    alone = Alone(clock)
    assert alone.claim()
    alone.release(grace=False)  # its unit runs in a forked child: the reply is safe here
    assert alone.claim()  # the next retry may start at once, no ack needed
    alone.release()
    assert not alone.claim()  # an in-process unit's retry still has its grace


def test_a_retry_may_go_to_a_busy_forked_replica_and_does_not_fence_it() -> None:
    from fitwork.engine.ray.routing import Router

    router = Router(0, limit=4)
    router.set_members(["plain", "forked"], 1)
    router.set_forked("forked")
    router.in_flight.update({"plain": 1, "forked": 1})  # both busy with a call each
    # A retry needs a member with nothing in flight, unless that member runs its unit in a
    # forked child (it runs the retry alone there itself): only "forked" qualifies now,
    # and it stays open to other frames.
    assert router.pick(block=False, alone=True) == "forked"
    assert router.alone == set() and router.in_flight["forked"] == 2
    router.in_flight["plain"] = 0
    picked = {router.pick(block=False, alone=True) for _ in range(20)}
    assert "plain" in picked and "plain" in router.alone  # a plain one is fenced
