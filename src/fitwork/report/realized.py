"""A run's throughput against its plan's prediction, and when start-up makes it too short.

A plan predicts a steady rate.  A run's throughput is its items over its whole wall time,
start-up and the first frame's way through the pipeline included, so a short run realizes
less than a prediction that is right.  `compare` puts the steady part of the run (between
10% and 90% of its items settled) beside the whole, and says when start-up took so much of
the run that its whole-run figure says little about the plan.
"""

from __future__ import annotations

import math

from fitwork.telemetry.record import RunRecord

STARTUP_SHARE = 0.2
"""Start-up over this share of a run's wall time makes the run too short to judge a plan
by its whole-run throughput."""
ENOUGH_SHARE = 0.1
"""A run long enough to compare keeps start-up under this share of its wall time."""


def startup_share(record: RunRecord) -> float | None:
    """The share of the run's wall time before its first items settled."""
    first = record.completions.first_s()
    if first is None or record.wall_s <= 0:
        return None
    return min(1.0, first / record.wall_s)


def enough_items(record: RunRecord, rate: float) -> int:
    """Items a run at ``rate`` items/s needs for this run's start-up to be `ENOUGH_SHARE`
    of its wall time."""
    first = record.completions.first_s() or 0.0
    return math.ceil(first * rate * (1 - ENOUGH_SHARE) / ENOUGH_SHARE)


def compare(record: RunRecord, predicted: float, steady_predicted: float | None = None) -> str:
    """``realized X (r x)``, and for a run mostly start-up, its steady rate against the
    plan's steady prediction and the items a run needs to compare by its whole.

    ``predicted`` is what the plan promises the whole run (an engine's start-up priced in
    where it is, as on Ray); ``steady_predicted`` the steady rate it promises (``predicted``
    where not given).
    """
    steady_predicted = steady_predicted or predicted
    line = f"realized {record.throughput:,.1f} ({record.throughput / predicted:.2f}x)"
    share = startup_share(record)
    if share is None or share <= STARTUP_SHARE:
        return line
    first = record.completions.first_s() or 0.0
    steady = record.completions.steady(record.items_completed)
    past = (f"past it, {steady:,.1f} items/s ({steady / steady_predicted:.2f}x the steady "
            f"{steady_predicted:,.1f})" if steady is not None
            else "too few frames settled after it to measure a steady rate")
    rate = steady or steady_predicted
    return (f"{line}; start-up (until the first items settled) took {first:.2f} s of the "
            f"run's {record.wall_s:.2f} s ({share:.0%}), so this run is too short to judge "
            f"the plan by its whole: {past}; a run of at least "
            f"{enough_items(record, rate):,} items compares")
