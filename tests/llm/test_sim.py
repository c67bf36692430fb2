"""Replay simulator: hand-computed timelines, M/D/1, KV and batch bounds, conservation,
SLO accounting, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from fitwork.llm.options import SLO
from fitwork.llm.plan import load_fleet, plan_split
from fitwork.llm.sim import replay, simulate_llm
from fitwork.llm.trace import Trace, poisson_trace, shipped_trace
from tests.llm import toy


def _trace(arrival: list[float], prompt: list[int], output: list[int]) -> Trace:
    return Trace("hand", np.array(arrival), np.array(prompt), np.array(output))


def test_one_request_by_hand() -> None:
    # prefill 50 + 100 x 1.0 = 150 ms; then 10 decode steps of 20 + 1 = 21 ms.
    plan = toy.plan([("prefill", 1, 1), ("decode", 1, 8)])
    sim, t = replay(plan, _trace([0.0], [1000], [11]), book=toy.book())
    assert t.first[0] == pytest.approx(0.150)
    assert t.last[0] == pytest.approx(0.150 + 10 * 0.021)
    assert sim.tpot["p50"] == pytest.approx(0.021)


def test_two_requests_share_a_batch_at_an_iteration_boundary() -> None:
    plan = toy.plan([("prefill", 1, 1), ("decode", 1, 8)], ttft=0.2, tpot=0.1)
    sim, t = replay(plan, _trace([0.0, 0.0], [1000, 1000], [11, 11]), book=toy.book())
    # One prefill server: the second prompt waits for the first (done 0.15, then 0.30).
    assert t.first.tolist() == pytest.approx([0.15, 0.30])
    # Request 1 joins at the first boundary after 0.30: 0.15 + 8 x 0.021 = 0.318; request 0
    # then has 2 steps left at 22 ms (batch 2); request 1 runs 2 at 22 and 8 alone at 21.
    assert t.admitted[1] == pytest.approx(0.318)
    assert t.last.tolist() == pytest.approx([0.318 + 0.044, 0.318 + 0.044 + 0.168])
    # SLO accounting: request 1 misses TTFT 0.2 s; both meet TPOT 0.1 s.
    assert (sim.ttft_attained, sim.tpot_attained, sim.attained) == (0.5, 1.0, 0.5)
    assert sim.goodput == pytest.approx(1.0)  # one good request over the 1 s minimum span
    assert sim.ttft["p90"] == pytest.approx(0.285)


def test_decode_steps_grow_with_context_in_closed_form() -> None:
    # decode_ms = 21 + 5 x ctx / 1000 at batch 1; step j reads 1000 + j tokens.
    plan = toy.plan([("prefill", 1, 1), ("decode", 1, 8)])
    _, t = replay(plan, _trace([0.0], [1000], [11]), book=toy.book(c2=5.0))
    steps = sum(0.021 + 5e-6 * (1000 + j) for j in range(10))
    assert t.last[0] - t.first[0] == pytest.approx(steps)


def test_prefill_queue_matches_md1() -> None:
    # Fixed 150 ms prefills at 4/s: rho = 0.6, M/D/1 mean wait rho S / (2 (1 - rho)).
    plan = toy.plan([("prefill", 1, 1), ("decode", 1, 64)])
    trace = poisson_trace(4.0, 20_000, 1000, 1, seed=3)
    sim, t = replay(plan, trace, book=toy.book())
    wait = float(np.mean(t.first - trace.arrival)) - 0.150
    assert wait == pytest.approx(0.6 * 0.15 / (2 * 0.4), rel=0.06)
    prefill = next(p for p in sim.pools if p.phase == "prefill")
    assert prefill.busy == pytest.approx(0.6, rel=0.03)


def test_kv_memory_and_max_batch_bound_the_batch() -> None:
    # toy-big: KV room for 3,013 tokens; each request reserves 1,011: two at a time.
    arrivals, prompts, outputs = [0.0] * 6 + [0.0], [1000] * 6 + [5000], [11] * 6 + [11]
    trace = _trace(arrivals, prompts, outputs)
    for max_batch, most in ((8, 2), (1, 1)):
        plan = toy.plan([("prefill", 3, 1), ("decode", 1, max_batch)], model="toy-big")
        sim, t = replay(plan, trace, book=toy.book())
        assert sim.dropped == 1  # the 6,011-token request never fits
        done = ~np.isnan(t.admitted)
        events = sorted([(a, 1) for a in t.admitted[done]] + [(b, -1) for b in t.last[done]])
        assert max(np.cumsum([e[1] for e in events])) == most


def test_colocated_prefill_pauses_the_batch() -> None:
    plan = toy.plan([("colocated", 1, 8)], mode="colocated")
    _, t = replay(plan, _trace([0.0, 0.05], [1000, 1000], [11, 11]), book=toy.book())
    # Request 0: prefill 0-0.15, decodes from 0.15. Request 1 arrives at 0.05, is admitted at
    # the first boundary (0.15), and its prefill pauses request 0's batch until 0.30.
    assert t.first.tolist() == pytest.approx([0.15, 0.30])
    assert t.last[0] == pytest.approx(0.30 + 10 * 0.022)


def test_conservation_and_determinism_on_a_real_plan() -> None:
    trace = shipped_trace("conv").head(3000)
    plan = plan_split("llama2-70b", trace, load_fleet("mixed"),
                      SLO.parse("ttft_p90=2s,tpot_p90=150ms"))
    run = trace.scaled(plan.goodput / trace.rate)
    a, ta = replay(plan, run, seed=5)
    b, _ = replay(plan, run, seed=5)
    assert a.model_dump(exclude={"wall_s"}) == b.model_dump(exclude={"wall_s"})
    assert a.completed + a.dropped == a.requests == 3000
    done = ~np.isnan(ta.last)
    assert done.sum() == a.completed
    assert np.all(ta.first >= run.arrival - 1e-12)
    assert np.all(ta.last[done] >= ta.first[done] - 1e-12)
    for pool in a.pools:
        assert 0 < pool.busy <= 1 and all(0 <= v <= 1 + 1e-9 for v in pool.busy_over_time)
        assert 0 < pool.capacity < 1
        # The figures over time add up to the totals (FLOPs and bytes are conserved).
        for total, over in ((pool.busy, pool.busy_over_time),
                            (pool.compute, pool.compute_over_time),
                            (pool.bandwidth, pool.bandwidth_over_time)):
            assert sum(over) * a.bin_s == pytest.approx(total * a.duration_s, rel=1e-6)
    assert simulate_llm(plan, run, seed=6).completed == 3000


def test_kv_transfer_over_the_link_by_hand() -> None:
    # toy-big: 2,621,440 KV bytes per token; 1,000 prompt tokens over 1 GB/s take 2.62 s, and
    # one link per decode replica sends one cache at a time.
    plan = toy.plan([("prefill", 1, 1), ("decode", 1, 2)], model="toy-big", network=1e9)
    sim, t = replay(plan, _trace([0.0, 0.0], [1000, 1000], [11, 11]), book=toy.book())
    send = 1000 * 2_621_440 / 1e9
    assert t.ready.tolist() == pytest.approx([0.15 + send, 0.15 + 2 * send])
    assert t.transfer.tolist() == pytest.approx([send, 2 * send - 0.15])
    assert t.last[0] == pytest.approx(0.15 + send + 10 * 0.021)
    # TPOT counts the transfer: (last - first token) / 10.
    assert sim.tpot["max"] == pytest.approx((t.last[1] - 0.30) / 10)
