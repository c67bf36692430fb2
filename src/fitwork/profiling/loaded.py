"""A unit's figures under load: its loaded factor beside copies of it, its CPU pooled."""

from __future__ import annotations

import statistics
from typing import Any

from fitwork.hardware.discover import usable_cores
from fitwork.profiling.corun import loaded_factor, worth_measuring
from fitwork.profiling.record import UnitProfile
from fitwork.workload.unit import Unit


def under_load(unit: Unit, inputs: list[Any], profile: UnitProfile) -> UnitProfile:
    """``profile`` with its ``loaded_factor``, where the unit works the CPU enough to tell."""
    chosen = profile.batches[-1] if profile.batches else None
    if chosen is None or not worth_measuring(chosen.cpu_s, chosen.wall_s):
        return profile
    import psutil

    # a full host, as replicas fill it, and no more copies than its free memory holds
    room = psutil.virtual_memory().available // max(profile.peak_rss, 1)
    copies = int(min(usable_cores() // max(1.0, profile.replica_parallelism()), room))
    found = loaded_factor(unit, inputs, chosen.batch_size, copies, chosen.wall_s,
                          warm=chosen.warmup_cpu_s is not None)
    if found is None:
        return profile
    loaded = profile.model_copy(update={"loaded_copies": found.copies,
                                        "loaded_factor": round(found.factor, 4)})
    return with_pooled_cpu(loaded, found.alone)


def with_pooled_cpu(profile: UnitProfile, later: tuple[float, ...]) -> UnitProfile:
    """``profile`` with its CPU per item the mean of its own timing and ``later`` ones (CPU
    seconds per item alone, at its batch, from the co-run copies' passes alone), every batch
    size's CPU and wall time scaled alike; as it was where its pools run several threads
    (a copy's CPU there counts the pools' spinning, which its own timing took out).

    One timing is one moment of the host: on this repository's 2-core host four profiles of
    the same BLAS unit read 1.64-3.16 ms per item (cv 0.29), and that timing pooled with its
    three later ones 2.08-2.93 (cv 0.15); a numpy unit's cv went from 0.16 to 0.06 (the
    co-run measurement now passes alone four times, so five timings are pooled)."""
    chosen = profile.batches[-1] if profile.batches else None
    if not later or chosen is None or chosen.cpu_s <= 0 or (profile.threads or 1) > 1:
        return profile
    scale = statistics.mean([chosen.cpu_s, *later]) / chosen.cpu_s
    return profile.cpu_scaled(scale, pooled_timings=len(later) + 1,
                              pooled_factor=round(scale, 4))
