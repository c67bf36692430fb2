"""Held out: a unit that shells out to a command-line tool.

Each record batch (16 log records of ~6 KB) is piped through ``gzip -6`` in a child process,
as pipelines call ffmpeg, tesseract or a vendor's converter: the CPU is spent in a process
the unit starts, and every call pays a fork and exec besides.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
from bench_shape import Shape

from fitwork import Pipeline, unit

GZIP = shutil.which("gzip") or "gzip"
LEVELS = ("INFO", "WARN", "DEBUG", "ERROR")


@unit
def record(number: int) -> bytes:
    """A log record: 80 lines of level, request id and latency (about 6 KB)."""
    rng = np.random.default_rng(number)
    lines = [f"{LEVELS[rng.integers(0, 4)]} req={rng.integers(0, 10**9):09d} "
             f"path=/v1/items/{rng.integers(0, 5000)} ms={rng.exponential(40):.2f}"
             for _ in range(80)]
    return "\n".join(lines).encode()


@unit(batch_size=16, batch_wait=0.02)
def compress(batch: list[bytes]) -> list[bytes]:
    """The batch through one ``gzip -6`` child, split back into one blob per record."""
    sizes = [len(body) for body in batch]
    packed = subprocess.run([GZIP, "-6", "-c"], input=b"".join(batch), check=True,
                            capture_output=True).stdout
    share = len(packed) / max(sum(sizes), 1)
    return [packed[:max(1, int(size * share))] for size in sizes]


@unit
def ratio(blob: bytes) -> int:
    """The compressed size."""
    return len(blob)


SHAPE = Shape(Pipeline(record, compress, ratio, name="gzip_shell"),
              "shells out: gzip -6 in a child process per batch of 16 (~6 KB records)", 3000,
              (1, 2, 3, 4), {"record": (1, 2), "compress": (1, 2, 3), "ratio": (1,)})
