"""Output ratios counted over more of the input than the samples a profile times.

A filter's or flat-map's output ratio sets how much work every unit after it gets per
source item, and a profile's samples are few: 17 of 48 samples kept is 0.35, where the
input the bench's filter pipeline then ran kept 0.29, and the plan predicted 1.20x too
little.  Where the units up to the last filter or flat-map are cheap, further input items
(up to `RATIO_ITEMS`, in about `RATIO_SECONDS`) are taken through them in a forked copy
of the profiling process, outputs dropped, and each unit's ratio is counted over its
samples and those items together, with its standard error (`UnitProfile.ratio_error`),
which a plan's range carries (`fitwork.fit.ranges`).  The items are counted in `CHUNKS`
stretches of the input as well: where the ratio moves between stretches more than chance
would move it (a filter whose keep ratio drifts along the input), the error also carries
how far a stretch's ratio strays (`drift_variance`), since a run over another part of the
input meets another ratio.  The pass runs those units on more items than the samples, so a
unit with side effects sees more calls while profiling.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

from fitwork.forked import forked_ints
from fitwork.profiling.in_turn import in_turn
from fitwork.profiling.record import UnitProfile
from fitwork.workload.unit import Unit

RATIO_SECONDS = 1.0
"""About how long the pass takes items through the units (their building aside)."""
RATIO_ITEMS = 4096
"""The most further items the pass reads from the input."""
CHUNKS = 8
"""The stretches of the counted items whose ratios are compared (`drift_variance`)."""
LEAST_CHUNK = 16
"""The fewest items a stretch needs to be compared."""
RATIO_TIMEOUT_S = 120.0
"""The most seconds the forked pass may take, building its units included: twice their
builds as the profile measured them, and three times `RATIO_SECONDS`, up to this (an item
that hangs costs the pass, not two minutes)."""


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
    builds = sum(p.build_wall_s or 0.0 for p in profiles[:last + 1])
    limit = min(RATIO_TIMEOUT_S, 2 * builds + 3 * RATIO_SECONDS + 5.0)
    found = forked_ints(limit, _count, list(units[:last + 1]), more)
    if found is None:
        return profiles
    counted, width = list(profiles), 3 + 2 * CHUNKS
    for index, profile in enumerate(profiles[:last + 1]):
        taken, made, squares, *chunks = found[width * index: width * (index + 1)]
        if taken:
            counted[index] = _pooled(profile, taken, made, squares,
                                     list(zip(chunks[::2], chunks[1::2], strict=True)))
    return counted


def _pooled(profile: UnitProfile, taken: int, made: int, squares: int,
            chunks: list[tuple[int, int]]) -> UnitProfile:
    """``profile`` with its ratio over its samples and ``taken`` more items, which gave
    ``made`` outputs (``squares``: the sum of each item's count squared; ``chunks``: items
    in and outputs of each stretch of them)."""
    samples = max(profile.samples - profile.failures, 0)
    items = samples + taken
    ratio = (profile.output_ratio * samples + made) / items
    mean = made / taken
    variance = max(squares / taken - mean * mean, 0.0)
    error = math.sqrt(variance / items + drift_variance(chunks, variance))
    return profile.model_copy(update={"output_ratio": ratio, "ratio_items": items,
                                      "ratio_error": error})


def drift_variance(chunks: list[tuple[int, int]], variance: float) -> float:
    """How far the ratio of a stretch of the input strays from the whole's, as a variance,
    beyond what chance gives items of ``variance`` each: the between-stretch component of
    a one-way analysis of variance over the stretches of at least `LEAST_CHUNK` items
    (``(MS_between - variance) / mean stretch size``, at least 0); 0 with fewer than three.
    A filter keeping 80% of the items falling to 20% over 3,000 of them strays by about
    0.2 over stretches of 500, where a steady one strays by nothing."""
    kept = [(n, made / n) for n, made in chunks if n >= LEAST_CHUNK]
    if len(kept) < 3:
        return 0.0
    total = sum(n for n, _ in kept)
    mean = sum(n * r for n, r in kept) / total
    between = sum(n * (r - mean) ** 2 for n, r in kept) / (len(kept) - 1)
    return max(0.0, (between - variance) / (total / len(kept)))


def _count(units: list[Unit], items: list[Any]) -> tuple[int, ...]:
    """In the forked copy: each unit's items in, outputs and sum of outputs squared per
    item, then items in and outputs of each of `CHUNKS` equal stretches of the source items
    taken, taking ``items`` through the units (`in_turn`) until `RATIO_SECONDS` pass.  A
    failed call counts as an item with no output, as in the profile."""
    per_item: list[list[tuple[int, int, int]]] = []  # per source item, per unit
    deadline = None  # from the first item through: the units' building aside
    for gave in in_turn(units, items):
        deadline = deadline or time.monotonic() + RATIO_SECONDS
        per_item.append([(len(outputs), sum(outputs), sum(n * n for n in outputs))
                         for outputs in gave])
        if time.monotonic() > deadline:
            break
    stretch = max(1, -(-len(per_item) // CHUNKS))
    found: list[int] = []
    for index in range(len(units)):
        column = [row[index] for row in per_item]
        found += [sum(c[0] for c in column), sum(c[1] for c in column),
                  sum(c[2] for c in column)]
        for start in range(0, stretch * CHUNKS, stretch):
            part = column[start:start + stretch]
            found += [sum(c[0] for c in part), sum(c[1] for c in part)]
    return tuple(found)
