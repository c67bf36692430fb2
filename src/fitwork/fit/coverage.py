"""Coverage of stated ranges by cross-validation: how often a held-out rate lands inside.

A p10-p90 range should hold about 80% of measured rates it was not fitted on.  Each check
holds out one group (a model and TP degree, a Gavel job, an MLPerf submission), builds the
range from
the other groups exactly as `fitwork.fit.calibration` builds it for the shipped estimates
(efficiencies calibrated without the group, residuals held out among the rest,
`heldout_range`), and counts the held-out group's measured rates inside it, and the groups
with at least half of theirs inside.  The groups are what is independent: a line of 140 rates
from 4 groups is 4 draws, and a range that holds 80% of groups holds all 4 with probability
0.8^4 = 0.41, so 4/4 groups (99% of rates) does not show the range too wide.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fitwork.fit.calibration import (
    GAVEL_SOURCE,
    SPLITWISE_SOURCE,
    gavel_jobs,
    gavel_leave_one_out,
    gavel_residuals,
    leave_group_out,
    splitwise_residuals,
    splitwise_settings,
)
from fitwork.fit.heldout import Residual, heldout_range
from fitwork.fit.roofline import Bound
from fitwork.fit.vendors import (
    MLPERF_SOURCE,
    REFERENCE_VENDOR,
    attainments,
    mlperf_rows,
    vendor_fit,
)
from fitwork.hardware.catalog import Catalog, catalog


@dataclass(frozen=True)
class Coverage:
    """One line of the coverage table: a kind of transfer, where its rows come from."""

    kind: str
    vendor: str
    n: int
    inside: int
    groups: int
    source: str
    groups_held: int | None = None
    """Held-out groups with at least half their rates inside their range."""

    @property
    def share(self) -> float:
        """Held-out measured rates inside their range, as a share."""
        return self.inside / self.n if self.n else float("nan")


def _count(residuals: Sequence[Residual], low: float, high: float) -> int:
    return sum(low <= r.ratio <= high for r in residuals)


def _held(inside: int, n: int) -> int:
    """1 when a held-out group has at least half of its ``n`` rates inside."""
    return int(n > 0 and 2 * inside >= n)


def _splitwise(known: Catalog, check: str, bound: str,
               pick: Callable[[Residual], bool]) -> tuple[int, int, int, int]:
    settings = splitwise_settings()
    groups = sorted({s.group for s in settings})
    n = inside = kept = 0
    for group in groups:
        train = [s for s in settings if s.group != group]
        test = [s for s in settings if s.group == group]
        inner = [r for r in leave_group_out(train, known, check)
                 if r.bound == bound and pick(r)]
        held = [r for r in splitwise_residuals(train, test, known, check=check)
                if r.bound == bound and pick(r)]
        if inner and held:
            low, high = heldout_range(inner)
            count = _count(held, low, high)
            n, inside, kept = n + len(held), inside + count, kept + _held(count, len(held))
    return n, inside, len(groups), kept


def _gavel(known: Catalog) -> tuple[int, int, int, int]:
    jobs = gavel_jobs()
    n = inside = kept = 0
    for i, job in enumerate(jobs):
        rest = [*jobs[:i], *jobs[i + 1:]]
        inner = gavel_leave_one_out(rest, known)
        held = gavel_residuals(rest, [job], known)
        count = 0
        for r in held:
            pair = [x for x in inner if (x.source, x.target) == (r.source, r.target)]
            low, high = heldout_range(pair)
            count += low <= r.ratio <= high
        n, inside, kept = n + len(held), inside + count, kept + _held(count, len(held))
    return n, inside, len(jobs), kept


def _vendor(known: Catalog, vendor: str, bound: Bound) -> tuple[int, int, int, int]:
    """Each submission of ``vendor`` held out: its rows' attainments against the range
    `vendor_fit` states from the rows left (the vendor's other submissions; "not calibrated"
    where none is left)."""
    rows = mlperf_rows(known)
    mine = [(r, a) for r, a in attainments(rows, known)
            if r.vendor == vendor and r.bound == bound]
    groups = sorted({r.group for r, _ in mine})
    n = inside = kept = 0
    for group in groups:
        fit = vendor_fit([r for r in rows if not (r.vendor == vendor and r.group == group)],
                         vendor, bound, known)
        held = [a for r, a in mine if r.group == group]
        count = sum(fit.value * fit.low <= a <= fit.value * fit.high for a in held)
        n, inside, kept = n + len(held), inside + count, kept + _held(count, len(held))
    return n, inside, len(groups), kept


def _pair(check: str, source: str, target: str) -> Callable[[Residual], bool]:
    """Which residuals one line counts: those to ``target`` (and from ``source`` for a
    transfer)."""
    if check == "flops":
        return lambda r: r.target == target
    return lambda r: (r.source, r.target) == (source, target)


def coverage_table(known: Catalog | None = None) -> list[Coverage]:
    """Cross-validated coverage per kind of transfer and per vendor."""
    known = known or catalog()
    rows = []
    for check, kind in (("transfer", "bytes"), ("flops", "flops")):
        for bound in ("compute", "memory"):
            for a, b in (("A100-80GB", "H100-SXM"), ("H100-SXM", "A100-80GB")):
                label = (f"{kind} {bound}-bound on {b}" if check == "flops"
                         else f"{kind} {bound}-bound {a} -> {b}")
                n, inside, groups, kept = _splitwise(known, check, bound, _pair(check, a, b))
                rows.append(Coverage(label, REFERENCE_VENDOR, n, inside, groups,
                                     f"leave-one-model/TP-out; {SPLITWISE_SOURCE}", kept))
    n, inside, groups, kept = _gavel(known)
    rows.append(Coverage("assumed fp32 (K80/P100/V100)", REFERENCE_VENDOR, n, inside, groups,
                         f"leave-one-job-out; {GAVEL_SOURCE}", kept))
    measured = {(r.vendor, r.bound) for r in mlperf_rows(known)}
    for vendor, bound in sorted(measured, key=lambda vb: (vb[0] != REFERENCE_VENDOR, vb)):
        n, inside, groups, kept = _vendor(known, vendor, bound)
        rows.append(Coverage(f"attainment {bound}-bound, {vendor} (MLPerf)", vendor, n, inside,
                             groups, f"leave-one-submission-out; {MLPERF_SOURCE}", kept))
    return rows
