"""Profile records: what one unit cost per item, at each batch size, on one device class."""

from __future__ import annotations

import math
import os
import time
from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from fitwork.document import Document
from fitwork.errors import InputError
from fitwork.telemetry.cputime import cpu_seconds

IO_BOUND_BELOW = 0.5
MEASURED_SPREAD = 0.10
"""The least a measured rate's p10-p90 reaches either side of it: a plan's realized /
predicted throughput spread about this much on ``bench/fit_quality.py``'s pipelines on a
shared 2-core host (the figure ``fitwork.fit.plan.TIE_MARGIN`` rests on)."""
BUSY_HOST = 0.20
"""A profile whose calls sat this share of their wall time runnable but not running (other
processes had the cores) was taken on a busy host: its rates are low and the range says so."""
LOAD_REACH = 0.60
"""The most run-queue share a measured rate's range reaches either way (x2.5): a run on the
same host meets a load near the profile's, not none or all of it.  On this project's shared
2-core host at load averages 4 to 11, ``bench/coverage.py``'s plans realized 0.31 to 1.13 of
their prediction (an in-sample figure: it is what this cap was set from)."""


WAIT_THREADS = 16
"""Calls at once in the pass that times a unit that mostly waits in threads of one process
(`UnitProfile.threaded_cpu`): the io of an I/O unit's replica, and a threaded fused
replica's threads, are of this order."""


WIRE_SAID_S = 20e-6
"""A unit's input crossing is said in its `UnitProfile.conditions` from this many seconds of
pickling and unpickling an item on."""


class BatchMeasurement(BaseModel):
    """Per-item cost at one batch size.  ``others_share`` is the share of the host's cores
    other processes used while it was timed (``None``: not measured)."""

    batch_size: int
    items: int
    wall_s: float
    cpu_s: float
    queued_s: float = 0.0
    accel_s: float | None = None
    call_p10_s: float | None = None
    call_p90_s: float | None = None
    calls: int | None = None
    host_load: float | None = None
    others_share: float | None = None
    others_readings: list[float] = Field(default_factory=list)
    """``others_share`` over each `READING_SECONDS` of the pass, in order (empty: the pass
    was shorter, or a profile from before they were kept): a transient load lowers some of
    them only, which the core ceiling reads (`fitwork.fit.ceiling.core_ceiling`)."""
    warmup_cpu_s: float | None = None
    warmup_wall_s: float | None = None
    """What the unit's first calls cost beyond its calls once warm, paid once per replica
    (``None``: no warm-up seen; `fitwork.profiling.batch_timing.warm_up`).  ``cpu_s`` and
    ``wall_s`` are then its calls once warm."""
    peak_rss: int | None = Field(default=None, ge=0)
    """The unit's replica's peak RSS over its start once built and called up to this batch
    size (the sweep goes up, so each size's is what a replica at it reached); ``None``: not
    read.  A replica planned at a small batch holds less than the sweep's largest did."""


def _cores() -> set[int]:
    """The cores this process may run on."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """How many cores this process may run on (what `host_busy_seconds` reads over)."""
    return max(len(_cores()), 1)


def host_busy_seconds() -> float | None:
    """CPU seconds every process on the host has run so far on the cores this process may
    run on, together (``None`` where the platform does not say)."""
    mine = _cores()
    try:
        with open("/proc/stat") as stat:
            lines = [line.split() for line in stat if line.startswith("cpu")]
        # cpuN user nice system idle iowait irq softirq steal: all but idle and iowait
        busy = sum(int(f[i]) for f in lines if f[0][3:].isdigit() and int(f[0][3:]) in mine
                   for i in (1, 2, 3, 6, 7, 8) if i < len(f))
        return busy / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def others_share(host0: float | None, own0: float, wall0: float) -> float | None:
    """The share of this process's cores that other processes used since ``host0`` (from
    `host_busy_seconds`), ``own0`` (this process's CPU seconds) and ``wall0`` (seconds)."""
    host = host_busy_seconds()
    wall = time.perf_counter() - wall0
    if host is None or host0 is None or wall <= 0:
        return None
    own = cpu_seconds() - own0
    return min(1.0, max(0.0, (host - host0 - own) / wall / max(len(_cores()), 1)))


READING_SECONDS = 0.1
"""The least wall time one of a pass's `OthersReadings` spans (ten of the kernel's 10 ms
ticks per core: a reading moves in steps of 10% of a core or less)."""


class OthersReadings:
    """`others_share` over successive windows of at least `READING_SECONDS` of a pass; the
    readings are taken between calls, outside the timed windows."""

    def __init__(self) -> None:
        self.readings: list[float] = []
        self._restart()

    def _restart(self) -> None:
        self._host, self._own, self._start = (host_busy_seconds(), cpu_seconds(),
                                              time.perf_counter())

    def tick(self) -> None:
        """Close the window where it has run `READING_SECONDS`, and open the next."""
        if time.perf_counter() - self._start < READING_SECONDS:
            return
        share = others_share(self._host, self._own, self._start)
        if share is not None:
            self.readings.append(round(share, 4))
        self._restart()


def host_load() -> float | None:
    """The host's 1-minute load average over the cores this process may run on (``None``
    where the platform gives neither)."""
    try:
        return os.getloadavg()[0] / max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return None


def call_spread(calls: list[float]) -> dict[str, float | int | None]:
    """The p10 and p90 of per-item wall seconds over a batch size's calls, and their count
    (``None`` figures under three calls: no spread to speak of)."""
    if len(calls) < 3:
        return {"calls": len(calls)}
    ordered = sorted(calls)
    def at(q: float) -> float:
        i = q * (len(ordered) - 1)
        lo = math.floor(i)
        hi = min(lo + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (i - lo)
    return {"call_p10_s": at(0.1), "call_p90_s": at(0.9), "calls": len(calls)}


class RateSpread(BaseModel):
    """A measured rate's p10-p90 as factors on it, and what they rest on."""

    low: float
    high: float
    busy: float
    basis: str


class UnitProfile(BaseModel):
    """One unit, measured alone on sample items (figures are per input item).

    ``device_class`` is the catalog class every figure was measured on: the accelerator's
    for a unit that holds a GPU share on a host with one, else the host's CPU class.
    ``accel_s`` is its time on that accelerator, and ``accel_source`` the timer that
    measured it (``declared``, ``torch-cuda``, ``onnxruntime``: see
    `fitwork.profiling.timers`).

    ``bytes_in`` and ``bytes_out`` are what crosses between units (pickled item sizes), and
    ``wire_in_s`` and ``wire_out_s`` the CPU seconds per input item to pickle and unpickle
    them (``None``: not measured): for items of many small objects that, not their bytes, is
    what a crossing costs.
    ``device_bytes`` is different: the bytes one item moves through device memory (weights
    read, activations, KV cache; at the unit's batch size), ``measured`` (by onnxruntime's
    profiler, for a unit on an accelerator) or ``declared`` on the unit; the cost model reads
    it to tell compute-bound from memory-bound work (``counted`` by torch for a PyTorch unit:
    the bytes its operators read and write, `fitwork.profiling.torch_count`).
    ``device_memory`` is the device memory one replica holds (weights plus KV cache, say),
    ``measured`` by a timer or ``declared``; a device class with less gets no replica.  Both
    are ``None`` when unknown.
    ``reserve``, ``max_concurrency`` and ``rate_limit`` are the unit's declarations, carried
    for the fit: a hard reservation of its cores, and bounds on the calls of all replicas.
    ``peak_rss`` is the most memory one replica held, built and with one call running;
    ``call_memory`` is what each further call in flight adds to it: the peak RSS with four
    threads calling the unit at once over one thread's making the same calls, per further
    thread (``None``: not measured), which a replica with several calls in flight (``io``
    threads, a threaded fused replica, whose stages run an item at a time) holds once per
    further call.

    The conditions it was measured under: ``threads`` is the limit its BLAS, OpenMP and
    torch pools were held to, the one a replica of it gets
    (`fitwork.resources.allotted_threads`: its declared cores, rounded up past a slack), so
    its rates are the rates a run sees and no spinning pool thread counts as its CPU.
    ``parallelism`` is the most cores one replica keeps busy at once: 1 unless the unit's
    threads were measured to run at once (`replica_parallelism`).
    ``thread_speedup`` is its wall time at one thread over that at ``threads``, where it
    was measured at both (``None``: ``threads`` is 1, or no pool was loaded).  A profile
    from before fitwork held the pools has ``threads`` ``None``.  ``loaded_factor`` is its
    CPU per item with ``loaded_copies`` copies of it running at once, one per core, over its
    CPU per item alone (`fitwork.profiling.corun`; ``None``: not measured), and `loaded`
    is the unit as a run that fills the host meets it, which is what the fit plans from.
    ``pooled_timings`` is how many timings its CPU per item is the mean of (its own and the
    co-run copies' passes alone, later: `fitwork.profiling.loaded.with_pooled_cpu`; ``None``: its
    own alone), and ``pooled_factor`` that mean over its own timing, by which every batch
    size's CPU and wall time were scaled.
    ``build_cpu_s`` and ``build_wall_s`` are what a replica spends before it works at the
    profiled pace: building the unit (loading a model) and its first call's extra (imports,
    caches), beyond one item's work (``None``: a profile from before they were measured).
    ``lock_share`` is the share of a call's CPU that holds the interpreter lock, read from
    the cores four threads calling it at once kept busy (0: a native library that lets go
    of it; 1: plain Python), and ``concurrent_cpu`` those threads' CPU per call over one
    thread's (``None``: not measured; see `fitwork.profiling.concurrent.measure_concurrent`).
    ``threaded_cpu``, for a unit that mostly waits, is its CPU per call with `WAIT_THREADS` of
    one process calling it at once over its CPU per item alone: what a replica running its
    calls in threads (``io``, a threaded fused replica) spends, and what the fit charges it.
    ``ratio_items`` and ``ratio_error``: where further input items were counted through the
    units up to the last filter or flat-map (`fitwork.profiling.ratios`), how many items
    ``output_ratio`` is over, and its standard error (``None``: the samples' alone).
    """

    name: str
    kind: str
    resources: dict[str, float]
    batch_size: int | None = None
    device_class: str
    samples: int
    failures: int = 0
    wall_s: float
    cpu_s: float
    queued_s: float = 0.0
    accel_s: float | None = None
    accel_source: str | None = None
    flops: float | None = None
    flops_source: Literal["declared", "counted"] | None = None
    bytes_in: float
    bytes_out: float
    wire_in_s: float | None = None
    wire_out_s: float | None = None
    device_bytes: float | None = None
    device_bytes_source: Literal["measured", "declared", "counted"] | None = None
    device_memory: int | None = None
    device_memory_source: Literal["measured", "declared"] | None = None
    output_ratio: float
    peak_rss: int
    call_memory: int | None = None
    batches: list[BatchMeasurement] = Field(default_factory=list)
    reserve: bool = False
    max_concurrency: int | None = None
    rate_limit: float | None = None
    threads: int | None = None
    parallelism: float | None = None
    thread_speedup: float | None = None
    loaded_copies: int | None = None
    loaded_factor: float | None = None
    pooled_timings: int | None = None
    pooled_factor: float | None = None
    build_cpu_s: float | None = None
    build_wall_s: float | None = None
    lock_share: float | None = None
    concurrent_cpu: float | None = None
    threaded_cpu: float | None = None
    ratio_items: int | None = None
    ratio_error: float | None = None

    def at_batch(self, batch_size: int | None) -> BatchMeasurement:
        """The per-item figures at ``batch_size`` (its own figures when not swept)."""
        for b in self.batches:
            if b.batch_size == (batch_size or 1):
                return b
        return BatchMeasurement(batch_size=self.batch_size or 1, items=self.samples,
                                wall_s=self.wall_s, cpu_s=self.cpu_s,
                                queued_s=self.queued_s, accel_s=self.accel_s)

    def ratio_spread(self) -> float:
        """How far ``output_ratio`` may be from the input's own, as a log standard deviation:
        the standard error counted (``ratio_error``, over ``ratio_items``), or where none
        was, a binomial (a ratio under 1: items kept) or Poisson (over 1: children per
        item) count over the samples."""
        ratio = self.output_ratio
        if ratio <= 0:
            return 0.0
        if self.ratio_error is not None:
            return self.ratio_error / ratio
        n = max(self.samples - self.failures, 1)
        if ratio < 1:
            return math.sqrt(ratio * (1 - ratio) / n) / ratio
        return math.sqrt(ratio / n) / ratio if ratio > 1 else 0.0

    def replica_parallelism(self) -> float:
        """The most cores one replica of this unit keeps busy: as measured, or for a profile
        without the figure, its declared cores (at least one)."""
        if self.parallelism is not None:
            return self.parallelism
        return max(1.0, self.resources.get("cpu", 1.0))

    @property
    def conditions(self) -> str:
        """What it was measured under, in words."""
        if self.threads is None:
            return "thread pools not held (a profile from before fitwork held them)"
        said = f"thread pools held to {self.threads} (as a replica's)"
        if self.thread_speedup is not None:
            said += f", {self.thread_speedup:.2f}x faster than at 1 thread"
        said += f"; parallelism {self.replica_parallelism():.2f} cores"
        if self.loaded_factor is not None:
            said += (f"; {self.loaded_factor:.2f}x the CPU per item with {self.loaded_copies} "
                     "copies at once, one per core (planned with)")
        if self.pooled_timings is not None and self.pooled_factor is not None:
            said += (f"; CPU per item the mean of {self.pooled_timings} timings at moments "
                     f"apart ({self.pooled_factor:.2f}x its first)")
        if self.lock_share is not None:
            said += (f"; with calls at once {self.lock_share:.0%} of its CPU holds the "
                     "interpreter lock")
        if self.threaded_cpu is not None:
            said += (f"; {self.threaded_cpu:.2f}x the CPU per item with {WAIT_THREADS} calls "
                     "at once in threads (planned with where threads run it)")
        if self.wire_in_s is not None and self.wire_in_s >= WIRE_SAID_S:
            said += (f"; its input item takes {self.wire_in_s * 1e6:,.0f} us to pickle and "
                     f"unpickle ({self.bytes_in:,.0f} bytes: charged where a split moves it)")
        if self.ratio_items is not None:
            said += (f"; {self.output_ratio:.3g} outputs per item counted over "
                     f"{self.ratio_items:,} items")
        return said

    def loaded(self) -> UnitProfile:
        """This unit as a run that fills the host meets it: each CPU figure times
        ``loaded_factor``, and its wall time longer by the extra CPU (itself where not
        measured)."""
        factor = self.loaded_factor
        if factor is None or factor == 1.0:
            return self
        return self.cpu_scaled(factor)

    def cpu_scaled(self, factor: float, **update: float) -> UnitProfile:
        """This unit with each CPU figure (its own and every batch size's) times ``factor``
        and each wall time moved by the CPU it gained or lost, and ``update`` set."""

        def scaled(wall: float, cpu: float) -> dict[str, float]:
            return {"wall_s": max(0.0, wall + cpu * (factor - 1.0)), "cpu_s": cpu * factor}

        return self.model_copy(update={
            **scaled(self.wall_s, self.cpu_s), **update,
            "batches": [b.model_copy(update=scaled(b.wall_s, b.cpu_s)) for b in self.batches]})

    def rate_spread(self, batch_size: int | None = None) -> RateSpread:
        """How far a rate measured here may sit from a run's: factors (low, high) on it.

        Three things widen it, in log space added in quadrature: the spread of the profile's
        own calls (p10 and p90 of per-item wall time against their mean), the host's load
        (the share of wall time the calls sat runnable while other processes had the cores,
        or the share of the cores others took by the load average while profiling, the larger:
        a quieter host gives that much back, so the high end reaches ``wall / (wall -
        queued)``, and a run may meet as much more of it, so the low end reaches as far
        down), and at the least `MEASURED_SPREAD`.
        """
        batch = next((b for b in self.batches if b.batch_size == batch_size), None)
        wall = batch.wall_s if batch else self.wall_s
        queued = batch.queued_s if batch else self.queued_s
        busy = min(max(queued / wall, 0.0), 0.95) if wall > 0 else 0.0
        if batch and batch.host_load and batch.host_load > 1:  # more runnable than cores
            busy = max(busy, 1 - 1 / batch.host_load)
        floor = math.log1p(MEASURED_SPREAD)
        down = up = 0.0
        said = "no per-call spread kept (a profile from before it was)"
        if batch and batch.call_p10_s and batch.call_p90_s and wall > 0:
            down = max(math.log(batch.call_p90_s / wall), 0.0)
            up = max(math.log(wall / batch.call_p10_s), 0.0)
            said = (f"{batch.calls} calls: per-item wall p10 {batch.call_p10_s:.3g} s, p90 "
                    f"{batch.call_p90_s:.3g} s")
        load = -math.log1p(-min(busy, LOAD_REACH))
        low = math.exp(-math.hypot(floor, down, load))
        high = math.exp(math.hypot(floor, up, load))
        loaded = (f", host load {batch.host_load:.1f} per core" if batch and batch.host_load
                  else "")
        basis = (f"measured on {self.device_class}; range from {said}, run-queue wait "
                 f"{queued / wall if wall > 0 else 0.0:.0%} of wall time{loaded} (busy "
                 f"{busy:.0%}), at least +-{MEASURED_SPREAD:.0%}")
        if busy >= BUSY_HOST:
            basis += (f"; WARNING: profiled on a busy host ({busy:.0%} of the time waiting "
                      "for a core): the rate is low, re-profile on a quiet host")
        return RateSpread(low=low, high=high, busy=busy, basis=basis)

    @property
    def waiting_s(self) -> float:
        """Seconds per item spent waiting on something other than a CPU (I/O, a device).

        Time the process sat runnable in the kernel's run queue (other processes had the
        cores) is not waiting: on a busy host it would make CPU-bound work look I/O-bound.
        """
        return max(0.0, self.wall_s - self.cpu_s - self.queued_s)

    @property
    def cpu_share(self) -> float:
        """CPU seconds per second not spent queued: near 1 is compute-bound, near 0 waits."""
        active = self.cpu_s + self.waiting_s
        return self.cpu_s / active if active > 0 else 0.0

    @property
    def bound(self) -> str:
        """``accelerator``, ``io`` or ``cpu``: what limits this unit on the host measured."""
        if self.accel_s:
            return "accelerator"
        return "io" if self.cpu_share < IO_BOUND_BELOW else "cpu"


class PipelineProfile(Document):
    """Every unit of a pipeline, profiled on one host.

    ``host_class`` is the catalog class of the host's cores and ``accelerator_class`` that
    of the GPU its GPU units ran on (``None``: none); ``classes_from`` says whether each was
    discovered (and from what) or given.  Each unit's ``device_class`` is one of the two.
    """

    document_kind: ClassVar[str] = "profile"
    document_maker: ClassVar[str] = "`fitwork profile`"

    fitwork_version: str
    pipeline: str
    units: list[UnitProfile]
    host_class: str
    created_at: float
    accelerator_class: str | None = None
    classes_from: str = ""
    wire_scale: float = 1.0
    """This host's CPU per byte of moving an array between processes as a multiple of the
    host the fit's byte charges were measured on (`fitwork.profiling.wire_cost`); measured
    where a unit moves items of 64 KiB or more, else 1.0."""
    wire_ns_per_byte: float | None = None
    """What the probe behind `wire_scale` read, in nanoseconds of CPU per byte moved; None
    where no unit moves items large enough to probe."""
    host_speed: float | None = Field(default=None, gt=0)
    """A fixed CPU probe's speed as the profile began (`fitwork.telemetry.host_speed`):
    read again after a run of its plan, their ratio is the host's moment then against
    now; None in a profile made before it was read."""
    fused_rss: int | None = Field(default=None, ge=0)
    """Bytes one process running every unit in turn (a fused replica) held of its own: its
    peak RSS over its start, measured on the samples; None where not measured (one unit,
    or the measurement failed).  The units' own ``peak_rss`` count the libraries they share
    once each."""
    share_readings: dict[int, list[float]] = Field(default_factory=dict)
    """Readings of the share of the host's cores ``k`` processes spinning at once got, by
    ``k`` (`fitwork.profiling.shares`): what a plan of several busy threads may count on
    where the host's other work is shared with fairly; empty where not read (``--alone``,
    or a profile made before it was read)."""
    yield_readings: dict[int, list[float]] = Field(default_factory=dict)
    """Where ``k`` processes working as the pipeline's replicas do got all they asked for
    (`share_readings` then tell what this work asks, not what the host would give it):
    readings of the share ``k`` processes spinning without a pause got, by ``k``
    (`fitwork.profiling.shares.yield_readings`); empty where not read."""

    def under_load(self) -> PipelineProfile:
        """This profile with every unit `UnitProfile.loaded`: what the fit plans from."""
        if all(u.loaded_factor in (None, 1.0) for u in self.units):
            return self
        return self.model_copy(update={"units": [u.loaded() for u in self.units]})

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

