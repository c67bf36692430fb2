"""The shapes held out until stop 46, trained since (see README.md)."""

from __future__ import annotations

from bench_shape import Shape

from seen import (
    drift_filter,
    fanout3,
    fetch_parse,
    gpu_decode,
    gzip_shell,
    rate_limited,
    sized_items,
    warmup,
)

SHAPES: tuple[Shape, ...] = (gpu_decode.SHAPE, drift_filter.SHAPE, warmup.SHAPE,
                             sized_items.SHAPE, rate_limited.SHAPE, fanout3.SHAPE,
                             gzip_shell.SHAPE, fetch_parse.SHAPE)

__all__ = ["SHAPES", "Shape", "rate_limited"]
