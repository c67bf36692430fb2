"""A unit whose outputs are large is also timed dropping each output at once, as a replica
does, before any output is kept; a unit with small outputs is timed once."""

from __future__ import annotations

import numpy as np

from fitwork import unit
from fitwork.profiling.batch_timing import STEADY_CYCLES
from fitwork.profiling.classes import measured_on
from fitwork.profiling.dropped import DROPPED_MIN
from fitwork.profiling.profiler import measure_unit

CALLS: list[int] = []


@unit
def big(seed: int) -> np.ndarray:
    """A 1.2 MB array: what a replica sends on and frees."""
    CALLS.append(seed)
    return np.full(150_000, float(seed))


@unit
def small(seed: int) -> int:
    CALLS.append(seed)
    return seed * 2


def test_a_unit_with_large_outputs_is_timed_dropping_them_first() -> None:
    on = measured_on("cpu-x86", discover_accelerator=False)
    CALLS.clear()
    profile, outputs = measure_unit(big, list(range(6)), on)
    assert profile.bytes_out >= DROPPED_MIN
    # the warm-up, the pass dropping its outputs, the timed pass keeping them (the samples
    # cycled while it has timed under STEADY_SECONDS; outputs kept from the first visits only)
    assert [0, *range(6), *range(6)] == CALLS[:13]
    assert cycled(CALLS[7:], 6)
    assert [float(o[0]) for o in outputs] == [float(i) for i in range(6)]
    assert profile.cpu_s > 0 and profile.wall_s > 0 and profile.batches[-1].cpu_s == profile.cpu_s

    CALLS.clear()
    profile, outputs = measure_unit(small, list(range(6)), on)
    assert profile.bytes_out < DROPPED_MIN
    assert CALLS[0] == 0 and cycled(CALLS[1:], 6) and outputs == [i * 2 for i in range(6)]


def cycled(calls: list[int], samples: int) -> bool:
    """The samples in order, once at least and then again, STEADY_CYCLES times at most (the
    batch size a replica runs)."""
    return (len(calls) >= samples and len(calls) <= STEADY_CYCLES * samples
            and calls == [i % samples for i in range(len(calls))])
