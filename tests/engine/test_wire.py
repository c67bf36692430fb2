"""Frames on the wire and the crash-safe channel, without an engine around them."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np

from fitwork.engine.local.channel import STOP, Channel
from fitwork.engine.local.wire import INLINE_LIMIT, Wire


def test_small_frames_travel_inline() -> None:
    wire = Wire("fitwork-testwire")
    data, size = wire.dumps({"a": [1, 2, 3]})
    assert data[:1] == b"I" and size == len(data)
    assert wire.loads(data) == ({"a": [1, 2, 3]}, size)


def test_large_arrays_travel_through_a_file_that_is_gone_once_read() -> None:
    wire = Wire("fitwork-testwire")
    array = np.arange(1 << 20, dtype=np.float64)
    data, size = wire.dumps([("x", array), ("y", b"z" * 10)])
    assert data[:1] == b"S" and len(data) < 100 and size >= array.nbytes
    assert list(wire.directory.glob("fitwork-testwire-*"))
    (_, received), (_, tail) = wire.loads(data)[0]
    assert np.array_equal(received, array) and tail == b"z" * 10
    received[0] = -1.0  # private mapping: writable, and the sender's array is untouched
    assert array[0] == 0.0
    assert not list(wire.directory.glob("fitwork-testwire-*"))


def test_big_pickles_spill_too_and_sweep_removes_leftovers() -> None:
    wire = Wire("fitwork-testsweep")
    data, _ = wire.dumps("x" * (2 * INLINE_LIMIT))
    assert data[:1] == b"S"
    assert wire.sweep() == 1
    assert wire.sweep() == 0


def test_a_held_file_has_its_name_only_once_ready_and_a_dead_writers_are_swept() -> None:
    wire = Wire("fitwork-testheld")
    data, _ = wire.dumps("x" * (2 * INLINE_LIMIT), held=True)
    name = data[1:].decode()
    assert [p.name for p in wire.directory.glob("fitwork-testheld-*")] == [f"{name}.w"]
    wire.ready(data)  # what a worker does once it holds a credit, just before sending
    assert wire.loads(data)[0] == "x" * (2 * INLINE_LIMIT)
    wire.dumps("y" * (2 * INLINE_LIMIT), held=True)  # a writer killed before its credit
    assert wire.sweep_unsent(os.getpid() + 1) == 0  # another process's files stay
    assert wire.sweep_unsent(os.getpid()) == 1
    assert not list(wire.directory.glob("fitwork-testheld-*"))


def test_channel_credits_bound_what_waits() -> None:
    channel = Channel(multiprocessing.get_context("fork"), capacity=2)
    assert channel.put(b"I1", timeout=0) and channel.put(b"I2", timeout=0)
    assert not channel.put(b"I3", timeout=0)
    assert channel.in_use() == 2
    assert channel.get(timeout=1) == b"I1"
    assert channel.put(b"I3", timeout=0)
    channel.put_stop()
    assert [channel.get(timeout=1) for _ in range(3)] == [b"I2", b"I3", STOP]
    assert channel.get(timeout=0.01) is None
    channel.credits.acquire()  # a credit a killed sender took and never used
    assert channel.restore_credits() == 1 and channel.in_use() == 0
    channel.close()
