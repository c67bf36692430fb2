"""`Allotment`: what one replica of a unit gets, decided once (`allot`).

Its own module, light to import, so a replica process can hold one (unpickled from its
driver) without loading the placement; `fitwork.placement` is where plans reach it, and
where `fitwork.placement.allot_unit` sums it over a unit's groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fitwork.errors import UnitDefinitionError
from fitwork.resources import Resources, allotted_threads

if TYPE_CHECKING:
    from fitwork.placement import Group
    from fitwork.workload.unit import Unit


@dataclass(frozen=True, slots=True)
class Allotment:
    """What one replica of a unit gets, decided once (`allot`): its batch and the wait for
    one, what it asks an engine for (cores, GPUs, memory, devices), the threads its pools
    may run, its device class, its calls at once (0: one after another), and the memory it
    may hold before the memory watch stops it (``memory_bound``, 0: none)."""

    unit: str
    batch_size: int | None
    batch_wait: float
    resources: Resources
    planned: bool
    """Whether ``resources`` is a plan's (else the unit's declaration)."""
    io: int = 0
    device_class: str | None = None
    memory_bound: int = 0
    """Bytes of its own a replica may hold: the unit's ``memory=`` (a plan's memory is its
    estimate for packing replicas onto nodes, not a bound to stop a replica at)."""

    @property
    def cores(self) -> float:
        """Cores one replica holds."""
        return self.resources.cpu

    @property
    def threads(self) -> int:
        """Threads one replica's pools may run (`fitwork.resources.allotted_threads`)."""
        return allotted_threads(self.resources.cpu)

    @property
    def calls(self) -> int:
        """Calls one replica runs at once: its ``io``, else one per thread its pools run
        (what a re-fit compares, `fitwork.engine.adapt.threads_of`)."""
        return self.io or self.threads

    def demand(self) -> dict[str, float]:
        """The non-zero per-replica figures as a dict (resources, and ``io`` if any): what
        the run core and the run record hold of a replica."""
        return {**self.resources.as_dict(), **({"io": float(self.io)} if self.io else {})}


def allot(unit: Unit, group: Group | None) -> Allotment:
    """What a replica of ``unit`` in ``group`` gets: the group's batch size, resources and
    calls at once where a plan (or the command line) set them, else the unit's declaration.
    The one place that falls back to the declaration; engines read the allotment.

    A batch size for a unit that is not batched (its function takes one item) is refused:
    the unit could not take the lists a batch would hand it."""
    if group is not None and group.batch_size and not unit.batch_size:
        raise UnitDefinitionError(
            f"placement: unit {unit.name!r} is given batch_size={group.batch_size}, but it "
            "is not batched (its function takes one item); drop the group's batch_size, or "
            "declare the unit with @unit(batch_size=N)")
    batch = group.batch_size if group is not None and group.batch_size else unit.batch_size
    given = group.resources if group is not None else None
    io = group.io if group is not None and group.io is not None else unit.io
    return Allotment(unit.name, batch, unit.batch_wait,
                     given if given is not None else unit.resources, given is not None,
                     io, group.device_class if group is not None else None,
                     int(unit.resources.memory or 0))


__all__ = ["Allotment", "allot"]
