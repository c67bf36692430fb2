"""The co-fit on small fleets checked by hand, and a property: every capacity row holds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitwork.jobs.cofit import CoFit, CoFitInputError, JobSpec, Offer, Pool, alone_rates, cofit

GPU_POOL = Pool("gpu", 1, {"cores": 8, "slot:G": 6}, price_per_hour=10.0)
CPU_POOL = Pool("cpu", 1, {"cores": 16}, price_per_hour=1.0)
POOLS = [GPU_POOL, CPU_POOL]


def pipeline(job: int) -> list[Offer]:
    """Decode (10 items/s per replica, one core held) on either pool's cores, then a model
    (20 items/s per replica, one G slot and one core held) on the GPU pool."""
    return [Offer(job, 0, 0, "cpu", 10.0, {"cores": 1}, {}, 8),
            Offer(job, 0, 1, "cpu", 10.0, {"cores": 1}, {}, 16),
            Offer(job, 1, 0, "G", 20.0, {"slot:G": 1, "cores": 1}, {}, 6)]


def offers_for(n: int) -> list[Offer]:
    """The pipeline's offers for jobs 0..n-1."""
    return [o for j in range(n) for o in pipeline(j)]


def rates(plan: CoFit) -> dict[str, float]:
    """Job name -> T_p."""
    return {j.name: j.rate for j in plan.jobs}


@pytest.mark.parametrize("integral", [True, False])
def test_alone_is_six_model_replicas(integral: bool) -> None:
    # 6 slots x 20 = 120 items/s; decode needs 12 cores: 16 on the CPU node + 2 left on
    # the GPU node after the model's 6.
    assert alone_rates([JobSpec("a", (1, 1))], pipeline(0), POOLS,
                       integral=integral) == pytest.approx([120.0])


def test_fair_split_of_equal_jobs() -> None:
    plan = cofit([JobSpec("a", (1, 1)), JobSpec("b", (1, 1))], offers_for(2), POOLS)
    assert rates(plan) == pytest.approx({"a": 60.0, "b": 60.0})
    assert [j.share for j in plan.jobs] == pytest.approx([0.5, 0.5])
    assert plan.status == "optimal" and plan.gap == pytest.approx(0.0, abs=1e-6)
    assert plan.size.integers > 0 and plan.size.rows > 0


def test_weights_two_to_one_give_shares_two_to_one() -> None:
    plan = cofit([JobSpec("a", (1, 1)), JobSpec("b", (1, 1), weight=2)], offers_for(2), POOLS)
    a, b = plan.jobs
    assert (a.rate, b.rate) == pytest.approx((40.0, 80.0))
    assert b.share / a.share == pytest.approx(2.0)


def test_a_quota_binds() -> None:
    jobs = [JobSpec("a", (1, 1), quota={"slot:G": 1}), JobSpec("b", (1, 1))]
    alone = alone_rates(jobs, offers_for(2), POOLS)
    assert alone == pytest.approx([20.0, 120.0])
    assert alone_rates(jobs, offers_for(2), POOLS, quotas=False) == pytest.approx([120, 120])
    plan = cofit(jobs, offers_for(2), POOLS, alone=alone)
    assert rates(plan) == pytest.approx({"a": 20.0, "b": 100.0})
    assert plan.job("a").use["slot:G"] == pytest.approx(1.0)


def test_min_rate_admits_queues_and_rejects_in_arrival_order() -> None:
    jobs = [JobSpec("a", (1, 1), min_rate=100.0), JobSpec("b", (1, 1), min_rate=50.0),
            JobSpec("c", (1, 1), min_rate=200.0), JobSpec("d", (1, 1))]
    plan = cofit(jobs, offers_for(4), POOLS)
    status = {j.name: j.status for j in plan.jobs}
    assert status == {"a": "admitted", "b": "queued", "c": "rejected", "d": "admitted"}
    assert plan.job("a").rate >= 100.0
    b = plan.job("b")
    assert b.rate == 0.0 and "at most 20 fit while a keep" in b.reason
    assert "short of slot:G (needs 2.5, 1 free)" in b.reason
    assert "min_rate 200 items/s exceeds the 120" in plan.job("c").reason
    assert "\n" not in b.reason


def test_min_cost_meets_every_min_rate_at_the_least_price() -> None:
    # 60 items/s needs 3 model replicas (3 cores) and 6 decoders: 9 cores > the GPU node's
    # 8, so one CPU node is paid beside one GPU node: 10 + 1 per hour.
    pools = [Pool("gpu", 3, {"cores": 8, "slot:G": 6}, 10.0), Pool("cpu", 3, {"cores": 16}, 1.0)]
    jobs = [JobSpec("a", (1, 1), min_rate=40.0, team="x"),
            JobSpec("b", (1, 1), min_rate=20.0, team="y")]
    plan = cofit(jobs, offers_for(2), pools, objective="min_cost")
    assert plan.objective_value == pytest.approx(11.0)
    assert plan.nodes_paid == pytest.approx((1.0, 1.0))
    assert [j.rate >= j_min - 1e-6 for j, j_min in zip(plan.jobs, (40, 20), strict=True)]
    assert sum(plan.cost_per_hour.values()) + plan.idle_cost_per_hour == pytest.approx(11.0)
    assert plan.cost_per_hour["x"] > plan.cost_per_hour["y"] > 0


def test_whole_placement_keeps_decode_on_the_gpu_node() -> None:
    # Whole on the GPU node: g model + d decode replicas share 8 cores: g = 3, d = 5 gives
    # min(60, 50) = 50 items/s; relaxed, 20g = 10d and g + d = 8 give 160/3; the units split
    # across pools reach 120 (test_alone_is_six_model_replicas).
    whole = [JobSpec("a", (1, 1), whole=True)]
    assert alone_rates(whole, pipeline(0), POOLS) == pytest.approx([50.0])
    assert alone_rates(whole, pipeline(0), POOLS, integral=False) == pytest.approx([160 / 3])


def test_relaxed_plan_rounds_to_whole_replicas() -> None:
    plan = cofit([JobSpec("a", (1, 1)), JobSpec("b", (1, 1), weight=2)], offers_for(2),
                 POOLS, integral=False)
    assert all(float(x).is_integer() for x in plan.x)
    fluid = cofit([JobSpec("a", (1, 1)), JobSpec("b", (1, 1), weight=2)], offers_for(2),
                  POOLS, integral=False, fractional=True)
    assert fluid.fractional and fluid.status == "optimal"
    assert [j.rate for j in fluid.jobs] == pytest.approx([40.0, 80.0])


def test_bad_offer_is_one_line() -> None:
    bad = [Offer(0, 0, 1, "G", 1.0, {"slot:G": 1}, {}, 1)]
    with pytest.raises(CoFitInputError, match="pool cpu has none of; drop the offer") as err:
        cofit([JobSpec("a", (1,))], bad, POOLS)
    assert "\n" not in str(err.value)


def feasible(plan: CoFit, jobs: list[JobSpec], offers: list[Offer], pools: list[Pool]) -> None:
    """Every capacity, routing, unit and quota row holds on the plan's x and f."""
    tol = 1e-6
    for n, pool in enumerate(pools):
        for key, cap in pool.capacity.items():
            used = sum(o.held.get(key, 0.0) * plan.x[k] + o.consumed.get(key, 0.0) * plan.f[k]
                       for k, o in enumerate(offers) if o.pool == n)
            assert used <= cap * plan.nodes_paid[n] * (1 + tol) + tol, (pool.name, key)
    for k, o in enumerate(offers):
        assert plan.f[k] <= o.rate * plan.x[k] * (1 + tol) + tol
        assert plan.x[k] <= pools[o.pool].count * o.per_node + tol
    for p, job in enumerate(jobs):
        got = plan.jobs[p].rate
        for u, m in enumerate(job.multiplicity):
            carried = sum(plan.f[k] for k, o in enumerate(offers) if o.job == p and o.unit == u)
            assert carried >= m * got * (1 - tol) - tol
        for key, most in (job.quota or {}).items():
            assert plan.jobs[p].use.get(key, 0.0) <= most * (1 + tol) + tol


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[JobSpec], list[Offer], list[Pool]]:
    """Two to three pools, one to four jobs of one to three units, random offers."""
    pools = [Pool(f"p{n}", draw(st.integers(1, 3)),
                  {"cores": draw(st.sampled_from([4.0, 8.0, 16.0])),
                   "memory": 64.0, "slot:G": draw(st.sampled_from([0.0, 1.0, 4.0])),
                   "time:G": 4.0}, draw(st.floats(0.5, 5.0)))
             for n in range(draw(st.integers(2, 3)))]
    jobs: list[JobSpec] = []
    offers: list[Offer] = []
    for p in range(draw(st.integers(1, 4))):
        units = draw(st.integers(1, 3))
        quota = {"cores": draw(st.floats(2.0, 20.0))} if draw(st.booleans()) else None
        jobs.append(JobSpec(f"j{p}", tuple(draw(st.floats(0.25, 2.0)) for _ in range(units)),
                            weight=draw(st.sampled_from([1.0, 2.0])), quota=quota,
                            whole=draw(st.booleans())))
        for u in range(units):
            for n, pool in enumerate(pools):
                rate = draw(st.floats(0.5, 50.0))
                if pool.capacity["slot:G"] > 0 and draw(st.booleans()):
                    offers.append(Offer(p, u, n, "G", rate, {"slot:G": 1.0, "memory": 8.0},
                                        {"cores": 0.01}, int(pool.capacity["slot:G"])))
                else:
                    held = draw(st.sampled_from([1.0, 2.0]))
                    offers.append(Offer(p, u, n, "cpu", rate, {"cores": held, "memory": 2.0},
                                        {}, int(pool.capacity["cores"] // held)))
    return jobs, offers, pools


@settings(max_examples=30, deadline=None)
@given(fleets(), st.sampled_from(["fair", "max_throughput"]), st.booleans())
def test_every_row_holds(case: tuple[list[JobSpec], list[Offer], list[Pool]],
                         objective: str, integral: bool) -> None:
    jobs, offers, pools = case
    plan = cofit(jobs, offers, pools, objective=objective,  # type: ignore[arg-type]
                 integral=integral, time_limit=1.0)
    feasible(plan, jobs, offers, pools)
    assert all(math.isfinite(j.share) and j.share <= 1 + 1e-6 for j in plan.jobs)


@pytest.mark.parametrize("whole", [False, True])
def test_identical_copies_as_one_spec_match_them_apart(whole: bool) -> None:
    apart = [JobSpec(f"a{i}", (1, 1), whole=whole) for i in range(3)] + [
        JobSpec("b", (1, 1), weight=2, whole=whole)]
    together = [JobSpec("a", (1, 1), count=3, whole=whole),
                JobSpec("b", (1, 1), weight=2, whole=whole)]
    kw = {"integral": False, "fractional": True}
    one = cofit(apart, offers_for(4), POOLS, **kw)  # type: ignore[arg-type]
    two = cofit(together, offers_for(2), POOLS, **kw)  # type: ignore[arg-type]
    assert sum(j.rate for j in one.jobs[:3]) == pytest.approx(3 * two.jobs[0].rate)
    assert one.jobs[3].rate == pytest.approx(two.jobs[1].rate)
    with pytest.raises(CoFitInputError, match="count > 1 needs integral=False"):
        cofit(together, offers_for(2), POOLS)


def test_rounding_leaves_no_job_without_a_replica_of_a_unit() -> None:
    # Five jobs, one unit each, on two pools of 3 G slots, each job busy 0.6 replicas on
    # both (the relaxation's spread): rounded up that is 10 slots for 6. Flooring takes
    # first the replicas whose unit keeps another (flooring in offer order alone left two
    # jobs with none).
    import numpy as np

    from fitwork.jobs.cofit_result import round_replicas

    pools = [Pool("g1", 1, {"slot:G": 3}), Pool("g2", 1, {"slot:G": 3})]
    offers = [Offer(j, 0, n, "G", 10.0, {"slot:G": 1}, {}, 3) for j in range(5) for n in (0, 1)]
    jobs = [JobSpec(f"j{j}", (1,)) for j in range(5)]
    x = round_replicas(jobs, offers, pools, range(5), np.full(10, 0.6), [1.0, 1.0])
    per_job = x.reshape(5, 2).sum(axis=1)
    assert per_job.min() >= 1 and x.sum() <= 6
    assert x.reshape(5, 2)[:, 0].sum() <= 3 and x.reshape(5, 2)[:, 1].sum() <= 3


def test_a_unit_floored_to_nothing_gets_a_replica_where_one_fits() -> None:
    # Pool g1 (3 slots) holds jobs 0-2 busy at one replica each and job 3 at half of one;
    # rounded up, g1 needs 4 slots, so job 3's is floored; the refill puts one on g2, where
    # the relaxation had given job 3 nothing.
    import numpy as np

    from fitwork.jobs.cofit_result import round_replicas

    pools = [Pool("g1", 1, {"slot:G": 3}), Pool("g2", 1, {"slot:G": 3})]
    offers = [Offer(j, 0, 0, "G", 10.0, {"slot:G": 1}, {}, 3) for j in range(4)]
    offers.append(Offer(3, 0, 1, "G", 5.0, {"slot:G": 1}, {}, 3))
    jobs = [JobSpec(f"j{j}", (1,)) for j in range(4)]
    x = round_replicas(jobs, offers, pools, range(4), np.array([1, 1, 1, 0.5, 0]), [1, 1])
    assert list(x) == [1, 1, 1, 0, 1]


def test_a_floored_unit_takes_a_replica_from_one_that_has_two() -> None:
    # One pool of 3 slots: job 0 busy on 2 replicas, job 1 on 1, job 2 on half of one. Job
    # 2's is floored (the others are not rounded up) and no slot is free, so job 0 gives one.
    import numpy as np

    from fitwork.jobs.cofit_result import round_replicas

    pools = [Pool("g1", 1, {"slot:G": 3})]
    offers = [Offer(j, 0, 0, "G", 10.0, {"slot:G": 1}, {}, 3) for j in range(3)]
    jobs = [JobSpec(f"j{j}", (1,)) for j in range(3)]
    x = round_replicas(jobs, offers, pools, range(3), np.array([2, 1, 0.5]), [1])
    assert list(x) == [1, 1, 1]


@pytest.mark.parametrize("running", [0, 1])
def test_warm_keeps_load_where_it_runs_when_equally_good(running: int) -> None:
    # Decode can run on either CPU pool, equally; the model's one slot caps the job at
    # 20 items/s, which two decoders carry. The warm plan's pool is kept, at no cost.
    pools = [Pool("gpu", 1, {"cores": 1, "slot:G": 1}), Pool("a", 1, {"cores": 16}),
             Pool("b", 1, {"cores": 16})]
    offers = [Offer(0, 0, 1, "cpu", 10.0, {"cores": 1}, {}, 16),
              Offer(0, 0, 2, "cpu", 10.0, {"cores": 1}, {}, 16),
              Offer(0, 1, 0, "G", 20.0, {"slot:G": 1, "cores": 1}, {}, 1)]
    warm = [2.0 if running == 0 else 0.0, 2.0 if running == 1 else 0.0, 1.0]
    plan = cofit([JobSpec("a", (1, 1))], offers, pools, warm=warm)
    assert plan.jobs[0].rate == pytest.approx(20.0)
    assert plan.x[running] == pytest.approx(2.0) and plan.x[1 - running] == 0.0
    assert plan.stages[-3].name == "keep running"
