"""What calls at once cost a replica: call memory, the lock's share, CPU among threads."""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fitwork.forked import forked_ints
from fitwork.profiling.record import WAIT_THREADS
from fitwork.profiling.rss import high_water, reset_high_water
from fitwork.telemetry.cputime import cpu_seconds

MEMORY_THREADS = 4
"""Calls at once `measure_concurrent` runs, in threads of one process."""
MEMORY_ROUNDS = 2
"""Calls each of those threads makes, one item each."""
MEMORY_TIMEOUT_S = 60.0
"""The most seconds the call-memory pass may take before it is given up."""
WAIT_ROUNDS = 4
"""Calls each of those threads makes in one pass."""
WAIT_PASSES = 5
"""Passes of those calls at most; the figure is their median.  One pass of a unit that waits
12 ms and then parses 60 KB of JSON, beside a process spinning on the other core of a
2-core host, read 0.57-1.68 ms of CPU a call over ten passes in one process, and profiles
minutes apart planned it at 465-1,706 items/s on that figure alone (stop 53)."""
WAIT_BUDGET_S = 1.0
"""Past the third pass, no pass starts after this many seconds of the passes."""


@dataclass(frozen=True)
class Concurrent:
    """What calls at once cost a replica (see `measure_concurrent`); ``None``: not measured."""

    call_memory: int | None = None
    lock_share: float | None = None
    cpu_factor: float | None = None
    threaded_cpu_s: float | None = None


LOCK_BUSY = 0.8
"""One thread's calls must keep this much of a core busy for the lock share to be read: a
unit that mostly waits meets few others on the cores whatever it holds."""
LOCK_CORES = 1.5
"""The threads must have had this many cores (busy or left idle, not taken by other processes)
for the lock share to be read: on fewer, one core held and all free look alike."""


def measure_concurrent(call: Callable[[list[Any]], Any], inputs: list[Any]) -> Concurrent:
    """What a replica running several calls at once (``io`` threads, a threaded fused
    replica) meets, from `MEMORY_THREADS` threads calling the unit at once against one
    thread making the same calls, in a forked copy of this replica (so a unit that crashes
    or hangs when called from several threads costs these figures only):

    - ``call_memory``: the peak RSS over the one thread's, per further thread.  It counts
      what a call lets go of after (numpy temporaries) and what a library keeps per
      concurrent call (an allocator's arena grown for each run at once, as onnxruntime's).
    - ``lock_share``: the share of a call's CPU that holds the interpreter lock, from the
      cores the threads kept busy: ``k`` of them where no call holds it (a native library
      that lets go of it, as onnxruntime and BLAS do), one where every call does, ``k``
      the cores the copy could have had (those the threads kept busy and those left idle, so a
      core another process holds is not read as the lock), at most `MEMORY_THREADS`; read
      only where one thread's calls kept `LOCK_BUSY` of a core busy and that ``k`` is at
      least `LOCK_CORES`.
    - ``cpu_factor``: CPU seconds of the threads' calls over the one thread's (calls that
      share caches and cores, and hand the lock on, spend more each).
    - ``threaded_cpu_s``: for a unit whose calls mostly wait (the one thread's CPU under
      half its wall time), its CPU per call with `WAIT_THREADS` threads calling it at once.
      Alone, each call wakes from its wait to caches others have since filled; threads of
      one process calling the same code keep them warm: a call that sleeps 30 ms and then
      draws 16 KiB with numpy spent 0.37 ms of CPU alone, 0.13 ms among 16 threads.
    """
    if not inputs or sys.platform != "linux":
        return Concurrent()
    found = forked_ints(MEMORY_TIMEOUT_S, _threads_measured, call, inputs)
    if found is None or len(found) != 4:
        return Concurrent()
    memory, lock, factor, waiting = found
    return Concurrent(memory if memory >= 0 else None,
                      lock / 1000 if lock >= 0 else None,
                      factor / 1000 if factor > 0 else None,
                      waiting / 1e9 if waiting > 0 else None)


def _threads_measured(call: Callable[[list[Any]], Any],
                      inputs: list[Any]) -> tuple[int, int, int, int] | None:
    """`measure_concurrent`'s measurement itself, in this process: (call memory in bytes, lock
    share and CPU factor in thousandths, a waiting unit's CPU per call among threads in
    nanoseconds), -1 for a figure it could not read."""
    items = [inputs[i % len(inputs)] for i in range(MEMORY_THREADS * MEMORY_ROUNDS)]

    def calls(mine: list[Any], start: threading.Barrier | None = None) -> None:
        if start is not None:
            start.wait()
        for item in mine:
            with contextlib.suppress(Exception):
                call([item])

    reset = reset_high_water()
    cpu1, wall1 = _at_once(calls, items, 1)
    alone = high_water() if reset else None
    reset_high_water()
    mine = sorted(os.sched_getaffinity(0))
    idle0 = _idle_s(mine)
    cpu4, wall4 = _at_once(calls, items, MEMORY_THREADS)
    idle = _idle_s(mine) - idle0
    together = high_water() if reset else None
    memory = -1 if alone is None or together is None else \
        max(0, together - alone) // (MEMORY_THREADS - 1)
    lock = -1
    if len(mine) >= 2 and wall1 > 0 and wall4 > 0 and cpu1 >= LOCK_BUSY * wall1:
        busy = cpu4 / wall4  # cores the threads kept busy at once
        # the cores they could have had: those they kept busy and those left idle (another
        # process's share of a busy host is not the lock's)
        cores = min(MEMORY_THREADS, len(mine), busy + max(0.0, idle) / wall4)
        if cores >= LOCK_CORES:
            lock = round(1000 * min(1.0, max(0.0, (cores - busy) / (cores - 1))))
    factor = round(1000 * cpu4 / cpu1) if cpu1 > 0 and cpu4 > 0 else -1
    return memory, lock, factor, \
        _waiting_cpu(calls, inputs, max(memory, 0)) if cpu1 < wall1 / 2 else -1


def _idle_s(cpus: list[int]) -> float:
    """Seconds the cores ``cpus`` have been idle (waiting on I/O included) since boot."""
    import psutil

    times = psutil.cpu_times(percpu=True)
    return sum(times[c].idle + getattr(times[c], "iowait", 0.0) for c in cpus if c < len(times))


def _waiting_cpu(calls: Callable[..., None], inputs: list[Any], call_memory: int) -> int:
    """Nanoseconds of CPU per call with `WAIT_THREADS` threads calling at once, each
    `WAIT_ROUNDS` times: the median of up to `WAIT_PASSES` such passes (three at least, more
    while `WAIT_BUDGET_S` lasts), as one pass moves with the moment the host is at (see
    `measure_concurrent`); -1 where that many calls at once would hold more than half the
    memory free (``call_memory`` bytes each)."""
    import psutil

    if WAIT_THREADS * call_memory > psutil.virtual_memory().available // 2:
        return -1
    items = [inputs[i % len(inputs)] for i in range(WAIT_THREADS * WAIT_ROUNDS)]
    passes: list[float] = []
    started = time.perf_counter()
    while len(passes) < WAIT_PASSES and (len(passes) < 3
                                         or time.perf_counter() - started < WAIT_BUDGET_S):
        used, _ = _at_once(calls, items, WAIT_THREADS)
        if used > 0:
            passes.append(used / len(items))
    return round(1e9 * statistics.median(passes)) if passes else -1


def _at_once(calls: Callable[..., None], items: list[Any], threads: int
             ) -> tuple[float, float]:
    """(CPU, wall) seconds of ``items`` called by ``threads`` threads started together
    (one: in this thread, in turn)."""
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    if threads == 1:
        calls(items)
    else:
        start = threading.Barrier(threads)
        running = [threading.Thread(target=calls, args=(items[k::threads], start),
                                    daemon=True) for k in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join()
    return cpu_seconds() - cpu0, time.perf_counter() - wall0
