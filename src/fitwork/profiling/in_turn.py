"""Items taken through units in turn in one process, as a fused replica takes them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from fitwork.placement import allot
from fitwork.profiling.pools import hold_pools
from fitwork.workload.kernel import Failed, Kernel
from fitwork.workload.unit import Unit


def in_turn(units: Sequence[Unit], items: Iterable[Any]) -> Iterator[list[list[int]]]:
    """Build every unit in this process (its pools held to the widest unit's cores), then
    take ``items`` through them one at a time, outputs dropped: per item, for each unit, how
    many outputs each value it got gave (a failed call gives none)."""
    hold_pools(max(allot(u, None).threads for u in units))
    calls = [(kernel, kernel.caller()) for kernel in map(Kernel, units)]
    for item in items:
        values, counts = [item], []
        for kernel, call in calls:
            made: list[Any] = []
            gave = []
            for value in values:
                results, _ = call([value])
                out = [o for r in results if type(r) is not Failed
                       for o in kernel.outputs(value, r)]
                gave.append(len(out))
                made.extend(out)
            counts.append(gave)
            values = made
        yield counts
