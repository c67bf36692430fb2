"""Runs back to back on a Ray cluster of several nodes: a kept-warm pool against cold actors and
tuned Ray Data.

What a long-lived cluster serving one pipeline sees: the same run again and again.  Three
contenders, each on a fresh cluster of ``--nodes`` one-CPU nodes of one type started on this
host (`ray_cluster_local.LocalCluster`), each run ``--runs`` times back to back: fitwork's plan
(fitted to that fleet, from a profile taken here first) with ``keep_warm`` (the first run
starts the replicas and parks them, the next adopt them), the same plan with cold actors (a
new replica actor every run), and Ray Data as ``ray_engines.py`` tunes it, at each of
``--batch-sizes``.  Printed: items/s of every run, each run's start-up from its record
(first frame, seconds from the run's creation) and the replicas it adopted, then per
contender its best and worst run after the first, and the kept-warm pool's worst run after
the first over Ray Data's best run after its first.

    .venv/bin/python bench/ray_warm_nodes.py [--nodes 3] [--items 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ray_engines as bench  # type: ignore[import-not-found]  # a sibling script
import ray_nodes as nodes  # type: ignore[import-not-found]
from ray_cluster_local import LocalCluster, token_auth  # type: ignore[import-not-found]

import fitwork

TOTALS: set[float] = set()
"""Every run's sum of its outputs: all contenders must agree (to the float sums' order)."""


def fitwork_runs(plan: Any, address: str, items: int, runs: int, warm: float) -> list[float]:
    """items/s of ``runs`` runs of the light plan back to back (kept warm ``warm`` s, or cold)."""
    rates = []
    for i in range(runs):
        start = time.perf_counter()
        with fitwork.run(bench.PIPELINES["light"], range(items), engine="ray", address=address,
                         placement=plan, keep_warm=warm) as result:
            total = float(sum(result))
        TOTALS.add(total)
        seconds = time.perf_counter() - start
        host = result.record.host or {}
        began = host.get("ray_start", {}).get("first frame")
        adopted = host.get("warm_pool", {}).get("adopted", 0)
        print(f"  run {i}: {items / seconds:>9,.0f} items/s, first frame "
              f"{began if began is None else f'{began:.2f} s'}, adopted {adopted} "
              f"(sum {total})", flush=True)
        rates.append(items / seconds)
    return rates


def ray_data_runs(items: int, runs: int, size: int, cpus: int) -> list[float]:
    """items/s of ``runs`` Ray Data runs back to back at batch ``size``."""
    stages = nodes.ray_data_stages("light", [size], cpus)[size]
    rates = []
    for i in range(runs):
        start = time.perf_counter()
        total = bench.run_ray_data(items, stages, "s")
        TOTALS.add(total)
        rates.append(items / (time.perf_counter() - start))
        print(f"  run {i}: {rates[-1]:>9,.0f} items/s (sum {total})", flush=True)
    return rates


def on_fresh_cluster(args: argparse.Namespace, title: str, body: Any) -> list[float]:
    """``body(address)`` on a cluster started for it and stopped after."""
    print(f"{title}:", flush=True)
    cluster = LocalCluster(args.nodes, cpus=1.0, store=args.store_mib * 2**20)
    address = nodes.connect(cluster)
    try:
        rates: list[float] = body(address)
        return rates
    finally:
        nodes.disconnect(cluster)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--items", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--store-mib", type=int, default=150)
    parser.add_argument("--batch-sizes", default="256,1024")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(  # Ray's workers import the sibling scripts
        [str(Path(__file__).resolve().parent), *filter(None, [os.environ.get("PYTHONPATH")])])
    token_auth()  # before profiling
    plan = nodes.plan_for("light", 256, args.nodes, 1.0)
    print(f"light pipeline, {args.items:,} items a run, {args.runs} runs back to back per "
          f"contender, a fresh cluster of {args.nodes} one-CPU nodes each; plan "
          f"{bench.layout(plan)}; load average {os.getloadavg()[0]:.1f}")
    found = {
        "fitwork kept warm": on_fresh_cluster(args, "fitwork, keep_warm=60", lambda a: (
            fitwork_runs(plan, a, args.items, args.runs, 60.0))),
        "fitwork cold actors": on_fresh_cluster(args, "fitwork, cold actors", lambda a: (
            fitwork_runs(plan, a, args.items, args.runs, 0.0))),
    }
    for size in (int(s) for s in args.batch_sizes.split(",")):
        found[f"ray data batch={size}"] = on_fresh_cluster(
            args, f"Ray Data, batch {size}",
            lambda a, s=size: ray_data_runs(args.items, args.runs, s, args.nodes))
    if max(TOTALS) - min(TOTALS) > 1e-9 * max(1.0, abs(max(TOTALS))):  # order of the sums
        raise SystemExit(f"the contenders' outputs differ: sums {sorted(TOTALS)}")
    print(f"after the first run of each (load average {os.getloadavg()[0]:.1f}):")
    for name, rates in found.items():
        later = rates[1:] or rates
        print(f"  {name:<22} first {rates[0]:>9,.0f}  later {min(later):>9,.0f}-"
              f"{max(later):>9,.0f} items/s")
    best_data = max(max(r[1:] or r) for n, r in found.items() if n.startswith("ray data"))
    warm = min(found["fitwork kept warm"][1:] or found["fitwork kept warm"])
    print(f"fitwork kept warm (worst later run) / Ray Data (best later run): "
          f"{warm / best_data:.2f}x")


if __name__ == "__main__":
    main()
