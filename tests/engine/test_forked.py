"""A replica's unit in a forked child (`fitwork.engine.ray.forked`): a row that kills the
child fails only the frames it held, the spare built behind it takes the next frame, and
closing leaves no child behind.  Real forked processes, driven as the Ray replica drives
them (Ray itself is not started: the children never touch it)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

pytest.importorskip("ray")

from fitwork import unit
from fitwork.engine.ray.forked import Build, Forked, UnitDied, _Mark
from fitwork.engine.segment import Segment
from fitwork.engine.serve import Busy
from fitwork.workload.allotment import allot


@unit
def deadly(n: int) -> dict[str, int]:
    """Doubles ``n``; a negative ``n`` kills its process (-2 after a quarter second), ``n``
    99 raises."""
    if n == -2:
        time.sleep(0.25)
    if n < 0:
        os.kill(os.getpid(), signal.SIGKILL)
    if n == 99:
        raise ValueError("ninety-nine")
    return {"n": n * 2, "pid": os.getpid()}


@unit(batch_size=4, batch_wait=5.0)
def summed(values: list[int]) -> list[int]:
    """A batch unit: each item plus the batch's length."""
    return [v + len(values) for v in values]


def forked(fn: Any, spares: int = 1) -> tuple[Forked, Busy]:
    busy = Busy()
    return Forked(Build(fn, allot(fn, None), None, None, 1, spares), busy), busy


def segment(frame: int, values: list[int], attempt: int = 0) -> Segment:
    return Segment(frame, attempt, range(len(values)), None, None, values)


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended and been reaped (not a zombie, not running)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped, maybe while being read
        return True


def test_a_death_fails_only_its_frame_and_the_spare_serves_the_next() -> None:
    child, busy = forked(deadly)
    assert child.error is None
    settled = child.call([segment(0, [1, 2, 3])]).result(timeout=30)
    out, back, failures = settled[0]
    assert out is not None and [v["n"] for v in out.values] == [2, 4, 6]
    first_pid = out.values[0]["pid"]
    assert first_pid != os.getpid() and back is None and not failures

    with pytest.raises(UnitDied, match="SIGKILL") as died:
        child.call([segment(1, [5, -1, 6])]).result(timeout=30)
    assert died.value.number == 1

    # the next frame runs at once in the spare, which was built before the death
    started = time.monotonic()
    settled = child.call([segment(2, [7, 99])]).result(timeout=30)
    took = time.monotonic() - started
    out, _, failures = settled[0]
    assert out is not None and [v["n"] for v in out.values] == [14]
    assert out.values[0]["pid"] not in (first_pid, os.getpid())
    assert [f.error for f in failures] == ["ValueError: ninety-nine"]
    assert "deadly" in failures[0].traceback  # the record was made where the error was
    assert took < 5.0
    assert child.deaths == 1
    assert child.cpu_seconds() > 0.0 and busy.so_far() > 0.0

    pids = [child.kid.pid] + ([child.spare.pid] if child.spare is not None else [])
    child.close()
    deadline = time.monotonic() + 10
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(pid) for pid in pids)


def test_a_batch_unit_runs_in_the_child_and_drain_ends_its_wait() -> None:
    child, _ = forked(summed)
    future = child.call([segment(0, [10, 20])])
    time.sleep(0.3)
    assert not future.done()  # two items wait for a batch of four (up to 5 s)
    child.drain()  # nothing more comes: the batch runs now
    out, _, _ = future.result(timeout=10)[0]
    assert out is not None and out.values == [12, 22]
    child.close()


def test_a_unit_that_cannot_be_built_in_the_child_is_said() -> None:
    @unit
    class Broken:
        def __init__(self) -> None:
            raise RuntimeError("no model file")

        def __call__(self, value: int) -> int:
            return value

    child, _ = forked(Broken)
    assert child.error is not None and "no model file" in child.error


@unit
def echo(value: bytes) -> bytes:
    return value


def test_large_frames_from_many_calls_at_once_all_come_back() -> None:
    # A frame's write to the child may wait for the child to read while the child waits
    # for its results to be read: neither may wait on the other's lock.
    child, _ = forked(echo)
    blobs = [bytes([n]) * (3 << 20) for n in range(6)]
    futures = [child.call([segment(n, [blob])]) for n, blob in enumerate(blobs)]
    for blob, future in zip(blobs, futures, strict=True):
        out, _, _ = future.result(timeout=60)[0]
        assert out is not None and out.values == [blob]
    child.close()


def test_frames_the_dead_child_had_not_taken_run_in_the_next_one() -> None:
    child, _ = forked(deadly)
    killer = child.call([segment(0, [3, -2])])  # dies a quarter second in
    time.sleep(0.05)  # it has taken its frame; these wait in its socket behind it
    later = [child.call([segment(n, [n, n + 1])]) for n in (1, 2, 3)]
    with pytest.raises(UnitDied, match="SIGKILL"):
        killer.result(timeout=30)
    for n, call in zip((1, 2, 3), later, strict=True):
        out, _, failures = call.result(timeout=30)[0]  # not failed: they never ran
        assert out is not None and [v["n"] for v in out.values] == [2 * n, 2 * n + 2]
        assert not failures
    assert child.deaths == 1
    child.close()


def test_a_death_loses_only_the_item_it_died_in_the_others_run_in_the_next_child() -> None:
    child, _ = forked(deadly)
    frame = [segment(0, [1, 2]), segment(1, [3, -1, 4, -3, 5])]  # two items that kill
    with pytest.raises(UnitDied) as died:
        child.call(frame).result(timeout=30)
    # each death lost the one item it happened in (the item after the first killer ran in
    # the next child and met the second killer, which took that child too)
    assert [(n, [(s.frame, list(s.offsets), s.values) for s in lost], named)
            for n, lost, named in died.value.losses] == [
        (1, [(1, [1], [-1])], True), (2, [(1, [3], [-3])], True)]
    done = sorted((out.frame, o, v["n"]) for out, _, _ in died.value.settled
                  if out is not None for o, v in zip(out.offsets, out.values, strict=True))
    assert done == [(0, 0, 2), (0, 1, 4), (1, 0, 6), (1, 2, 8), (1, 4, 10)]
    assert child.deaths == 2
    child.close()


def test_a_frame_being_read_when_the_child_died_counts_as_taken() -> None:
    mark = _Mark()
    assert mark.taken([1, 2]) == set()  # nothing read: both go to the next child
    mark.took(3)
    assert mark.taken([2, 3, 4, 5]) == {2, 3}
    mark.reading()  # reading 4 when it died: 4 may be what killed it
    assert mark.taken([2, 3, 4, 5]) == {2, 3, 4}


def test_without_spares_a_death_forks_and_builds_the_next_child_then() -> None:
    child, _ = forked(deadly, spares=0)
    first = child.call([segment(0, [1])]).result(timeout=30)[0][0]
    assert first is not None and child.spare is None  # no second built copy held
    with pytest.raises(UnitDied):
        child.call([segment(1, [-1])]).result(timeout=30)
    after = child.call([segment(2, [2])]).result(timeout=30)[0][0]
    assert after is not None and after.values[0]["n"] == 4
    assert after.values[0]["pid"] != first.values[0]["pid"] and child.spare is None
    child.close()
