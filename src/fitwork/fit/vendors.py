"""Per-vendor attainment: what another vendor's accelerators reach of a roofline transfer.

``mlperf_vendor_rows.csv`` (``fitwork/fit/data/``, see the README there) holds MLPerf
closed-division results, single node, valid runs: Inference v4.1 (Llama-2-70B,
Mixtral-8x7B, SDXL) and Training v5.1 (Llama-2-70B LoRA), on H100-SXM, H200 and MI300X: only
repositories whose licence was checked (Apache-2.0); no Intel row is shipped, so Intel is
"not calibrated for this vendor".  Each benchmark has a bound: LLM serving is memory-bound
(H200 over H100 follows the bandwidth ratio, not the FLOP ratio), SDXL and LoRA training
compute-bound.  A row's
efficiency is its rate per device over the class's bandwidth (memory) or FP16 peak (compute);
its ATTAINMENT is that over the median efficiency of NVIDIA's rows of the same benchmark,
scenario and round from other submissions (any round where that one has none): the share of
the roofline transfer from NVIDIA that the row reached.

Per vendor and bound (`vendor_fit`): the median attainment, and a p10-p90 range of measured /
predicted from leave-one-submission-out (a submission is a submitter in a round): each
submission predicted by the median of the others.  Where fewer than `MIN_GROUPS`
submissions, or rows of fewer than `MIN_BENCHMARKS` benchmarks, exist the range is widened
(in quadrature) to span at least the whole spread of attainments seen across vendors
(`attainment_spread`): few rows give a WIDE range, computed from the rows, never NVIDIA's.
A vendor with no rows for a bound is "not calibrated for this vendor": it takes the median
attainment of the other vendors' rows (not NVIDIA's), with a range that spans the whole
spread.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fitwork.fit.heldout import Residual, data_rows, heldout_range
from fitwork.fit.roofline import Bound
from fitwork.hardware.catalog import Catalog

MLPERF_FILE = "mlperf_vendor_rows.csv"
MLPERF_SOURCE = ("MLPerf closed results (mlcommons/inference_results_v4.1 @ 198fc46, "
                 "training_results_v5.1 @ 441d65f; Apache-2.0)")
REFERENCE_VENDOR = "NVIDIA"
MIN_GROUPS = 3
"""Fewer submissions than this: the range spans at least the whole cross-vendor spread."""
MIN_BENCHMARKS = 2
"""Rows of fewer benchmarks than this say nothing of how another workload lands: likewise."""
UNCALIBRATED_VENDOR = "not calibrated for this vendor"
UNCALIBRATED_CLASS = "not calibrated for this class"


@dataclass(frozen=True)
class VendorRow:
    """One MLPerf result: a system of ``devices`` accelerators of one class."""

    round: str
    submitter: str
    system: str
    device_class: str
    vendor: str
    devices: int
    benchmark: str
    scenario: str
    bound: Bound
    rate: float
    path: str

    def efficiency(self, known: Catalog) -> float:
        """Rate per device per unit of the bound's roofline (bandwidth or FP16 peak)."""
        device = known.get(self.device_class)
        roof = device.memory_bandwidth if self.bound == "memory" else device.fp16_flops
        return self.rate / self.devices / float(roof or float("nan"))

    @property
    def group(self) -> str:
        """The submission (submitter and round): the unit held out together."""
        return f"{self.submitter} ({self.round})"


@dataclass(frozen=True)
class VendorFit:
    """A vendor's attainment for one bound and its p10-p90 range of measured / predicted."""

    vendor: str
    bound: Bound
    value: float
    low: float
    high: float
    n: int
    groups: int
    classes: tuple[str, ...]
    basis: str

    @property
    def calibrated(self) -> bool:
        """Whether any row of the vendor was measured for this bound."""
        return self.n > 0


def vendor_of(known: Catalog, name: str) -> str:
    """The first word of class ``name``'s vendor (``AMD``, ``Intel``, ``NVIDIA``)."""
    return known.get(name).vendor.split(" ")[0]


def mlperf_rows(known: Catalog) -> list[VendorRow]:
    """The shipped MLPerf rows, each with its class's vendor and bound."""
    out = []
    for row in data_rows(MLPERF_FILE):
        bound: Bound = "memory" if row["bound"] == "memory" else "compute"
        out.append(VendorRow(row["round"], row["submitter"], row["system"], row["device_class"],
                             vendor_of(known, row["device_class"]), int(row["devices"]),
                             row["benchmark"], row["scenario"], bound, float(row["rate"]),
                             row["path"]))
    return out


def attainments(rows: Sequence[VendorRow], known: Catalog) -> list[tuple[VendorRow, float]]:
    """Each row's efficiency over the median of NVIDIA rows of its benchmark and scenario
    from other submissions, same round where there are any (rows without one left out)."""
    reference: dict[tuple[str, str], list[VendorRow]] = defaultdict(list)
    for r in rows:
        if r.vendor == REFERENCE_VENDOR:
            reference[r.benchmark, r.scenario].append(r)
    out = []
    for row in rows:
        others = [r for r in reference[row.benchmark, row.scenario] if r.group != row.group]
        same = [r for r in others if r.round == row.round] or others
        if same:
            base = statistics.median(r.efficiency(known) for r in same)
            out.append((row, row.efficiency(known) / base))
    return out


def attainment_spread(rows: Sequence[VendorRow], known: Catalog) -> float:
    """log(highest / lowest) attainment of every row of every vendor and bound."""
    values = [a for _, a in attainments(rows, known)]
    return float(np.log(max(values) / min(values))) if len(values) > 1 else 1.0


def _by_group(pairs: Sequence[tuple[VendorRow, float]]) -> dict[str, list[float]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for row, value in pairs:
        groups[row.group].append(value)
    return groups


def _range(groups: dict[str, list[float]], spread: float, few: bool) -> tuple[float, float]:
    """p10-p90 of measured / predicted, each submission predicted by the others' median;
    widened to span at least ``spread`` (log, the whole width) where rows are ``few``."""
    residuals = []
    for held, values in groups.items():
        rest = [v for g, vs in groups.items() if g != held for v in vs]
        if rest:
            centre = statistics.median(rest)
            residuals.extend(Residual("vendor", "", "", None, held, centre, v) for v in values)
    low, high = heldout_range(residuals) if residuals else (1.0, 1.0)
    if not few:
        return low, high
    centre, half = (np.log(low) + np.log(high)) / 2, (np.log(high) - np.log(low)) / 2
    half = float(np.hypot(half, spread / 2))
    return float(np.exp(centre - half)), float(np.exp(centre + half))


def vendor_fit(rows: Sequence[VendorRow], vendor: str, bound: Bound,
               known: Catalog) -> VendorFit:
    """``vendor``'s median attainment for ``bound`` and its leave-one-submission-out range."""
    spread = attainment_spread(rows, known)
    pairs = [(r, a) for r, a in attainments(rows, known)
             if r.vendor == vendor and r.bound == bound]
    if not pairs:
        return _unmeasured(rows, vendor, bound, known, spread)
    groups = _by_group(pairs)
    value = statistics.median(a for _, a in pairs)
    benchmarks = {r.benchmark for r, _ in pairs}
    thin = len(groups) < MIN_GROUPS or len(benchmarks) < MIN_BENCHMARKS
    low, high = _range(groups, spread, thin)
    classes = tuple(sorted({r.device_class for r, _ in pairs}))
    few = (f"; only {len(groups)} submission(s) of {len(benchmarks)} benchmark(s): widened to "
           f"span the cross-vendor spread x{np.exp(spread):.2f}" if thin else "")
    return VendorFit(vendor, bound, value, low, high, len(pairs), len(groups), classes,
                     f"{vendor} {bound}-bound attainment {value:.2f} of NVIDIA's per "
                     f"{'bandwidth' if bound == 'memory' else 'FP16 peak'} (p10-p90 of "
                     f"measured/predicted {low:.2f}-{high:.2f}, leave-one-submission-out over "
                     f"{len(pairs)} MLPerf rows of {len(groups)} submissions on "
                     f"{', '.join(classes)}{few}; {MLPERF_SOURCE})")


def _unmeasured(rows: Sequence[VendorRow], vendor: str, bound: Bound, known: Catalog,
                spread: float) -> VendorFit:
    """A vendor with no row for ``bound``: the median attainment of the other vendors'
    rows (not NVIDIA's; 1 where there are none), its range spanning the whole spread."""
    others = [a for r, a in attainments(rows, known)
              if r.vendor not in (vendor, REFERENCE_VENDOR) and r.bound == bound]
    value = statistics.median(others) if others else 1.0
    said = (f"the median attainment {value:.2f} of {len(others)} rows of other vendors than "
            f"{REFERENCE_VENDOR}" if others else f"{REFERENCE_VENDOR}'s efficiency")
    half = float(np.exp(spread / 2))
    return VendorFit(vendor, bound, value, 1 / half, half, 0, 0, (),
                     f"{UNCALIBRATED_VENDOR} ({vendor}, {bound}-bound): no MLPerf row measured; "
                     f"{said}, range x{1 / half:.2f}-x{half:.2f} (spanning the whole spread of "
                     f"attainments across vendors; {MLPERF_SOURCE})")


def combined(low: float, high: float, other_low: float, other_high: float) -> tuple[float, float]:
    """Two independent p10-p90 ranges of ratios multiplied: centres add, half-widths in
    quadrature (log space)."""
    a = (np.log(low) + np.log(high)) / 2 + (np.log(other_low) + np.log(other_high)) / 2
    half = float(np.hypot((np.log(high) - np.log(low)) / 2,
                          (np.log(other_high) - np.log(other_low)) / 2))
    return float(np.exp(a - half)), float(np.exp(a + half))
