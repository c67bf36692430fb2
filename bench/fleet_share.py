"""Many pipelines, one fleet: the shipped Philly trace under `fitwork fleet simulate`'s policies.

Every policy holds each pipeline to the GPUs its Philly job asked for (``max_gpus``). The
trace's CPU pre-/post-processing rates are ASSUMED (no public per-family figure verified), so
the bench sweeps them on request (``--cpu-cost 1,2,4,8``: x1, x2, x4, x8 of the assumed CPU
cost per item, a SENSITIVITY sweep, not a measured trace; the default is x1 alone, to keep
the bench near 15 minutes here). Per setting it prints the side-by-side table for fitwork,
job-level and static (whole-pipeline bundles, as Gavel and team silos run) and their fluid
forms job-level-fluid and static-fluid (the strongest forms, to show what bundling costs),
run two at a time, one per core; the ratios fitwork / job-level and fitwork / static against
the aims of issue 36 (MET or MISSED), and the same ratios against the fluid forms. Then the
time of one re-fit at 500 running pipelines with every pipeline its own spec (no aggregation
of identical pipelines), fluid and rounded to whole replicas, with the model's size and gap.

    .venv/bin/python bench/fleet_share.py [--quick] [--arrival-scale 1] [--cpu-cost 1,2,4,8]
                                          [--no-gpu-cap] [--json OUT]

``--quick``: every 10th pipeline on a tenth of the fleet (the same load per node).
``--arrival-scale 4``: arrivals 4x as dense (the fleet near full).
``--no-gpu-cap``: the rule before the cap (a pipeline may hold any number of GPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from fitwork.hardware.fleet import Fleet
from fitwork.jobs.cofit import JobSpec, Offer, alone_rates, cofit
from fitwork.jobs.sim_inputs import load_trace, pools, scale_cpu_cost, shape_of
from fitwork.jobs.sim_table import render
from fitwork.jobs.simulate import POLICIES, simulate
from fitwork.jobs.trace import shipped_trace

FLEET = Path(__file__).resolve().parents[1] / "src/fitwork/jobs/data/philly_fleet.yaml"


def fleet_and_lines(quick: bool, cpu_cost: float = 1.0) -> tuple[Fleet, list[Any]]:
    """The fleet and trace lines (a tenth of each with ``quick``), every CPU unit's cost per
    item ``cpu_cost`` times the trace's assumed one."""
    fleet = Fleet.from_yaml(FLEET)
    lines = load_trace(shipped_trace())
    if cpu_cost != 1.0:
        lines = scale_cpu_cost(lines, cpu_cost)
    if quick:
        fleet = fleet.model_copy(update={"name": fleet.name + "-tenth", "node_types": [
            n.model_copy(update={"count": max(1, n.count // 10)}) for n in fleet.node_types]})
        lines = lines[::10]
    return fleet, lines


def run_policy(args: tuple[str, bool, float, float, bool]) -> tuple[dict[str, Any], float]:
    """One policy's simulation at one CPU cost, and its wall seconds (in a worker process)."""
    policy, quick, scale, cpu_cost, cap = args
    fleet, lines = fleet_and_lines(quick, cpu_cost)
    start = time.perf_counter()
    result = simulate(fleet, lines, policy, arrival_scale=scale,  # type: ignore[arg-type]
                      gpu_cap=cap)
    result["cpu_cost"] = cpu_cost
    return result, time.perf_counter() - start


def refit_at(n: int, quick: bool, cap: bool) -> list[str]:
    """One fair re-fit of the first ``n`` pipelines of the trace, each its own spec."""
    fleet, lines = fleet_and_lines(quick)
    chosen = lines[:n]
    specs: list[JobSpec] = []
    offers: list[Offer] = []
    alone: dict[str, float] = {}
    fleet_pools = pools(fleet)
    for p, line in enumerate(chosen):
        shape = shape_of(line, fleet, cap)
        specs.append(JobSpec(line.id, shape.multiplicity, line.weight, team=line.team,
                             quota=shape.quota))
        offers += [replace(o, job=p) for o in shape.offers]
        if shape.key not in alone:
            alone[shape.key] = alone_rates([specs[-1]], list(shape.offers), fleet_pools,
                                           integral=False)[0]
    rates = [alone[shape_of(line, fleet, cap).key] for line in chosen]
    out = []
    for label, fractional in (("fluid (as simulated)", True), ("whole replicas", False)):
        start, cpu = time.perf_counter(), time.process_time()
        plan = cofit(specs, offers, fleet_pools, alone=rates, integral=False,
                     fractional=fractional, time_limit=10.0, mip_gap=1e-4)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        out.append(f"re-fit at {n} running pipelines, one spec each, {label}: "
                   f"{wall:.2f} s wall, {cpu:.2f} s CPU (load average "
                   f"{os.getloadavg()[0]:.1f}; {plan.seconds:.2f} s in HiGHS, {len(plan.stages)} "
                   f"solves), {plan.size.variables} variables, {plan.size.rows} rows, "
                   f"{plan.size.integers} integers, status {plan.status}, gap {plan.gap:.1e} "
                   f"against the LP bound")
    return out


AIMS = (("job-level", "utilization", 1.5), ("job-level", "completion", 0.7),
        ("static", "utilization", 3.0))
"""Issue 36's fleet-scale aims: fitwork's GPU utilization at least this many times the
baseline's, its average completion at most this many times."""


def _ratio(fw: dict[str, Any], base: dict[str, Any], figure: str) -> float:
    """fitwork's figure over the baseline's (GPU busy/owned, or average completion)."""
    if figure == "utilization":
        return float(fw["gpu_utilization"] / base["gpu_utilization"])
    return float(fw["avg_completion_s"] / base["avg_completion_s"])


def ratios(by: dict[str, dict[str, Any]]) -> list[str]:
    """fitwork against each baseline on the aims' figures, MET or MISSED."""
    fw = by["fitwork"]
    lines = []
    for other, figure, aim in AIMS:
        got = _ratio(fw, by[other], figure)
        met = got >= aim if figure == "utilization" else got <= aim
        sign = ">=" if figure == "utilization" else "<="
        fluid = by.get(f"{other}-fluid")
        beside = (f"; against {other}-fluid {_ratio(fw, fluid, figure):.2f}x"
                  if fluid else "")
        lines.append(f"fitwork / {other} {figure}: {got:.2f}x (aim {sign} {aim}x: "
                     f"{'MET' if met else 'MISSED'}){beside}")
    jain = fw["jain"]
    lines.append(f"fitwork Jain's fairness {jain:.3f} (aim >= 0.9: "
                 f"{'MET' if jain >= 0.9 else 'MISSED'})")
    return lines


def _costs(text: str) -> list[float]:
    """The --cpu-cost list, e.g. "1,2,4,8"."""
    try:
        costs = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--cpu-cost {text!r}: give numbers, e.g. 1,2,4,8") from None
    if not costs or min(costs) <= 0:
        raise argparse.ArgumentTypeError(f"--cpu-cost {text!r}: every factor must be > 0")
    return costs


def _block(cost: float, done: list[tuple[dict[str, Any], float]], policies: list[str]) -> None:
    """One setting's table, wall seconds and ratios against the aims."""
    results = {r["policy"]: r for r, _ in done}
    print(f"\n== CPU cost per item x{cost:g} of the trace's ASSUMED rates"
          + (" (the trace as shipped)" if cost == 1 else " (SENSITIVITY, not a measured trace)")
          + " ==")
    print(render([results[p] for p in policies]))
    print("simulation wall: " + ", ".join(f"{r['policy']} {s:.0f} s" for r, s in done)
          + "; load average " + " ".join(f"{v:.1f}" for v in os.getloadavg()))
    if {"fitwork", "job-level", "static"} <= set(results):
        for line in ratios(results):
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--arrival-scale", type=float, default=1.0)
    parser.add_argument("--cpu-cost", type=_costs, default=[1.0],
                        help="CPU cost factors to sweep, e.g. 1,2,4,8 (default 1: the trace "
                             "as shipped; the full fleet takes ~12 CPU-minutes per factor)")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--no-gpu-cap", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    policies = [p for p in args.policies.split(",") if p]
    fleet, lines = fleet_and_lines(args.quick)
    cap = not args.no_gpu_cap
    print(f"fleet {fleet.name}: {sum(n.count for n in fleet.node_types)} nodes, "
          f"{len(fleet.node_types)} node types; trace {len(lines)} pipelines "
          f"(arrivals / {args.arrival_scale:g}); each pipeline held to the GPUs it asked for: "
          f"{'yes' if cap else 'NO (--no-gpu-cap)'}", flush=True)
    start = time.perf_counter()
    jobs = [(p, args.quick, args.arrival_scale, c, cap) for c in args.cpu_cost for p in policies]
    out: dict[str, dict[str, Any]] = {}
    with ProcessPoolExecutor(max_workers=2) as pool:
        done = pool.map(run_policy, jobs)
        for cost in args.cpu_cost:
            block = [next(done) for _ in policies]
            _block(cost, block, policies)
            out[f"x{cost:g}"] = {r["policy"]: r for r, _ in block}
            sys.stdout.flush()
    print(f"\nall simulations {time.perf_counter() - start:.0f} s (two at a time)")
    for line in refit_at(min(500, len(lines)), args.quick, cap):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
