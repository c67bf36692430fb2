"""Many pipelines, one fleet: the shipped Philly trace under `fitwork fleet simulate`'s policies.

Prints the side-by-side table for fitwork, job-level and static (whole-pipeline bundles, as
Gavel and team silos run) and their fluid forms job-level-fluid and static-fluid (the
strongest forms, to show what bundling costs), run two at a time, one per core; the ratios
fitwork / job-level and fitwork / static against the aims of issue 36 (MET or MISSED), and
the same ratios against the fluid forms; then the time of one re-fit at 500 running pipelines
with every pipeline its own spec (no aggregation of identical pipelines), fluid and rounded
to whole replicas, with the model's size and gap.

    .venv/bin/python bench/fleet_share.py [--quick] [--arrival-scale 1] [--json OUT]

``--quick``: every 10th pipeline on a tenth of the fleet (the same load per node).
``--arrival-scale 4``: arrivals 4x as dense (the fleet near full).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from fitwork.hardware.fleet import Fleet
from fitwork.jobs.cofit import JobSpec, Offer, alone_rates, cofit
from fitwork.jobs.sim_inputs import load_trace, pools, shape_of
from fitwork.jobs.sim_table import render
from fitwork.jobs.simulate import POLICIES, simulate
from fitwork.jobs.trace import shipped_trace

FLEET = Path(__file__).resolve().parents[1] / "src/fitwork/jobs/data/philly_fleet.yaml"


def fleet_and_lines(quick: bool) -> tuple[Fleet, list[Any]]:
    """The fleet and trace lines (a tenth of each with ``quick``)."""
    fleet = Fleet.from_yaml(FLEET)
    lines = load_trace(shipped_trace())
    if quick:
        fleet = fleet.model_copy(update={"name": fleet.name + "-tenth", "node_types": [
            n.model_copy(update={"count": max(1, n.count // 10)}) for n in fleet.node_types]})
        lines = lines[::10]
    return fleet, lines


def run_policy(args: tuple[str, bool, float]) -> tuple[dict[str, Any], float]:
    """One policy's simulation and its wall seconds (in a worker process)."""
    policy, quick, scale = args
    fleet, lines = fleet_and_lines(quick)
    start = time.perf_counter()
    result = simulate(fleet, lines, policy, arrival_scale=scale)  # type: ignore[arg-type]
    return result, time.perf_counter() - start


def refit_at(n: int, quick: bool) -> list[str]:
    """One fair re-fit of the first ``n`` pipelines of the trace, each its own spec."""
    fleet, lines = fleet_and_lines(quick)
    chosen = lines[:n]
    specs: list[JobSpec] = []
    offers: list[Offer] = []
    alone: dict[str, float] = {}
    fleet_pools = pools(fleet)
    for p, line in enumerate(chosen):
        shape = shape_of(line, fleet)
        specs.append(JobSpec(line.id, shape.multiplicity, line.weight, team=line.team))
        offers += [replace(o, job=p) for o in shape.offers]
        if shape.key not in alone:
            alone[shape.key] = alone_rates([specs[-1]], list(shape.offers), fleet_pools,
                                           integral=False)[0]
    rates = [alone[shape_of(line, fleet).key] for line in chosen]
    out = []
    for label, fractional in (("fluid (as simulated)", True), ("whole replicas", False)):
        start = time.perf_counter()
        plan = cofit(specs, offers, fleet_pools, alone=rates, integral=False,
                     fractional=fractional, time_limit=10.0, mip_gap=1e-4)
        wall = time.perf_counter() - start
        out.append(f"re-fit at {n} running pipelines, one spec each, {label}: "
                   f"{wall:.2f} s wall ({plan.seconds:.2f} s in HiGHS, {len(plan.stages)} "
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--arrival-scale", type=float, default=1.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    fleet, lines = fleet_and_lines(args.quick)
    print(f"fleet {fleet.name}: {sum(n.count for n in fleet.node_types)} nodes, "
          f"{len(fleet.node_types)} node types; trace {len(lines)} pipelines "
          f"(arrivals / {args.arrival_scale:g})")
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(run_policy, [(p, args.quick, args.arrival_scale)
                                          for p in POLICIES]))
    results = {r["policy"]: r for r, _ in done}
    print(render([results[p] for p in POLICIES]))
    print("simulation wall: " + ", ".join(f"{r['policy']} {s:.0f} s" for r, s in done)
          + f"; all {time.perf_counter() - start:.0f} s (two at a time); load average "
          + " ".join(f"{v:.1f}" for v in os.getloadavg()))
    for line in ratios(results):
        print(line)
    for line in refit_at(min(500, len(lines)), args.quick):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
