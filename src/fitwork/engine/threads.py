"""Hold a replica's thread pools to the cores it was allotted, as Ray does for its workers.

A process that asks for one core but lets OpenBLAS, OpenMP or torch start a thread per
host core competes with every other replica for the cores they were given, and its
measured CPU time exceeds what was allocated.  How to hold them depends on how the replica
starts:

- a forked worker (the local engine) inherits its parent's pools, and OpenBLAS, asked to
  shrink its pool after a fork, may start threads again; so the parent shrinks its pools
  and sets the usual variables around the fork (`held_to`), and the child starts with them;
- a fresh process (a Ray actor) takes the variables in its environment (`variables`)
  before it loads any of those libraries.

ONNX Runtime sessions take their thread count from the session options the unit builds;
pass ``intra_op_num_threads``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def allotted_threads(cores: float) -> int:
    """Threads a replica holding ``cores`` cores may run: at least one, rounded up."""
    return max(1, math.ceil(cores - 1e-9))


def variables(cores: float) -> dict[str, str]:
    """The environment that holds a new process's pools to ``cores``."""
    return dict.fromkeys(THREAD_VARIABLES, str(allotted_threads(cores)))


@contextlib.contextmanager
def held_to(cores: float) -> Iterator[None]:
    """Within the block, this process's pools and variables are held to ``cores``.

    Fork a worker inside it: the child starts with pools of that size.  On leaving, the
    variables and pools are as they were.
    """
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update(variables(cores))
    limits = None
    with contextlib.suppress(Exception):
        from threadpoolctl import threadpool_limits

        limits = threadpool_limits(allotted_threads(cores))
    try:
        yield
    finally:
        if limits is not None:
            with contextlib.suppress(Exception):
                limits.restore_original_limits()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def limit_torch(cores: float) -> None:
    """torch's intra-op pool, if torch is loaded (it reads no variable once started)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            torch.set_num_threads(allotted_threads(cores))
