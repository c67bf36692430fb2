"""The samples that kill a unit's process when each is called alone, found in forked children."""

from __future__ import annotations

import contextlib
from typing import Any

from fitwork.workload.kernel import Kernel
from fitwork.workload.unit import Unit


def killers_of(unit: Unit, inputs: list[Any]) -> set[int]:
    """The positions of the samples that kill the unit's process when called alone.

    A forked child builds the unit and calls it on one sample at a time from a position
    on, saying which before each call: where it dies, that sample is a killer, and the
    next child goes on after it.  One child per killer, plus one; no timing.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    killers: set[int] = set()
    start = 0
    while start < len(inputs):
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_call_each, args=(unit, inputs, start, send), daemon=True)
        child.start()
        send.close()
        at: int | None = None
        try:
            while (said := receive.recv()) is not None:
                at = said
        except EOFError:  # it died calling sample ``at`` (None: before any sample)
            child.join()
            if at is None:
                return killers  # its constructor died: no sample is to blame
            killers.add(at)
            start = at + 1
            continue
        finally:
            receive.close()
        child.join()
        break
    return killers


def _call_each(unit: Unit, inputs: list[Any], start: int, send: Any) -> None:
    """In a forked child: the unit on ``inputs[start:]`` one at a time, each position sent
    before its call and ``None`` after the last (or when the unit cannot be built)."""
    try:
        call = Kernel(unit).caller()
    except Exception:
        send.send(None)
        return
    for index in range(start, len(inputs)):
        send.send(index)
        with contextlib.suppress(Exception):
            call([inputs[index]])
    send.send(None)
