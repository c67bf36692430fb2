"""Held-out statistics of transfers: residuals, their p10-p90 range for a group never seen.

A `Residual` is one prediction checked against a measurement (rates, items/s);
`heldout_range` turns held-out residuals into a p10-p90 of measured / predicted meant to hold
on a group the fit never saw, `summarize` adds median, p90 and worst relative error, and
`data_rows` reads a CSV shipped in ``fitwork/fit/data/``.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np
from pydantic import BaseModel
from scipy import stats

from fitwork.fit.roofline import Bound, CostModelError

LOW_Q, HIGH_Q = 0.10, 0.90
Z90 = 1.2816
"""The standard normal's 90th percentile: a p10-p90 half-width in standard deviations."""


@dataclass(frozen=True)
class Residual:
    """One prediction checked against a measurement (rates, items/s)."""

    check: str
    source: str
    target: str
    bound: Bound | None
    group: str
    predicted: float
    actual: float

    @property
    def error(self) -> float:
        """|predicted - measured| / measured."""
        return abs(self.predicted - self.actual) / self.actual

    @property
    def ratio(self) -> float:
        """measured / predicted."""
        return self.actual / self.predicted


class TransferError(BaseModel):
    """How far rates carried by one kind of transfer fell from measured ones."""

    n: int
    median: float
    p90: float
    worst: float
    low: float
    high: float
    basis: str


def heldout_range(residuals: Sequence[Residual]) -> tuple[float, float]:
    """A p10-p90 range of measured / predicted meant to hold on a group never seen.

    Pooled quantiles of held-out residuals miss whole groups (another model, another
    framework) that sit off the pooled median.  So, in log space: the median ratio, plus or
    minus the p80 of each residual's distance from its own group's median (the spread within
    a group) and the p90 of a prediction interval for a new group's median from the groups'
    medians (the spread between groups), added in quadrature.
    """
    by_group: dict[str, list[float]] = defaultdict(list)
    for r in residuals:
        by_group[r.group].append(float(np.log(r.ratio)))
    logs = np.concatenate([np.array(v) for v in by_group.values()])
    centre = float(np.median(logs))
    within = np.concatenate([np.array(v) - np.median(v) for v in by_group.values()])
    half = float(np.quantile(np.abs(within), HIGH_Q - LOW_Q))
    medians = [float(np.median(v)) for v in by_group.values()]
    k = len(medians)
    # A new group's median, predicted from k seen ones: Student's t at p90, k - 1 degrees of
    # freedom, times the sample deviation and sqrt(1 + 1/k) (a prediction interval).
    between = (float(stats.t.ppf(HIGH_Q, k - 1)) * float(np.std(medians, ddof=1))
               * float(np.sqrt(1 + 1 / k))) if k > 1 else 0.0
    width = float(np.hypot(half, between))
    return float(np.exp(centre - width)), float(np.exp(centre + width))


def widened(low: float, high: float, spread: float) -> tuple[float, float]:
    """``(low, high)`` widened by ``spread`` (a log half-width) in quadrature, same centre."""
    centre, half = (np.log(low) + np.log(high)) / 2, (np.log(high) - np.log(low)) / 2
    width = float(np.hypot(half, spread))
    return float(np.exp(centre - width)), float(np.exp(centre + width))


def summarize(residuals: Sequence[Residual], basis: str) -> TransferError:
    """Median, p90 and worst relative error, and the held-out p10-p90 range of measured /
    predicted (`heldout_range`)."""
    if not residuals:
        raise CostModelError(f"no measured pairs for {basis}")
    errors = np.array([r.error for r in residuals])
    low, high = heldout_range(residuals)
    return TransferError(n=len(residuals), median=float(np.median(errors)),
                         p90=float(np.quantile(errors, 0.9)), worst=float(errors.max()),
                         low=low, high=high, basis=basis)


def data_rows(name: str) -> list[dict[str, str]]:
    """The rows of CSV ``name`` shipped in ``fitwork/fit/data/``."""
    text = resources.files("fitwork.fit").joinpath("data", name).read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))
