"""Held out: a unit with a warm-up.

``Compiled`` stands for a JIT-compiled kernel: each replica compiles one kernel per input
shape the first time it meets it (12 ms of CPU) and caches it; there are 24 shapes, so a
replica's first few dozen calls are slow and every later call takes about a millisecond.
"""

from __future__ import annotations

import numpy as np
from bench_shape import Shape, spin

from fitwork import Pipeline, unit

SHAPES = 24  # distinct input shapes, each compiled once per replica
COMPILE_S = 0.012


@unit
def request(number: int) -> np.ndarray:
    """A request: a vector whose length is one of `SHAPES` sizes."""
    size = 256 + 64 * (number * 7919 % SHAPES)
    return np.random.default_rng(number).standard_normal(size)


class Compiled:
    """A kernel per input length, compiled (slowly) on first use and cached."""

    def __init__(self) -> None:
        self.kernels: dict[int, np.ndarray] = {}

    def __call__(self, values: np.ndarray) -> np.ndarray:
        kernel = self.kernels.get(values.size)
        if kernel is None:
            spin(COMPILE_S)
            kernel = np.hanning(values.size)
            self.kernels[values.size] = kernel
        for _ in range(60):
            values = np.fft.irfft(np.fft.rfft(values * kernel) * 0.98, n=values.size)
        return values


compiled = unit(name="compiled")(Compiled)


@unit
def answer(values: np.ndarray) -> float:
    """The response's peak."""
    return float(np.abs(values).max())


SHAPE = Shape(Pipeline(request, compiled, answer, name="warmup"),
              "warm-up: 24 kernels JIT-compiled per replica (12 ms each), then ~1 ms", 2000,
              (1, 2, 3, 4), {"request": (1,), "compiled": (1, 2, 3), "answer": (1,)})
