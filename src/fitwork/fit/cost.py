"""The cost model: r(unit, class), items per second of one replica on a device class.

Where a unit was profiled on a class, its rate there is measured.  Elsewhere it is
transferred by roofline from the measured class, with the bound chosen PER TARGET CLASS::

    t(target)  = t_host + t_device(source) x R(target) / R(source)
    R(c)       = max(F / (peak_c x e_c,compute),  B / (bandwidth_c x e_c,memory))

F is the unit's FLOPs per item, B its ``device_bytes`` per item (what it moves through device
memory: weights, activations, KV cache; NOT ``bytes_in``/``bytes_out``, which are the bytes
sent between units), e the class's efficiency (achieved / roofline) for that bound.  Which
term wins is the bound on that class: the unit's arithmetic intensity F / B against the
class's balance point peak x e_compute / (bandwidth x e_memory).  A unit can be memory-bound
on an H100 and compute-bound on an A100.  ``t_host`` (I/O, Python around the kernel) stays as
measured.  Efficiencies are calibrated (``calibration.py``) from measured LLM steps on
A100-80GB and H100-SXM (splitwise perf_model.csv); a class without calibration takes the
pooled median of the calibrated ones, and every estimate names the efficiency it used.

When ``device_bytes`` is unknown the bound cannot be judged: the transfer assumes
compute-bound (peak FLOP/s ratio at ``precision``), says so in its note, and, among K80, P100
and V100 at FP32, applies the per-class factor calibrated on Gavel's measured matrix.  A GPU
unit profiled only on a CPU host has no device time to scale: its time is R(target) itself
(``method="flops"``).  A class whose device memory (times the replica's device share) is
below the unit's ``device_memory`` gets rate 0 and a note saying why.

Rates depend on batch size: ``batch_rates`` gives r at every batch size the profile measured
(with the batch's wall time as its latency); ``unit_rates`` gives it at the unit's own batch
size.  ``device_bytes`` is per item at the unit's batch size and is reused at the others.

Every transferred rate carries the error its kind of transfer showed on measured data
(median and p90 relative error of the rate, and a p10-p90 range of measured / predicted),
from the checks in ``calibration.py``; a measured rate's range comes from the profile's own
calls and the host's load while profiling (`UnitProfile.rate_spread`), and a transferred
rate carries that spread of its source too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from fitwork.fit.roofline import (
    DEFAULT_EFFICIENCY,
    Bound,
    CostModelError,
    DevicePeaks,
    Precision,
    TransferKind,
    checked_bandwidth,
    checked_peak,
    choose_bound,
    peak_flops,
    roofline_seconds,
    scale_ratio,
    transfer_rate,
)
from fitwork.profiling.record import UnitProfile

__all__ = [
    "DEFAULT_EFFICIENCY", "Bound", "CostModelError", "DevicePeaks", "Precision",
    "RateEstimate", "TransferKind", "batch_rates", "choose_bound", "peak_flops",
    "roofline_seconds", "scale_ratio", "transfer_rate", "unit_rates",
]

class RateEstimate(BaseModel):
    """One entry of r(unit, class), with how it was obtained and how far to trust it.

    ``batch_size`` is the batch the rate is for and ``batch_latency_s`` the wall time of one
    such batch.  ``efficiency`` is the target class's achieved / roofline figure the estimate
    used (``efficiency_source`` says where it comes from).  ``error_median`` and ``error_p90``
    are the relative errors of the rate (|predicted - measured| / measured) that this kind of
    transfer showed on measured pairs, ``error_basis`` which pairs; ``rate_low`` and
    ``rate_high`` are the rate times the p10 and p90 of measured / predicted there.  A
    measured rate has zero error and a range from its profile (``error_basis`` says).
    ``rate`` 0 means the unit cannot run on the class (``method="infeasible"``, the note says
    why).
    """

    unit: str
    device_class: str
    rate: float
    seconds_per_item: float
    method: Literal["measured", "roofline", "flops", "infeasible"]
    source_class: str | None = None
    bound: Bound | None = None
    note: str = ""
    batch_size: int | None = None
    batch_latency_s: float | None = None
    efficiency: float | None = None
    efficiency_source: str = ""
    error_median: float = 0.0
    error_p90: float = 0.0
    error_basis: str = ""
    rate_low: float | None = None
    rate_high: float | None = None

    @property
    def transferred(self) -> bool:
        """Whether the rate was carried from elsewhere rather than measured on its class."""
        return self.method in ("roofline", "flops")

    def bounds(self) -> tuple[float, float]:
        """``(rate_low, rate_high)``, the rate itself where no range was stated."""
        low = self.rate if self.rate_low is None else self.rate_low
        high = self.rate if self.rate_high is None else self.rate_high
        return low, high


@dataclass(frozen=True)
class _At:
    """A unit's per-item figures at one batch size."""

    batch_size: int | None
    wall_s: float
    cpu_s: float
    accel_s: float | None


def _own(profile: UnitProfile) -> _At:
    return _At(profile.batch_size, profile.wall_s, profile.cpu_s, profile.accel_s)


def _rate(seconds: float, cpu_s: float, profile: UnitProfile) -> float:
    """Items/s of one replica: an I/O unit overlaps ``io`` calls, up to its CPU time."""
    if seconds <= 0:
        return 0.0
    concurrency = profile.resources.get("io", 0.0)
    if concurrency:
        return min(concurrency / seconds, 1 / max(cpu_s, 1e-9))
    return 1 / seconds


def unit_rates(profile: UnitProfile, classes: Sequence[DevicePeaks], measured: DevicePeaks,
               *, precision: Precision = "fp16",
               efficiency: float | None = None) -> list[RateEstimate]:
    """r(unit, c) at the unit's own batch size, for every class ``c`` it can run on.

    A unit that demands a GPU runs on accelerator classes; any other unit runs on CPU
    classes.  ``measured`` is the class the profile was taken on.  ``efficiency`` overrides
    the calibrated efficiency of units profiled without an accelerator (``method="flops"``).
    """
    estimates = _estimates(profile, _own(profile), classes, measured, precision, efficiency)
    if not estimates:
        raise CostModelError(
            f"unit {profile.name!r} demands a GPU but its profile has neither accelerator time "
            "nor FLOPs; declare flops= on the unit, or profile it on a host with a GPU")
    return estimates


def batch_rates(profile: UnitProfile, classes: Sequence[DevicePeaks], measured: DevicePeaks,
                *, precision: Precision = "fp16",
                efficiency: float | None = None) -> list[RateEstimate]:
    """r(unit, c) at every batch size the profile measured (its own, if it measured none).

    Each estimate's ``batch_size`` says which batch it is for and ``batch_latency_s`` how long
    one batch takes; ordered by batch size, then class.
    """
    views = [_At(b.batch_size, b.wall_s, b.cpu_s, b.accel_s)
             for b in sorted(profile.batches, key=lambda b: b.batch_size)] or [_own(profile)]
    out: list[RateEstimate] = []
    for at in views:
        out.extend(_estimates(profile, at, classes, measured, precision, efficiency))
    if not out:
        raise CostModelError(
            f"unit {profile.name!r} demands a GPU but its profile has neither accelerator time "
            "nor FLOPs; declare flops= on the unit, or profile it on a host with a GPU")
    return out


def _estimates(profile: UnitProfile, at: _At, classes: Sequence[DevicePeaks],
               measured: DevicePeaks, precision: Precision,
               efficiency: float | None) -> list[RateEstimate]:
    wants_gpu = profile.resources.get("gpu", 0.0) > 0
    estimates = []
    for target in (c for c in classes if (c.kind != "cpu") == wants_gpu):
        estimate = _too_small(profile, at, target, measured)
        if estimate is None:
            try:
                if wants_gpu:
                    estimate = _gpu_estimate(profile, at, target, measured, precision, efficiency)
                else:
                    estimate = _cpu_estimate(profile, at, target, measured)
            except CostModelError as missing:
                estimate = _infeasible(profile, at, target, str(missing))
        if estimate is not None:
            estimates.append(estimate)
    return estimates


def _infeasible(profile: UnitProfile, at: _At, target: DevicePeaks,
                why: str) -> RateEstimate:
    return RateEstimate(unit=profile.name, device_class=target.name, rate=0.0,
                        seconds_per_item=0.0, method="infeasible", note=why,
                        batch_size=at.batch_size, rate_low=0.0, rate_high=0.0,
                        error_basis="cannot run there")


def _too_small(profile: UnitProfile, at: _At, target: DevicePeaks,
               measured: DevicePeaks) -> RateEstimate | None:
    """Rate 0 where one replica's device memory exceeds what it gets of ``target``."""
    need = profile.device_memory
    if not need or target.kind == "cpu" or target.name == measured.name:
        return None
    share = profile.resources.get("gpu", 0.0) or 1.0
    held = target.memory_bytes * (share if share < 1 else math.ceil(share))
    if held >= need:
        return None
    return _infeasible(profile, at, target,
                       f"needs {need / 2**30:.1f} GiB of device memory per replica; "
                       f"{target.name} gives it {held / 2**30:.1f} GiB "
                       f"({share:g} x {target.memory_bytes / 2**30:.0f} GiB)")


def _measured(profile: UnitProfile, at: _At, target: DevicePeaks) -> RateEstimate:
    rate = _rate(at.wall_s, at.cpu_s, profile)
    spread = profile.rate_spread(at.batch_size)  # the profile's own calls and host load
    return RateEstimate(unit=profile.name, device_class=target.name, rate=rate,
                        seconds_per_item=at.wall_s, method="measured",
                        batch_size=at.batch_size, batch_latency_s=_latency(at.wall_s, at),
                        rate_low=rate * spread.low, rate_high=rate * spread.high,
                        error_basis=spread.basis)


def _latency(seconds: float, at: _At) -> float:
    return seconds * (at.batch_size or 1)


def _transferred(profile: UnitProfile, at: _At, target: DevicePeaks, seconds: float, *,
                 method: Literal["roofline", "flops"], kind: TransferKind,
                 source: DevicePeaks, bound: Bound | None, note: str,
                 precision: Precision, efficiency: float | None = None,
                 efficiency_source: str = "") -> RateEstimate:
    from fitwork.fit.calibration import calibration
    from fitwork.fit.heldout import widened

    rate = _rate(seconds, at.cpu_s, profile)
    error = calibration().error(kind, source.name, target.name, bound, precision)
    if method == "roofline":  # the measured side's own spread travels with it
        spread = profile.rate_spread(at.batch_size)
        low, high = widened(error.low, error.high,
                            max(-math.log(spread.low), math.log(spread.high)))
        error = error.model_copy(update={"low": low, "high": high})
    return RateEstimate(
        unit=profile.name, device_class=target.name, rate=rate, seconds_per_item=seconds,
        method=method, source_class=source.name if method == "roofline" else None,
        bound=bound, note=note, batch_size=at.batch_size,
        batch_latency_s=_latency(seconds, at), efficiency=efficiency,
        efficiency_source=efficiency_source, error_median=error.median,
        error_p90=error.p90, error_basis=error.basis, rate_low=rate * error.low,
        rate_high=rate * error.high)


def _cpu_estimate(profile: UnitProfile, at: _At, target: DevicePeaks,
                  measured: DevicePeaks) -> RateEstimate:
    if target.name == measured.name:
        return _measured(profile, at, target)
    host = max(at.wall_s - at.cpu_s, 0.0)
    ratio = scale_ratio(measured, target, "compute", "fp32")
    return _transferred(profile, at, target, host + at.cpu_s * ratio, method="roofline",
                        kind="cpu", source=measured, bound="compute", precision="fp32",
                        note=f"CPU time x {ratio:.3g} (FP32 per core); waiting time kept")


def _gpu_estimate(profile: UnitProfile, at: _At, target: DevicePeaks, measured: DevicePeaks,
                  precision: Precision, efficiency: float | None) -> RateEstimate | None:
    from fitwork.fit.calibration import calibration

    known = calibration()
    flops, nbytes = profile.flops, profile.device_bytes
    if at.accel_s:
        if target.name == measured.name:
            return _measured(profile, at, target)
        host = max(at.wall_s - at.accel_s, 0.0)
        if flops and nbytes:
            e_src, why_src = known.device_efficiency(measured.name)
            e_dst, why_dst = known.device_efficiency(target.name)
            r_src, _ = roofline_seconds(flops, nbytes, measured, precision, e_src)
            r_dst, bound = roofline_seconds(flops, nbytes, target, precision, e_dst)
            seconds = host + at.accel_s * r_dst / r_src
            return _transferred(
                profile, at, target, seconds, method="roofline", kind="bytes", source=measured,
                bound=bound, precision=precision,
                note=f"{_intensity(flops, nbytes, target, precision, e_dst)}; device time x "
                     f"{r_dst / r_src:.3g} (roofline {target.name} / {measured.name})",
                efficiency=e_dst[0 if bound == "compute" else 1],
                efficiency_source=f"{why_dst}; source side: {why_src}")
        ratio = scale_ratio(measured, target, "compute", precision)
        factor, why = known.generation_factor(measured.name, target.name, precision)
        seconds = host + at.accel_s * ratio / factor
        missing = "device bytes unknown" if flops else "FLOPs and device bytes unknown"
        return _transferred(
            profile, at, target, seconds, method="roofline", kind="assumed", source=measured,
            bound="compute", precision=precision,
            note=f"{missing} (bytes_in/bytes_out are bytes between units, not device traffic): "
                 f"compute-bound assumed; device time x {ratio / factor:.3g} ({precision} peak "
                 f"ratio{'' if factor == 1.0 else f' / calibrated factor {factor:.3g}'})",
            efficiency=factor if factor != 1.0 else None, efficiency_source=why)
    if not flops:
        return None
    if efficiency is not None:
        eff, why = (efficiency, efficiency), f"{efficiency:.0%} given by the caller (assumed)"
    else:
        eff, why = known.device_efficiency(target.name)
    seconds, bound = roofline_seconds(flops, nbytes, target, precision, eff)
    shown = eff[0 if bound == "compute" else 1]
    return _transferred(
        profile, at, target, seconds, method="flops", kind="flops", source=measured,
        bound=bound, precision=precision,
        note=f"{flops:.3g} FLOP/item at {shown:.0%} of {precision} peak"
             + (f", {_intensity(flops, nbytes, target, precision, eff)}" if nbytes else
                ", device bytes unknown: compute-bound assumed")
             + f" (no accelerator time: profiled on {measured.name} only)",
        efficiency=shown, efficiency_source=why)


def _intensity(flops: float, nbytes: float, device: DevicePeaks, precision: Precision,
               efficiency: tuple[float, float]) -> str:
    peak, bandwidth = checked_peak(device, precision), checked_bandwidth(device)
    effective = peak * efficiency[0] / (bandwidth * efficiency[1])
    return (f"intensity {flops / nbytes:.3g} FLOP/B vs balance {effective:.3g} on "
            f"{device.name} at calibrated efficiencies ({peak / bandwidth:.3g} by datasheet)")
