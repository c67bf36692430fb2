"""Pure arithmetic over telemetry: intervals, percentiles, busy fractions, utilization."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

Interval = tuple[float, float]


def merge_intervals(intervals: Iterable[Interval], gap: float = 0.0) -> list[Interval]:
    """Sorted, non-overlapping intervals covering the input; ones closer than ``gap`` join."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if end < start:
            raise ValueError(f"interval ({start}, {end}) ends before it starts")
        if merged and start - merged[-1][1] <= gap:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def covered_seconds(intervals: Iterable[Interval], window: Interval | None = None) -> float:
    """Length of the union of ``intervals``, clipped to ``window`` when one is given."""
    total = 0.0
    for start, end in merge_intervals(intervals):
        if window is not None:
            start, end = max(start, window[0]), min(end, window[1])
        total += max(0.0, end - start)
    return total


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) by linear interpolation; ``None`` for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} is outside 0..100")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def weighted_percentile(values: Sequence[tuple[float, int]], q: float) -> float | None:
    """The ``q``-th percentile of values given with counts, ``(value, count)``; nearest rank."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} is outside 0..100")
    pairs = sorted((v, c) for v, c in values if c > 0)
    total = sum(c for _, c in pairs)
    if not total:
        return None
    rank = max(1, math.ceil(total * q / 100))
    seen = 0
    for value, count in pairs:
        seen += count
        if seen >= rank:
            return value
    return pairs[-1][0]


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, and 0.0 when nothing was in the denominator."""
    return numerator / denominator if denominator > 0 else 0.0


def share(part: float, whole: float) -> float:
    """``part / whole`` held to 0..1: a share of what exists is never more than all of it
    (0.0 when nothing was in ``whole``)."""
    return min(1.0, max(0.0, ratio(part, whole)))


def busy_fraction(busy_seconds: float, replicas: int, wall_seconds: float) -> float:
    """Share of the replicas' time spent working: busy s / (replicas x wall s), at most 1."""
    return share(busy_seconds, replicas * wall_seconds)


def utilization(used: float, allocated: float) -> float:
    """Fleet utilization of one resource: busy resource-seconds / allocated resource-seconds,
    held to 1 for charts; more used than allocated is a finding (`over_allocation` words
    it: the plan under-allocated), which every report shows beside the figure."""
    return share(used, allocated)


def over_allocation(what: str, used_s: float, allocated_s: float) -> str:
    """Words for ``used_s`` over ``allocated_s`` resource-seconds (empty when not over): a
    run that used more than its plan allocated is a finding, never shown as 100%."""
    if allocated_s <= 0 or used_s <= allocated_s * (1 + 1e-9):
        return ""
    return (f"{what} used {used_s / allocated_s:.0%} of what the plan allocated ({used_s:,.2f} "
            f"s used, {allocated_s:,.2f} s allocated): the plan under-allocated")


def bucket_series(
    samples: Sequence[tuple[float, float]], start: float, end: float, width: float
) -> list[tuple[float, float]]:
    """Mean of ``(time, value)`` samples per ``width``-second bucket from ``start`` to ``end``."""
    if width <= 0:
        raise ValueError(f"bucket width {width} must be > 0")
    count = max(1, math.ceil((end - start) / width))
    sums, counts = [0.0] * count, [0] * count
    for t, value in samples:
        index = min(count - 1, max(0, int((t - start) / width)))
        sums[index] += value
        counts[index] += 1
    return [(start + i * width, sums[i] / counts[i]) for i in range(count) if counts[i]]


def _positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def host_limits(host: Mapping[str, object] | None) -> tuple[float | None, float | None]:
    """(cores, GPUs) a run record's host or cluster has; ``None`` where it does not say.

    Cores are its ``cores``; GPUs its ``devices`` (Ray's ``GPU`` count, else the sum of its
    classes' counts) or the length of its ``gpus`` list, when positive.
    """
    host = host or {}
    cores = _positive(host.get("cores"))
    devices = host.get("devices")
    gpus: float | None = None
    if isinstance(devices, Mapping) and devices:
        gpus = _positive(devices["GPU"]) if "GPU" in devices else _positive(sum(
            v for k, v in devices.items() if not str(k).startswith("accelerator_type:")
            and isinstance(v, int | float) and not isinstance(v, bool)))
    listed = host.get("gpus")
    if gpus is None and isinstance(listed, list) and listed:
        gpus = float(len(listed))
    return cores, gpus
