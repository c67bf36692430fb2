"""The cost model: r(unit, class), items per second of one replica on a device class.

Where a unit was profiled on a class, its rate there is measured.  Elsewhere it is
transferred by roofline from the measured class:

    t(target) = t_host + t_device(source) x ratio
    ratio     = peak FLOP/s(source) / peak FLOP/s(target)    compute-bound work
              = bandwidth(source)   / bandwidth(target)      memory-bound work

``t_host`` (waiting on I/O, Python around the kernel) stays as measured.  Which bound
applies comes from the unit's arithmetic intensity (FLOPs per byte moved) against the
source class's balance point (peak FLOP/s / bandwidth) when FLOPs are known; otherwise
the transfer assumes compute-bound and says so.  A GPU unit profiled only on a CPU host
has no device time to scale: its GPU time is estimated as FLOPs / (peak x efficiency),
with the efficiency an explicit, reported assumption.  Every estimate carries the method
and assumption that produced it, so a plan shows how much of it is measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel

from fitwork.errors import FitworkError
from fitwork.profiling.record import UnitProfile

Bound = Literal["compute", "memory"]
Precision = Literal["fp16", "fp32"]
DEFAULT_EFFICIENCY = 0.35


class DevicePeaks(Protocol):
    """What the cost model reads of a device class (the catalog's `DeviceClass` has it)."""

    name: str
    kind: str
    fp16_flops: float
    fp32_flops: float
    memory_bandwidth: float


class CostModelError(FitworkError, ValueError):
    """A rate cannot be estimated from what the profile holds."""


class RateEstimate(BaseModel):
    """One entry of r(unit, class), with how it was obtained."""

    unit: str
    device_class: str
    rate: float
    seconds_per_item: float
    method: Literal["measured", "roofline", "flops"]
    source_class: str | None = None
    bound: Bound | None = None
    note: str = ""


def peak_flops(device: DevicePeaks, precision: Precision) -> float:
    """The device's peak FLOP/s at ``precision``."""
    return device.fp16_flops if precision == "fp16" else device.fp32_flops


def scale_ratio(source: DevicePeaks, target: DevicePeaks, bound: Bound,
                precision: Precision = "fp32") -> float:
    """How much longer the same work takes on ``target`` than on ``source`` (<1: faster)."""
    if bound == "compute":
        return peak_flops(source, precision) / peak_flops(target, precision)
    return source.memory_bandwidth / target.memory_bandwidth


def transfer_rate(rate: float, source: DevicePeaks, target: DevicePeaks, bound: Bound,
                  precision: Precision = "fp32") -> float:
    """A measured rate on ``source`` carried to ``target`` by roofline (all device time)."""
    return rate / scale_ratio(source, target, bound, precision)


def choose_bound(flops_per_item: float | None, bytes_per_item: float, device: DevicePeaks,
                 precision: Precision = "fp32") -> tuple[Bound, str]:
    """Compute- or memory-bound on ``device``, and why (intensity against balance point)."""
    if not flops_per_item or bytes_per_item <= 0:
        return "compute", "FLOPs or bytes unknown: assumed compute-bound"
    intensity = flops_per_item / bytes_per_item
    balance = peak_flops(device, precision) / device.memory_bandwidth
    bound: Bound = "compute" if intensity >= balance else "memory"
    return bound, f"intensity {intensity:.3g} FLOP/B vs balance {balance:.3g} on {device.name}"


def _rate(seconds: float, profile: UnitProfile) -> float:
    """Items/s of one replica: an I/O unit overlaps ``io`` calls, up to its CPU time."""
    if seconds <= 0:
        return 0.0
    concurrency = profile.resources.get("io", 0.0)
    if concurrency:
        return min(concurrency / seconds, 1 / max(profile.cpu_s, 1e-9))
    return 1 / seconds


def unit_rates(profile: UnitProfile, classes: Sequence[DevicePeaks], measured: DevicePeaks,
               *, precision: Precision = "fp16",
               efficiency: float = DEFAULT_EFFICIENCY) -> list[RateEstimate]:
    """r(unit, c) for every class ``c`` the unit can run on.

    A unit that demands a GPU runs on accelerator classes; any other unit runs on CPU
    classes.  ``measured`` is the class the profile was taken on.
    """
    wants_gpu = profile.resources.get("gpu", 0.0) > 0
    targets = [c for c in classes if (c.kind != "cpu") == wants_gpu]
    estimates = []
    for target in targets:
        if wants_gpu:
            estimate = _gpu_estimate(profile, target, measured, precision, efficiency)
        else:
            estimate = _cpu_estimate(profile, target, measured)
        if estimate is not None:
            estimates.append(estimate)
    if not estimates:
        raise CostModelError(
            f"unit {profile.name!r} demands a GPU but its profile has neither accelerator time "
            "nor FLOPs; declare flops= on the unit, or profile it on a host with a GPU")
    return estimates


def _cpu_estimate(profile: UnitProfile, target: DevicePeaks,
                  measured: DevicePeaks) -> RateEstimate:
    host = max(profile.wall_s - profile.cpu_s, 0.0)
    if target.name == measured.name:
        return RateEstimate(unit=profile.name, device_class=target.name,
                            rate=_rate(profile.wall_s, profile),
                            seconds_per_item=profile.wall_s, method="measured")
    ratio = scale_ratio(measured, target, "compute", "fp32")
    seconds = host + profile.cpu_s * ratio
    return RateEstimate(
        unit=profile.name, device_class=target.name, rate=_rate(seconds, profile),
        seconds_per_item=seconds, method="roofline", source_class=measured.name,
        bound="compute", note=f"CPU time x {ratio:.3g} (FP32 per core); waiting time kept")


def _gpu_estimate(profile: UnitProfile, target: DevicePeaks, measured: DevicePeaks,
                  precision: Precision, efficiency: float) -> RateEstimate | None:
    if profile.accel_s:
        host = max(profile.wall_s - profile.accel_s, 0.0)
        if target.name == measured.name:
            return RateEstimate(unit=profile.name, device_class=target.name,
                                rate=_rate(profile.wall_s, profile),
                                seconds_per_item=profile.wall_s, method="measured")
        bound, why = choose_bound(profile.flops, profile.bytes_in + profile.bytes_out,
                                  measured, precision)
        seconds = host + profile.accel_s * scale_ratio(measured, target, bound, precision)
        return RateEstimate(unit=profile.name, device_class=target.name,
                            rate=_rate(seconds, profile), seconds_per_item=seconds,
                            method="roofline", source_class=measured.name, bound=bound,
                            note=why)
    if not profile.flops:
        return None
    seconds = profile.flops / (peak_flops(target, precision) * efficiency)
    return RateEstimate(
        unit=profile.name, device_class=target.name, rate=_rate(seconds, profile),
        seconds_per_item=seconds, method="flops", bound="compute",
        note=f"{profile.flops:.3g} FLOP/item at {efficiency:.0%} of {precision} peak "
             f"(assumed; profiled on {measured.name} only)")
