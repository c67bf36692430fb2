"""A filter's or flat-map's output ratio is counted over more of the input than the timed
samples where the units up to it are cheap, and a plan's range carries what is left of its
error."""

from __future__ import annotations

import time

import numpy as np
import pytest

from fitwork import Pipeline, unit
from fitwork.fit.plan import plan_for
from fitwork.hardware.fleet import Fleet
from fitwork.profiling import PipelineProfile, profile_pipeline
from fitwork.profiling.ratios import drift_variance

FLEET = Fleet.parse({"name": "box", "node_types": [
    {"name": "box", "count": 1, "cores": 2, "memory": "16GiB"}]})


@unit(kind="filter")
def keep(n: int) -> bool:
    """Keeps half of the first 48 items and a quarter of the rest: the samples mislead."""
    return n % 2 == 0 if n < 48 else n % 4 == 0


@unit(kind="filter")
def drifting(n: int) -> bool:
    """Keeps 80% of the items at the input's head, falling to 20% by item 2,000."""
    share = 0.8 - 0.6 * min(n, 2000) / 2000
    return (n * 2654435761 % 1000) / 1000 < share


@unit
def work(n: int) -> int:
    """The expensive unit after the filter."""
    deadline = time.thread_time() + 0.002
    while time.thread_time() < deadline:
        pass
    return n


@unit
def slow(n: int) -> int:
    """Waits 30 ms an item: too slow to take 48 more items through in a second."""
    time.sleep(0.03)
    return n


@unit(kind="flat_map")
def triple(n: int) -> list[int]:
    """Always three children."""
    return [n, n, n]


@pytest.fixture(scope="module")
def counted() -> PipelineProfile:
    """`keep` then `work` profiled on 48 samples of 2,000 items: made once, read by the tests
    of the count and of the plan's range (neither changes it)."""
    return profile_pipeline(Pipeline(keep, work), range(2000), samples=48, loaded=False)


def test_a_filter_s_ratio_is_counted_over_the_input_past_the_samples(
        counted: PipelineProfile) -> None:
    kept = counted.units[0]
    # the samples alone: 24 of 48; with the rest counted: (24 + 488) / 2000
    assert kept.output_ratio == pytest.approx(0.256, abs=0.02)
    assert kept.ratio_items is not None and kept.ratio_items > 1000
    assert kept.ratio_error is not None and kept.ratio_error < 0.02
    assert "counted over" in kept.conditions


def test_the_samples_alone_where_the_input_has_no_more() -> None:
    profile = profile_pipeline(Pipeline(keep, work), range(48), samples=48, loaded=False)
    kept = profile.units[0]
    assert kept.output_ratio == 0.5 and kept.ratio_items is None
    assert kept.ratio_spread() == pytest.approx((0.25 / 48) ** 0.5 / 0.5)  # a binomial


def test_no_pass_where_the_units_before_the_filter_are_slow() -> None:
    profile = profile_pipeline(Pipeline(slow, keep, work), range(2000), samples=48,
                               loaded=False)
    assert profile.units[1].ratio_items is None


def test_a_fixed_fan_out_is_counted_exact() -> None:
    profile = profile_pipeline(Pipeline(triple, work), range(500), samples=16,
                               loaded=False)
    fan = profile.units[0]
    assert fan.output_ratio == 3.0 and fan.ratio_error == 0.0 and fan.ratio_spread() == 0.0


def test_a_plan_s_range_carries_a_ratio_counted_over_few_items(counted: PipelineProfile
                                                               ) -> None:
    few = counted.model_copy(update={"units": [
        counted.units[0].model_copy(update={"ratio_items": None, "ratio_error": None}),
        *counted.units[1:]]})
    # the model's own miss widens both alike, in quadrature; left out, the ratio's part shows
    wide = plan_for(few, FLEET, layout_error=0.0).fitted
    narrow = plan_for(counted, FLEET, layout_error=0.0).fitted
    assert wide.throughput == pytest.approx(narrow.throughput)
    assert wide.throughput_low is not None and narrow.throughput_low is not None
    assert wide.throughput_high is not None and narrow.throughput_high is not None
    # 0.256 over 48 items is +-0.06 (a binomial), over 2,000 +-0.01: the work after the
    # filter, and so the throughput, is that much less sure
    assert wide.throughput_high / wide.throughput_low > \
        1.1 * narrow.throughput_high / narrow.throughput_low


def test_a_ratio_that_drifts_along_the_input_carries_its_drift() -> None:
    steady = profile_pipeline(Pipeline(keep, work), range(2000), samples=48, loaded=False)
    drift = profile_pipeline(Pipeline(drifting, work), range(2000), samples=48, loaded=False)
    kept, moving = steady.units[0], drift.units[0]
    assert moving.ratio_items is not None and moving.ratio_items > 1000
    print(f"steady {kept.output_ratio:.3f} +- {kept.ratio_error:.4f}, "
          f"drifting {moving.output_ratio:.3f} +- {moving.ratio_error:.4f}")
    # the counted stretches of the drifting filter kept 0.8 down to about 0.3: a run over
    # another part of its input may meet any of those, not the mean to within 0.01
    assert moving.ratio_error is not None and moving.ratio_error > 0.08
    assert kept.ratio_error is not None and kept.ratio_error < 0.02
    wide = plan_for(drift, FLEET, layout_error=0.0).fitted
    assert wide.throughput_high is not None and wide.throughput_low is not None
    assert wide.throughput_high / wide.throughput_low > 1.3


def test_stretches_that_differ_by_chance_alone_add_no_drift() -> None:
    rng = np.random.default_rng(7)
    steady = [(500, int(rng.binomial(500, 0.4))) for _ in range(8)]
    # chance strays a stretch of 500 by up to about 0.03 (0-0.025 over 20 seeds)
    assert drift_variance(steady, 0.4 * 0.6) ** 0.5 < 0.03
    falling = [(500, int(500 * (0.8 - 0.6 * k / 7))) for k in range(8)]
    assert drift_variance(falling, 0.25) ** 0.5 == pytest.approx(0.2, abs=0.03)
    assert drift_variance(falling[:2], 0.25) == 0.0  # too few stretches to tell
