"""Held out: CPU work that releases the GIL.

Each item is a 96 KB block of sensor text; compressing it with zlib (level 6) and hashing
it with SHA-256 both release the GIL, so threads of one process use several cores at once,
unlike pure-Python work.  The units declare no threads: the user did not know.
"""

from __future__ import annotations

import hashlib
import zlib

import numpy as np
from bench_shape import Shape

from fitwork import Pipeline, unit

BLOCK_VALUES = 12_000


@unit
def block(number: int) -> bytes:
    """A block of readings as text (about 96 KB)."""
    values = np.random.default_rng(number).normal(20.0, 4.0, BLOCK_VALUES).round(2)
    return values.astype("U8").astype("S8").tobytes()


@unit
def pack(body: bytes) -> bytes:
    """zlib level 6 (releases the GIL while it works)."""
    return zlib.compress(body, 6)


@unit
def digest(packed: bytes) -> int:
    """SHA-256 of the packed block, 20 rounds (each releases the GIL); its first 4 bytes."""
    value = packed
    for _ in range(20):
        value = hashlib.sha256(value).digest() + packed
    return int.from_bytes(hashlib.sha256(value).digest()[:4], "big")


SHAPE = Shape(Pipeline(block, pack, digest, name="zlib_threads"),
              "GIL-free CPU: zlib level 6 of 96 KB blocks, 20 SHA-256 rounds", 1000,
              (1, 2, 3, 4), {"block": (1, 2), "pack": (1, 2, 3), "digest": (1, 2)})
