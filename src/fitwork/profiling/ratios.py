"""Output ratios counted over more of the input than the samples a profile times.

A filter's or flat-map's output ratio sets how much work every unit after it gets per
source item, and a profile's samples are few: 17 of 48 samples kept is 0.35, where the
input the bench's filter pipeline then ran kept 0.29, and the plan predicted 1.20x too
little.  Where the units up to the last filter or flat-map are cheap, further input items
(up to `RATIO_ITEMS`, in about `RATIO_SECONDS`) are taken through them in a forked copy
of the profiling process, outputs dropped, and each unit's ratio is counted over its
samples and those items together, with its standard error (`UnitProfile.ratio_error`),
which a plan's range carries (`fitwork.fit.ranges`).  The pass runs those units on more
items than the samples, so a unit with side effects sees more calls while profiling.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

from fitwork.forked import forked_ints
from fitwork.profiling.pools import hold_pools
from fitwork.profiling.record import UnitProfile
from fitwork.resources import allotted_threads
from fitwork.workload.kernel import Failed, Kernel
from fitwork.workload.unit import Unit

RATIO_SECONDS = 1.0
"""About how long the pass takes items through the units (their building aside)."""
RATIO_ITEMS = 4096
"""The most further items the pass reads from the input."""
RATIO_TIMEOUT_S = 120.0
"""The most seconds the forked pass may take, building its units included."""


def counted_ratios(units: Sequence[Unit], profiles: list[UnitProfile],
                   source: Iterator[Any]) -> list[UnitProfile]:
    """``profiles`` with the output ratios of the units up to the last filter or flat-map
    counted over further items of ``source`` as well (see the module docstring); as they
    were where no unit changes the item count, the units are not cheap enough to take at
    least as many items again as their samples, the input has no more, or the pass
    failed."""
    last = max((i for i, p in enumerate(profiles) if p.output_ratio != 1.0), default=None)
    if last is None:
        return profiles
    seconds, multiplicity = 0.0, 1.0
    for profile in profiles[:last + 1]:
        seconds += multiplicity * profile.wall_s
        multiplicity *= profile.output_ratio
    wanted = RATIO_ITEMS if seconds <= 0 else int(min(RATIO_ITEMS, RATIO_SECONDS / seconds))
    if wanted < profiles[0].samples:
        return profiles
    more = list(itertools.islice(source, wanted))
    if len(more) < profiles[0].samples:
        return profiles
    found = forked_ints(RATIO_TIMEOUT_S, _count, list(units[:last + 1]), more)
    if found is None:
        return profiles
    counted = list(profiles)
    for index, profile in enumerate(profiles[:last + 1]):
        taken, made, squares = found[3 * index: 3 * index + 3]
        if taken:
            counted[index] = _pooled(profile, taken, made, squares)
    return counted


def _pooled(profile: UnitProfile, taken: int, made: int, squares: int) -> UnitProfile:
    """``profile`` with its ratio over its samples and ``taken`` more items, which gave
    ``made`` outputs (``squares``: the sum of each item's count squared)."""
    samples = max(profile.samples - profile.failures, 0)
    items = samples + taken
    ratio = (profile.output_ratio * samples + made) / items
    mean = made / taken
    variance = max(squares / taken - mean * mean, 0.0)
    return profile.model_copy(update={"output_ratio": ratio, "ratio_items": items,
                                      "ratio_error": math.sqrt(variance / items)})


def _count(units: list[Unit], items: list[Any]) -> tuple[int, ...]:
    """In the forked copy: each unit's (items in, outputs, sum of outputs squared per
    item), taking ``items`` through the units one at a time until `RATIO_SECONDS` pass.
    A failed call counts as an item with no output, as in the profile."""
    hold_pools(allotted_threads(max(u.resources.cpu for u in units)))
    calls = [(kernel, kernel.caller()) for kernel in map(Kernel, units)]
    counts = [[0, 0, 0] for _ in units]
    deadline = time.monotonic() + RATIO_SECONDS
    for item in items:
        if time.monotonic() > deadline:
            break
        values = [item]
        for (kernel, call), count in zip(calls, counts, strict=True):
            made: list[Any] = []
            for value in values:
                results, _ = call([value])
                out = [o for r in results if type(r) is not Failed
                       for o in kernel.outputs(value, r)]
                count[0] += 1
                count[1] += len(out)
                count[2] += len(out) ** 2
                made.extend(out)
            values = made
    return tuple(v for count in counts for v in count)
