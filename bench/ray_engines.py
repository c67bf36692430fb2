"""The same CPU pipeline through fitwork on Ray, fitwork's local engine, and Ray Data.

Three stages of modest numpy work per item run over the same items three ways in one
script, on one Ray cluster started here: fitwork's Ray engine (replica actors sending
frames to each other), fitwork's local engine (processes and kernel channels), and Ray
Data (``map_batches`` with the same three functions applied item by item inside each
batch).  Prints items/s for each and the ratios.  Aim: fitwork on Ray at least matches
Ray Data.

    .venv/bin/python bench/ray_engines.py [--items N]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

from fitwork import Pipeline, unit


def expand(x: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, 2_000) * (x % 97)


def transform(a: np.ndarray) -> np.ndarray:
    return np.sqrt(np.abs(np.sin(a) * 3.0 + a))


def reduce_(a: np.ndarray) -> float:
    return float(a.sum())


PIPELINE = Pipeline(unit(expand, cpu=0.5), unit(transform, cpu=0.5), unit(reduce_, cpu=0.5),
                    name="cpu-chain")


def run_fitwork(engine: str, items: int) -> tuple[float, float]:
    start = time.perf_counter()
    with PIPELINE.run(range(items), engine=engine) as result:
        total = sum(result)
    return items / (time.perf_counter() - start), total


def run_ray_data(items: int) -> tuple[float, float]:
    import ray.data

    def batch_of(fn: Any, key_in: str, key_out: str) -> Any:
        def apply(batch: dict[str, np.ndarray]) -> dict[str, Any]:
            return {key_out: [fn(v) for v in batch[key_in]]}
        return apply

    start = time.perf_counter()
    dataset = (ray.data.range(items)
               .map_batches(batch_of(expand, "id", "a"), batch_size=64, num_cpus=0.5)
               .map_batches(batch_of(transform, "a", "b"), batch_size=64, num_cpus=0.5)
               .map_batches(batch_of(reduce_, "b", "s"), batch_size=64, num_cpus=0.5))
    total = float(sum(row["s"] for row in dataset.iter_rows()))
    return items / (time.perf_counter() - start), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False,
             object_store_memory=500 * 2**20)
    ray.data.DataContext.get_current().enable_progress_bars = False
    results: dict[str, list[float]] = {"fitwork ray": [], "fitwork local": [], "ray data": []}
    totals = {}
    for _ in range(2):  # alternate and keep the best: the machine is shared and noisy
        for name, call in (("fitwork ray", lambda: run_fitwork("ray", args.items)),
                           ("fitwork local", lambda: run_fitwork("local", args.items)),
                           ("ray data", lambda: run_ray_data(args.items))):
            rate, total = call()
            results[name].append(rate)
            totals[name] = total
    assert len({round(t, 3) for t in totals.values()}) == 1, totals
    best = {name: max(rates) for name, rates in results.items()}
    print(f"{args.items:,} items, 3 numpy stages, {os.cpu_count()} cores, best of 2")
    for name, rate in best.items():
        print(f"  {name:<14} {rate:>10,.0f} items/s")
    print(f"  fitwork ray / ray data     {best['fitwork ray'] / best['ray data']:.2f}x "
          "(aim >= 1)")
    print(f"  fitwork local / ray data   {best['fitwork local'] / best['ray data']:.2f}x")
    print(f"  fitwork ray / fitwork local {best['fitwork ray'] / best['fitwork local']:.2f}x")
    ray.shutdown()


if __name__ == "__main__":
    main()
