"""Hold the profiled process's thread pools to what a replica of the unit will get.

A replica is held to ``allotted_threads(cores)`` (`fitwork.resources`) threads in every
BLAS, OpenMP and torch pool (`fitwork.engine.threads` does it for the engines).  A unit
profiled with its pools free measures another program: NumPy's BLAS runs a thread per core,
spinning beside the unit, so its CPU per item counts the spin and its wall time a speed-up
no replica gets.
The profiler therefore holds its child process the same way before it builds the unit,
and again after the warm-up call (threadpoolctl reaches only libraries already loaded).

Resizing OpenBLAS's pool wakes its worker threads, which then busy-wait for work for about
0.1 s (its ``THREAD_TIMEOUT``, 2^28 cycles) before they sleep: timed at once, a unit of a few
milliseconds per item would be charged that spin (twice its CPU on this repository's host:
4.3 ms against 2.0 ms for a 1 MiB random tile).  `hold_pools` therefore waits `SETTLE_S`
after resizing a loaded pool, so the timing starts with the pool asleep.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
"""The variables libraries loaded later read their pool size from (as the engines set)."""
SETTLE_S = 0.3
"""How long a resized pool's threads are given to stop spinning before anything is timed."""


def hold_pools(threads: int) -> bool:
    """Hold this process's pools (loaded or loaded later) to ``threads``; whether any pool
    that runs threads is loaded now."""
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, str(threads)))
    loaded = False
    with contextlib.suppress(Exception):
        from threadpoolctl import threadpool_limits

        limits = threadpool_limits(limits=threads)
        loaded = any(limits.get_original_num_threads().values())
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            torch.set_num_threads(threads)
            loaded = True
    if loaded:
        time.sleep(SETTLE_S)
    return loaded
