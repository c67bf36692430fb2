"""Hold a replica's thread pools to the cores it was allotted, as Ray does for its workers.

A process that asks for one core but lets OpenBLAS, OpenMP or torch start a thread per
host core competes with every other replica for the cores they were given, and its
measured CPU time exceeds what was allocated.  How to hold them depends on how the replica
starts:

- a fresh process (a Ray actor) holds its own (`hold_threads`);
- a forked worker (the local engine) takes its pool size from its parent: the driver holds
  its pools while it forks (`ForkHold`).

OpenBLAS shuts its threads down around every fork, in parent and child, and the next call
that sets its size starts them again, each spinning ~0.1 s before it sleeps.  Holding a
child after the fork therefore costs every replica that spin, and restoring the driver
after each fork cost it 0.15 s of CPU a run (15% of a 2M-item no-op run,
``bench/overhead.py``).  So the driver holds its pools from its first fork until the run
ends, and only then restores them: one spin per run, after it.

ONNX Runtime sessions take their thread count from the session options the unit builds;
pass ``intra_op_num_threads``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from fitwork.resources import allotted_threads

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def variables(cores: float) -> dict[str, str]:
    """The environment that holds a new process's pools to ``cores``."""
    return dict.fromkeys(THREAD_VARIABLES, str(allotted_threads(cores)))


def hold_threads(cores: float) -> None:
    """Hold this process's thread pools to ``cores``: the variables for what loads later
    (and for child processes), the pools of what is loaded already (BLAS, OpenMP, torch)."""
    os.environ.update(variables(cores))
    with contextlib.suppress(Exception):
        from threadpoolctl import threadpool_limits

        threadpool_limits(allotted_threads(cores))
    limit_torch(cores)


class ForkHold:
    """A driver's pools, held to each replica's cores as it is forked, until `release`."""

    def __init__(self) -> None:
        self.threads = 0  # what the pools are held to now (0: as they were)
        self.original: Any = None  # restores the pools as they were before the first hold

    @contextlib.contextmanager
    def forking(self, cores: float) -> Iterator[None]:
        """Within the block, the pools and variables are held to ``cores``: fork in it."""
        threads = allotted_threads(cores)
        if threads != self.threads:
            self.threads = threads
            with contextlib.suppress(Exception):
                limits = _controller().limit(limits=threads)
                self.original = self.original or limits
        saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
        os.environ.update(variables(cores))
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def release(self) -> None:
        """The pools back as they were before the first fork."""
        if self.original is not None:
            with contextlib.suppress(Exception):
                self.original.restore_original_limits()
        self.original, self.threads = None, 0


_found: tuple[int, Any] = (-1, None)


def _controller() -> Any:
    """threadpoolctl's view of the loaded pools, found again only once more modules have
    loaded (finding them walks every shared library: ~1 ms, a fifth of a short run's fork)."""
    global _found
    if _found[0] != len(sys.modules):
        from threadpoolctl import ThreadpoolController

        _found = (len(sys.modules), ThreadpoolController())
    return _found[1]


def limit_torch(cores: float) -> None:
    """torch's intra-op pool, if torch is loaded (it reads no variable once started)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            torch.set_num_threads(allotted_threads(cores))
