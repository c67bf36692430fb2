"""`Placement`: replicas of each unit, where they run, at what batch size: a plan for engines.

A placement is the only way a plan reaches an engine.  It is a list of replica groups, each
``count`` replicas of one unit on one device class of one node type (both optional: a
placement written by hand, or from ``workers={...}``, names neither), with the batch size
those replicas use, the rate a plan predicted for one of them, and what one replica asks
of the engine when that differs from the unit's declaration (fluid cores, a GPU share).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from fitwork.errors import UnitDefinitionError
from fitwork.resources import Resources
from fitwork.workload.allotment import Allotment, allot

if TYPE_CHECKING:
    from fitwork.workload.pipeline import Pipeline
    from fitwork.workload.unit import Unit

Source = Literal["declared", "plan", "workers", "refit"]


@dataclass(frozen=True, slots=True)
class Group:
    """``replicas`` replicas of ``unit`` on one device class of one node type."""

    unit: str
    replicas: int
    device_class: str | None = None
    node_type: str | None = None
    batch_size: int | None = None
    rate: float | None = None
    resources: Resources | None = None
    nodes: tuple[int, ...] = ()
    io: int | None = None  # calls one replica runs at once, where a plan chose it (fused)

    def __post_init__(self) -> None:
        if self.replicas < 0:
            raise UnitDefinitionError(f"placement: unit {self.unit!r} has {self.replicas} "
                                      "replicas; give 0 or more")
        if self.batch_size is not None and self.batch_size < 1:
            raise UnitDefinitionError(f"placement: unit {self.unit!r}: batch_size must be >= 1")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (resources as their amounts)."""
        data: dict[str, Any] = {"unit": self.unit, "replicas": self.replicas}
        for name in ("device_class", "node_type", "batch_size", "rate", "io"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        if self.resources is not None:
            data["resources"] = self.resources.as_dict()
        if self.nodes:
            data["nodes"] = list(self.nodes)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Group:
        """The inverse of `to_json`."""
        fields = dict(data)
        if "resources" in fields:
            fields["resources"] = Resources.from_dict(fields["resources"])
        if "nodes" in fields:
            fields["nodes"] = tuple(fields["nodes"])
        return cls(**fields)


def allot_unit(unit: Unit, placement: Placement) -> Allotment:
    """What a replica of ``unit`` gets over all its groups in ``placement``, for what keeps
    one figure per unit (the run core's stages, the run record): the largest batch size
    and calls at once, and the resources averaged over the replicas (a plan's fractional
    cores, its GPU share); `allot` of no group where the unit has no replica."""
    groups = [g for g in placement.of(unit.name) if g.replicas]
    if not groups:
        return allot(unit, None)
    given = [(allot(unit, g), g.replicas) for g in groups]
    total = sum(count for _, count in given)
    summed = given[0][0].resources
    if any(each.resources != summed for each, _ in given):
        summed = Resources()
        for each, count in given:
            summed = summed + each.resources * (count / total)
    sizes = [each.batch_size for each, _ in given if each.batch_size]
    return Allotment(unit.name, max(sizes) if sizes else None, unit.batch_wait,
                     summed, any(each.planned for each, _ in given),
                     max(each.io for each, _ in given),
                     given[0][0].device_class if len(given) == 1 else None,
                     given[0][0].memory_bound)


@dataclass(frozen=True)
class Placement:
    """Replica groups for every unit of a pipeline, and where they came from.

    ``fusion`` lists runs of consecutive units that run as ONE fused unit (a plan may find
    that splitting them gains nothing); the groups then name the fused unit.
    """

    groups: tuple[Group, ...]
    source: Source = "declared"
    notes: tuple[str, ...] = field(default=())
    fusion: tuple[tuple[str, ...], ...] = ()

    @classmethod
    def declared(cls, pipeline: Pipeline, workers: Mapping[str, int] | None = None
                 ) -> Placement:
        """One group per unit: its declared replicas, or the count ``workers`` gives it."""
        workers = dict(workers or {})
        for name, count in workers.items():
            pipeline.unit_named(name)
            if count < 1:
                raise UnitDefinitionError(f"workers: {name}={count}: replicas must be >= 1")
        groups = tuple(Group(u.name, workers.get(u.name, u.replicas), batch_size=u.batch_size)
                       for u in pipeline.units)
        return cls(groups, "workers" if workers else "declared")

    @property
    def units(self) -> list[str]:
        """Unit names in the order their groups first appear."""
        return list(dict.fromkeys(g.unit for g in self.groups))

    def of(self, unit: str) -> tuple[Group, ...]:
        """The groups of ``unit`` (empty if it has none)."""
        return tuple(g for g in self.groups if g.unit == unit)

    def replicas(self, unit: str) -> int:
        """Replicas of ``unit`` in all its groups."""
        return sum(g.replicas for g in self.groups if g.unit == unit)

    def counts(self) -> dict[str, int]:
        """Replicas per unit."""
        return {name: self.replicas(name) for name in self.units}

    def fused_into(self, unit: str) -> str | None:
        """The unit ``unit`` runs inside under this placement's fusion (None: its own)."""
        if unit in self.units or not any(unit in run for run in self.fusion):
            return None
        return self.units[0] if self.units else None

    def refuse_fused(self, setting: str, units: Iterable[str]) -> None:
        """Refuse a per-unit ``setting`` (``--workers``, ``--batch``...) for a unit this
        placement runs fused into another: one line naming both and the way out."""
        for unit in units:
            fused = self.fused_into(unit)
            if fused is not None:
                raise UnitDefinitionError(
                    f"{setting} {unit}=...: the plan runs {unit!r} fused into {fused!r} "
                    f"(one replica runs every unit), so {unit!r} has no setting of its own; "
                    "plan with `fitwork plan --no-fuse` to set it")

    def with_workers(self, workers: Mapping[str, int]) -> Placement:
        """This placement with some units' replica counts replaced (their groups merged);
        a unit it runs fused is refused (`refuse_fused`)."""
        if not workers:
            return self
        self.refuse_fused("--workers", workers)
        groups: list[Group] = []
        done: set[str] = set()
        for group in self.groups:
            if group.unit not in workers:
                groups.append(group)
            elif group.unit not in done:
                done.add(group.unit)
                groups.append(replace(group, replicas=workers[group.unit]))
        groups += [Group(name, count) for name, count in workers.items() if name not in done]
        return Placement(tuple(groups), "workers", self.notes, self.fusion)

    def check(self, pipeline: Pipeline) -> Placement:
        """Raise unless every unit of ``pipeline`` has a replica and no group names another."""
        names = [u.name for u in pipeline.units]
        unknown = sorted(set(self.units) - set(names))
        if unknown:
            raise UnitDefinitionError(
                f"placement names {', '.join(unknown)}, which pipeline {pipeline.name!r} lacks; "
                f"its units are {', '.join(names)}")
        empty = [n for n in names if self.replicas(n) < 1]
        if empty:
            raise UnitDefinitionError(
                f"placement gives no replica to {', '.join(empty)}; every unit needs at least "
                "one (set its workers, or re-plan)")
        return self

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"source": self.source, "groups": [g.to_json() for g in self.groups],
                "notes": list(self.notes), "fusion": [list(f) for f in self.fusion]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Placement:
        """The inverse of `to_json`."""
        return cls(tuple(Group.from_json(g) for g in data["groups"]),
                   data.get("source", "plan"), tuple(data.get("notes", ())),
                   tuple(tuple(f) for f in data.get("fusion", ())))

    def applied_to(self, pipeline: Pipeline) -> Pipeline:
        """``pipeline`` with this placement's fusion done (itself when there is none)."""
        if not self.fusion:
            return pipeline
        names = [u.name for u in pipeline.units]
        if len(self.fusion) != 1 or list(self.fusion[0]) != names:
            raise UnitDefinitionError(
                f"placement fuses {self.fusion}; only fusing every unit "
                f"({', '.join(names)}) is supported")
        return pipeline.fused(name=self.units[0],
                              io=max((g.io or 0 for g in self.groups), default=0))


__all__ = ["Allotment", "Group", "Placement", "Source", "allot", "allot_unit"]
