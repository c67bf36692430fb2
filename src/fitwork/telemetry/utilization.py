"""The three utilization figures of a run record, per device class, and the series reports plot.

Never mixed (see DESIGN.md, "Three utilization figures")::

    fleet utilization    busy device-seconds / device-seconds allocated          per class
    MFU                  FLOPs the work needed / (peak FLOP/s x devices x wall)  per class
    server capacity      achieved throughput / the most these servers sustain    per run

A unit runs on one device class: the one ``classes`` names for it, else ``cpu_class`` when
it holds no GPU share, else the class the record's device samples show (when they show
exactly one), else the placeholder ``gpu`` (a GPU of a class nobody named).  A unit on an
accelerator also holds host cores, counted on ``cpu_class``.

Busy time is MEASURED where it can be and DECLARED where it cannot, and each class's
``basis`` says which (it starts ``measured:`` or ``declared:``):

- CPU classes: the workers' process CPU time (a unit waiting on I/O keeps its cores idle),
  as in the record's own ``resources``; always measured.
- accelerator classes with device samples (``RunRecord.device_samples``, NVML): each
  device's mean utilization x wall seconds, summed over the devices sampled of that class
  (with even sampling, mean utilization x wall x devices); the devices allocated are at
  least those sampled, since the run could use every GPU it saw.
- accelerator classes without samples: each unit's busy seconds x its GPU share.

No share is ever over 100%: what a class allocated is held to what the record's host (or
cluster) has, cores and GPUs; FLOPs over the peak and achieved items/s over the plan's
bound are each held to 1, and the row's ``note`` (or the run's ``capacity_note``) says why.
Busy time over what the plan allocated is a finding, not a rounding: the row is
``under_allocated``, its ``note`` says "CPU used 179% of what the plan allocated: the plan
under-allocated", and reports print that instead of 100%.

Everything here is arithmetic over values it is given (the catalog of peaks defaults to
the packaged one).  A class the catalog gives no peak for at the precision asked (an
SN40L's or a Gaudi2's FP32 rate) has no MFU figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from fitwork.errors import InputError
from fitwork.hardware.catalog import Catalog, DeviceKind, catalog, device_kind
from fitwork.telemetry.figures import host_limits, over_allocation, ratio, share
from fitwork.telemetry.record import (
    DeviceSample,
    ResourceRecord,
    RunRecord,
    UnitRecord,
    bounded_resources,
)

if TYPE_CHECKING:
    from fitwork.fit.plan import Plan

Precision = Literal["fp16", "fp32"]

DEFAULT_CPU_CLASS = "cpu-x86"
UNNAMED_GPU = "gpu"
CPU_BASIS = "measured: process CPU seconds / (cores allocated x wall seconds)"
GPU_BASIS = "declared: busy seconds x GPU share / (GPUs allocated x wall seconds)"
GPU_MEASURED_BASIS = ("measured: mean NVML utilization x wall seconds, summed over the GPUs "
                      "sampled / (GPUs allocated, at least those sampled, x wall seconds)")


class ClassFigures(BaseModel):
    """Fleet utilization and MFU of one device class in one run.

    ``allocated`` counts devices (cores for a CPU class), at most what the host has;
    ``declared`` is what the replicas declared when that was more (else ``None``).
    ``busy_s`` and ``allocated_s`` are device-seconds; ``utilization`` is their ratio held
    to 1.  ``flops`` is what the work on this class needed, ``mfu`` that over ``peak_flops
    x allocated x wall`` held to 1; both ``None`` when no FLOPs were given for its units,
    and ``mfu`` also when the catalog has no peak for the class.  ``measured`` tells a
    measured basis from a declared one (see ``basis``); ``note`` says, in words, where a
    figure was held to what exists.
    """

    device_class: str
    allocated: float
    allocated_s: float
    busy_s: float
    utilization: float
    basis: str
    measured: bool = True
    declared: float | None = None
    flops: float | None = None
    peak_flops: float | None = None
    mfu: float | None = None
    note: str = ""

    @property
    def under_allocated(self) -> bool:
        """More busy device-seconds than the plan allocated (``note`` says by how much)."""
        return self.declared is None and self.busy_s > self.allocated_s * (1 + 1e-9) > 0


class RunFigures(BaseModel):
    """The three figures of one run: two per device class, server capacity for the run.

    ``capacity_utilization`` is achieved items/s over the bound, held to 1;
    ``capacity_realized`` is the raw ratio, and ``capacity_note`` says when it is over 1
    (the plan under-predicted what these servers sustain).
    """

    run_id: str
    pipeline: str
    wall_s: float
    throughput: float
    classes: list[ClassFigures]
    capacity_bound: float | None = None
    capacity_utilization: float | None = None
    capacity_realized: float | None = None
    capacity_basis: str = ""
    capacity_note: str = ""

    def of(self, device_class: str) -> ClassFigures:
        """The figures of ``device_class``."""
        for entry in self.classes:
            if entry.device_class == device_class:
                return entry
        raise KeyError(f"run {self.run_id} allocated nothing of device class {device_class!r}")


def _canonical(name: str, known: Catalog) -> str:
    return known.get(name).name if name in known else name


def sample_class(sample: DeviceSample, known: Catalog | None = None) -> str:
    """The catalog class of the GPU a sample was read from (its NVML name when unknown)."""
    device = (known or catalog()).match(sample.name)
    return device.name if device is not None else sample.name


def sampled_busy(samples: Sequence[DeviceSample], wall_s: float,
                 known: Catalog | None = None) -> dict[str, tuple[int, float]]:
    """Per device class the samples show: (devices sampled, busy device-seconds).

    A device is a (node, NVML index) pair; its busy seconds are the mean of its samples'
    utilization times ``wall_s``, and a class's are the sum over its devices (so, sampled
    evenly, mean utilization x wall x devices).  Classes come in order of first sample.
    """
    known = known or catalog()
    readings: dict[tuple[str, str | None, int], list[float]] = {}
    for sample in samples:
        key = (sample_class(sample, known), sample.node, sample.device)
        readings.setdefault(key, []).append(min(max(sample.utilization, 0.0), 1.0))
    totals: dict[str, tuple[int, float]] = {}
    for (name, _, _), values in readings.items():
        devices, busy = totals.get(name, (0, 0.0))
        totals[name] = (devices + 1, busy + sum(values) / len(values) * wall_s)
    return totals


def unit_classes(units: list[UnitRecord], classes: Mapping[str, str] | None = None,
                 cpu_class: str = DEFAULT_CPU_CLASS,
                 known: Catalog | None = None, gpu_class: str = UNNAMED_GPU) -> dict[str, str]:
    """The device class each unit ran on: named in ``classes``, else CPU, else ``gpu_class``.

    Names the catalog knows are given as it spells them (``h100`` becomes ``H100-SXM``).
    """
    known = known or catalog()
    named = dict(classes or {})
    unknown = sorted(set(named) - {u.name for u in units})
    if unknown:
        raise InputError(f"device classes given for units {', '.join(unknown)}, which the run "
                         f"record does not have; its units are "
                         f"{', '.join(u.name for u in units)}")
    placed = {u.name: named.get(u.name) or (gpu_class if u.resources.get("gpu", 0.0) > 0
                                            else cpu_class)
              for u in units}
    return {unit: _canonical(name, known) for unit, name in placed.items()}


def _placed(record: RunRecord, classes: Mapping[str, str] | None, cpu_class: str,
            known: Catalog) -> tuple[dict[str, str], dict[str, tuple[int, float]]]:
    """Each unit's class (GPU units named nowhere go to the one class sampled, if one), and
    the device samples' figures per class."""
    sampled = sampled_busy(record.device_samples, record.wall_s, known)
    gpu_class = next(iter(sampled)) if len(sampled) == 1 else UNNAMED_GPU
    return unit_classes(record.units, classes, cpu_class, known, gpu_class), sampled


def _allocations(record: RunRecord, classes: Mapping[str, str] | None, cpu_class: str,
                 known: Catalog) -> dict[str, tuple[float, float, str, float | None]]:
    """Per class: (devices allocated, busy device-seconds, basis, declared when more than
    exists), in order of first use.

    A unit placed on an accelerator without a declared GPU share holds one whole device.
    An accelerator class with device samples takes its busy time from them, and at least
    the devices sampled as allocated.  Cores allocated are at most the host's cores, GPUs
    at most its GPUs (what the replicas declare beyond that does not exist to allocate).
    """
    placed, sampled = _placed(record, classes, cpu_class, known)
    cpu_class = _canonical(cpu_class, known)
    totals: dict[str, list[float]] = {}
    bases: dict[str, str] = {}
    for u in record.units:
        name = placed[u.name]
        cores = u.resources.get("cpu", 0.0)
        if device_kind(name, known) is DeviceKind.CPU:
            host, share = name, 0.0
        else:
            host, share = cpu_class, u.resources.get("gpu", 0.0) or 1.0
            entry = totals.setdefault(name, [0.0, 0.0])
            entry[0] += u.replicas * share
            entry[1] += u.busy_s * share
            bases[name] = GPU_BASIS
        if cores > 0:
            entry = totals.setdefault(host, [0.0, 0.0])
            entry[0] += u.replicas * cores
            entry[1] += u.used_cpu_s
            bases[host] = CPU_BASIS
    cores, gpus = host_limits(record.host)
    found: dict[str, tuple[float, float, str, float | None]] = {}
    for name, entry in totals.items():
        if name in sampled and bases[name] == GPU_BASIS:
            devices, busy = sampled[name]
            entry[0], entry[1] = max(entry[0], float(devices)), busy
            bases[name] = GPU_MEASURED_BASIS
        limit = cores if device_kind(name, known) is DeviceKind.CPU else gpus
        declared = None
        if limit is not None and entry[0] > limit + 1e-9:
            declared, entry[0] = entry[0], limit
        found[name] = (entry[0], entry[1], bases[name], declared)
    return found


def _class_note(name: str, alloc: float, busy: float, wall: float, declared: float | None,
                known: Catalog) -> str:
    what = "cores" if device_kind(name, known) is DeviceKind.CPU else "GPUs"
    notes = []
    if declared is not None:
        notes.append(f"the replicas declared {declared:g} {what}; the host has {alloc:g}, so "
                     f"{alloc:g} are counted as allocated")
    if declared is None:
        notes.append(over_allocation(f"{name} ({what})", busy, alloc * wall))
    elif busy > alloc * wall * (1 + 1e-9):
        notes.append(f"busy {busy:,.2f} device-s is more than the host's {alloc * wall:,.2f} "
                     "(a measurement error): shown as 100%")
    return "; ".join(n for n in notes if n)


def fleet_utilization(record: RunRecord, classes: Mapping[str, str] | None = None, *,
                      cpu_class: str = DEFAULT_CPU_CLASS,
                      known: Catalog | None = None) -> list[ClassFigures]:
    """Busy device-seconds over allocated device-seconds, per device class (no MFU)."""
    known = known or catalog()
    wall = record.wall_s
    return [ClassFigures(device_class=name, allocated=alloc, allocated_s=alloc * wall,
                         busy_s=busy, utilization=share(busy, alloc * wall), basis=basis,
                         measured=basis.startswith("measured"), declared=declared,
                         note=_class_note(name, alloc, busy, wall, declared, known))
            for name, (alloc, busy, basis, declared)
            in _allocations(record, classes, cpu_class, known).items()]


def record_resources(record: RunRecord) -> list[ResourceRecord]:
    """The record's own resources (``cpu``, ``gpu``) as a report shows them: allocated at
    most what the host has, utilization held to 1 (`bounded_resources`)."""
    return bounded_resources(record.resources, record.host, record.wall_s)


def needed_flops(record: RunRecord, flops_per_item: Mapping[str, float],
                 classes: Mapping[str, str] | None = None,
                 cpu_class: str = DEFAULT_CPU_CLASS,
                 known: Catalog | None = None) -> dict[str, float]:
    """FLOPs the run's work needed per device class: items each unit took x its FLOPs/item."""
    known = known or catalog()
    placed, _ = _placed(record, classes, cpu_class, known)
    unknown = sorted(set(flops_per_item) - set(placed))
    if unknown:
        raise InputError(f"FLOPs per item given for units {', '.join(unknown)}, which the run "
                         f"record does not have; its units are {', '.join(placed)}")
    needed: dict[str, float] = {}
    for u in record.units:
        flops = flops_per_item.get(u.name)
        if flops:
            needed[placed[u.name]] = needed.get(placed[u.name], 0.0) + u.items_in * flops
    return needed


def model_flops_utilization(record: RunRecord, flops_per_item: Mapping[str, float],
                            classes: Mapping[str, str] | None = None, *,
                            cpu_class: str = DEFAULT_CPU_CLASS, precision: Precision = "fp16",
                            known: Catalog | None = None) -> dict[str, float]:
    """MFU per device class: FLOPs needed / (peak FLOP/s x devices allocated x wall seconds),
    at most 1 (more means the FLOPs per item overstate the work; `run_figures` says so).

    The peak is the catalog's: FP32 for a CPU class (no CPU in it runs FP16 faster), the
    ``precision`` figure for an accelerator.  A class without that figure in the catalog
    (or not in the catalog) gets no MFU.
    """
    known = known or catalog()
    allocated = _allocations(record, classes, cpu_class, known)
    figures = {}
    for name, flops in needed_flops(record, flops_per_item, classes, cpu_class, known).items():
        peak = _peak(name, precision, known)
        if peak is None:
            continue
        devices = allocated[name][0] if name in allocated else 0.0
        figures[name] = share(flops, peak * devices * record.wall_s)
    return figures


def _peak(name: str, precision: Precision, known: Catalog) -> float | None:
    if name == UNNAMED_GPU:
        raise InputError("a unit with FLOPs per item holds a GPU share, but no device class "
                         "was named for it; pass classes={unit: 'H100-SXM'} (or its class)")
    if name not in known:
        return None
    device = known.get(name)
    return device.fp32_flops if device.is_cpu or precision == "fp32" else device.fp16_flops


def capacity_utilization(throughput: float, bound: float) -> float:
    """Server-capacity utilization: achieved items/s over the most the servers sustain, at
    most 1 (a run faster than the bound shows the plan under-predicted: see
    `capacity_note`)."""
    return share(throughput, bound)


def capacity_note(throughput: float, bound: float) -> str:
    """Words for a run that beat its bound (empty when it did not)."""
    realized = ratio(throughput, bound)
    if realized <= 1.0:
        return ""
    return (f"the plan under-predicted (realized {realized:.2f}\u00d7 the prediction: "
            f"{throughput:,.1f} vs {bound:,.1f} items/s); shown as 100%, never more than full")


def capacity_bound(plan: Plan) -> float:
    """The most the plan's servers sustain for this workload, as the plan's figures use it.

    That is the fitted plan's proven bound (the LP relaxation or the MILP's dual bound), or
    a throughput either side reaches when it is higher.
    """
    return max(plan.fitted.result.bound, plan.fitted.throughput, plan.monolithic.throughput)


def plan_flops(plan: Plan, record: RunRecord) -> dict[str, float]:
    """FLOPs per item of the record's units as the plan's profile counted or declared them.

    A record of the fused baseline (one unit the plan does not have) gets the sum of the
    stages' FLOPs, each times its items per source item.
    """
    names = [u.name for u in record.units]
    counted = {name: f for name, f in plan.flops.items() if f}
    if set(names) <= set(plan.units):
        return {name: f for name, f in counted.items() if name in names}
    fused = sum(plan.multiplicity.get(name, 1.0) * f for name, f in counted.items())
    if len(names) == 1 and fused:
        return {names[0]: fused}
    return {}


def run_figures(record: RunRecord, plan: Plan | None = None,
                flops_per_item: Mapping[str, float] | None = None,
                classes: Mapping[str, str] | None = None, *,
                cpu_class: str = DEFAULT_CPU_CLASS, precision: Precision = "fp16",
                bound: float | None = None, known: Catalog | None = None) -> RunFigures:
    """All three figures of ``record``.

    FLOPs per item come from ``flops_per_item``, else from ``plan``'s profile; the capacity
    bound from ``bound``, else from ``plan`` (`capacity_bound`); without either, no capacity
    figure.
    """
    known = known or catalog()
    if flops_per_item is None and plan is not None:
        flops_per_item = plan_flops(plan, record)
    mfu = model_flops_utilization(record, flops_per_item or {}, classes, cpu_class=cpu_class,
                                  precision=precision, known=known)
    needed = needed_flops(record, flops_per_item or {}, classes, cpu_class, known)
    rows = []
    for row in fleet_utilization(record, classes, cpu_class=cpu_class, known=known):
        if row.device_class in needed:
            peak = _peak(row.device_class, precision, known)
            flops = needed[row.device_class]
            note = row.note
            if peak is not None and flops > peak * row.allocated_s * (1 + 1e-9):
                note = "; ".join(n for n in (note, (
                    f"the FLOPs counted ({flops:.3g}) exceed the peak over the run "
                    f"({peak * row.allocated_s:.3g}): MFU shown as 100%; the FLOPs per item "
                    "overstate the work or the catalog's peak is low")) if n)
            row = row.model_copy(update={
                "flops": flops, "mfu": mfu.get(row.device_class), "peak_flops": peak,
                "note": note})
        rows.append(row)
    basis = ""
    if bound is None and plan is not None:
        bound = capacity_bound(plan)
        basis = (f"achieved items/s / plan bound for fleet {plan.fleet.name!r} "
                 f"({bound:,.1f} items/s)")
    elif bound is not None:
        basis = f"achieved items/s / given bound ({bound:,.1f} items/s)"
    return RunFigures(
        run_id=record.run_id, pipeline=record.pipeline, wall_s=record.wall_s,
        throughput=record.throughput, classes=rows, capacity_bound=bound,
        capacity_utilization=None if bound is None else capacity_utilization(
            record.throughput, bound),
        capacity_realized=None if bound is None else ratio(record.throughput, bound),
        capacity_basis=basis,
        capacity_note="" if bound is None else capacity_note(record.throughput, bound))
