"""This host's CPU per byte of moving a large array between processes, as the local engine does."""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import secrets
import statistics
import tempfile
import time

import numpy as np

LARGE_ITEM = 64 * 1024
"""A profile measures `wire_scale` where a unit takes or gives items of this many pickled
bytes or more (below it the bytes cost little beside the engine's work per frame)."""
PROBE_BYTES = 2 << 20
"""The probe's array: 2 MiB of float64, which crosses out of band (a /dev/shm file)."""
PROBE_ITEMS = 16
PROBE_PASSES = 5
WARM_PASSES = 2
"""Passes run first and not counted: a fresh process's first ones read up to twice the
steady figure (its first mappings, the file system's first pages)."""

REFERENCE_SECONDS_PER_BYTE = 0.47e-9
"""What `wire_seconds_per_byte` reads on the host the fit's byte charges were measured on
(this repository's 2-core host): the median of 21 readings in fresh processes, 0.38 to
0.67 ns per byte, the same with both cores busy with other processes; 12 later readings
gave 0.44 to 0.55."""
SPREAD = 1.5
"""A reading within this factor of the reference either way is within the reference
host's own spread from one process to the next: no evidence of a different host, so the
charges stay as measured (`wire_scale` 1.0)."""
SCALE_RANGE = (0.25, 4.0)
"""The most `wire_scale` moves the byte charges either way."""


def wire_seconds_per_byte() -> float:
    """CPU seconds per byte to move an array between processes as the local engine does out
    of band: pickled with its buffer kept aside, the buffer written to a /dev/shm file,
    the file mapped privately and unlinked, every page read and the mapping released.
    The median of `PROBE_PASSES` passes after `WARM_PASSES`.  ``bench/fit_quality.py
    --wire`` measures the engine's own wire by item size, which the byte charges are
    calibrated from."""
    values = np.random.default_rng(0).standard_normal(PROBE_BYTES // 8)
    folder = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    path = os.path.join(folder, f"fitwork-probe-{os.getpid()}-{secrets.token_hex(6)}")
    passes = []
    for _ in range(WARM_PASSES + PROBE_PASSES):
        start = time.process_time()
        for _ in range(PROBE_ITEMS):
            _move(values, path)
        passes.append((time.process_time() - start) / PROBE_ITEMS)
    return statistics.median(passes[WARM_PASSES:]) / PROBE_BYTES


def _move(values: np.ndarray, path: str) -> None:
    """One array sent through a file at ``path`` and received, every page of it read."""
    buffers: list[pickle.PickleBuffer] = []
    pickle.dumps(values, protocol=5, buffer_callback=buffers.append)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        try:
            for buffer in buffers:
                data = buffer.raw()
                while data:
                    data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            view = mmap.mmap(fd, os.fstat(fd).st_size, flags=mmap.MAP_PRIVATE,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # as the receiver does once it has mapped the file
    # the receiver's array over the mapping (the engine unpickles the small stream around
    # it; nothing here is unpickled, and a few microseconds are left out)
    received = np.frombuffer(view, dtype=np.uint8)
    received[::4096].sum()  # a receiving unit reads every page
    del received
    view.close()


def wire_scale(seconds_per_byte: float) -> float:
    """A reading of `wire_seconds_per_byte` as a multiple of the reference host's: 1.0
    within that host's own `SPREAD`, else the reading within `SCALE_RANGE`.  What the fit
    scales its byte charges by (`fitwork.fit.inputs.byte_seconds`)."""
    ratio = seconds_per_byte / REFERENCE_SECONDS_PER_BYTE
    if 1 / SPREAD <= ratio <= SPREAD:
        return 1.0
    low, high = SCALE_RANGE
    return round(min(high, max(low, ratio)), 3)
