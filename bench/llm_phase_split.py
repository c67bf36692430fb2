"""Phase-split vs colocated LLM serving on A100-only, H100-only and mixed fleets of about
equal hourly cost, on both Azure 2023 traces: planned and replayed goodput, $/Mtok and GPU
utilization per phase (llama2-70b, splitwise timings)."""

from __future__ import annotations

import argparse

from fitwork.llm.options import SLO
from fitwork.llm.plan import LLMPlan, load_fleet, plan_llm
from fitwork.llm.sim import SimResult, simulate_llm
from fitwork.llm.trace import shipped_trace

FLEETS = ("a100", "h100", "mixed")


def _replay(plan: LLMPlan, trace_name: str, seed: int) -> SimResult:
    trace = shipped_trace(trace_name)
    return simulate_llm(plan, trace.scaled(plan.goodput / trace.rate), seed=seed)


def _cost(plan: LLMPlan, goodput: float) -> float:
    tokens = goodput * (plan.mean_prompt + plan.mean_output)
    return plan.cost_per_hour / (tokens * 3600) * 1e6 if tokens > 0 else float("nan")


def _phases(sim: SimResult) -> str:
    out = []
    for phase in ("prefill", "decode", "colocated"):
        pools = [p for p in sim.pools if p.phase == phase]
        if not pools:
            continue
        gpus = sum(p.replicas * p.tp for p in pools)
        busy = sum(p.busy * p.replicas * p.tp for p in pools) / gpus
        comp = sum(p.compute * p.replicas * p.tp for p in pools) / gpus
        bw = sum(p.bandwidth * p.replicas * p.tp for p in pools) / gpus
        cap = sum(p.capacity * p.replicas * p.tp for p in pools) / gpus
        tps = "+".join(f"TP{tp}" for tp in sorted({p.tp for p in pools}))
        out.append(f"{phase} {gpus} GPU {tps} busy {busy:.0%} MFU {comp:.0%} cap {cap:.0%} "
                   f"HBM {bw:.0%}")
    return "; ".join(out)


def main() -> None:
    """Print one row per (trace, fleet, mode) and the verdict per trace."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--slo", default="ttft_p90=2s,tpot_p90=150ms")
    parser.add_argument("--model", default="llama2-70b")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    slo = SLO.parse(args.slo)
    print(f"{args.model}, SLO {slo.text()}; plans by fitwork's solver (max goodput), each "
          "replayed on its trace scaled to the plan's goodput (seed "
          f"{args.seed}). Goodput: mean req/s served within both SLOs; $/Mtok: fleet $/h "
          "over prompt+output tokens at that goodput.")
    for name in ("conv", "code"):
        trace = shipped_trace(name)
        print(f"\ntrace {name}: {len(trace):,} requests, prompt mean {trace.prompt.mean():.0f}, "
              f"output mean {trace.output.mean():.0f}, burstiness x{trace.burstiness():.2f}")
        print(f"  {'fleet':<6} {'$/h':>7} {'plan':<24} {'goodput':>8} {'replay':>8} "
              f"{'in SLO':>7} {'$/Mtok':>7} {'replay':>7}  GPU use per phase (replay)")
        best: dict[str, tuple[float, float, str]] = {}
        for fleet_name in FLEETS:
            fleet = load_fleet(fleet_name)
            plans = plan_llm(args.model, trace, fleet, slo)
            for plan in [plans.split, *plans.colocated]:
                if not plan.feasible:
                    print(f"  {fleet_name:<6} {'':>7} {plan.label:<24} infeasible")
                    continue
                sim = _replay(plan, name, args.seed)
                mode = "split" if plan.mode == "split" else "colocated"
                key = (min(plan.goodput, sim.goodput), plan.label)
                if mode not in best or key[0] > best[mode][0]:
                    best[mode] = (key[0], _cost(plan, key[0]), f"{fleet_name} {plan.label}")
                print(f"  {fleet_name:<6} {fleet.hourly_price() or 0:7.1f} {plan.label:<24} "
                      f"{plan.goodput:8.2f} {sim.goodput:8.2f} {sim.attained:7.1%} "
                      f"{plan.cost_per_million_tokens or 0:7.3f} "
                      f"{_cost(plan, sim.goodput):7.3f}  {_phases(sim)}")
        s, c = best["split"], best["colocated"]
        print(f"  best phase-split: {s[2]} {s[0]:.2f} req/s at ${s[1]:.3f}/Mtok; best "
              f"colocated: {c[2]} {c[0]:.2f} req/s at ${c[1]:.3f}/Mtok -> goodput "
              f"x{s[0] / c[0]:.2f}, cost per token x{s[1] / c[1]:.2f} (the lower of planned "
              "and replayed goodput)")


if __name__ == "__main__":
    main()
