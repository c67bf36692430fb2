"""How a replica's outputs are cut into frames for the next stage: one rule for every engine.

A stage's frame size is the run core's (`fitwork.engine.core.sizing.frame_size`, at most
`MAX_FRAME`); before the core has measured a stage its size is its batch size, else 0
(`first_sizes`), and a replica then cuts a call's outputs by `cut` (a frame per replica
downstream, twice over).  Whatever the size, a frame holds about `FRAME_BYTES` at most, by
the bytes per item this replica has sent so far (`outputs_per_frame`).
"""

from __future__ import annotations

from collections.abc import Sequence

from fitwork.engine.core.sizing import cut

MAX_FRAME = 4096
"""The most items one frame holds, on every engine."""
FRAME_BYTES = 4 << 20
"""About the most bytes one frame of outputs holds."""


def first_sizes(batch_sizes: Sequence[int | None]) -> list[int]:
    """Each stage's frame size before the core has measured it: its batch, else 0 (cut by
    `cut`'s rule)."""
    return [min(MAX_FRAME, size or 0) for size in batch_sizes]


def sizes_told(sizes: Sequence[int], measured: Sequence[bool],
               first: Sequence[int]) -> list[int]:
    """The sizes replicas cut frames by, from the core's `FrameSizes`: a stage's size once
    measured, its first size (`first_sizes`) until then."""
    known = measured or [True] * len(sizes)
    return [size if seen else start
            for size, seen, start in zip(sizes, known, first, strict=True)]


def outputs_per_frame(total: int, size: int, replicas: int, items_out: int,
                      bytes_out: int) -> int:
    """Items per frame for ``total`` outputs into a stage of ``replicas`` replicas whose
    frame size is ``size`` (0: not measured yet): `cut`'s step, held to about
    `FRAME_BYTES` by the bytes per item sent so far (``bytes_out`` over ``items_out``),
    and to `MAX_FRAME`."""
    step = cut(total, size, replicas)
    if items_out and bytes_out:
        step = min(step, int(FRAME_BYTES * items_out / bytes_out))
    return max(1, min(step, MAX_FRAME))


__all__ = ["FRAME_BYTES", "MAX_FRAME", "first_sizes", "outputs_per_frame", "sizes_told"]
