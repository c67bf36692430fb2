"""A frame that crosses through a /dev/shm file costs the engine a fixed amount beyond its
bytes: the fit charges it per frame, so at frames of one item every item pays it."""

from __future__ import annotations

import time

import numpy as np
import pytest

import fitwork
from fitwork import Pipeline, unit
from fitwork.fit.inputs import (
    HOP_SECONDS,
    INLINE_MAX,
    SPILL_FRAME_SECONDS,
    byte_seconds,
    demands,
    fleet_classes,
    moved_seconds,
    spill_seconds,
)
from fitwork.hardware.catalog import catalog
from fitwork.hardware.fleet import Fleet
from fitwork.profiling.record import PipelineProfile

TWO_CORES = Fleet.parse({"name": "laptop", "node_types": [
    {"name": "laptop", "cores": 2, "memory": "8GiB"}]})


@unit
def block(seed: int) -> np.ndarray:
    """An 80 KB array: a frame of one such item spills to a file."""
    return np.full(10_000, float(seed))


@unit
def slow(values: np.ndarray) -> np.ndarray:
    """6 ms of CPU per item: the engines give it frames of one item."""
    end = time.thread_time() + 0.006
    while time.thread_time() < end:
        pass
    return values


@unit
def first_value(values: np.ndarray) -> float:
    """A float from the array."""
    return float(values[0])


def _charges(profile: PipelineProfile) -> dict[str, float]:
    known = catalog()
    units, _, _, _ = demands(profile, fleet_classes(TWO_CORES, known), known)
    return {u.name: next(iter(u.classes.values())).cpu_seconds for u in units}


def test_spill_seconds_per_frame() -> None:
    assert spill_seconds(INLINE_MAX - 1, 1) == 0.0
    assert spill_seconds(INLINE_MAX, 1) == SPILL_FRAME_SECONDS
    assert spill_seconds(1000, 100) == pytest.approx(SPILL_FRAME_SECONDS / 100)  # 100 KB
    assert spill_seconds(1000, 10) == 0.0  # 10 KB: inline


def test_crossings_between_units_pay_the_file_once_per_frame() -> None:
    profile = fitwork.profile_pipeline(Pipeline(block, slow, first_value, name="spills"),
                                       range(8), samples=8)
    assert profile.units[1].bytes_in > INLINE_MAX
    charged = _charges(profile)
    # The same profile with items small enough to cross inline (and no pickling measured:
    # bytes alone): the difference is the file (per frame of one item) and what moving the
    # items costs, their bytes or their pickling, whichever is more.
    small = profile.model_copy(update={"units": [
        u.model_copy(update={"bytes_in": 1000.0 if i else u.bytes_in,
                             "bytes_out": 1000.0 if i < 2 else u.bytes_out,
                             "wire_in_s": None if i else u.wire_in_s,
                             "wire_out_s": None if i < 2 else u.wire_out_s})
        for i, u in enumerate(profile.units)]})
    inline = _charges(small)
    for name, u in zip(("slow", "first_value"), profile.units[1:], strict=True):
        extra = charged[name] - inline[name]
        assert extra == pytest.approx(
            SPILL_FRAME_SECONDS + moved_seconds(u.bytes_in, u.wire_in_s, profile.wire_scale)
            - byte_seconds(1000.0, profile.wire_scale), rel=1e-6)
    # The first unit's crossing in (from the driver) is one a fused layout makes too.
    assert charged["block"] == pytest.approx(inline["block"], rel=1e-9)
    assert SPILL_FRAME_SECONDS > HOP_SECONDS
