"""What a run on Ray costs beyond the plan's work: replica start-up and the cost per call.

A plan predicts a steady rate; a run's throughput is its items over its whole wall time.
On the local engine a replica is a fork (milliseconds); on Ray it is a worker process that
starts Python, imports Ray and loads its unit before its first call, and each frame then
pays Ray's cost of a call at every unit on its path.  So the rate a plan can promise a Ray
run of ``items`` items is those items over the start-up and the items at the steady rate
less the calls' share (`predicted`).  This module imports nothing of Ray: the CLI prices a
Ray run with it after the run.

Measured on this repository's 2-core development host (busy: load 15-29 from other jobs),
with a one-unit pipeline on a 2-CPU Ray 2.60 cluster started in-process, CPU-seconds of
the whole process tree (driver, raylet, GCS, workers): a run of 2,000 trivial items cost
1.6-2.0 CPU-s with one replica and 4.6-5.9 with four, about 1.0-1.3 CPU-s more per replica
actor; calls of ~100 ms frames cost 1-2 ms of CPU each along their path (driver, each unit's
replica, the object store).
"""

from __future__ import annotations

from typing import Any

ACTOR_START_CPU_S = 1.1
"""CPU-seconds for one replica actor to start (a worker process, Ray's imports, the unit
loaded), before its first call; replicas start side by side, so a run's start-up is about
this times its replicas over the cluster's cores."""
CALL_CPU_S = 0.0015
"""CPU-seconds Ray spends on one call of one frame into one unit (submit, schedule, the
summary back, the frame through the object store)."""
FRAME_TIME = 0.1
"""Seconds of work a frame carries into a unit on Ray (the driver's ``FRAME_TIME``)."""


def startup_seconds(replicas: int, cores: float) -> float:
    """Seconds before a Ray run of ``replicas`` replica actors takes its first frame."""
    return max(0, replicas) * ACTOR_START_CPU_S / max(1.0, cores)


def steady_rate(rate: float, units: int) -> float:
    """``rate`` less Ray's calls: each frame of `FRAME_TIME` seconds of work pays
    `CALL_CPU_S` at each of ``units`` units on its path."""
    return rate / (1.0 + max(1, units) * CALL_CPU_S / FRAME_TIME)


def predicted(rate: float, items: int, replicas: int, units: int, cores: float) -> float:
    """The throughput (items over wall time) a plan's steady ``rate`` comes to on Ray for a
    run of ``items`` items with ``replicas`` replica actors of ``units`` units on ``cores``
    cores: the start-up, then the items at the steady rate less the calls' share."""
    if rate <= 0 or items <= 0:
        return rate
    return items / (startup_seconds(replicas, cores) + items / steady_rate(rate, units))


def for_record(rate: float, record: Any) -> tuple[float, str]:
    """`predicted` for a finished Ray run's record (its items, replicas started with it,
    units and the cluster's cores), and a few words saying what it includes."""
    workers = len(getattr(record, "workers", ()))  # less replacements: started with it
    replicas = max(1, workers - int(getattr(record, "worker_restarts", 0)))
    cores = float((getattr(record, "host", None) or {}).get("cores") or 1.0)
    units = len(getattr(record, "units", ())) or 1
    items = int(getattr(record, "items_completed", 0))
    value = predicted(rate, items, replicas, units, cores)
    return value, (f" ({rate:,.1f} steady, less Ray's start-up of {replicas} replicas "
                   f"on {cores:g} cores, ~{startup_seconds(replicas, cores):.1f} s, and its "
                   f"cost per call, for {items:,} items)")


__all__ = ["ACTOR_START_CPU_S", "CALL_CPU_S", "FRAME_TIME", "for_record", "predicted",
           "startup_seconds", "steady_rate"]
