"""Where a short Ray run's start-up goes, and the same plan on one-node Ray against local.

One script, one Ray cluster of this host started here (as ``bench/ray_engines.py`` starts
it), the pipelines and plans of ``bench/ray_engines.py``: the light pipeline over 4,000
items and the heavy one over 160, each through fitwork's plan on the local engine and on
Ray (actors, a cold start each run; task replicas on Ray's prestarted workers; and, with
``--keep-warm``, actors adopted from the warm pool the run before left).  Contenders run
in both orders by turns (ABC, then CBA); printed: each one's items/s and the CPU-seconds
of the whole process tree, the ratios of Ray to local in each order, the load average, and
each Ray run's start-up breakdown from its record (``host["ray_start"]``: seconds from the
run's creation to its connection, its nodes read, its replicas asked for, the first and
last replica up, the first frame settled).  Outside the run: ``ray.init`` (once per
process) and the plan loaded from its file, timed here.

    .venv/bin/python bench/ray_start.py [--items 4000] [--heavy-items 160] [--repeats 2]
        [--keep-warm 60]
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ray_engines as rig  # type: ignore[import-not-found]  # a sibling script

import fitwork
from fitwork.fit.plan import Plan

PHASES = ("connected", "nodes read", "prepared", "spawned", "first hello", "last hello",
          "feeding", "first frame", "stopping")
BREAKDOWNS: list[tuple[str, str, dict[str, float]]] = []


def ray_run(name: str, items: int, plan: Any, label: str, **options: Any) -> float:
    """The plan on Ray; the outputs' sum.  Its record's start-up breakdown is kept."""
    with fitwork.run(rig.PIPELINES[name], range(items), engine="ray", placement=plan,
                     **options) as result:
        total = float(sum(result))
    start = (result.record.host or {}).get("ray_start", {})
    adopted = (result.record.host or {}).get("warm_pool", {}).get("adopted", 0)
    BREAKDOWNS.append((name, f"{label}{f' (adopted {adopted})' if adopted else ''}", start))
    return total


def contenders(name: str, items: int, plan: Any, warm: float) -> list[rig.Contender]:
    """Local, Ray cold (actors; task replicas on Ray's prestarted workers), and (``warm``
    > 0) Ray adopting the pool a run before it left."""
    config = rig.plan_config(plan)
    found = [rig.Contender("local", config, lambda: rig.run_local(name, items, None, plan)),
             rig.Contender("ray", f"{config}, actors",
                           lambda: ray_run(name, items, plan, "ray"))]
    found.append(rig.Contender("ray tasks", f"{config}, task_replicas=True", lambda: ray_run(
        name, items, plan, "ray tasks", task_replicas=True)))
    if warm > 0:
        found.append(rig.Contender(
            "ray warm", f"{config}, actors kept warm {warm:g} s", lambda: ray_run(
                name, items, plan, "ray warm", keep_warm=warm),
            prepare=lambda: ray_run(name, min(items, 64), plan, "warming", keep_warm=warm)))
    return found


def show(title: str, found: list[rig.Contender]) -> None:
    """items/s and CPU-s per order, each Ray contender against local, the load average."""
    load = os.getloadavg()
    print(f"{title}  (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})")
    local = found[0]
    for c in found:
        cells = []
        for order in ("ABC", "CBA"):
            rate, cpu = c.best(order)
            base, base_cpu = local.best(order)
            cells.append(f"{order} {rate:>8,.0f}/s {cpu:>6.2f} CPU-s {rate / base:>5.2f}x "
                         f"(CPU {cpu / max(base_cpu, 1e-9):.2f}x)")
        print(f"  {c.name:<9} {'   '.join(cells)}  {c.config}")


def breakdown() -> None:
    """Each Ray run's start-up, phase by phase (seconds from the run's creation)."""
    print("start-up of each Ray run, seconds from the run's creation:")
    print(f"  {'':<24}" + "".join(f"{p:>12}" for p in PHASES))
    for name, label, marks in BREAKDOWNS:
        cells = "".join(f"{marks[p]:>12.3f}" if p in marks else f"{'-':>12}" for p in PHASES)
        print(f"  {name + ' ' + label:<24}{cells}")
    BREAKDOWNS.clear()


def timed(what: str, step: Callable[[], Any]) -> Any:
    """Run ``step``, print how long it took."""
    start = time.perf_counter()
    value = step()
    print(f"{what}: {time.perf_counter() - start:.3f} s")
    return value


def main() -> None:
    """Plan, start Ray, measure light then heavy in both orders, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4_000, help="items, light pipeline")
    parser.add_argument("--heavy-items", type=int, default=160, help="items, heavy pipeline")
    parser.add_argument("--repeats", type=int, default=2, help="runs each, ABC/CBA by turns")
    parser.add_argument("--keep-warm", type=float, default=0.0,
                        help="also run Ray adopting a warm pool kept this many seconds")
    parser.add_argument("--skip", choices=("light", "heavy"), help="leave one pipeline out")
    args = parser.parse_args()
    import ray

    cores = os.cpu_count() or 2
    temp_dir = tempfile.mkdtemp(prefix="fwstart-")
    plans: dict[str, Plan] = {}
    for name, sample in (("light", 256), ("heavy", 32)):
        path = Path(temp_dir) / f"{name}.plan.json"
        rig.planned(rig.PIPELINES[name], sample).save(path)
        plans[name] = timed(f"plan {name} loaded from its file", functools.partial(Plan.load,
                                                                                    path))
    rig.HELPER.append(ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")))
    rig.HELPER[0].submit(time.sleep, 0).result()
    rig.CPU.append(rig.TreeCPU())
    timed("ray.init (a one-node cluster of this host, once per process)", lambda: ray.init(
        num_cpus=cores, include_dashboard=False, log_to_driver=False,
        object_store_memory=300 * 2**20, _temp_dir=str(Path(temp_dir) / "ray")))
    try:
        for name, items in (("light", args.items), ("heavy", args.heavy_items)):
            if args.skip == name:
                continue
            found = contenders(name, items, plans[name], args.keep_warm)
            rig.measure(found, items, max(2, args.repeats))
            show(f"{name}: {items:,} items, {rig.layout(plans[name])}, {cores} cores", found)
            breakdown()
    finally:
        ray.shutdown()
        rig.HELPER[0].shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
