"""Hold a replica's thread pools to the cores it was allotted, as Ray does for its workers.

A process that asks for one core but lets OpenBLAS, OpenMP or torch start a thread per
host core competes with every other replica for the cores they were given, and its
measured CPU time exceeds what was allocated.  This sets the usual environment variables
(for libraries loaded later) and resizes pools already loaded (through threadpoolctl for
BLAS and OpenMP, ``torch.set_num_threads`` for torch).  ONNX Runtime sessions take their
thread count from the session options the unit builds; pass ``intra_op_num_threads``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def allotted_threads(cores: float) -> int:
    """Threads a replica holding ``cores`` cores may run: at least one, rounded up."""
    return max(1, math.ceil(cores - 1e-9))


def limit_threads(cores: float) -> int:
    """Limit this process's compute thread pools to ``cores`` (rounded up); returns the count."""
    threads = allotted_threads(cores)
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)
    with contextlib.suppress(Exception):
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            torch.set_num_threads(threads)
    return threads
