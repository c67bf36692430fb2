"""Held out: I/O at both ends, one end declared and one not.

A read from an object store (15 ms a call, declared ``io=8``), 2 ms of numpy feature work,
then a write to a database that takes 25 ms a call and that the user did not declare (a
plain blocking call, as a driver without async support makes).
"""

from __future__ import annotations

import time

import numpy as np
from bench_shape import Shape

from fitwork import Pipeline, unit

READ_S = 0.015
WRITE_S = 0.025


@unit(io=8)
def read(number: int) -> np.ndarray:
    """An object: 4,096 float32 readings, after the store's latency."""
    time.sleep(READ_S)
    return np.random.default_rng(number).standard_normal(4096).astype(np.float32)


@unit
def features(values: np.ndarray) -> np.ndarray:
    """Smoothed spectra over 64 windows (about 2 ms)."""
    windows = values.reshape(64, 64)
    out = np.zeros(33, dtype=np.float64)
    for _ in range(12):
        spectra = np.abs(np.fft.rfft(windows * np.hanning(64), axis=1))
        out += spectra.mean(axis=0)
        windows = np.roll(windows, 1, axis=1)
    return out / 12


@unit
def write(row: np.ndarray) -> int:
    """An insert that blocks for the database's round trip; returns the row's key."""
    time.sleep(WRITE_S)
    return int(row.argmax())


SHAPE = Shape(Pipeline(read, features, write, name="two_waits"),
              "I/O at both ends: 15 ms read (io=8), 2 ms numpy, 25 ms UNDECLARED write", 2500,
              (4, 8, 16, 32), {"read": (1, 2), "features": (1, 2), "write": (4, 8, 16, 32)})
