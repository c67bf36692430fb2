"""Held out: a unit that reads local files.

Each item names one of 48 files of 2 MiB written to a temporary folder by `prepare`, before
the bench forks anything (so they sit in the page cache, as a hot dataset on local disk does); the
unit reads its file whole and checksums it (zlib's CRC-32, which releases the GIL on large
buffers), then a light unit folds the checksum.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np
from bench_shape import Shape

from fitwork import Pipeline, unit

FILES = 48
FILE_BYTES = 2 * 1024 * 1024


FOLDER: Path | None = None  # set by `prepare` before anything forks; workers inherit it


def prepare() -> Path:
    """Write the files once per interpreter (the bench calls it before it forks anything, so
    its workers share one folder); removed when the process that wrote them exits."""
    global FOLDER
    if FOLDER is None:
        folder = Path(tempfile.mkdtemp(prefix="fitwork-heldout-files-"))
        for k in range(FILES):
            data = np.random.default_rng(k).integers(0, 256, FILE_BYTES, dtype=np.uint8)
            (folder / f"part-{k:03d}.bin").write_bytes(data.tobytes())
        owner = os.getpid()
        atexit.register(
            lambda: os.getpid() == owner and shutil.rmtree(folder, ignore_errors=True))
        FOLDER = folder
    return FOLDER


@unit
def path_of(number: int) -> str:
    """The file item ``number`` reads."""
    return str(prepare() / f"part-{number % FILES:03d}.bin")


@unit
def read_sum(path: str) -> int:
    """The file read whole, then its CRC-32."""
    with open(path, "rb") as handle:
        return zlib.crc32(handle.read())


@unit
def fold(checksum: int) -> float:
    """The checksum scaled to [0, 1)."""
    return checksum / 2**32


SHAPE = Shape(Pipeline(path_of, read_sum, fold, name="file_read"),
              "reads local files: 2 MiB each from the page cache, CRC-32 (releases the GIL)",
              6000, (1, 2, 3, 4), {"path_of": (1,), "read_sum": (1, 2, 3), "fold": (1,)})
