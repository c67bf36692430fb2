"""MLPerf vendor factors: what an accelerator of another vendor than NVIDIA gets.

MLPerf Inference's closed Llama-2-70B results (``mlperf_llama2_70b.csv`` in
``fitwork/fit/data/``, Apache-2.0, see the README there) give one vendor factor each: the
median tokens/s per device per FP16 peak of the vendor's systems over NVIDIA's
(`vendor_factors`), and the spread of those efficiencies across vendors (`vendor_spread`)
that widens the range of a class not calibrated for its vendor.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fitwork.fit.heldout import Residual, data_rows
from fitwork.hardware.catalog import Catalog

MLPERF_FILE = "mlperf_llama2_70b.csv"
MLPERF_SOURCE = ("MLPerf Inference closed Llama-2-70B results (mlcommons/inference_results_v4.1 "
                 "@ a2f5d66, inference_results_v4.0 @ 3c4a1cf)")
REFERENCE_VENDOR = "NVIDIA"


@dataclass(frozen=True)
class VendorRow:
    """One MLPerf Llama-2-70B result: a system of ``devices`` accelerators of one class."""

    submitter: str
    system: str
    device_class: str
    vendor: str
    devices: int
    scenario: str
    framework: str
    tokens_per_s: float
    path: str

    def efficiency(self, known: Catalog) -> float:
        """Tokens/s per device per FP16 peak FLOP/s (a relative figure: all ran FP8)."""
        return self.tokens_per_s / self.devices / known.get(self.device_class).fp16_flops

    @property
    def group(self) -> str:
        """The system and scenario: the unit held out together."""
        return f"{self.system} {self.scenario} ({self.framework})"


def mlperf_rows(known: Catalog) -> list[VendorRow]:
    """The shipped MLPerf Llama-2-70B results, each with its class's vendor."""
    return [VendorRow(row["submitter"], row["system"], row["device_class"],
                      known.get(row["device_class"]).vendor.split(" ")[0], int(row["devices"]),
                      row["scenario"], row["framework"], float(row["tokens_per_s"]), row["path"])
            for row in data_rows(MLPERF_FILE)]


def vendor_factors(rows: Sequence[VendorRow], known: Catalog) -> dict[str, float]:
    """Per vendor: the median efficiency of its rows over NVIDIA's median (NVIDIA: 1)."""
    by_vendor: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        by_vendor[row.vendor].append(row.efficiency(known))
    reference = by_vendor.get(REFERENCE_VENDOR)
    if not reference:
        return {}
    base = statistics.median(reference)
    return {v: statistics.median(e) / base for v, e in by_vendor.items()}


def vendor_spread(rows: Sequence[VendorRow], known: Catalog) -> float:
    """The spread of efficiencies across vendors: log(most / least) efficient row."""
    values = [row.efficiency(known) for row in rows]
    return float(np.log(max(values) / min(values))) if len(values) > 1 else 0.0


def vendor_factor(factors: dict[str, float], vendor: str) -> tuple[float, str]:
    """``vendor``'s factor, or the median of the other vendors' (1 where there are none)."""
    if vendor in factors:
        return factors[vendor], f"{vendor}'s MLPerf factor {factors[vendor]:.2f}"
    others = [f for v, f in factors.items() if v != REFERENCE_VENDOR]
    if not others:
        return 1.0, f"no MLPerf rows for {vendor} or any other vendor: factor 1"
    value = statistics.median(others)
    return value, (f"no MLPerf rows for {vendor}: median factor {value:.2f} of "
                   f"{', '.join(sorted(v for v in factors if v != REFERENCE_VENDOR))}")


def vendor_residuals(rows: Sequence[VendorRow], held: str, known: Catalog) -> list[Residual]:
    """The rows of vendor ``held``, each carried from every NVIDIA row by the FP16 peak ratio
    times a factor calibrated WITHOUT ``held`` (`vendor_factor` of the others)."""
    factor, _ = vendor_factor(vendor_factors([r for r in rows if r.vendor != held], known),
                              held)
    out = []
    for target in (r for r in rows if r.vendor == held):
        for source in (r for r in rows if r.vendor == REFERENCE_VENDOR):
            ratio = known.get(target.device_class).fp16_flops / known.get(
                source.device_class).fp16_flops
            out.append(Residual("vendor", source.device_class, target.device_class,
                                "compute", target.group,
                                source.tokens_per_s / source.devices * ratio * factor,
                                target.tokens_per_s / target.devices))
    return out
