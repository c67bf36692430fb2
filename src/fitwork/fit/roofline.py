"""The roofline: a device class's peaks, which bound a piece of work, and how long it takes.

The primitives both the cost model (`fitwork.fit.cost`) and its calibration
(`fitwork.fit.calibration`) stand on: datasheet peaks read through `DevicePeaks`, the
balance point that tells compute-bound from memory-bound work, and roofline time.
"""

from __future__ import annotations

from typing import Literal, Protocol

from fitwork.errors import FitworkError

Bound = Literal["compute", "memory"]
Precision = Literal["fp16", "fp32"]
TransferKind = Literal["bytes", "assumed", "flops", "cpu"]
DEFAULT_EFFICIENCY = 0.35
"""The efficiency assumed where nothing better is known (kept for callers that pass it)."""


class DevicePeaks(Protocol):
    """What the cost model reads of a device class (the catalog's `DeviceClass` has it)."""

    name: str
    fp16_flops: float
    fp32_flops: float | None
    memory_bandwidth: float | None
    memory_bytes: int

    @property
    def kind(self) -> str:
        """cpu, gpu or accelerator (read only: the catalog's is a `DeviceKind`)."""


class CostModelError(FitworkError, ValueError):
    """A rate cannot be estimated from what the profile holds."""


def peak_flops(device: DevicePeaks, precision: Precision) -> float | None:
    """The device's peak FLOP/s at ``precision`` (``None`` where none is published)."""
    return device.fp16_flops if precision == "fp16" else device.fp32_flops


def checked_peak(device: DevicePeaks, precision: Precision) -> float:
    peak = peak_flops(device, precision)
    if not peak:
        raise CostModelError(f"device class {device.name}: the catalog has no {precision} peak; "
                             "profile the unit there, or plan it at another precision")
    return peak


def checked_bandwidth(device: DevicePeaks) -> float:
    if not device.memory_bandwidth:
        raise CostModelError(f"device class {device.name}: the catalog has no memory bandwidth; "
                             "memory-bound work cannot be carried there")
    return device.memory_bandwidth


def scale_ratio(source: DevicePeaks, target: DevicePeaks, bound: Bound,
                precision: Precision = "fp32") -> float:
    """How much longer the same work takes on ``target`` than on ``source`` (<1: faster).

    The datasheet ratio: peak FLOP/s for compute-bound work, bandwidth for memory-bound.
    """
    if bound == "compute":
        return checked_peak(source, precision) / checked_peak(target, precision)
    return checked_bandwidth(source) / checked_bandwidth(target)


def transfer_rate(rate: float, source: DevicePeaks, target: DevicePeaks, bound: Bound,
                  precision: Precision = "fp32") -> float:
    """A measured rate on ``source`` carried to ``target`` by the datasheet ratio."""
    return rate / scale_ratio(source, target, bound, precision)


def choose_bound(flops_per_item: float | None, bytes_per_item: float | None,
                 device: DevicePeaks, precision: Precision = "fp32") -> tuple[Bound, str]:
    """Compute- or memory-bound on ``device`` by its datasheet balance point, and why."""
    if not flops_per_item or not bytes_per_item or bytes_per_item <= 0:
        return "compute", "FLOPs or device bytes unknown: assumed compute-bound"
    intensity = flops_per_item / bytes_per_item
    balance = checked_peak(device, precision) / checked_bandwidth(device)
    bound: Bound = "compute" if intensity >= balance else "memory"
    return bound, f"intensity {intensity:.3g} FLOP/B vs balance {balance:.3g} on {device.name}"


def roofline_seconds(flops: float | None, nbytes: float | None, device: DevicePeaks,
                     precision: Precision, efficiency: tuple[float, float] = (1.0, 1.0)
                     ) -> tuple[float, Bound]:
    """Roofline time of ``flops`` FLOPs moving ``nbytes`` bytes, and the bound that sets it.

    ``efficiency`` is (compute, memory) achieved / roofline; a ``None`` side is left out.
    """
    compute = memory = 0.0
    if flops:
        compute = flops / (checked_peak(device, precision) * efficiency[0])
    if nbytes:
        memory = nbytes / (checked_bandwidth(device) * efficiency[1])
    if not flops and not nbytes:
        raise CostModelError("roofline needs FLOPs or device bytes per item")
    return (compute, "compute") if compute >= memory else (memory, "memory")
