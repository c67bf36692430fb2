"""The model's own error on whole plans: realized / predicted on the project's bench pipelines.

A plan's range drawn from its units' rates (`fitwork.fit.ranges`) says how far the rates may
move; it does not say how far the model that turns rates into a layout's throughput misses
(what a split costs, how replicas share cores, a batch's fill wait).  Measured on
``bench/fit_quality.py``'s pipelines, that miss is larger than the rates' spread: ranges of
±9% held 18 of 39 quiet runs (46%) on a 2-core host.  So every plan side's range is widened,
in quadrature, by the spread of realized / predicted across those pipelines
(`layout_spread`: the spread within each pipeline's runs and of the pipelines' own misses).

The residuals ship in ``fitwork/fit/data/plan_residuals.csv``, written by
``bench/coverage.py --write-residuals``: one row per run of a trained pipeline's plan (never
a held-out one), with the host it ran on; taken once at an ordinary moment of the host and
once with one core kept busy (``--load``), and joined.  They were measured on one small x86
host (2 cores), on CPU pipelines: on other hosts and on accelerators they are an
assumption the plan states, not a measurement.  ``bench/coverage.py`` checks the widened
ranges leaving each pipeline's own rows out.

Each row also says whether its plan's profile found other work on the host
(`profiled_busy`): a plan profiled beside other work is widened by the rows profiled so,
one profiled on a free host by the free rows, where each kind has rows of three pipelines
or more; else by all of them.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections import defaultdict

import numpy as np

from fitwork.fit.heldout import Residual, data_rows
from fitwork.profiling.record import PipelineProfile

RESIDUALS_FILE = "plan_residuals.csv"
COLUMNS = ("pipeline", "predicted", "realized", "load", "cores", "host", "profiled_busy")
SPREAD_Q = 0.8
"""The quantile of distances (within a pipeline's runs, and of pipelines from no miss) the
spread takes: each about the half-width of a p10-p90."""
BUSY, FREE = "busy profile", "profile"
"""A residual's ``source``: its plan's profile found other work on the host, or did not."""


@functools.cache
def residuals() -> tuple[Residual, ...]:
    """The shipped realized / predicted rows of whole plans, one group per pipeline."""
    return tuple(Residual(check="plan", source=BUSY if row.get("profiled_busy") == "1" else FREE,
                          target=row["host"], bound=None,
                          group=row["pipeline"], predicted=float(row["predicted"]),
                          actual=float(row["realized"]))
                 for row in data_rows(RESIDUALS_FILE))


def profiled_busy(profile: PipelineProfile) -> bool:
    """Whether ``profile`` found other work on its host: the share probe reads past its first
    count only where other processes used some of the host (`fitwork.profiling.shares`)."""
    return len(profile.share_readings) > 1


def layout_spread(exclude: str | None = None, busy: bool | None = None) -> float:
    """The log half-width a plan's range is widened by, from the shipped pipelines' rows
    (``exclude`` left out, as a pipeline never seen), those profiled as ``busy`` says where
    they cover three pipelines or more; 0.0 with fewer than three pipelines to go on.

    In log space, two spreads added in quadrature: the p80 of each row's distance from its
    own pipeline's median (its runs, each from a profile and plan of its own since stop 53,
    so the scatter holds how far profiles of one pipeline move, not only runs), and the p80
    of the pipelines' medians' distance from no miss (a pipeline's own bias: the range is
    centred on the prediction, so a model that misses most pipelines one way is wide that
    much).  Quantiles, not a
    t-interval over the medians' deviation: one pipeline missed 2x (warmup) made that
    interval hold 89-92% of the rows it left out, past the 70-90% aimed at; these
    quantiles held 73-77% (114 rows of 19 trained pipelines, quiet and one core kept busy,
    ``bench/coverage.py``)."""
    rows = [r for r in residuals() if r.group != exclude]
    alike = [r for r in rows if busy is not None and (r.source == BUSY) == busy]
    if len({r.group for r in alike}) >= 3:
        rows = alike
    by_group: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_group[r.group].append(math.log(r.ratio))
    if len(by_group) < 3:
        return 0.0
    within = [abs(x - statistics.median(v)) for v in by_group.values() for x in v]
    between = [abs(statistics.median(v)) for v in by_group.values()]
    return math.hypot(float(np.quantile(within, SPREAD_Q)), float(np.quantile(between, SPREAD_Q)))
