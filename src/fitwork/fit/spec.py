"""What the solver is given: each unit's demand per device class, and the fleet's node types."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

CPU_PREFIX = "cpu-"


def is_cpu_class(device_class: str) -> bool:
    """Whether ``device_class`` runs on host cores (its name starts with ``cpu-``)."""
    return device_class.startswith(CPU_PREFIX)


class ClassDemand(BaseModel):
    """One replica of a unit on one device class: its speed and what it holds while it runs.

    ``rate`` is items per second of ONE replica (0 = cannot run there). ``device_share`` is the
    fraction of one device of this class a replica holds (0.25 for MPS/MIG/time-slicing; above
    1 means that many whole devices, rounded up, on one node); it must be 0 on a ``cpu-`` class,
    where the replica just holds ``cores``. ``bytes_out_per_item`` is what the unit sends to the
    next unit per item it processes.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate: float = Field(ge=0)
    cores: float = Field(default=1.0, ge=0)
    memory: int = Field(default=0, ge=0)
    device_share: float = Field(default=0.0, ge=0)
    bytes_out_per_item: float = Field(default=0.0, ge=0)


class UnitDemand(BaseModel):
    """One unit of a pipeline, as the solver sees it.

    ``multiplicity`` is how many items this unit processes per source item: the product of the
    output ratios upstream (0.8 behind a filter keeping 80%, 3.0 behind a 1:3 flat-map).
    ``classes`` maps each device class the unit can run on to its per-replica demand there.
    Units are given in pipeline order: unit i sends its output to unit i + 1.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    multiplicity: float = Field(default=1.0, gt=0)
    classes: dict[str, ClassDemand]


class NodeType(BaseModel):
    """``count`` identical nodes; every capacity here is per node.

    ``devices`` counts accelerators per class. Host cores offer the CPU class ``cpu_class``
    (``None``: the cores only feed accelerators, no CPU-class replica runs there).
    ``network`` is bytes/s per node in each direction (``None``: not a constraint; leave it
    ``None`` for a single-host fleet). ``price_per_hour`` is per node.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    count: int = Field(ge=0)
    cores: float = Field(ge=0)
    memory: int = Field(ge=0)
    cpu_class: str | None = "cpu-x86"
    devices: dict[str, int] = Field(default_factory=dict)
    network: float | None = Field(default=None, gt=0)
    price_per_hour: float = Field(default=0.0, ge=0)

    @field_validator("cpu_class")
    @classmethod
    def _cpu_class_named(cls, value: str | None) -> str | None:
        if value is not None and not is_cpu_class(value):
            raise ValueError(f"cpu_class {value!r} must start with {CPU_PREFIX!r}")
        return value

    @field_validator("devices")
    @classmethod
    def _devices_are_accelerators(cls, value: dict[str, int]) -> dict[str, int]:
        for name, count in value.items():
            if is_cpu_class(name):
                raise ValueError(
                    f"device class {name!r} is a CPU class: give it as cpu_class, not in devices"
                )
            if count < 0:
                raise ValueError(f"devices[{name!r}]={count}: must be >= 0")
        return value

    def offers(self, device_class: str) -> bool:
        """Whether one node of this type can host a replica on ``device_class``."""
        if is_cpu_class(device_class):
            return device_class == self.cpu_class
        return self.devices.get(device_class, 0) > 0
