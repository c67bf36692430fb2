"""Held out: a replica that builds a large in-memory index before its first call.

The middle unit is a class whose constructor builds a dictionary of 400,000 keys (about
0.4 s of pure Python a replica, and some 60 MB), as a tokenizer's vocabulary or a lookup
table loaded at start does; each call then looks up 40 keys and sums their vectors (about
0.3 ms).  So every replica pays its build once, and a plan of more replicas pays more.
A numpy score follows (about 1 ms).
"""

from __future__ import annotations

import numpy as np
from bench_shape import Shape

from fitwork import Pipeline, unit

KEYS = 400_000
LOOKUPS = 40


@unit
def query(number: int) -> list[str]:
    """The keys item ``number`` looks up."""
    return [f"k{(number * 7919 + j * 104_729) % KEYS}" for j in range(LOOKUPS)]


class Index:
    """A dictionary of 400,000 keys to small tuples, built at start."""

    def __init__(self) -> None:
        self.table = {f"k{i}": (i % 97, i % 89, i % 83) for i in range(KEYS)}

    def __call__(self, keys: list[str]) -> np.ndarray:
        return np.array([self.table[k] for k in keys], dtype=np.float64).sum(axis=0)


look_up = unit(name="look_up")(Index)


@unit
def score(vector: np.ndarray) -> float:
    """A small projection of the looked-up vector, repeated as a model's layers would."""
    x = np.outer(vector, np.linspace(0.0, 1.0, 256))
    for _ in range(12):
        x = np.tanh(x * 0.01 + 0.1)
    return float(x.sum())


SHAPE = Shape(Pipeline(query, look_up, score, name="index_build"),
              "a replica builds a 400,000-key index first (~0.4 s), then 0.3 ms lookups",
              6000, (1, 2, 3, 4), {"query": (1,), "look_up": (1, 2), "score": (1, 2)})
