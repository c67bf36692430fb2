"""The decomposition report: units with their lines, data in and out, kind, cost; merges; why."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from fitwork.document import Document
from fitwork.profiling.record import PipelineProfile


class Cost(BaseModel):
    """What one unit cost per item when measured on the sample (``bound`` as the profiler
    sees it; the unit's ``kind`` applies the decomposer's stricter I/O test)."""

    wall_s: float
    cpu_s: float
    accel_s: float | None = None
    bytes_in: float
    bytes_out: float
    bound: str


class UnitReport(BaseModel):
    """One unit of the decomposed function."""

    name: str
    lines: tuple[int, int]
    source: str
    inputs: list[str]
    outputs: list[str]
    shape: Literal["map", "flat_map"]
    kind: Literal["cpu", "io", "gpu"] | None = None
    kind_source: Literal["hint", "measured", "source", "default"] = "default"
    resources: dict[str, float]
    cost: Cost | None = None


MergeRule = Literal["safety", "pickle", "bookkeeping", "kind", "transfer", "trivial"]
"""Why two pieces were joined: the rule that joined them."""


class Merge(BaseModel):
    """Two neighbouring pieces joined into one unit, and why."""

    lines: tuple[int, int]
    parts: list[tuple[int, int]]
    rule: MergeRule
    reason: str
    bytes: float | None = None
    transfer_s: float | None = None
    time_s: float | None = None


class Decomposition(Document):
    """How ``decompose`` split a function; saved, it rebuilds the same units (``layout=``)."""

    document_kind: ClassVar[str] = "decomposition"
    document_maker: ClassVar[str] = "`fitwork decompose ... --output FILE`"

    function: str
    module: str
    filename: str
    lines: tuple[int, int]
    source_hash: str
    generator: bool = False
    fallback: str | None = None
    samples: int = 0
    units: list[UnitReport]
    merges: list[Merge] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    profile: PipelineProfile | None = None

    @property
    def split(self) -> bool:
        """True when the function became more than one unit."""
        return len(self.units) > 1

