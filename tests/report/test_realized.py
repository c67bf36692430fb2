"""A run against its plan's prediction: the steady part beside the whole, for short runs."""

from __future__ import annotations

import pytest

from fitwork.report.realized import compare, enough_items, startup_share
from fitwork.telemetry.record import CompletionSeries
from tests.report.records import record


def test_first_and_steady_read_the_measured_series() -> None:
    series = CompletionSeries(times_s=[0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
                              completed=[0, 10, 30, 50, 70, 100])
    assert series.first_s() == 0.6
    # between 10 and 90 of 100 items: 10 at 0.6 s to 70 at 0.9 s
    assert series.steady(100) == pytest.approx(60 / 0.3)
    assert CompletionSeries(times_s=[1.0], completed=[5]).steady(5) is None
    assert CompletionSeries().first_s() is None


def test_a_run_mostly_start_up_says_so_and_what_its_steady_part_did() -> None:
    # 100 items in 1 s: nothing settles for 0.6 s, then 250 items/s
    short = record("short", throughput=100.0, items=100,
                   completions=[(0.6, 10), (0.7, 35), (0.8, 60), (0.9, 85), (1.0, 100)])
    assert startup_share(short) == pytest.approx(0.6)
    line = compare(short, predicted=240.0)
    assert line.startswith("realized 100.0 (0.42x)")
    assert "too short to judge the plan" in line
    assert "past it, 250.0 items/s (1.04x the steady 240.0)" in line
    # start-up a tenth of the run: 0.6 s of 6 s at 250 items/s is 1,350 items after it
    assert f"at least {enough_items(short, 250.0):,} items" in line
    assert enough_items(short, 250.0) == 1350


def test_a_run_past_its_start_up_is_judged_by_its_whole() -> None:
    steady = record("long", throughput=100.0, items=1000,
                    completions=[(0.5, 5), *((t / 2, 50 * t) for t in range(2, 21))])
    assert compare(steady, predicted=100.0) == "realized 100.0 (1.00x)"
