"""What the solver is given: each unit's demand per device class, and the fleet's node types."""

from __future__ import annotations

import functools

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fitwork.hardware.catalog import CPU_PREFIX, DeviceKind, device_kind


@functools.cache
def is_cpu_class(device_class: str) -> bool:
    """Whether ``device_class`` runs on host cores: its kind (`device_kind`) is CPU."""
    return device_kind(device_class) is DeviceKind.CPU


class ClassDemand(BaseModel):
    """One replica of a unit on one device class (at one batch size): speed and consumption.

    ``rate`` is items per second of ONE replica (0 = cannot run there).  Cores are FLUID
    unless ``reserve``: a replica consumes ``cpu_seconds`` core-seconds per item it processes
    (``None``: ``cores / rate``, i.e. ``cores`` while it is busy), so replicas may outnumber
    cores and an idle one costs none.  With ``reserve`` every replica holds ``cores`` whole,
    busy or not.  ``memory`` (bytes) is always held per replica.  ``device_share`` is a
    replica's slot on a device of this class (0.25: four to a device; above 1: that many whole
    devices, rounded up), held per replica; the device's TIME is fluid: ``device_seconds`` per
    item (``None``: ``share / rate``, the slot kept busy while the replica is).  Must be 0 on a
    ``cpu-`` class.  ``bytes_out_per_item`` is what the unit sends to the next unit per item.
    ``batch_size`` and ``latency`` (wall seconds of one call, a whole batch) say which batch
    this demand is for; a unit may give several per class (`UnitDemand.alternatives`) and the
    fit picks one.  ``parallelism`` is the most cores one replica can keep busy at once (1
    for plain Python; more only where its measured threads really run at once; ``None``:
    not bounded): a replica's rate is at most ``parallelism / core_seconds()`` (see
    `within_parallelism`), and throughput beyond that comes from more replicas.
    ``call_memory`` is what each call in flight holds beyond the one ``memory`` counts: a
    replica running N calls at once (its unit's ``concurrency``) holds
    ``memory + (N - 1) · call_memory`` (`held_memory`).  ``threaded_saving`` is the
    core-seconds per item fewer a replica spends when it runs its calls in threads of one
    process (a unit that mostly waits: `UnitProfile.threaded_cpu`); `threaded` applies it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate: float = Field(ge=0)
    cores: float = Field(default=1.0, ge=0)
    memory: int = Field(default=0, ge=0)
    device_share: float = Field(default=0.0, ge=0)
    bytes_out_per_item: float = Field(default=0.0, ge=0)
    cpu_seconds: float | None = Field(default=None, ge=0)
    device_seconds: float | None = Field(default=None, ge=0)
    reserve: bool = False
    batch_size: int | None = Field(default=None, ge=1)
    latency: float | None = Field(default=None, ge=0)
    parallelism: float | None = Field(default=None, gt=0)
    call_memory: int = Field(default=0, ge=0)
    threaded_saving: float = Field(default=0.0, ge=0)

    def threaded(self) -> ClassDemand:
        """This demand as a replica running its calls in threads spends it
        (``threaded_saving`` fewer core-seconds per item)."""
        if not self.threaded_saving:
            return self
        return self.model_copy(update={
            "cpu_seconds": max(0.0, self.core_seconds() - self.threaded_saving),
            "threaded_saving": 0.0})

    def held_memory(self, calls: int = 1) -> int:
        """Bytes one replica holds with ``calls`` calls in flight."""
        return self.memory + max(0, calls - 1) * self.call_memory

    def core_seconds(self) -> float:
        """Core-seconds one processed item consumes (fluid), whether given or implied."""
        if self.cpu_seconds is not None:
            return self.cpu_seconds
        return self.cores / self.rate if self.rate > 0 else 0.0

    def within_parallelism(self) -> ClassDemand:
        """This demand with its rate bounded by what one replica can do: at most
        ``parallelism`` cores of fluid core-seconds per second (a reserved replica holds its
        cores instead, and an unbounded one keeps its rate).  A call of a batch then takes
        at least ``batch_size`` items at the bounded rate."""
        if self.parallelism is None or self.reserve or self.rate <= 0:
            return self
        cpu = self.core_seconds()
        if cpu <= 0 or cpu * self.rate <= self.parallelism * (1 + 1e-9):
            return self
        rate = self.parallelism / cpu
        latency = None if self.latency is None else max(
            self.latency, (self.batch_size or 1) / rate)
        return self.model_copy(update={"rate": rate, "latency": latency,
                                       "cpu_seconds": cpu})

    def call_latency(self) -> float:
        """Wall seconds of one call (a batch): given, or one item at this rate."""
        if self.latency is not None:
            return self.latency
        return (self.batch_size or 1) / self.rate if self.rate > 0 else 0.0


class UnitDemand(BaseModel):
    """One unit of a pipeline, as the solver sees it.

    ``multiplicity`` is how many items this unit processes per source item: the product of the
    output ratios upstream (0.8 behind a filter keeping 80%, 3.0 behind a 1:3 flat-map).
    ``classes`` maps each device class the unit can run on to its per-replica demand there;
    ``alternatives`` gives more demands for a class at other batch sizes (the fit picks ONE
    batch size per class); with ``exclusive`` False they are not exclusive: the fit may run
    any of a class's demands side by side, each with its own replicas (e.g. one model at
    several tensor-parallel degrees).  ``concurrency`` is calls one replica has in flight
    (``io``, or 1); ``max_concurrency`` bounds the calls in flight of all replicas together and
    ``rate_limit`` the calls per second of all replicas together (a batch is one call).
    Units are given in pipeline order: unit i sends its output to unit i + 1.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    multiplicity: float = Field(default=1.0, gt=0)
    classes: dict[str, ClassDemand]
    alternatives: dict[str, list[ClassDemand]] = Field(default_factory=dict)
    concurrency: int = Field(default=1, ge=1)
    max_concurrency: int | None = Field(default=None, ge=1)
    rate_limit: float | None = Field(default=None, gt=0)
    exclusive: bool = True

    @model_validator(mode="after")
    def _alternatives_have_a_class(self) -> UnitDemand:
        stray = sorted(set(self.alternatives) - set(self.classes))
        if stray:
            raise ValueError(f"alternatives for {', '.join(stray)}: give that class in classes")
        return self

    def options(self, device_class: str) -> list[ClassDemand]:
        """Every demand given for ``device_class``: its main one, then the alternatives."""
        return [self.classes[device_class], *self.alternatives.get(device_class, [])]


class NodeType(BaseModel):
    """``count`` identical nodes; every capacity here is per node.

    ``devices`` counts accelerators per class. Host cores offer the CPU class ``cpu_class``
    (``None``: the cores only feed accelerators, no CPU-class replica runs there).
    ``network`` is bytes/s per node in each direction (``None``: not a constraint; leave it
    ``None`` for a single-host fleet). ``price_per_hour`` is per node.  ``core_ceiling`` is the
    share of the cores left after reservations that fluid load may use (the oversubscription
    cost, see ``fitwork.fit.ceiling.core_ceiling``); 1.0 uses them all.
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
    core_ceiling: float = Field(default=1.0, gt=0, le=1)

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
