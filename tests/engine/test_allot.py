"""What one replica gets is decided once (`fitwork.placement.allot`): the group's batch and
resources where a plan set them, else the unit's; an engine's replica runs by it."""

from __future__ import annotations

from typing import Any

import fitwork
from fitwork import Pipeline, unit
from fitwork.placement import Group, Placement, allot
from fitwork.resources import Resources


@unit(cpu=1, batch_size=8, batch_wait=0.2)
def sizes(batch: list[int]) -> list[int]:
    return [len(batch)] * len(batch)


def test_the_group_wins_where_it_says_and_the_unit_elsewhere() -> None:
    planned = Group("sizes", 2, batch_size=32, resources=Resources(cpu=1.6),
                    device_class="cpu-x")
    given = allot(sizes, planned)
    assert (given.batch_size, given.cores, given.threads, given.planned) == (32, 1.6, 2, True)
    assert given.device_class == "cpu-x" and given.batch_wait == 0.2
    bare = allot(sizes, Group("sizes", 2))
    assert (bare.batch_size, bare.resources, bare.planned) == (8, sizes.resources, False)
    assert allot(sizes, None).batch_size == 8


def test_a_local_replica_batches_at_its_groups_size() -> None:
    placement = Placement((Group("sizes", 1, batch_size=3),), "plan")
    options: dict[str, Any] = {"placement": placement}
    with fitwork.run(Pipeline(sizes), range(30), engine="local", **options) as result:
        seen = list(result)
    assert len(seen) == 30 and max(seen) == 3
