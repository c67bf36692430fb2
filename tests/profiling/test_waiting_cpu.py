"""A waiting unit's CPU per call among threads is the median of several passes, not one."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from fitwork.profiling import concurrent
from fitwork.profiling.concurrent import WAIT_PASSES, WAIT_ROUNDS, WAIT_THREADS, _waiting_cpu

from .spinning import spin


def test_one_costly_pass_does_not_set_the_figure() -> None:
    """The first pass's calls spin 2 ms each, every later pass's 0.2 ms: one pass would read
    the 2 ms (a moment of the host), the median of the passes reads about 0.2 ms."""
    per_pass = WAIT_THREADS * WAIT_ROUNDS
    made = itertools.count()
    lock = threading.Lock()

    def calls(mine: list[Any], start: threading.Barrier | None = None) -> None:
        if start is not None:
            start.wait()
        for _ in mine:
            with lock:
                n = next(made)
            time.sleep(0.001)
            spin(0.002 if n < per_pass else 0.0002)

    ns = _waiting_cpu(calls, list(range(8)), call_memory=0)
    passes = next(made) // per_pass
    assert 3 <= passes <= WAIT_PASSES
    assert 0.15e6 < ns < 0.6e6, ns  # one 2 ms pass would have read 2e6


def test_passes_stop_at_the_budget_after_three(monkeypatch: Any) -> None:
    """With no budget left, three passes are taken and no more."""
    monkeypatch.setattr(concurrent, "WAIT_BUDGET_S", 0.0)
    made = itertools.count()

    def calls(mine: list[Any], start: threading.Barrier | None = None) -> None:
        if start is not None:
            start.wait()
        for _ in mine:
            next(made)
            spin(0.0002)

    assert _waiting_cpu(calls, list(range(8)), call_memory=0) > 0
    assert next(made) == 3 * WAIT_THREADS * WAIT_ROUNDS
