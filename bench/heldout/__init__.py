"""The held-out shapes: pipelines no model change of this round was made from."""

from __future__ import annotations

from heldout import drift_filter, fanout3, gpu_decode, rate_limited, sized_items, warmup
from heldout.shape import Shape

SHAPES: tuple[Shape, ...] = (gpu_decode.SHAPE, drift_filter.SHAPE, warmup.SHAPE,
                             sized_items.SHAPE, rate_limited.SHAPE, fanout3.SHAPE)

__all__ = ["SHAPES", "Shape", "rate_limited"]
