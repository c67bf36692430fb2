"""The report's arithmetic: ratios, cores busy of the host, measured rates, checks, re-fits."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fitwork.report.figures import (
    Refit,
    baseline_index,
    comparable,
    compare_hosts,
    compared,
    comparison_basis,
    completion_rates,
    cores_busy_of_host,
    cpu_seconds,
    device_figures,
    host_cores,
    outputs_match,
    refits,
    replica_steps,
    speedup,
)
from fitwork.telemetry.record import DeviceSample
from tests.report.records import HOST, record


def test_speedup_is_candidate_over_baseline() -> None:
    assert speedup(300.0, 400.0) == pytest.approx(0.75)
    assert speedup(52.0, 20.0) == pytest.approx(2.6)
    assert speedup(1.0, 0.0) is None and speedup(None, 1.0) is None
    assert speedup(1.0, None) is None


def test_the_baseline_is_the_monolithic_run_and_fitted_runs_come_first() -> None:
    assert baseline_index(["fitted", "monolithic"]) == 1
    assert baseline_index(["a", "b"]) == 0
    assert compared(["other", "Monolithic", "fitted"]) == [2, 0]
    assert compared(["a", "b", "c"]) == [1, 2]


def test_cores_busy_of_the_host_divides_by_all_its_cores() -> None:
    # 4 CPU seconds in 2 s on a 8-core host: a quarter of the host
    assert cores_busy_of_host(4.0, 8.0, 2.0) == pytest.approx(0.25)
    # the same work on an allocation of 1.2 cores reads as 167% fleet utilization, and on
    # 2 cores as 100%: the host figure is the one that compares
    assert cores_busy_of_host(4.0, None, 2.0) is None
    assert cores_busy_of_host(4.0, 8.0, 0.0) is None
    assert host_cores({"cores": 16}) == 16.0
    assert host_cores({"cores": True}) is None and host_cores({"cores": "16"}) is None
    assert host_cores({}) is None and host_cores(None) is None


def test_cpu_seconds_sum_the_units_else_the_workers() -> None:
    one = record("r", throughput=100.0, cpu_s=3.0)
    assert cpu_seconds(one) == pytest.approx(3.0)
    bare = one.model_copy(update={"units": [u.model_copy(update={"cpu_s": 0.0})
                                            for u in one.units]})
    assert cpu_seconds(bare) == pytest.approx(sum(w.cpu_s for w in one.workers))


def test_hosts_and_outputs_are_compared_only_when_recorded() -> None:
    other = {**HOST, "name": "elsewhere"}
    assert compare_hosts([HOST, dict(HOST)]) == "same host"
    assert compare_hosts([HOST, other]) == "different hosts"
    assert compare_hosts([HOST, None]) == "host not recorded"
    assert compare_hosts([HOST, {**HOST, "gpus": ["extra"]}]) == "different hosts"
    assert compare_hosts([HOST, {**HOST, "note": "ignored"}]) == "same host"
    assert outputs_match(["ab", "ab"]) == "same"
    assert outputs_match(["ab", "cd"]) == "different"
    assert outputs_match(["ab", None, "cd"]) == "different"
    assert outputs_match(["ab", None]) == "not checked"
    assert outputs_match(["ab"]) == "not checked"
    assert outputs_match([None, None]) == "not checked"


def test_the_basis_of_a_comparison_says_what_it_rests_on() -> None:
    mono = record("m", throughput=400.0, digest="d1")
    fitted = record("f", throughput=300.0, digest="d1")
    assert comparison_basis(mono, fitted) == ["measured", "same host", "same input"]
    assert comparable(mono, fitted)
    differ = fitted.model_copy(update={"output_digest": "d2"})
    assert comparison_basis(mono, differ)[-1] == ("same item count (100) but DIFFERENT "
                                                  "outputs")
    assert not comparable(mono, differ)
    unchecked = fitted.model_copy(update={"output_digest": None, "host": None})
    assert comparison_basis(mono, unchecked) == [
        "measured", "host not recorded", "same item count (100), outputs not checked"]
    assert comparable(mono, unchecked)
    short = fitted.model_copy(update={"items_in": 80, "status": "aborted"})
    assert comparison_basis(mono, short)[2:] == ["different inputs: 80 vs 100 items",
                                                 "compared run aborted"]
    assert not comparable(mono, short)


def test_completion_rates_count_settled_items_per_bucket() -> None:
    # cumulative completions: 10 by 0.5 s, 30 by 1.5 s, 40 by 1.9 s; buckets of 1 s to 2 s
    rates = completion_rates([0.5, 1.5, 1.9], [10, 30, 40], 1.0, 2.0)
    assert rates == [(0.0, 1.0, pytest.approx(10.0)), (1.0, 2.0, pytest.approx(30.0))]
    # a shorter last bucket is divided by its own length; what settled after wall counts
    rates = completion_rates([0.2, 2.4, 2.6], [5, 10, 12], 1.0, 2.5)
    assert [r for _, _, r in rates] == pytest.approx([5.0, 0.0, 7 / 0.5])
    assert [end for _, end, _ in rates] == pytest.approx([1.0, 2.0, 2.5])
    # a moment on a bucket's edge counts in the bucket it ends
    rates = completion_rates([1.0], [4], 1.0, 2.0)
    assert [r for _, _, r in rates] == pytest.approx([4.0, 0.0])
    assert completion_rates([], [], 1.0, 2.0) == [(0.0, 1.0, 0.0), (1.0, 2.0, 0.0)]
    with pytest.raises(ValueError, match="must be > 0"):
        completion_rates([], [], 0.0, 1.0)


def test_device_figures_per_device() -> None:
    samples = [DeviceSample(t_s=t, node="n1", device=d, name="NVIDIA H200", utilization=u,
                            memory_used=m, memory_total=100, power_w=p)
               for t, d, u, m, p in ((0.0, 1, 0.2, 10, None), (0.0, 0, 0.5, 40, 300.0),
                                     (1.0, 0, 1.5, 60, 500.0), (1.0, 1, 0.4, 5, None))]
    zero, one = device_figures(samples)
    assert (zero.device, zero.samples, zero.peak_memory) == (0, 2, 60)
    assert zero.mean_utilization == pytest.approx(0.75)  # 1.5 is read as 1.0
    assert zero.mean_power_w == pytest.approx(400.0)
    assert (one.device, one.peak_memory, one.mean_power_w) == (1, 10, None)
    assert one.mean_utilization == pytest.approx(0.3)
    assert device_figures([]) == []


def test_refits_are_read_from_dicts_or_objects_in_time_order() -> None:
    plain = record("r", throughput=1.0)
    assert refits(plain) == []
    entries = [
        SimpleNamespace(t_s=2.0, reason="later", before={"a": 2}, after={"a": 3},
                        predicted_before=None, predicted_after=9),
        {"t_s": 1.0, "reason": "a is the bottleneck", "before": {"a": 1, "b": 1},
         "after": {"a": 2, "b": 1}, "predicted_before": 10.0, "predicted_after": 15.5},
    ]
    first, second = refits(plain.model_copy(update={"refits": entries}))
    assert first == Refit(1.0, "a is the bottleneck", {"a": 1, "b": 1}, {"a": 2, "b": 1},
                          10.0, 15.5)
    assert first.changes() == {"a": (1, 2)}
    assert second.predicted_before is None and second.predicted_after == 9.0
    assert Refit(0.0, "", {"a": 1}, {"b": 2}).changes() == {"a": (1, 0), "b": (0, 2)}


def test_replica_steps_run_to_the_end_of_the_run() -> None:
    assert replica_steps([0.0, 1.0], [2, 3], 4.0) == [(0.0, 2.0), (1.0, 3.0), (4.0, 3.0)]
    assert replica_steps([0.0, 4.0], [2, 3], 4.0) == [(0.0, 2.0), (4.0, 3.0)]
    assert replica_steps([], [], 4.0) == []
