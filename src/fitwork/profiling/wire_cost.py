"""This host's CPU per byte of moving a large array through the local engine's wire."""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

LARGE_ITEM = 64 * 1024
"""A profile measures `wire_scale` where a unit takes or gives items of this many pickled
bytes or more (below it the bytes cost little beside the engine's work per frame)."""
PROBE_BYTES = 2 << 20
"""The probe's array: 2 MiB of float64, which crosses out of band (a /dev/shm file)."""
PROBE_ITEMS = 16
PROBE_PASSES = 5

REFERENCE_SECONDS_PER_BYTE = 0.64e-9
"""What `wire_seconds_per_byte` reads on the host the fit's byte charges were measured on
(this repository's 2-core host: 0.60 to 0.65 ns per byte in 5 runs quiet, 0.61 to 0.67 with
both cores busy with other processes)."""
SCALE_RANGE = (0.25, 4.0)
"""The most `wire_scale` moves the byte charges either way."""


def wire_seconds_per_byte() -> float:
    """CPU seconds per byte to send an array out of band and receive it, reading every page
    (dumps, the file written, mapped, read, released), the median of `PROBE_PASSES` passes
    (the best one reads low where freed pages are at hand, by a third at times): the same
    loop ``bench/fit_quality.py --wire`` calibrates the byte charges with."""
    from fitwork.engine.local.wire import Wire

    wire = Wire(f"fitwork-probe{os.getpid()}")
    values = np.random.default_rng(0).standard_normal(PROBE_BYTES // 8)
    passes = []
    try:
        for _ in range(PROBE_PASSES):
            start = time.process_time()
            for _ in range(PROBE_ITEMS):
                data, _ = wire.dumps(values)
                received, _ = wire.loads(data)
                received.view(np.uint8)[::4096].sum()  # a receiving unit reads every page
                del received
            passes.append((time.process_time() - start) / PROBE_ITEMS)
    finally:
        wire.sweep()
    return statistics.median(passes) / PROBE_BYTES


def wire_scale() -> float:
    """This host's CPU per byte moved as a multiple of the reference host's, within
    `SCALE_RANGE`: what the fit scales its byte charges by
    (`fitwork.fit.inputs.byte_seconds`)."""
    low, high = SCALE_RANGE
    return round(min(high, max(low, wire_seconds_per_byte() / REFERENCE_SECONDS_PER_BYTE)), 3)
