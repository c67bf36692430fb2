"""How fast this host's cores run at a moment: a fixed piece of work, timed in CPU time.

A shared host's cores do not run at one speed: on this repository's 2-core host the same
unit's CPU per item moved by 1.2-1.5x from one minute to the next with nothing else of
ours running, and a profile is one such moment.  The probe is read when a pipeline is
profiled and again after a run of its plan; their ratio tells a plan's miss from the host's
moment (in ``bench/fit_quality.py`` a layout's throughput moved 1.2x with it).
"""

from __future__ import annotations

import time

import numpy as np

PROBE_S = 0.05
"""Seconds of this thread's CPU one reading takes (and a tenth more, warming)."""

_WORK = np.random.default_rng(0).standard_normal(4096)


def _pass() -> None:
    """The fixed work: an interpreted loop, and numpy's arithmetic and sort on 4096 floats
    (no BLAS: its pool threads would run beside the thread timed)."""
    total = 0
    for i in range(2000):
        total += i * i
    float(np.sort(_WORK * 1.5 + 1.0)[2048])


def host_speed(seconds: float = PROBE_S) -> float:
    """Passes of the fixed work per second of this thread's CPU time: a run queue does not
    move it (a thread waiting for a core spends none), a slower core does.  The process's
    CPU time would not do: pool threads spinning in the same process count there (OpenBLAS's
    spin ~0.1 s after a run restores them, and read as a host at 0.2-0.5 of its speed)."""
    start = time.thread_time()
    while time.thread_time() - start < seconds / 10:  # warm: a probe after a pause is cold
        _pass()
    start, passes = time.thread_time(), 0
    while True:
        _pass()
        passes += 1
        spent = time.thread_time() - start
        if spent >= seconds:
            return passes / spent
