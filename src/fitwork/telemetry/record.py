"""The run record: a JSON-serialisable account of one run, assembled from worker reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from fitwork.document import Document
from fitwork.failure import Failure
from fitwork.telemetry.figures import (
    busy_fraction,
    host_limits,
    over_allocation,
    ratio,
    share,
    utilization,
    weighted_percentile,
)


class WorkerRecord(BaseModel):
    """One worker process: what it did and when it was busy (seconds from the run's start).

    ``cpu_s`` is the CPU it spent from its first call on; ``build_cpu_s`` what it spent
    before (starting, building its unit: loading a model), which a short run pays at every
    replica and a profile's CPU per item leaves out."""

    worker_id: int
    unit: str
    pid: int
    node: str | None = None
    started_s: float
    ended_s: float | None = None
    exit_code: int | None = None
    items_in: int = 0
    items_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    busy_s: float = 0.0
    blocked_s: float = 0.0
    cpu_s: float = 0.0
    build_cpu_s: float = 0.0
    exit_cause: str | None = None
    busy_intervals: list[tuple[float, float]] = Field(default_factory=list)

    @property
    def used_cpu_s(self) -> float:
        """All the CPU it used: its work and building its unit."""
        return self.cpu_s + self.build_cpu_s


class UnitRecord(BaseModel):
    """One unit, summed over its replicas."""

    name: str
    kind: str
    replicas: int
    resources: dict[str, float]
    batch_size: int | None = None
    replica_s: float = 0.0
    items_in: int = 0
    items_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    busy_s: float = 0.0
    busy_fraction: float = 0.0
    blocked_s: float = 0.0
    cpu_s: float = 0.0
    build_cpu_s: float = 0.0
    failures: int = 0

    @property
    def used_cpu_s(self) -> float:
        """All the CPU its replicas used: their work and building the unit."""
        return self.cpu_s + self.build_cpu_s


class ResourceRecord(BaseModel):
    """Fleet utilization of one resource: used resource-seconds over allocated ones.

    ``utilization`` is a share of the allocation, held to 0..1 (for charts); where more was
    used than allocated, ``used_of_allocated`` is the raw ratio (over 1) and ``finding``
    says the plan under-allocated: a report shows that, never a silent 100%.
    """

    resource: str
    allocated: float
    allocated_s: float
    used_s: float
    utilization: float
    basis: str

    @property
    def used_of_allocated(self) -> float:
        """Used resource-seconds over allocated ones, not held to 1 (0.0 with none allocated)."""
        return ratio(self.used_s, self.allocated_s)

    @property
    def finding(self) -> str:
        """Words for a run that used more than it allocated (empty when it did not)."""
        return over_allocation(self.resource.upper(), self.used_s, self.allocated_s)


class QueueSeries(BaseModel):
    """Items waiting in front of each unit, sampled over time (seconds from the start)."""

    times_s: list[float] = Field(default_factory=list)
    depths: dict[str, list[int]] = Field(default_factory=dict)


class CompletionSeries(BaseModel):
    """Source items settled so far, at each moment a feed frame settled (measured, not derived)."""

    times_s: list[float] = Field(default_factory=list)
    completed: list[int] = Field(default_factory=list)

    def first_s(self) -> float | None:
        """Seconds from the run's start until the first items settled (its start-up and
        the first frame's way through the pipeline); None when none settled."""
        return next((t for t, c in zip(self.times_s, self.completed, strict=True) if c > 0),
                    None)

    def steady(self, total: int, low: float = 0.1, high: float = 0.9) -> float | None:
        """Items/s between ``low`` and ``high`` shares of ``total`` items settled, start-up
        and drain left out; None where fewer than three frames settled in between."""
        inside = [(t, c) for t, c in zip(self.times_s, self.completed, strict=True)
                  if low * total <= c <= high * total]
        if len(inside) < 3 or inside[-1][0] <= inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


class ReplicaSeries(BaseModel):
    """Live replicas of each unit, at each moment the counts changed."""

    times_s: list[float] = Field(default_factory=list)
    counts: dict[str, list[int]] = Field(default_factory=dict)


class DeviceSample(BaseModel):
    """One reading of one accelerator (NVML where available), seconds from the run's start."""

    t_s: float
    node: str | None = None
    device: int
    name: str
    utilization: float
    memory_used: int
    memory_total: int
    power_w: float | None = None
    sm_clock_mhz: float | None = None


class ProcessSample(BaseModel):
    """The run's processes at one moment, seconds from its start: the driver, its workers
    together (largest and summed resident memory, open files, threads) and ``/dev/shm``."""

    t_s: float
    driver_rss: int
    driver_fds: int
    driver_threads: int
    workers: int
    worker_rss_max: int
    worker_rss_sum: int
    worker_fds: int
    worker_threads: int
    shm_bytes: int


class Refit(BaseModel):
    """One live re-fit: when, why, replica counts before and after, predictions of both."""

    t_s: float
    reason: str
    before: dict[str, int]
    after: dict[str, int]
    predicted_before: float
    predicted_after: float


class LoggedStep(BaseModel):
    """One step of the run core: a stimulus (an event, or its start) and the instructions
    it gave, each ``{"type": NAME, ...}`` as `fitwork.engine.core.codec` writes them."""

    stimulus: dict[str, Any]
    out: list[dict[str, Any]] = Field(default_factory=list)


class CoreLog(BaseModel):
    """The run core's last steps before a run failed (`fitwork.engine.core.log`): what it
    was built from (``config``: stages, placement, policy, run id, start), and each step;
    ``dropped`` steps fell off the front of its ring (0: the log replays from the start)."""

    config: dict[str, Any]
    steps: list[LoggedStep]
    dropped: int = 0


RunStatus = Literal["completed", "aborted", "interrupted"]


class RunRecord(Document):
    """What happened in one run, in the form every report and figure reads."""

    document_kind: ClassVar[str] = "run record"
    document_maker: ClassVar[str] = "`fitwork run ... --record FILE`"

    fitwork_version: str
    run_id: str
    pipeline: str
    engine: str
    started_at: float
    wall_s: float
    items_in: int
    items_completed: int
    outputs: int
    failures: int
    poisoned: int
    retries: int
    worker_restarts: int
    throughput: float
    latency_p50_s: float | None
    latency_p95_s: float | None
    units: list[UnitRecord]
    resources: list[ResourceRecord]
    workers: list[WorkerRecord]
    queue: QueueSeries
    failed_items: list[Failure] = Field(default_factory=list)
    dead_letter: str | None = None
    status: RunStatus = "completed"
    error: str | None = None
    completions: CompletionSeries = Field(default_factory=CompletionSeries)
    replicas: ReplicaSeries = Field(default_factory=ReplicaSeries)
    placement: dict[str, Any] | None = None
    device_samples: list[DeviceSample] = Field(default_factory=list)
    process_samples: list[ProcessSample] = Field(default_factory=list)
    host: dict[str, Any] | None = None
    output_digest: str | None = None
    refits: list[Refit] = Field(default_factory=list)
    core_log: CoreLog | None = None
    """Kept only when the run did not complete (a record of a good run stays small)."""

    @model_validator(mode="after")
    def _bounded(self) -> RunRecord:
        """Whatever wrote the record (an older fitwork, a hand): resources allocated are at
        most what its host has, and every share is held to 0..1."""
        self.resources[:] = bounded_resources(self.resources, self.host, self.wall_s)
        self.units[:] = [u if 0.0 <= u.busy_fraction <= 1.0 else u.model_copy(
            update={"busy_fraction": min(1.0, max(0.0, u.busy_fraction))})
            for u in self.units]
        return self

    def unit(self, name: str) -> UnitRecord:
        """The record of the unit called ``name``."""
        for record in self.units:
            if record.name == name:
                return record
        raise KeyError(f"run record has no unit {name!r}")

    def resource(self, name: str) -> ResourceRecord:
        """The utilization record of resource ``name`` (``cpu``, ``gpu``)."""
        for record in self.resources:
            if record.resource == name:
                return record
        raise KeyError(f"run record has no resource {name!r}")



@dataclass(frozen=True, slots=True)
class UnitProgress:
    """One unit in a progress snapshot: replicas running, and its replicas' counters summed
    (items in and out, busy and CPU seconds)."""

    replicas: int = 0
    items_in: int = 0
    items_out: int = 0
    busy_s: float = 0.0
    cpu_s: float = 0.0


@dataclass(frozen=True)
class Progress:
    """A snapshot of a run in progress, handed to progress callbacks."""

    elapsed_s: float
    fed: int
    completed: int
    outputs: int
    failures: int
    depths: dict[str, int] = field(default_factory=dict)
    units: dict[str, UnitProgress] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Source items completed per second so far."""
        return ratio(self.completed, self.elapsed_s)


def summarize_units(
    units: Sequence[UnitRecord], workers: Sequence[WorkerRecord], wall_s: float
) -> list[UnitRecord]:
    """Units with their replicas' counters summed and their busy fraction computed."""
    summed = []
    for base in units:
        mine = [w for w in workers if w.unit == base.name]
        busy = sum(w.busy_s for w in mine)
        summed.append(base.model_copy(update={
            "blocked_s": sum(w.blocked_s for w in mine),
            "items_in": sum(w.items_in for w in mine),
            "items_out": sum(w.items_out for w in mine),
            "bytes_in": sum(w.bytes_in for w in mine),
            "bytes_out": sum(w.bytes_out for w in mine),
            "busy_s": busy,
            "cpu_s": sum(w.cpu_s for w in mine),
            "build_cpu_s": sum(w.build_cpu_s for w in mine),
            "busy_fraction": busy_fraction(busy, 1, base.replica_s) if base.replica_s
            else busy_fraction(busy, base.replicas, wall_s),
        }))
    return summed


def resource_utilization(units: Sequence[UnitRecord], wall_s: float) -> list[ResourceRecord]:
    """Per resource: allocated = replicas x demand x wall; used = measured busy seconds.

    CPU use is the workers' measured process CPU time (user + system), building their
    units included, so a unit waiting on I/O counts as idle cores.  GPU use, without
    device samples, is the busy time of the units that hold a GPU share, times that share.
    """
    records = []
    for resource, basis in (("cpu", "process CPU seconds / (cores allocated x wall seconds)"),
                            ("gpu", "busy seconds x GPU share / (GPUs allocated x wall "
                                    "seconds)")):
        allocated_s = sum(_replica_seconds(u, wall_s) * u.resources.get(resource, 0.0)
                          for u in units)
        if not allocated_s:
            continue
        if resource == "cpu":
            used = sum(u.used_cpu_s for u in units)
        else:
            used = sum(u.busy_s * u.resources.get("gpu", 0.0) for u in units)
        records.append(ResourceRecord(
            resource=resource, allocated=allocated_s / wall_s if wall_s else 0.0,
            allocated_s=allocated_s, used_s=used, utilization=utilization(used, allocated_s),
            basis=basis))
    return records


def bounded_resources(resources: Sequence[ResourceRecord], host: dict[str, Any] | None,
                      wall_s: float) -> list[ResourceRecord]:
    """``resources`` with ``cpu`` and ``gpu`` allocated at most what ``host`` has (what
    replicas declare beyond it does not exist to allocate; the basis says so) and every
    utilization held to 0..1."""
    cores, gpus = host_limits(host)
    bounded = []
    for r in resources:
        limit = cores if r.resource == "cpu" else gpus if r.resource == "gpu" else None
        if limit is not None and r.allocated > limit + 1e-9:
            allocated_s = limit * wall_s
            r = r.model_copy(update={
                "allocated": limit, "allocated_s": allocated_s,
                "utilization": share(r.used_s, allocated_s),
                "basis": f"{r.basis}; replicas declared {r.allocated:g}, the host has "
                         f"{limit:g}"})
        elif not 0.0 <= r.utilization <= 1.0:
            r = r.model_copy(update={"utilization": min(1.0, max(0.0, r.utilization))})
        bounded.append(r)
    return bounded


def _replica_seconds(unit: UnitRecord, wall_s: float) -> float:
    """Replica-seconds a unit held: measured over the run where recorded, else replicas x wall."""
    return unit.replica_s or unit.replicas * wall_s


def latency_figures(latencies: Sequence[tuple[float, int]]
                    ) -> tuple[float | None, float | None]:
    """(p50, p95) of item latencies given as (seconds, how many items took that long)."""
    return weighted_percentile(latencies, 50), weighted_percentile(latencies, 95)
