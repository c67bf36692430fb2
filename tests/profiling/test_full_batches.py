"""A batched unit is timed on full batches, several calls at each size: a unit that pays a
set-up per call costs more per item in a short last batch, and one call is no sample."""

from __future__ import annotations

import time

from fitwork import unit
from fitwork.profiling.batch_timing import BATCH_CALLS
from fitwork.profiling.classes import measured_on
from fitwork.profiling.profiler import measure_unit

SIZES: list[int] = []
SETUP_S = 0.004


@unit(batch_size=8)
def grouped(rows: list[int]) -> list[int]:
    """4 ms of waiting per call, whatever the batch holds."""
    SIZES.append(len(rows))
    time.sleep(SETUP_S)
    return [r + 1 for r in rows]


def test_each_batch_size_is_timed_on_full_batches_of_several_calls() -> None:
    on = measured_on("cpu-x86", discover_accelerator=False)
    SIZES.clear()
    profile, outputs = measure_unit(grouped, list(range(12)), on)
    # 12 samples: batches of 8 and 4 before, which put 8 ms on 12 items (0.67 ms each)
    assert outputs == [r + 1 for r in range(12)]
    assert set(SIZES) <= {1, 2, 8} and SIZES.count(8) >= BATCH_CALLS + 1  # + its warm-up
    at8 = next(b for b in profile.batches if b.batch_size == 8)
    assert at8.items == 12  # the samples, each counted once
    assert SETUP_S / 8 <= at8.wall_s < 1.25 * SETUP_S / 8, at8.wall_s
    assert profile.output_ratio == 1.0


def test_the_largest_size_is_timed_once_and_the_others_again_on_the_way_down() -> None:
    """Up 1, 2, 8 (8, a replica's own batch, for STEADY_SECONDS), then down 2, 1: the sizes
    below are read once all have run, and 8 is not timed twice at the same moment of the
    host (the faster of the two had read it fast)."""
    import itertools

    from fitwork.profiling.batch_timing import STEADY_CYCLES

    on = measured_on("cpu-x86", discover_accelerator=False)
    SIZES.clear()
    measure_unit(grouped, list(range(12)), on)
    assert [size for size, _ in itertools.groupby(SIZES)] == [1, 2, 8, 2, 1], SIZES
    assert BATCH_CALLS + 1 <= SIZES.count(8) <= 1 + STEADY_CYCLES * 12 // 8
