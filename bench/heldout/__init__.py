"""The held-out shapes: pipelines no model change has been made from (see README.md)."""

from __future__ import annotations

from bench_shape import Shape

from heldout import (
    deep_light,
    file_read,
    index_build,
    padded_batch,
    sqlite_lookup,
    two_waits,
    zlib_threads,
)

SHAPES: tuple[Shape, ...] = (zlib_threads.SHAPE, deep_light.SHAPE, two_waits.SHAPE,
                             padded_batch.SHAPE, file_read.SHAPE,
                             sqlite_lookup.SHAPE,
                             index_build.SHAPE)

__all__ = ["SHAPES", "Shape", "file_read", "sqlite_lookup"]
