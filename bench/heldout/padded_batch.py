"""Held out: batches padded to their longest item.

A sequence model runs each batch padded to its longest sequence, so a call costs the batch
size times the longest length: lengths vary (lognormal, median 48 tokens), and the bigger
the batch the more padding it carries.  Declared ``batch_size=32``.
"""

from __future__ import annotations

import math

import numpy as np
from bench_shape import Shape

from fitwork import Pipeline, unit

MEDIAN_LENGTH = 48
WIDTH = 96


@unit
def sequence(number: int) -> np.ndarray:
    """Token ids of a lognormal length (median 48, at most 512)."""
    rng = np.random.default_rng(number)
    length = int(min(512, max(4, rng.lognormal(math.log(MEDIAN_LENGTH), 0.8))))
    return rng.integers(0, 1000, length)


class Encoder:
    """An embedding table and two mixing layers over each padded position."""

    def __init__(self) -> None:
        rng = np.random.default_rng(5)
        self.table = rng.standard_normal((1000, WIDTH)).astype(np.float32)
        self.mix = [rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) / WIDTH ** 0.5
                    for _ in range(2)]

    def __call__(self, batch: list[np.ndarray]) -> list[np.ndarray]:
        longest = max(len(s) for s in batch)
        ids = np.zeros((len(batch), longest), dtype=np.int64)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = seq
        hidden = self.table[ids]
        for weights in self.mix:
            hidden = np.tanh(hidden @ weights)
        lengths = [len(s) for s in batch]
        return [hidden[row, :n].mean(axis=0) for row, n in enumerate(lengths)]


encode = unit(batch_size=32, batch_wait=0.02, name="encode")(Encoder)


@unit
def norm(vector: np.ndarray) -> float:
    """The pooled vector's length."""
    return float(np.linalg.norm(vector))


SHAPE = Shape(Pipeline(sequence, encode, norm, name="padded_batch"),
              "padded batches: cost = batch x longest sequence (lognormal lengths), bs=32",
              8000, (1, 2, 3, 4), {"sequence": (1, 2), "encode": (1, 2, 3), "norm": (1,)})
