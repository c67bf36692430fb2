"""The planner: the solver's pools under SLOs, baselines, properties, bad input."""

from __future__ import annotations

import pytest

from fitwork.hardware.fleet import Fleet
from fitwork.llm.options import SLO
from fitwork.llm.phases import LLMInputError
from fitwork.llm.plan import load_fleet, plan_colocated, plan_llm, plan_split
from fitwork.llm.sim import simulate_llm
from fitwork.llm.trace import shipped_trace

SLO_ = SLO.parse("ttft_p90=2s,tpot_p90=150ms")


@pytest.fixture(scope="module")
def conv():
    return shipped_trace("conv").head(4000)


def _fleet(a100: int, h100: int, network: str = "400Gbps") -> Fleet:
    nodes = []
    if a100:
        nodes.append({"name": "a", "count": a100, "cores": 96, "memory": "1152GiB",
                      "devices": {"A100-80GB": 8}, "network_bandwidth": network})
    if h100:
        nodes.append({"name": "h", "count": h100, "cores": 192, "memory": "2048GiB",
                      "devices": {"H100-SXM": 8}, "network_bandwidth": network})
    return Fleet.parse({"name": "t", "node_types": nodes})


def test_slo_parse() -> None:
    slo = SLO.parse("ttft_p90=1.5s, tpot_p90=120ms")
    assert (slo.ttft_p90, slo.tpot_p90) == (1.5, 0.12)
    for bad in ("ttft_p90=1s", "ttfb=1s,tpot_p90=1s", "ttft_p90=fast,tpot_p90=1s"):
        with pytest.raises(LLMInputError, match="--slo"):
            SLO.parse(bad)


def test_split_plan_pools_and_figures(conv) -> None:
    fleet = load_fleet("mixed")
    plans = plan_llm("llama2-70b", conv, fleet, SLO_)
    split = plans.split
    assert split.feasible and {p.phase for p in split.pools} == {"prefill", "decode"}
    # Capacity: the pools hold no more GPUs than the fleet has, per class.
    for name, count in fleet.device_counts().items():
        assert sum(p.gpus for p in split.pools if p.device_class == name) <= count
    # Decode batches fit the KV room of a replica; prefill runs a prompt at a time.
    assert all(p.max_batch == 1 for p in split.pools if p.phase == "prefill")
    tokens = split.goodput * (split.mean_prompt + split.mean_output)
    assert split.cost_per_million_tokens == pytest.approx(
        split.cost_per_hour / (tokens * 3600) * 1e6)
    assert split.goodput == pytest.approx(split.capacity / split.burst)
    assert split.ttft_p90 <= SLO_.ttft_p90 + 1e-6 and split.tpot_p90 <= SLO_.tpot_p90
    for u in split.utilization:
        assert 0 < u.busy <= 1 and 0 < u.compute < 1 and 0 < u.bandwidth < 1
        # Server capacity at the mean rate: the replicas carry capacity / burst at most.
        assert 0 < u.capacity <= 1 / split.burst + 1e-9
    assert split.bottleneck and split.solver["status"] in ("optimal", "feasible", "repaired",
                                                           "time_limit")
    # Baselines: each single class, then the best mix.
    assert [p.label for p in plans.colocated] == [
        "colocated A100-80GB", "colocated H100-SXM", "colocated best mix"]
    assert plans.colocated[-1].goodput >= max(p.goodput for p in plans.colocated[:-1]) * 0.99


def test_more_fleet_never_less_goodput(conv) -> None:
    small = plan_split("llama2-70b", conv, _fleet(2, 1), SLO_)
    large = plan_split("llama2-70b", conv, _fleet(4, 2), SLO_)
    assert large.goodput >= small.goodput * 0.99
    # The solver's proven bound holds its plan, within the gap it was asked for.
    for plan in (small, large):
        assert plan.solver["bound"] >= plan.capacity * (1 - 1e-9)
        assert plan.capacity >= plan.solver["bound"] * (1 - 0.01) or \
            plan.solver["status"] != "optimal"
    assert plan_colocated("llama2-70b", conv, _fleet(4, 2), SLO_).goodput >= \
        plan_colocated("llama2-70b", conv, _fleet(2, 1), SLO_).goodput * 0.99


def test_min_cost_serves_the_rate_for_less(conv) -> None:
    fleet = load_fleet("mixed")
    cheap = plan_split("llama2-70b", conv, fleet, SLO_, objective="min_cost")
    most = plan_split("llama2-70b", conv, fleet, SLO_)
    assert cheap.goodput == pytest.approx(conv.rate, rel=1e-6)
    assert cheap.cost_per_hour < most.cost_per_hour
    with pytest.raises(LLMInputError, match=r"^cannot serve x1000 under the SLO on this fleet: "
                                            r"at most [\d.]+ req/s"):
        plan_split("llama2-70b", conv.scaled(1000), _fleet(1, 0), SLO_, objective="min_cost")


def test_plan_and_replay_agree_on_a_steady_rate() -> None:
    from fitwork.llm.trace import Trace

    base = shipped_trace("conv").head(4000)
    plan = plan_colocated("llama2-70b", base, _fleet(0, 2), SLO_, burst=1.0)
    import numpy as np

    rng = np.random.default_rng(0)
    gaps = rng.exponential(1 / plan.goodput, len(base))
    steady = Trace("steady", np.cumsum(gaps) - gaps[0], base.prompt, base.output)
    sim = simulate_llm(plan, steady, seed=0)
    assert sim.meets_p90
    assert sim.goodput == pytest.approx(plan.goodput, rel=0.1)


def test_transferred_classes_are_marked(conv) -> None:
    fleet = Fleet.parse({"name": "h200", "node_types": [
        {"name": "h200x8", "count": 1, "cores": 192, "memory": "2048GiB",
         "devices": {"H200": 8}, "network_bandwidth": "3200Gbps"}]})
    plan = plan_split("llama2-70b", conv, fleet, SLO_)
    assert plan.pools and all(p.source == "transferred from H100-SXM" for p in plan.pools)
    assert plan.transferred


def test_slo_no_fleet_meets_says_the_best(conv) -> None:
    with pytest.raises(LLMInputError, match=r"cannot be met by prefill.*best achievable: "
                                            r"ttft_p90 0\.\d+s \(H100-SXM TP8"):
        plan_llm("llama2-70b", conv, load_fleet("mixed"), SLO.parse("ttft_p90=50ms,"
                                                                     "tpot_p90=150ms"))
    with pytest.raises(LLMInputError, match=r"cannot be met by decode.*tpot_p90 \d"):
        plan_llm("llama2-70b", conv, load_fleet("mixed"), SLO.parse("ttft_p90=5s,"
                                                                     "tpot_p90=10ms"))


def test_unknown_model(conv) -> None:
    with pytest.raises(LLMInputError, match="model 'gpt-x': no phase rows and no model shape"):
        plan_llm("gpt-x", conv, load_fleet("mixed"), SLO_)
