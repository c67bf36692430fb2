"""A unit timed dropping each call's outputs at once, as a replica does, and that timing used."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fitwork.profiling.record import BatchMeasurement
from fitwork.telemetry.cputime import children_seconds
from fitwork.telemetry.schedstat import run_queue_seconds

DROPPED_MIN = 64 * 1024
"""Pickled bytes of output per item from which `measure_unit` also times a unit dropping each
output as soon as it is made (a replica's way); below it, keeping them costs nothing much."""


@dataclass
class Dropped:
    """A pass over the samples with each call's results dropped at once."""

    batch_size: int
    wall_s: float
    cpu_s: float
    queued_s: float = 0.0


def time_dropping(call: Callable[[list[Any]], tuple[list[Any], int]], inputs: list[Any],
                  size: int) -> Dropped | None:
    """Wall and CPU seconds per item over ``inputs`` in batches of ``size``, each call's
    results dropped before the next call, as a replica drops them once sent on.

    The timing loop keeps every output (the next unit is measured on them), so each of its
    calls faults in fresh pages for what it returns, where a replica's allocator reuses the
    pages it freed or gives them back and faults them in again, as this pass's does when it
    runs first, before any output is kept.  A unit making a 1.2 MB array measured 2.0 ms of
    CPU per item keeping its outputs and 1.4 ms dropping them; one normalising such an array
    0.87 and 1.16 ms; a run spent about the latter in each.  Its run-queue wait is timed
    too, so wall, CPU and queued seconds come from the same calls.
    """
    wall = cpu = queued = 0.0
    measured = 0
    children0 = children_seconds()  # tools the unit ran: read once, not around each call
    for i in range(0, len(inputs), size):
        batch = inputs[i:i + size]
        queue0 = run_queue_seconds()  # outside the window, as `time_batches` keeps it
        wall0, cpu0 = time.perf_counter(), time.process_time()
        results, failed = call(batch)
        del results
        cpu += time.process_time() - cpu0
        wall += time.perf_counter() - wall0
        queued += run_queue_seconds() - queue0
        measured += len(batch) - failed
    cpu += children_seconds() - children0
    return Dropped(size, wall / measured, cpu / measured,
                   queued / measured) if measured else None


def as_dropped(chosen: BatchMeasurement, before: BatchMeasurement,
               dropped: Dropped | None) -> BatchMeasurement:
    """``chosen`` (``before`` the pools' spinning was taken out of it) with the wall, CPU and
    run-queue seconds the pass dropping outputs measured, less the same share of spinning.
    (The run-queue wait was once kept from the other pass: a profile taken as the host's
    load changed said big_array sat 15.0 ms queued in a 13.8 ms call, and the plan's core
    ceiling fell to 0.10.)"""
    if dropped is None or dropped.batch_size != chosen.batch_size:
        return chosen
    worked = chosen.cpu_s / before.cpu_s if before.cpu_s else 1.0
    return chosen.model_copy(update={"wall_s": dropped.wall_s,
                                     "cpu_s": dropped.cpu_s * worked,
                                     "queued_s": dropped.queued_s})
