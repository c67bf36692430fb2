"""Frames crossing Ray processes cheaply: same-shape arrays as one buffer, bytes counted.

Ray serialises a list of numpy arrays object by object (about 14 µs an array here, most of
it per-object bookkeeping); the same arrays stacked into one cross as a single buffer,
copied once, and arrive as views of it.  `pack` does that for each segment whose values
are all C-contiguous arrays of one shape and dtype: the values become `Rows`, a list that
pickles as the stacked array and unpickles as a list of its rows.  What a unit receives is
what it would have received (arrays of that shape and dtype, read-only where Ray's
zero-copy hands them so).

`frame_bytes` counts the bytes a frame moves for the run record: arrays by ``nbytes``,
anything else by the length of its pickle.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Sequence
from typing import Any

from fitwork.engine.segment import Segment

PLAIN = frozenset({int, float, complex, bool, str, bytes, type(None)})
"""Types whose values always cross processes."""


class Rows(list[Any]):
    """Arrays of one shape and dtype that cross processes stacked, as one array."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        import numpy

        return _rows, (numpy.stack(self),)


def _rows(stacked: Any) -> Rows:
    return Rows(stacked)


def _stackable(values: Sequence[Any]) -> bool:
    """Whether every value is a C-contiguous array (at least 1-D) of one shape and dtype."""
    numpy = sys.modules.get("numpy")
    if numpy is None or len(values) < 2:
        return False
    ndarray = numpy.ndarray
    first = values[0]
    if type(first) is not ndarray or not first.ndim or first.dtype.hasobject:
        return False
    shape, dtype = first.shape, first.dtype
    for value in values:
        if (type(value) is not ndarray or value.shape != shape or value.dtype != dtype
                or not value.flags.c_contiguous):
            return False
    return True


def pack(segments: list[Segment]) -> list[Segment]:
    """``segments`` as they should cross: stacked where their values allow (see above)."""
    packed = segments
    for i, segment in enumerate(segments):
        values = segment.values
        if type(values) is not Rows and _stackable(values):
            if packed is segments:
                packed = list(segments)
            packed[i] = segment.with_values(Rows(values))
    return packed


def crosses(segments: Sequence[Segment]) -> bool:
    """True when every value is plain data or a plain array, so pickling cannot fail."""
    numpy = sys.modules.get("numpy")
    ndarray = numpy.ndarray if numpy is not None else None
    for segment in segments:
        for value in segment.values:
            kind = type(value)
            if kind in PLAIN:
                continue
            if kind is ndarray and not value.dtype.hasobject:
                continue
            return False
    return True


def frame_bytes(segments: Sequence[Segment]) -> int:
    """Bytes a frame moves: its arrays' buffers, and the pickle of everything else."""
    numpy = sys.modules.get("numpy")
    ndarray = numpy.ndarray if numpy is not None else None
    total = 0
    rest: list[Any] = []
    for segment in segments:
        for value in segment.values:
            if type(value) is ndarray and not value.dtype.hasobject:
                total += value.nbytes
            else:
                rest.append(value)
    if not rest:
        return total
    sizes: list[int] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        sizes.append(buffer.raw().nbytes)
        return False

    try:
        return total + len(pickle.dumps(rest, protocol=5, buffer_callback=out_of_band)) \
            + sum(sizes)
    except Exception:
        return total
