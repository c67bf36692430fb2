"""A local worker's marks: what a forked worker writes, the driver reads after it dies."""

from __future__ import annotations

import os
import signal

from fitwork.engine.local.marks import RING, SLOTS, Marks


def test_a_killed_child_s_last_mark_is_read_by_its_parent() -> None:
    """The mapping is made before the fork and shared: a child that marks frame 77, item 3,
    row 12 and is then killed leaves exactly that for the parent to read."""
    marks = Marks()
    try:
        marks.want(0)
        pid = os.fork()
        if pid == 0:  # the worker: whatever happens here, it dies as a killed worker does
            try:
                mark = marks.bind(5, 0)
                if mark.wanted():
                    mark.took(77)
                    mark.running(3)
                    mark.row(12)
            finally:
                os.kill(os.getpid(), signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
        assert marks.died_in(5) == (77, 3, 12)
    finally:
        marks.close()


def test_a_mark_names_nothing_between_items_or_once_another_worker_has_its_slot() -> None:
    marks = Marks()
    try:
        mark = marks.bind(5, 1)
        assert not mark.wanted()  # no death in its unit yet: items are not marked
        marks.want(1)
        assert mark.wanted() and not marks.bind(6, 0).wanted()  # per unit
        mark.took(77)
        assert marks.died_in(5) is None  # took a frame, runs none of its items yet
        mark.running(0)
        assert marks.died_in(5) == (77, 0, -1)
        mark.between()
        assert marks.died_in(5) is None  # its outputs are going out: no item's death
        mark.running(4)
        marks.bind(5 + SLOTS, 1).took(90)  # a later worker shares the slot
        assert marks.died_in(5) is None and marks.died_in(5 + SLOTS) is None
    finally:
        marks.close()


def test_a_forked_reader_sees_the_shards_the_driver_marks_stale_after_the_fork() -> None:
    """The driver marks (frame, offset) pairs stale after the reader forked; the reader
    sees each at its next look, and once the ring has wrapped, only the latest `RING`."""
    marks = Marks()
    try:
        read, write = os.pipe()
        go_read, go_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the reader: answer what it sees once the driver says go
            try:
                mark = marks.bind(3, 0)
                before = mark.is_stale(9, 2)
                os.read(go_read, 1)
                seen = (before, mark.is_stale(9, 2), mark.is_stale(9, 1), mark.is_stale(4, 0))
                os.write(write, bytes(int(x) for x in seen))
            finally:
                os._exit(0)
        marks.stale(9, 2)
        marks.stale(4, 0)
        os.write(go_write, b"g")
        assert tuple(os.read(read, 4)) in {(0, 1, 0, 1), (1, 1, 0, 1)}
        os.waitpid(pid, 0)
        mark = marks.bind(3, 0)
        for k in range(RING + 10):
            marks.stale(100 + k, 0)
        assert mark.is_stale(100 + RING + 9, 0) and mark.is_stale(110, 0)
        assert not mark.is_stale(109, 0) and not mark.is_stale(9, 2)  # forgotten
    finally:
        marks.close()
