"""Seen (held out from 3667fd1 until it drove a change): a unit that shells out to a tool.

Each of a batch's 16 log records (~6 KB each) is piped through ``gzip -6`` in a child process
of its own, as pipelines call ffmpeg, tesseract or a vendor's converter: the CPU is spent in
processes the unit starts, and every record pays a fork and exec besides.  (Held out, it
piped a whole batch through one gzip and cut the result by size, which made a record's output
depend on its batch; the bench, which checks that every layout gives the same outputs,
refused it.)
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
    """Each record through a ``gzip -6`` child of its own."""
    return [subprocess.run([GZIP, "-6", "-n", "-c"], input=body, check=True,
                           capture_output=True).stdout for body in batch]


@unit
def ratio(blob: bytes) -> int:
    """The compressed size."""
    return len(blob)


SHAPE = Shape(Pipeline(record, compress, ratio, name="gzip_shell"),
              "shells out: gzip -6 in a child process per record (~6 KB), batches of 16", 3000,
              (1, 2, 3, 4), {"record": (1, 2), "compress": (1, 2, 3), "ratio": (1,)})
