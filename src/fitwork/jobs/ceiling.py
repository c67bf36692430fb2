"""The core ceiling a fleet plan counts on: the share of a busy host its own threads get.

A plan of one pipeline on a busy host settles its ceiling against its own threads
(`fitwork.fit.ceiling.settled_ceiling`): where the host's other work is shared fairly, more
runnable threads get more of the cores, and the threads a plan runs grow with the share it
is planned at.  A fleet plan is the same question with every job's threads counted
together: the jobs are each other's load, which the co-fit divides, and what they get
beside the host's other work grows with how many threads they keep runnable between them.
Planned at the one-process figure instead, three pipelines beside other load were given
0.68 of 2 cores in all (issue 36: 0.77x the status quo, whose alone-plans run more).

Where the scheduler weighs sessions as groups (autogroups), threads are not what counts:
`fitwork run --jobs` runs each pipeline in a session of its own and holds its share by
that session's weight (`fitwork.jobs.shares`), so the jobs' sessions share the host with
the others' as groups, however many threads each runs (`session_cap`).  Beside one core
kept busy, three pipelines weighted 2:1:1 got 66-69% of 2 cores where the thread rule
said 100% (`bench/fleet_host.py`); the cap says 67%.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from fitwork.fit.ceiling import (
    FREE_QUANTILE,
    SETTLE_STEPS,
    free_readings,
    quantile,
    share_ceiling,
    threads_of,
)
from fitwork.jobs.offers import Option, share_of
from fitwork.profiling.record import PipelineProfile

__all__ = ["busy_threads", "fleet_share", "session_cap", "settle"]

Solved = TypeVar("Solved")


def fleet_share(profiles: Sequence[PipelineProfile], threads: float) -> float:
    """The share of each node's cores ``threads`` busy threads of the jobs may count on:
    the highest of the jobs' profiles' readings at that count (`share_ceiling`).  Load
    others put on the host while one job was profiled only lowers its reading, so the
    least loaded saw the host nearest to as the plan will have it."""
    return max(share_ceiling(p.under_load(), threads) for p in profiles)


def busy_threads(options: Sequence[Sequence[Option]], x: Sequence[float],
                 f: Sequence[float]) -> float:
    """Threads the co-fit's replicas keep runnable at most: its solution (``x`` replicas
    and ``f`` items/s per option, every job's options in turn) as each job's replica groups
    (`share_of`), counted as a single plan's are (`threads_of`)."""
    groups, k = [], 0
    for job in options:
        groups += share_of(job, x[k:k + len(job)], f[k:k + len(job)])[0]
        k += len(job)
    return threads_of(groups)


def session_cap(profiles: Sequence[PipelineProfile], weights: Sequence[float]) -> float:
    """The share of the host the jobs' sessions get beside the others' work, where the
    scheduler weighs sessions as groups: each job's session weighs its weight over the
    heaviest's (as the share controller sets them, `fitwork.jobs.shares`), the others' work
    one session at full weight using what the profiles saw it use (the least loaded
    profile's `FREE_QUANTILE` reading of the share it left).  Contended, the others get
    at most ``1 / (1 + W)`` of the host for the jobs' total weight ``W``::

        cap = 1 - min(used_by_others, 1 / (1 + W))

    1.0 where no profile read what others left."""
    left = [quantile(free, FREE_QUANTILE)
            for free in (free_readings(p.under_load()) for p in profiles) if free]
    if not left or not weights or max(weights) <= 0:
        return 1.0
    total = sum(weights) / max(weights)
    return 1.0 - min(1.0 - max(left), 1.0 / (1.0 + total))


def settle(profiles: Sequence[PipelineProfile],
           solve_at: Callable[[float], tuple[Solved, float]],
           cap: float = 1.0) -> tuple[float, Solved]:
    """The highest ceiling the fleet plan's own threads bear out, and that solve.

    ``solve_at(ceiling)`` co-fits every job at ``ceiling`` and returns the solve with the
    threads it keeps busy (`busy_threads`).  From the share the most processes read, each
    step lowers the ceiling to what the plan's threads get, until the plan bears its
    ceiling out (at most `SETTLE_STEPS` re-solves); never above ``cap`` (`session_cap`)."""
    counts = [max(p.under_load().share_readings, default=1) for p in profiles]
    ceiling = min(cap, fleet_share(profiles, max(counts, default=1)))
    solved, threads = solve_at(ceiling)
    for _ in range(SETTLE_STEPS):
        borne = min(cap, fleet_share(profiles, threads))
        if borne >= ceiling - 1e-3:
            break
        ceiling = borne
        solved, threads = solve_at(ceiling)
    return ceiling, solved
