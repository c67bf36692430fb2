"""The decomposition report: units with their lines, data in and out, kind, cost; merges; why."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from fitwork.errors import InputError
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
    kind_source: Literal["hint", "measured", "default"] = "default"
    resources: dict[str, float]
    cost: Cost | None = None


class Merge(BaseModel):
    """Two neighbouring pieces joined into one unit, and why."""

    lines: tuple[int, int]
    parts: list[tuple[int, int]]
    rule: Literal["safety", "pickle", "bookkeeping", "kind", "transfer", "trivial"]
    reason: str
    bytes: float | None = None
    transfer_s: float | None = None
    time_s: float | None = None


class Decomposition(BaseModel):
    """How ``decompose`` split a function; saved, it rebuilds the same units (``layout=``)."""

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

    def save(self, path: str | Path) -> None:
        """Write the decomposition as JSON."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.model_dump_json(indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Decomposition:
        """Read a decomposition written by `save`."""
        try:
            return cls.model_validate_json(Path(path).read_text())
        except FileNotFoundError:
            raise InputError(f"decomposition {path}: no such file; write one with "
                             "`fitwork decompose ... --output FILE`") from None
        except ValueError as exc:
            first = " ".join(str(exc).splitlines()[1:3])
            raise InputError(f"decomposition {path}: not a fitwork decomposition ({first})")\
                from None
