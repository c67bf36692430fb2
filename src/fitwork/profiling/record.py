"""Profile records: what one unit cost per item, at each batch size, on one device class."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from fitwork.errors import InputError

IO_BOUND_BELOW = 0.5


class BatchMeasurement(BaseModel):
    """Per-item cost at one batch size."""

    batch_size: int
    items: int
    wall_s: float
    cpu_s: float
    accel_s: float | None = None


class UnitProfile(BaseModel):
    """One unit, measured alone on sample items (figures are per input item)."""

    name: str
    kind: str
    resources: dict[str, float]
    batch_size: int | None = None
    device_class: str
    samples: int
    failures: int = 0
    wall_s: float
    cpu_s: float
    accel_s: float | None = None
    flops: float | None = None
    flops_source: Literal["declared", "counted"] | None = None
    bytes_in: float
    bytes_out: float
    output_ratio: float
    peak_rss: int
    batches: list[BatchMeasurement] = Field(default_factory=list)

    @property
    def cpu_share(self) -> float:
        """CPU seconds per wall second: near 1 is compute-bound, near 0 waits on I/O."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def bound(self) -> str:
        """``accelerator``, ``io`` or ``cpu``: what limits this unit on the host measured."""
        if self.accel_s:
            return "accelerator"
        return "io" if self.cpu_share < IO_BOUND_BELOW else "cpu"


class PipelineProfile(BaseModel):
    """Every unit of a pipeline, profiled on one host."""

    fitwork_version: str
    pipeline: str
    units: list[UnitProfile]
    host_class: str
    created_at: float

    def unit(self, name: str) -> UnitProfile:
        """The profile of unit ``name``."""
        for record in self.units:
            if record.name == name:
                return record
        raise KeyError(f"profile has no unit {name!r}")

    def check_matches(self, unit_names: list[str], source: str = "profile") -> None:
        """Raise unless this profile was taken of a pipeline with exactly these units."""
        mine = [u.name for u in self.units]
        if mine != unit_names:
            raise InputError(
                f"{source}: profiled units {mine} are not the pipeline's units {unit_names}; "
                "profile this pipeline with `fitwork profile` first")

    def save(self, path: str | Path) -> None:
        """Write the profile as JSON."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.model_dump_json(indent=1))

    @classmethod
    def load(cls, path: str | Path) -> PipelineProfile:
        """Read and validate a profile written by `save`."""
        try:
            return cls.model_validate_json(Path(path).read_text())
        except FileNotFoundError:
            raise InputError(f"profile {path}: no such file; make one with `fitwork profile`")\
                from None
        except ValueError as exc:
            first = str(exc).splitlines()[1:3]
            raise InputError(f"profile {path}: not a fitwork profile ({' '.join(first)})")\
                from None
