"""Replay simulator scaling: the Azure conv trace at 20x its rate through a 1,000-GPU plan."""

from __future__ import annotations

import argparse
import time

from fitwork.hardware.fleet import Fleet
from fitwork.llm.options import SLO
from fitwork.llm.plan import plan_colocated, plan_split
from fitwork.llm.sim import compare, simulate_llm
from fitwork.llm.trace import shipped_trace

AIM_S = 60.0


def fleet(gpus: int) -> Fleet:
    """``gpus`` H100-SXM in 8-GPU nodes shaped like AWS p5.48xlarge (as llm/fleets/h100)."""
    return Fleet.parse({"name": f"h100-{gpus}", "node_types": [{
        "name": "h100x8", "count": gpus // 8, "cores": 192, "memory": "2048GiB",
        "devices": {"H100-SXM": 8}, "network_bandwidth": "3200Gbps"}]})


def main() -> None:
    """Plan on the fleet, replay the scaled trace through each plan twice, print wall times."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--scale", type=float, default=20.0)
    parser.add_argument("--slo", default="ttft_p90=2s,tpot_p90=150ms")
    parser.add_argument("--compress", action="store_true",
                        help="scale by compressing time (the same requests in 1/scale of the "
                             "hour) instead of superposing scale shifted copies over the hour")
    args = parser.parse_args()
    conv = shipped_trace("conv")
    trace = conv.scaled(args.scale) if args.compress else conv.superposed(int(args.scale))
    slo = SLO.parse(args.slo)
    print(f"trace {trace.name}: {len(trace):,} requests over {trace.duration:.0f}s "
          f"({trace.rate:.1f}/s, {int(trace.output.sum()):,} output tokens); "
          f"fleet {args.gpus} H100-SXM; SLO {slo.text()}")
    worst = 0.0
    for make in (plan_split, plan_colocated):
        t0 = time.perf_counter()
        plan = make("llama2-70b", trace, fleet(args.gpus), slo)
        planned = time.perf_counter() - t0
        gpus = sum(p.gpus for p in plan.pools)
        walls = []
        for _ in range(2):
            t0 = time.perf_counter()
            sim = simulate_llm(plan, trace, seed=0)
            walls.append(time.perf_counter() - t0)
        worst = max(worst, min(walls))
        print(f"\n{plan.label}: {gpus} GPUs in {len(plan.pools)} pool(s), planned in "
              f"{planned:.2f}s; replay wall {min(walls):.2f}s (runs: "
              f"{', '.join(f'{w:.2f}' for w in walls)})")
        print("  " + "\n  ".join(compare(plan, sim)))
        assert sim.completed + sim.dropped == sim.requests, "a request did not finish once"
    print(f"\nslowest replay {worst:.2f}s; aim < {AIM_S:.0f}s: "
          f"{'met' if worst < AIM_S else 'NOT met'}")


if __name__ == "__main__":
    main()
