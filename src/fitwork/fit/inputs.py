"""Solver inputs from a profile and a fleet: demands per class and batch size, node types.

Rates come from the cost model (``cost.py``) at every batch size the profile measured;
consumption per item from the measured CPU and device seconds (`consumption`), plus the
engine's own work per item (`HOP_SECONDS`); held demands from the units' declarations and
measured memory; multiplicities from measured output ratios; and each node type's fluid core
budget (`fitwork.fit.ceiling`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from fitwork.fit.candidates import format_node
from fitwork.fit.ceiling import contended_speed
from fitwork.fit.cost import Precision, RateEstimate, batch_rates, unit_rates
from fitwork.fit.errors import UnitFitsNowhere
from fitwork.fit.spec import ClassDemand, UnitDemand, is_cpu_class
from fitwork.fit.spec import NodeType as SolverNode
from fitwork.hardware.catalog import Catalog, DeviceClass
from fitwork.hardware.fleet import Fleet
from fitwork.profiling.record import PipelineProfile, UnitProfile

HOP_SECONDS = 70e-6
"""CPU seconds the engine spends on one item crossing one channel (the sender pickles and
sends it, the receiver takes and unpickles it, the books are kept), charged as core time and
as time in the replica: to every unit per item it takes in, and once more to the last unit
for the item it hands to the driver (a chain of n units makes n + 1 crossings).  Measured
on the local engine (this repository at 5925c81, a 2-core host), CPU per item with the
start-up taken out by differencing two run lengths: a chain of three units whose own calls
use 60 us per item (parse, a 20 ms sleep, square) took 286-310 us per item with 4 or 64
replicas of the sleeping unit, 57-63 us per crossing; the same work fused into one unit took
224 us per item with 64 replicas, 83 us per crossing.  That is the small-frame case fluid
plans make (many replicas, each taking an item at a time); with large frames the engine
spends about 1.3 us per item (``bench/overhead.py``), so for busy, batched units this is an
upper bound.  The profile cannot see it: each unit is timed alone, in its own process.
The charge per item is therefore `crossing_seconds`: this figure per frame, spread over the
items a frame holds, plus a small per-item part."""

FRAME_SECONDS = 0.005
"""The work the engines put in one frame into a unit (the local and simulated engines'
``FRAME_TIME``; a test keeps them equal): a unit that takes t seconds per item gets frames
of about ``FRAME_SECONDS / t`` items."""
MAX_FRAME = 4096
"""The most items the engines put in one frame."""
ITEM_SHARE = 0.02
"""The part of `HOP_SECONDS` paid per item whatever the frame size (pickling the item and
keeping its books): 1.4 us at 70 us, against about 0.4 us per crossing that
``bench/overhead.py`` measures with frames of thousands of trivial items."""

BYTE_SECONDS = 0.7e-9
"""CPU seconds per byte of an item crossing a channel in a datagram (a frame under 64 KiB).
Measured with the local engine's own wire (``bench/fit_quality.py --wire``: dumps, the
datagram, loads) on this repository's 2-core host: 36 us for a 256-byte item, 78 us for 60
KiB (the difference, 0.68 ns per byte; the fixed part is `HOP_SECONDS`'s)."""
OUT_OF_BAND_BYTE_SECONDS = 0.85e-9
"""CPU seconds per byte of an array of 1 MiB or more, which crosses out of band: written to a
/dev/shm file by the sender, mapped by the receiver, whose unit then faults in every page it
reads, and released.  Measured as `BYTE_SECONDS`, the receiver reading every page: 0.76 to
0.94 ns per byte for 1 to 16 MiB (0.5 to 0.65 without the read, which a unit cannot skip).
The unit's own CPU in the profile leaves out the fresh pages its output needs while the
profiler keeps every output (`fitwork.profiling.dropped.time_dropping`), so these bytes are
not counted twice."""
SPILLED_BYTE_SECONDS = 1.5e-9
"""CPU seconds per byte of an item of 64 KiB to 1 MiB, which is pickled in band and spilled
through a /dev/shm file (copied into the pickle, written, mapped, copied out): 1.2 to 1.7
ns per byte for 256 to 900 KiB, measured as `BYTE_SECONDS`."""
DRIVER_SECONDS = 140e-6
"""The driver's CPU seconds per frame a replica takes (it keeps the frame's books and reads
its Ready, Taken and Done), charged as core time, not as time in the replica.  Measured on
this repository's 2-core host under a load average of about 25 (tests/fit/test_crossing.py's
pipeline, three units with frames of one item, the driver's CPU differenced between runs of
200 and 800 items): 0.44 ms per item, 146 us per frame per unit."""
SPILL_FRAME_SECONDS = 270e-6
"""CPU seconds, sender and receiver together, that a frame costs when it crosses through a
/dev/shm file rather than in a datagram (its pickled items reach `INLINE_MAX`, or one holds
an array out of band), beyond its bytes (`byte_seconds`) and `HOP_SECONDS`: the file is
created, written, renamed and closed by the sender, opened, checked, mapped privately,
unlinked and unmapped by the receiver.  Per frame, so at frames of one item every item pays
it.  Measured with the local engine on this repository's 2-core host, CPU per item
differenced between runs of 150 and 600 items, two runs each: a chain of three units, the
middle one spinning 3 ms (frames of one item), passing 60 KB items (inline) and 70 KB ones
(spilled): the sender spent 167 us more per item, the receiver 194 us more, the middle unit
(one receive, one send) 310 us more; the byte charge says 63 us of that, which leaves about
270 us.  With frames of hundreds of items the same two sizes cost the same (within 10 us).
The `--wire` calibration of the byte charges writes and reads the file in one process, one
item to a file, and does not see it: the receiver is another process.  A split whose
frames of 256 KB items hold one item (``bench/fit_quality.py``'s blas_stages) spent 7.1 ms
of CPU per item where the plan charged 5.5 (planned / run 0.77, its fused side 0.93)."""
INLINE_MAX = 64 * 1024
OUT_OF_BAND_MIN = 1 << 20

BATCH_GAIN = 0.10
"""A batch size larger than the smallest the profile measured is planned only where its
rate is this much above that one's: batching costs in a pipeline what a unit profiled alone
does not show (waiting for a batch to fill, larger frames, fewer items in flight).  The OCR
demo's `recognise`, 3% faster per item at batch 2 than at 1 when profiled alone, spent 73 ms
of CPU per page at batch 1 in a 2-core run, 85 at batch 2 and 100 at batch 16."""


def byte_seconds(nbytes: float, scale: float = 1.0) -> float:
    """The engine's CPU seconds, beyond its work per frame, to move one item of ``nbytes``
    pickled bytes through one channel, on a host that spends ``scale`` times the CPU per
    byte these charges were measured at (`PipelineProfile.wire_scale`)."""
    if nbytes >= OUT_OF_BAND_MIN:
        return scale * nbytes * OUT_OF_BAND_BYTE_SECONDS
    per_byte = SPILLED_BYTE_SECONDS if nbytes >= INLINE_MAX else BYTE_SECONDS
    return scale * max(nbytes, 0.0) * per_byte


def moved_seconds(nbytes: float, codec: float | None, scale: float = 1.0) -> float:
    """CPU seconds to move one item of ``nbytes`` pickled bytes through one channel, beyond
    the engine's work per frame: its bytes (`byte_seconds`), or what the profile measured
    pickling and unpickling it took (``codec``), whichever is more.  The byte charges were
    measured on bytes and arrays, whose pickling is a copy; an item of many small objects
    costs its objects: bench/seen's sized_items word counts (4.4 KB pickled) took 100-119 us
    to pickle and unpickle where their bytes charge 3, fetch_parse's 600 parsed rows (21 KB)
    580-983 us against 15 (stop 53)."""
    return max(byte_seconds(nbytes, scale), codec or 0.0)


def _moved_out(unit: UnitProfile, scale: float) -> float:
    """`moved_seconds` of one of ``unit``'s outputs (its figures are per input item)."""
    ratio = unit.output_ratio
    codec = None if unit.wire_out_s is None else unit.wire_out_s / ratio
    return moved_seconds(unit.bytes_out / ratio, codec, scale)


def edge_seconds(profile: PipelineProfile) -> float:
    """Per source item, the CPU seconds the bytes cost that any layout moves: the source
    item into the first unit and the last unit's outputs out to the driver."""
    if not profile.units:
        return 0.0
    first, last = profile.units[0], profile.units[-1]
    m = 1.0
    for u in profile.units[:-1]:
        m *= u.output_ratio
    ratio, scale = last.output_ratio, profile.wire_scale
    out = ratio * _moved_out(last, scale) if ratio > 0 else 0.0
    return moved_seconds(first.bytes_in, first.wire_in_s, scale) + m * out


def frame_items(seconds_per_item: float, io: int = 0) -> int:
    """Items per frame the engines send a replica that takes ``seconds_per_item`` per item;
    a unit with ``io`` calls in flight gets frames of half that, whatever its time per item
    (its items run side by side, so a frame takes about one call's time; the engines keep
    frames to a share of a replica's threads so the work spreads over replicas)."""
    if io:
        return min(MAX_FRAME, max(1, io // 2))
    size = MAX_FRAME if seconds_per_item <= 0 else FRAME_SECONDS / seconds_per_item
    return int(min(float(MAX_FRAME), max(1.0, size)))


def crossing_seconds(hop: float, seconds_per_item: float, io: int = 0) -> float:
    """The engine's work per item for one channel crossing into (or out of) a unit taking
    ``seconds_per_item``: ``hop`` per frame spread over `frame_items`, plus `ITEM_SHARE`."""
    return hop * (1.0 / frame_items(seconds_per_item, io) + ITEM_SHARE)



def fleet_classes(fleet: Fleet, known: Catalog) -> list[DeviceClass]:
    """Every device class the fleet offers: its nodes' CPU classes and accelerators."""
    names = {n.cpu_class for n in fleet.node_types if n.cores}
    names |= {d for n in fleet.node_types for d, count in n.devices.items() if count}
    return [known.get(name) for name in sorted(names)]


def solver_nodes(fleet: Fleet, known: Catalog, ceiling: float = 1.0) -> list[SolverNode]:
    """The fleet's node types as the solver takes them, fluid cores at ``ceiling``."""
    return [
        SolverNode(name=n.name, count=n.count, cores=n.cores, memory=n.memory,
                   cpu_class=n.cpu_class, devices=dict(n.devices),
                   network=n.network_bandwidth, price_per_hour=n.hourly_price(known) or 0.0,
                   core_ceiling=ceiling)
        for n in fleet.node_types
    ]


def waiting_seconds(profile: PipelineProfile) -> float:
    """Seconds per source item the units wait on something other than a core, one item at a
    time, weighted by multiplicity: what a threaded monolith's threads overlap.  Each unit's
    wall time at batch 1 less its CPU and run-queue wait (a thread that computes holds the
    lock while it waits for a core).  Where more processes got more (`contended_speed`), a
    unit that waits longer than it computes waits for a core as each wait ends, without the
    lock: its wait is its wall time over `contended_speed` less its CPU (issue 37: io_service
    took 60-100 ms per item per thread for 23 ms of wait and 2 of CPU, 8 to 64 threads)."""
    speed = contended_speed(profile)
    m, total = 1.0, 0.0
    for u in profile.units:
        at = u.at_batch(1 if any(b.batch_size == 1 for b in u.batches) else u.batch_size)
        accel = at.accel_s or 0.0
        waits = max(0.0, at.wall_s - at.cpu_s - at.queued_s - accel)
        if speed is not None and waits > at.cpu_s:
            waits = max(waits, at.wall_s / speed - at.cpu_s - accel)
        total += m * waits
        m *= u.output_ratio
    return total


def fused_memory(profile: PipelineProfile) -> int | None:
    """Bytes one fused replica holds, as the profile measured a process running every unit
    (`PipelineProfile.fused_rss`); ``None`` (its stages' figures, summed) where it was not
    measured or a unit declares its memory (a declared figure is the unit's word)."""
    if any(u.resources.get("memory", 0) for u in profile.units):
        return None
    return profile.fused_rss


def consumption(profile: UnitProfile, estimate: RateEstimate) -> tuple[float, float | None]:
    """(core-seconds, device-seconds or None) one item consumes on the estimate's class.

    On a CPU class: the measured CPU seconds, or for a transferred class the estimate's
    seconds less the measured waiting (which a faster core does not shorten).  On an
    accelerator: the host CPU seconds measured beside the device (capped at the item's time
    on the target when the profile had no accelerator, where the measured CPU seconds did
    the device's work), and the device seconds measured or carried by the estimate.
    """
    at = profile.at_batch(estimate.batch_size)
    seconds = estimate.seconds_per_item
    if is_cpu_class(estimate.device_class):
        if estimate.method == "measured":
            return at.cpu_s, None
        return max(seconds - max(at.wall_s - at.cpu_s, 0.0), 0.0), None
    if at.accel_s:
        device = at.accel_s if estimate.method == "measured" else max(
            seconds - max(at.wall_s - at.accel_s, 0.0), 0.0)
        return at.cpu_s, device
    return min(at.cpu_s, seconds), seconds


def _frame(profile: UnitProfile, estimate: RateEstimate) -> int:
    """Items per frame the engines size for this option of a unit (`frame_items`)."""
    io = int(profile.resources.get("io", 0))
    if estimate.rate <= 0:
        return 1
    return frame_items(1.0 / (estimate.rate * max(io, 1)), io)


def spill_seconds(nbytes: float, size: float) -> float:
    """Per item, `SPILL_FRAME_SECONDS` of a frame of ``size`` items of ``nbytes`` pickled
    bytes each where the frame crosses through a /dev/shm file, else nothing."""
    size = max(1.0, size)
    return SPILL_FRAME_SECONDS / size if nbytes * size >= INLINE_MAX else 0.0


def _hop(profile: UnitProfile, estimate: RateEstimate, hop: float, arriving: float,
         last: bool, first: bool = False, scale: float = 1.0) -> float:
    """The engine's work per item of this option: its crossing in, at frames of its own size
    or of what arrives from upstream if smaller (workers split frames, they do not merge
    them), and for the last unit the crossing out to the driver as well; each crossing
    also moves the item's bytes (`byte_seconds`).  A crossing between two units whose frame
    goes through a file pays `spill_seconds` too (the source's crossing into the first unit
    and the last unit's out are not charged it: a fused layout makes the same two).  The
    bytes are charged at ``scale`` (`PipelineProfile.wire_scale`)."""
    if not hop:
        return 0.0
    size = max(1.0, min(float(_frame(profile, estimate)), arriving))
    seconds = hop * (1.0 / size + ITEM_SHARE) + moved_seconds(profile.bytes_in,
                                                              profile.wire_in_s, scale)
    if not first:
        seconds += spill_seconds(profile.bytes_in, size)
    ratio = profile.output_ratio
    if last:
        seconds += hop * (1.0 / max(1.0, size * ratio) + ITEM_SHARE)
        seconds += ratio * _moved_out(profile, scale) if ratio > 0 else 0.0
    return seconds


def _driver(profile: UnitProfile, estimate: RateEstimate, hop: float,
            arriving: float) -> float:
    """The driver's CPU seconds per item of this option: `DRIVER_SECONDS` per frame, at the
    frames `_hop` sizes (none where the engine's work is not charged)."""
    if not hop:
        return 0.0
    return DRIVER_SECONDS / max(1.0, min(float(_frame(profile, estimate)), arriving))


def _demand(profile: UnitProfile, estimate: RateEstimate, memory: tuple[int, int],
            hop: float, driver: float = 0.0) -> ClassDemand:
    """One option of a unit for the solver, holding ``memory`` (a replica's bytes with one
    call running, and each further call's); ``hop`` seconds of engine work per item (from
    `_hop`) are added to its core-seconds and to its replica's time per item (the rate),
    ``driver`` seconds (`_driver`) to its core-seconds only.  Its parallelism is the
    profile's, widened by the driver's share, so the solver bounds what one replica itself
    keeps busy by it."""
    cpu, device = consumption(profile, estimate)
    parallelism = profile.replica_parallelism()
    if driver and cpu + hop > 0:
        parallelism *= (cpu + hop + driver) / (cpu + hop)
    share = 0.0 if is_cpu_class(estimate.device_class) else profile.resources.get("gpu", 0.0)
    batch = estimate.batch_size or 1
    saving = cpu * (1.0 - profile.threaded_cpu) if is_cpu_class(estimate.device_class) \
        and profile.threaded_cpu is not None and profile.threaded_cpu < 1.0 else 0.0
    rate = 1.0 / (1.0 / estimate.rate + hop) if estimate.rate > 0 else 0.0
    latency = None if estimate.batch_latency_s is None else estimate.batch_latency_s + hop * batch
    return ClassDemand(
        rate=rate, cores=profile.resources.get("cpu", 1.0), memory=memory[0],
        call_memory=memory[1],
        device_share=share, bytes_out_per_item=profile.bytes_out,
        cpu_seconds=cpu + hop + driver,
        device_seconds=device if share and share <= 1 else None, reserve=profile.reserve,
        batch_size=estimate.batch_size, latency=latency,
        parallelism=parallelism, threaded_saving=saving)


def _no_class(u: UnitProfile, needs: str, fleet: Fleet | None) -> str:
    """One line: a unit no device class of the fleet can run, beside the largest node."""
    where = ""
    if fleet is not None and fleet.node_types:
        node = max(fleet.node_types, key=lambda n: (n.memory, n.cores, sum(n.devices.values())))
        shown = SolverNode(name=node.name, count=node.count, cores=node.cores,
                           memory=node.memory, cpu_class=node.cpu_class,
                           devices=dict(node.devices))
        where = f"; the largest node offers {format_node(shown)} (node type {node.name!r})"
    return (f"unit {u.name!r} fits no node: needs {needs}{where}; add a node type that offers "
            "this, or lower the unit's demand")


def demands(profile: PipelineProfile, classes: Iterable[DeviceClass], known: Catalog, *,
            precision: Precision = "fp16", efficiency: float | None = None,
            hop: float = HOP_SECONDS, fleet: Fleet | None = None
            ) -> tuple[list[UnitDemand], list[RateEstimate], dict[str, float],
                       list[RateEstimate]]:
    """Solver inputs for each profiled unit: demands per class and batch size, the rates at
    each unit's own batch size, multiplicities, and the rates at the other batch sizes.
    Each demand carries the engine's work per item per channel it crosses
    (`crossing_seconds` of ``hop``: one in, and the last unit's one out).  Raises
    `UnitFitsNowhere` for a unit no class of ``classes`` runs (named beside ``fleet``'s
    largest node)."""
    classes = list(classes)
    units, rates, others, multiplicity = [], [], [], {}
    m = 1.0
    arriving = float(MAX_FRAME)  # items per frame from upstream (the driver's are the unit's)
    scale = profile.wire_scale
    for index, u in enumerate(profile.units):
        last = index == len(profile.units) - 1  # the last hands items out to the driver
        measured = known.get(u.device_class)
        if u.resources.get("gpu", 0.0) > 0 and all(c.kind == "cpu" for c in classes):
            raise UnitFitsNowhere(u.name, _no_class(
                u, f"{u.resources['gpu']:g} of an accelerator", fleet))
        estimates = unit_rates(u, classes, measured, precision=precision,
                               efficiency=efficiency)
        if estimates and not any(e.rate > 0 for e in estimates):
            raise UnitFitsNowhere(u.name, _no_class(u, "; ".join(
                f"{e.device_class}: {e.note}" for e in estimates), fleet))
        rates.extend(estimates)
        swept = []
        if u.batch_size and len(u.batches) > 1:
            swept = [e for e in batch_rates(u, classes, measured, precision=precision,
                                            efficiency=efficiency)
                     if e.batch_size != u.batch_size]
        others.extend(swept)
        alternatives: dict[str, list[ClassDemand]] = {}
        first = index == 0  # takes its items from the driver
        offered, kept = paying_batches(estimates, swept)
        for e in kept:
            alternatives.setdefault(e.device_class, []).append(
                _demand(u, e, replica_memory(u, e.batch_size),
                        _hop(u, e, hop, arriving, last, first, scale),
                        _driver(u, e, hop, arriving)))
        main = {e.device_class: _demand(u, e, replica_memory(u, e.batch_size),
                                        _hop(u, e, hop, arriving, last, first, scale),
                                        _driver(u, e, hop, arriving))
                for e in offered}
        if any(e.rate > 0 for e in estimates):  # the smallest frames any option gets
            arriving = min(arriving, min(_frame(u, e) for e in estimates if e.rate > 0))
        arriving = max(1.0, arriving * u.output_ratio)
        units.append(UnitDemand(
            name=u.name, multiplicity=max(m, 1e-9), classes=main,
            alternatives={c: v for c, v in alternatives.items() if c in main},
            concurrency=max(1, int(u.resources.get("io", 0))),
            max_concurrency=u.max_concurrency, rate_limit=u.rate_limit))
        multiplicity[u.name] = m
        m *= u.output_ratio
    return units, rates, multiplicity, others


def replica_memory(u: UnitProfile, batch_size: int | None) -> tuple[int, int]:
    """(bytes one replica of ``u`` holds at ``batch_size``, bytes each further call in
    flight adds).  A declared ``memory=`` is the whole replica's and wins where larger;
    else the peak RSS the profile read going up to that batch size (its overall peak where
    it read none): the OCR demo's ``recognise`` peaked at its sweep's batch 16, and a plan
    at batch 1 was charged that in every replica."""
    size = batch_size or 1
    at = next((b.peak_rss for b in u.batches
               if b.batch_size == size and b.peak_rss is not None), None)
    measured = u.peak_rss if at is None else min(at, u.peak_rss)
    memory = max(int(u.resources.get("memory", 0)), measured)
    return memory, (u.call_memory or 0) if memory == measured else 0


def paying_batches(own: list[RateEstimate], swept: list[RateEstimate]
                   ) -> tuple[list[RateEstimate], list[RateEstimate]]:
    """The batch sizes a unit is offered at: per class, the smallest measured, and a larger
    one only where it carries more than `BATCH_GAIN` above it.  Returns (one option per
    class, the unit's own batch size where it pays, else its fastest that does; the other
    options that pay)."""
    offered: list[RateEstimate] = []
    kept: list[RateEstimate] = []
    for main in own:
        options = [main, *(e for e in swept if e.device_class == main.device_class)]
        smallest = min(options, key=lambda e: e.batch_size or 1)
        paying = [e for e in options if e is smallest
                  or e.rate > (1 + BATCH_GAIN) * smallest.rate]
        first = main if main in paying else max(paying, key=lambda e: e.rate)
        offered.append(first)
        kept.extend(e for e in paying if e is not first)
    kept.extend(e for e in swept if not any(e.device_class == m.device_class for m in own))
    return offered, kept


def sequential(units: list[UnitDemand], rates: list[RateEstimate],
               profile: PipelineProfile | None = None) -> list[UnitDemand]:
    """The units as one container runs them today: a call at a time, whole devices.

    A fused process calls each stage in turn on one item, so a batched stage runs at its
    batch-1 rate where the profile's sweep measured one (it cannot fill a batch), an I/O
    stage overlaps nothing; and a container that asks the orchestrator for a GPU is given a
    whole one (fractional shares need MPS, MIG or time-slicing set up for them, which is
    what fitwork brings).  ``rates`` holds every estimate there is, at every batch size;
    with ``profile``, a batched stage's CPU per item on a CPU class is its batch-1 figure too.
    """
    alone: dict[str, float] = {}
    for measured in (profile.units if profile is not None else []):
        ones = [b for b in measured.batches if b.batch_size == 1]
        if measured.batch_size and ones:
            alone[measured.name] = ones[0].cpu_s
    seconds: dict[tuple[str, str], tuple[int, float]] = {}
    for r in rates:
        if not r.rate:
            continue
        size = r.batch_size or 1
        known = seconds.get((r.unit, r.device_class))
        if known is None or size < known[0]:
            seconds[r.unit, r.device_class] = (size, r.seconds_per_item)
    return [u.model_copy(update={"alternatives": {}, "concurrency": 1, "classes": {
        name: d.model_copy(update={
            "rate": 1 / seconds[u.name, name][1] if (u.name, name) in seconds else d.rate,
            "batch_size": None, "latency": None,
            "cpu_seconds": alone.get(u.name, d.cpu_seconds) if is_cpu_class(name)
            else d.cpu_seconds,
            "device_share": float(math.ceil(d.device_share))})
        for name, d in u.classes.items()}}) for u in units]
