"""The core ceiling a fleet plan counts on: the share of a busy host its own threads get.

A plan of one pipeline on a busy host settles its ceiling against its own threads
(`fitwork.fit.inputs.settled_ceiling`): where the host's other work is shared fairly, more
runnable threads get more of the cores, and the threads a plan runs grow with the share it
is planned at.  A fleet plan is the same question with every job's threads counted
together: the jobs are each other's load, which the co-fit divides, and what they get
beside the host's other work grows with how many threads they keep runnable between them.
Planned at the one-process figure instead, three pipelines beside other load were given
0.68 of 2 cores in all (issue 36: 0.77x the status quo, whose alone-plans run more).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from fitwork.fit.inputs import BUSY_CORES, SETTLE_STEPS, share_ceiling
from fitwork.fit.spec import is_cpu_class
from fitwork.jobs.offers import Option
from fitwork.profiling.record import PipelineProfile

__all__ = ["busy_threads", "fleet_share", "settle"]

Solved = TypeVar("Solved")


def fleet_share(profiles: Sequence[PipelineProfile], threads: float) -> float:
    """The share of each node's cores ``threads`` busy threads of the jobs may count on:
    the highest of the jobs' profiles' readings at that count (`share_ceiling`).  Load
    others put on the host while one job was profiled only lowers its reading, so the
    least loaded saw the host nearest to as the plan will have it."""
    return max(share_ceiling(p.under_load(), threads) for p in profiles)


def busy_threads(options: Sequence[Sequence[Option]], x: Sequence[float],
                 f: Sequence[float]) -> float:
    """Threads the co-fit's replicas keep runnable at most: each CPU replica's calls at
    once (its ``threads``, else 1), counting replicas planned at least `BUSY_CORES` of
    CPU work (one that mostly waits adds no thread competing for the cores)."""
    threads, k = 0.0, 0
    for job in options:
        for option in job:
            count, flow = x[k], f[k]
            k += 1
            replicas = math.ceil(count - 1e-9) if count > 0 else 0
            if not replicas or not is_cpu_class(option.device_class):
                continue
            cores = (option.held_cores if option.reserved
                     else option.cpu_per_item * flow / replicas)
            if cores >= BUSY_CORES:
                threads += replicas * (option.threads or 1)
    return threads


def settle(profiles: Sequence[PipelineProfile],
           solve_at: Callable[[float], tuple[Solved, float]]) -> tuple[float, Solved]:
    """The highest ceiling the fleet plan's own threads bear out, and that solve.

    ``solve_at(ceiling)`` co-fits every job at ``ceiling`` and returns the solve with the
    threads it keeps busy (`busy_threads`).  From the share the most processes read, each
    step lowers the ceiling to what the plan's threads get, until the plan bears its
    ceiling out (at most `SETTLE_STEPS` re-solves)."""
    counts = [max(p.under_load().share_readings, default=1) for p in profiles]
    ceiling = fleet_share(profiles, max(counts, default=1))
    solved, threads = solve_at(ceiling)
    for _ in range(SETTLE_STEPS):
        borne = fleet_share(profiles, threads)
        if borne >= ceiling - 1e-3:
            break
        ceiling = borne
        solved, threads = solve_at(ceiling)
    return ceiling, solved
