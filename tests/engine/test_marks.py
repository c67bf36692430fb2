"""A local worker's marks: what a forked worker writes, the driver reads after it dies."""

from __future__ import annotations

import os
import signal

from fitwork.engine.local.marks import SLOTS, Marks


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
