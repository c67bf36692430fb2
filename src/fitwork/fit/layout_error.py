"""The model's own error on whole plans: realized / predicted on the project's bench pipelines.

A plan's range drawn from its units' rates (`fitwork.fit.ranges`) says how far the rates may
move; it does not say how far the model that turns rates into a layout's throughput misses
(what a split costs, how replicas share cores, a batch's fill wait).  Measured on
``bench/fit_quality.py``'s pipelines, that miss is larger than the rates' spread: ranges of
±9% held 18 of 39 quiet runs (46%) on a 2-core host.  So every plan side's range is widened,
in quadrature, by the spread of realized / predicted across those pipelines
(`fitwork.fit.heldout.heldout_range`, each pipeline a group, a prediction interval for a
pipeline never seen).

The residuals ship in ``fitwork/fit/data/plan_residuals.csv``, written by
``bench/coverage.py --write-residuals``: one row per run of a pipeline's plan, with the host
it ran on.  They were measured on one small x86 host (2 cores), on CPU pipelines: on other
hosts and on accelerators they are an assumption the plan states, not a measurement.
``bench/coverage.py`` checks the widened ranges leaving each pipeline's own rows out.
"""

from __future__ import annotations

import functools
import math

from fitwork.fit.heldout import Residual, data_rows, heldout_range

RESIDUALS_FILE = "plan_residuals.csv"
COLUMNS = ("pipeline", "predicted", "realized", "load", "cores", "host")


@functools.cache
def residuals() -> tuple[Residual, ...]:
    """The shipped realized / predicted rows of whole plans, one group per pipeline."""
    return tuple(Residual(check="plan", source="profile", target=row["host"], bound=None,
                          group=row["pipeline"], predicted=float(row["predicted"]),
                          actual=float(row["realized"]))
                 for row in data_rows(RESIDUALS_FILE))


def layout_spread(exclude: str | None = None) -> float:
    """The log half-width a plan's range is widened by: the farther end of the held-out
    p10-p90 of realized / predicted over the shipped pipelines (``exclude`` left out, as a
    pipeline never seen), 0.0 with fewer than three pipelines to go on."""
    rows = [r for r in residuals() if r.group != exclude]
    if len({r.group for r in rows}) < 3:
        return 0.0
    low, high = heldout_range(rows)
    return max(-math.log(low), math.log(high))
