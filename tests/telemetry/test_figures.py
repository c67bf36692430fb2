"""The pure arithmetic behind the run record."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fitwork.telemetry.figures import (
    bucket_series,
    busy_fraction,
    covered_seconds,
    merge_intervals,
    percentile,
    ratio,
    utilization,
)
from fitwork.telemetry.record import (
    UnitRecord,
    WorkerRecord,
    latency_figures,
    resource_utilization,
    summarize_units,
)

intervals = st.lists(
    st.tuples(st.floats(0, 100), st.floats(0, 10)).map(lambda se: (se[0], se[0] + se[1])),
    max_size=30)


def test_merge_intervals_joins_overlaps_and_near_neighbours() -> None:
    assert merge_intervals([(3, 4), (0, 1), (0.5, 2)]) == [(0, 2), (3, 4)]
    assert merge_intervals([(0, 1), (1.0005, 2)], gap=0.001) == [(0, 2)]
    assert merge_intervals([(0, 1), (1.5, 2)], gap=0.001) == [(0, 1), (1.5, 2)]
    with pytest.raises(ValueError, match="ends before it starts"):
        merge_intervals([(2, 1)])


@given(intervals)
def test_merged_intervals_are_sorted_disjoint_and_cover_the_same_time(spans) -> None:
    merged = merge_intervals(spans)
    assert all(a[1] < b[0] for a, b in pairwise(merged))
    total = sum(e - s for s, e in merged)
    assert total <= sum(e - s for s, e in spans) + 1e-9
    for s, e in spans:
        assert any(ms <= s and e <= me for ms, me in merged)


def test_covered_seconds_clips_to_the_window() -> None:
    assert covered_seconds([(0, 2), (1, 3), (5, 6)]) == 4
    assert covered_seconds([(0, 2), (1, 3), (5, 6)], window=(1, 5.5)) == 2.5


def test_percentile_interpolates() -> None:
    assert percentile([], 50) is None
    assert percentile([5], 95) == 5
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert math.isclose(percentile(list(range(101)), 95), 95)
    with pytest.raises(ValueError):
        percentile([1], 101)


def test_ratios_are_zero_without_a_denominator() -> None:
    assert ratio(3, 0) == 0.0
    assert busy_fraction(5, 2, 10) == 0.25
    assert utilization(1.5, 6) == 0.25


def test_bucket_series_averages_per_bucket() -> None:
    samples = [(0.0, 2), (0.4, 4), (1.2, 10)]
    assert bucket_series(samples, 0, 2, 1) == [(0, 3.0), (1, 10.0)]


def test_summaries_and_utilization_from_worker_counters() -> None:
    units = [UnitRecord(name="a", kind="map", replicas=2, resources={"cpu": 1.0}),
             UnitRecord(name="g", kind="map", replicas=1, resources={"cpu": 1.0, "gpu": 0.5})]
    workers = [
        WorkerRecord(worker_id=1, unit="a", pid=1, started_s=0, items_in=10, items_out=10,
                     busy_s=4, cpu_s=3),
        WorkerRecord(worker_id=2, unit="a", pid=2, started_s=0, items_in=6, items_out=6,
                     busy_s=2, cpu_s=1),
        WorkerRecord(worker_id=3, unit="g", pid=3, started_s=0, items_in=16, items_out=16,
                     busy_s=5, cpu_s=1),
    ]
    summed = summarize_units(units, workers, wall_s=10)
    assert summed[0].items_in == 16 and summed[0].busy_s == 6
    assert summed[0].busy_fraction == pytest.approx(0.3)
    resources = {r.resource: r for r in resource_utilization(summed, wall_s=10)}
    assert resources["cpu"].allocated == 3
    assert resources["cpu"].utilization == pytest.approx(5 / 30)
    assert resources["gpu"].utilization == pytest.approx(5 * 0.5 / (0.5 * 10))
    assert latency_figures([(1.0, 1), (2.0, 1), (3.0, 1)]) == (2.0, 3.0)
    assert latency_figures([(1.0, 90), (5.0, 10)]) == (1.0, 5.0)
