"""``ray_engines.py --nodes N``: fitwork against tuned Ray Data on a Ray cluster of N nodes.

The cluster runs on this host (`ray_cluster_local.LocalCluster`: each node its own ``ray
start``, temp dir, capped object store and CPUs).  Three contenders per pipeline: fitwork's
plan as replica actors, the same plan with ``task_replicas=True``, and Ray Data tuned as
the one-node bench tunes it (vectorised ``map_batches``, the batch size swept; the heavy
pipeline's scoring stage on an actor pool of one actor per cluster CPU).  The plan is
fitted to the cluster's own fleet (its nodes read into node types) from a profile taken on
this host before any cluster starts.

- WARM: one cluster, the contenders one after another (Ray Data at every swept batch
  size), in ABC then CBA order, ``repeats`` times by turns; the best run of each order.
- COLD: a fresh cluster for every run of every contender (Ray Data at the batch size that
  did best warm), in both orders.

Each cell is one (pipeline, mode, order); its figure for fitwork is items/s over the best
Ray Data's in that same cell.  The headline is the WORST cell of each fitwork contender,
not its better order.  Beside each fitwork run, realized / predicted: the plan's steady
rate less Ray's start-up, its cost per call and the CPU its frames crossing nodes cost
(`fitwork.engine.ray.costs.predicted`, `plan_crossing`).  CPU-s are those of every process
of the cluster and of this driver.
"""

from __future__ import annotations

import argparse
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import ray_engines as bench
from ray_cluster_local import LocalCluster, token_auth

import fitwork


@dataclass
class Cell:
    """Runs of one contender in one (pipeline, mode, order): (items/s, CPU-s, predicted)."""

    runs: list[tuple[float, float, float | None]] = field(default_factory=list)
    hung: int = 0

    def best(self) -> tuple[float, float, float | None]:
        return max(self.runs, key=lambda r: r[0]) if self.runs else (0.0, 0.0, None)


@dataclass
class Setup:
    """What a pipeline's contenders need: its plan for the cluster and its Ray Data stages."""

    name: str
    items: int
    plan: Any
    ray_data: dict[int, list[tuple[Any, dict[str, Any]]]]
    column: str = "s"


def driver_cpu() -> float:
    """This process's CPU-seconds."""
    times = psutil.Process().cpu_times()
    return times.user + times.system


def ray_data_stages(name: str, sizes: list[int], cpus: int
                    ) -> dict[int, list[tuple[Any, dict[str, Any]]]]:
    """Ray Data's stages per batch size, as the one-node bench tunes them."""
    import ray.data

    stages = {}
    for size in sizes:
        if name == "light":
            options = {"batch_size": size, "num_cpus": 1.0}
            stages[size] = [(bench.expand_batch, options), (bench.transform_batch, options),
                            (bench.reduce_batch, options)]
        else:
            stages[size] = [
                (bench.features_batch, {"batch_size": size, "num_cpus": 0.5}),
                (bench.ScoreBatch, {"batch_size": size, "num_cpus": 0.5,
                                    "compute": ray.data.ActorPoolStrategy(size=cpus)}),
                (bench.total_batch, {"batch_size": size, "num_cpus": 0.5})]
    return stages


KEEP_S = 60.0
"""How long the kept-warm contender's parked replicas wait for its next run."""
KEPT = "fitwork kept warm"


def fitwork_run(setup: Setup, address: str, tasks: bool, keep: float = 0.0
                ) -> Callable[[], float]:
    """A run of the plan on the cluster (actors, or task replicas; actors kept warm for
    ``keep`` seconds after it when above 0)."""
    def run() -> float:
        return bench.run_fitwork(bench.PIPELINES[setup.name], setup.items, "ray", None,
                                 setup.plan, address=address, task_replicas=tasks,
                                 keep_warm=keep)
    return run


def release_pool() -> int:
    """Stop every replica parked in a fitwork warm pool on the connected cluster (the
    kept-warm contender's, once its turn is over, so the next contender gets the cores),
    with Ray's idle workers refilled in their place (`fitwork.release_warm`); how many."""
    import fitwork

    return fitwork.release_warm()


def predicted(setup: Setup, cores: float, adopted: int = 0) -> float:
    """The plan's rate on this cluster for a run of ``setup.items``: start-up (of the
    replicas not ``adopted`` from a warm pool), calls and frames crossing nodes taken off
    (`fitwork.engine.ray.costs`), and its steady rate held to what this host's cores carry
    of it: the nodes are processes of this host, so three one-CPU nodes get its two cores
    (the plan, made for three machines, counts on three; adopted runs of the light plan
    realized 0.25-0.32 of a prediction that did not say so); start-up and crossings are
    charged to those cores too."""
    from fitwork.engine.ray import costs

    groups = setup.plan.placement().groups
    replicas = sum(g.replicas for g in groups)
    here = min(cores, float(len(os.sched_getaffinity(0))))  # the cores that carry it all
    share = here / cores if cores > 0 else 1.0
    return costs.predicted(setup.plan.fitted.throughput * share, setup.items,
                           max(0, replicas - adopted), len({g.unit for g in groups}),
                           here, costs.plan_crossing(setup.plan))


def adopted_by_last() -> int:
    """Replicas the last fitwork run adopted from a warm pool (its record says)."""
    record = bench.LAST_RECORD[0] if bench.LAST_RECORD else None
    pool = ((record.host or {}).get("warm_pool") or {}) if record is not None else {}
    return int(pool.get("adopted", 0))


class Hung(Exception):
    """A run that did not end within the bench's ``--run-timeout``."""


def timed(cluster: LocalCluster, run: Callable[[], float], timeout: float
          ) -> tuple[float, float, float]:
    """(total, seconds, CPU-s of the cluster and this driver) of one run; `Hung` if it
    takes longer than ``timeout`` (it is left to die with its cluster)."""
    before = cluster.cpu_seconds() + driver_cpu()
    start = time.perf_counter()
    out: list[float] = []
    failed: list[BaseException] = []

    def body() -> None:
        try:
            out.append(run())
        except BaseException as error:  # said in the main thread
            failed.append(error)

    worker = threading.Thread(target=body, daemon=True, name="contender")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise Hung(f"no end within {timeout:.0f} s")
    if failed:
        raise failed[0]
    total = out[0]
    seconds = time.perf_counter() - start
    time.sleep(0.25)  # the sampler's last look at workers that just ended
    return total, seconds, cluster.cpu_seconds() + driver_cpu() - before


def connect(cluster: LocalCluster) -> str:
    """Start ``cluster`` and connect this driver to it (Ray Data's logs kept quiet)."""
    import logging

    import ray
    import ray.data

    if ray.is_initialized():  # a hung run's thread may have touched Ray since
        ray.shutdown()
    address = cluster.start()
    ray.init(address=address, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    return address


def disconnect(cluster: LocalCluster) -> None:
    import ray

    ray.shutdown()
    cluster.stop()


Runner = Callable[[str], Callable[[], float]]  # an address to a run


def contenders(setup: Setup, sizes: list[int]) -> list[tuple[str, Runner, bool]]:
    """(name, run at an address, is fitwork) in ABC order: actors, actors kept warm,
    tasks, Ray Data."""
    out: list[tuple[str, Runner, bool]] = [
        ("fitwork actors", lambda a: fitwork_run(setup, a, False), True),
        (KEPT, lambda a: fitwork_run(setup, a, False, KEEP_S), True),
        ("fitwork tasks", lambda a: fitwork_run(setup, a, True), True)]
    for size in sizes:
        out.append((f"ray data batch={size}", lambda a, s=size: (
            lambda: bench.run_ray_data(setup.items, setup.ray_data[s], setup.column)), False))
    return out


class Table:
    """Every run's figures by (pipeline, mode, order, contender); totals checked."""

    def __init__(self, cores: float, timeout: float = 180.0) -> None:
        self.timeout = timeout
        self.cells: dict[tuple[str, str, str, str], Cell] = {}
        self.totals: dict[str, float] = {}
        self.cores = cores
        self.starts: list[float] = []  # seconds each cold cluster took to start (untimed)
        self.adopted: list[int] = []  # replicas each timed kept-warm warm run adopted

    def add(self, key: tuple[str, str, str, str], setup: Setup, result: tuple[float, ...],
            fitwork_run: bool, adopted: int = 0) -> None:
        total, seconds, cpu = result
        first = self.totals.setdefault(setup.name, total)
        if abs(total - first) > 1e-9 * max(1.0, abs(first)):
            raise SystemExit(f"{key}: total {total!r} != {first!r}")
        guess = predicted(setup, self.cores, adopted) if fitwork_run else None
        self.cells.setdefault(key, Cell()).runs.append((setup.items / seconds, cpu, guess))

    def hang(self, key: tuple[str, str, str, str], error: Hung) -> None:
        """A run that hung: counted in its cell, said at once."""
        self.cells.setdefault(key, Cell()).hung += 1
        print(f"  {' '.join(key)}: HUNG ({error}); its cluster is stopped", flush=True)


def warm(table: Table, setup: Setup, remake: Callable[[], LocalCluster], repeats: int) -> None:
    """One cluster; every contender in ABC then CBA order, by turns (a run that hangs is
    counted and the rest go on on a new cluster, said so).  The kept-warm contender's turn
    is two runs back to back, the second timed: the first parks its replicas, the second
    adopts them (what a long-lived cluster serving the pipeline sees run after run); its
    pool is then stopped so the next contender finds the cores free."""
    cluster = remake()
    address = connect(cluster)
    try:
        runs = contenders(setup, sorted(setup.ray_data))
        for turn in range(repeats):
            order = "ABC" if turn % 2 == 0 else "CBA"
            for name, runner, mine in runs if order == "ABC" else runs[::-1]:
                key = (setup.name, "warm", order, name)
                try:
                    if name == KEPT:  # untimed: fills the pool the timed run adopts
                        timed(cluster, runner(address), table.timeout)
                    result = timed(cluster, runner(address), table.timeout)
                    adopted = adopted_by_last() if name == KEPT else 0
                    table.add(key, setup, result, mine, adopted)
                    if name == KEPT:
                        table.adopted.append(adopted)
                        release_pool()
                except Hung as error:  # the rest of the warm runs on a new cluster
                    table.hang(key, error)
                    disconnect(cluster)
                    cluster = remake()
                    address = connect(cluster)
    finally:
        disconnect(cluster)


def cold(table: Table, setup: Setup, make: Callable[[], LocalCluster], size: int,
         repeats: int) -> None:
    """A fresh cluster for every run; the contenders in ABC then CBA order, by turns."""
    runs = contenders(setup, [size])
    for turn in range(repeats):
        order = "ABC" if turn % 2 == 0 else "CBA"
        for name, runner, mine in runs if order == "ABC" else runs[::-1]:
            cluster = make()
            started = time.perf_counter()
            address = connect(cluster)
            table.starts.append(time.perf_counter() - started)
            key = (setup.name, "cold", order, name)
            try:
                table.add(key, setup, timed(cluster, runner(address), table.timeout), mine)
            except Hung as error:
                table.hang(key, error)
            finally:
                disconnect(cluster)


COLUMNS = [("warm", "ABC"), ("warm", "CBA"), ("cold", "ABC"), ("cold", "CBA")]


def best_ray_data(table: Table, name: str, mode: str, order: str) -> tuple[str, float]:
    """The best Ray Data contender of one cell and its items/s."""
    found = [(cell.best()[0], key[3]) for key, cell in table.cells.items()
             if key[:3] == (name, mode, order) and key[3].startswith("ray data")]
    rate, which = max(found) if found else (0.0, "none")
    return which, rate


def report(table: Table, setup: Setup, load: tuple[float, float, float]) -> dict[str, float]:
    """The pipeline's table (items/s and CPU-s per cell), fitwork / best Ray Data per cell,
    realized / predicted per fitwork cell; returns each fitwork contender's worst ratio."""
    name = setup.name
    print(f"{name}: {setup.items:,} items; plan: {bench.layout(setup.plan)}, predicted steady "
          f"{setup.plan.fitted.throughput:,.0f} items/s (load average {load[0]:.1f} "
          f"{load[1]:.1f} {load[2]:.1f}; other jobs share this host)")
    print(f"  {'':<22}" + "".join(f"{m + ' ' + o:>22}" for m, o in COLUMNS))
    print(f"  {'':<22}" + f"{'items/s':>13} {'CPU-s':>8}" * len(COLUMNS))
    rows = sorted({k[3] for k in table.cells if k[0] == name},
                  key=lambda r: (not r.startswith("fitwork"), r))
    for row in rows:
        cells = [table.cells.get((name, m, o, row), Cell()) for m, o in COLUMNS]
        print(f"  {row:<22}" + "".join(
            f"{c.best()[0]:>13,.0f} {c.best()[1]:>8.1f}" if c.runs else
            f"{'hung' if c.hung else '-':>22}" for c in cells))
    worst: dict[str, float] = {}
    for row in (r for r in rows if r.startswith("fitwork")):
        ratios, fits = [], []
        for mode, order in COLUMNS:
            rate, _, guess = table.cells.get((name, mode, order, row), Cell()).best()
            _, baseline = best_ray_data(table, name, mode, order)
            ratios.append(rate / baseline if baseline else math.inf)  # none: Ray Data hung
            fits.append(f"{rate / guess:.2f}" if guess else "-")
        worst[row] = min(ratios)
        print(f"  {row} / best Ray Data: " + ", ".join(
            f"{m} {o} " + (f"{r:.2f}x" if math.isfinite(r) else "n/a (Ray Data hung)")
            for (m, o), r in zip(COLUMNS, ratios, strict=True))
            + f"; worst {min(ratios):.2f}x")
        print(f"  {row} realized / predicted: " + ", ".join(
            f"{m} {o} {f}" for (m, o), f in zip(COLUMNS, fits, strict=True))
            + f" (predicted {predicted(setup, table.cores):,.0f} items/s starting every "
               "replica" + (f", {predicted(setup, table.cores, 10**6):,.0f} adopting them all"
                            if row == KEPT else "") + ")")
    return worst


def plan_for(name: str, sample: int, nodes: int, cpus: float) -> Any:
    """fitwork's plan for ``name`` on ``nodes`` nodes of ``cpus`` CPUs (the cluster's own
    node type), from a profile taken on this host."""
    from fitwork.fit.errors import FitInputError
    from fitwork.fit.plan import plan_for
    from fitwork.hardware.fleet import Fleet

    memory = int(psutil.virtual_memory().total // (2 * nodes))
    fleet = Fleet.parse({"name": f"local-{nodes}", "node_types": [
        {"name": "cpu", "count": nodes, "cores": cpus, "memory": memory}]})
    for attempt in range(3):  # a profile taken under a burst of load can leave no plan
        profile = fitwork.profile_pipeline(bench.PIPELINES[name], range(sample),
                                           samples=sample)
        try:
            return plan_for(profile, fleet)
        except FitInputError as error:
            print(f"{name}: profile {attempt + 1} gave no plan ({error}); profiling again")
    raise SystemExit(f"{name}: no plan for {nodes} nodes of {cpus:g} CPU from 3 profiles")


def main(args: argparse.Namespace) -> None:
    """Warm then cold, light then heavy; the tables and the headline."""
    os.environ["RAY_ENABLE_AUTO_CONNECT"] = "0"  # a hung run's thread must not start a Ray
    token_auth()  # before profiling
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [here, *filter(None, [os.environ.get("PYTHONPATH")])])  # Ray's workers import these

    def make() -> LocalCluster:
        return LocalCluster(args.nodes, cpus=args.node_cpus, store=args.node_store_mib * 2**20)

    cpus = args.nodes * args.node_cpus
    table = Table(cpus, args.run_timeout)
    print(f"fitwork vs tuned Ray Data on {args.nodes} Ray nodes of {args.node_cpus:g} CPU "
          f"each ({args.node_store_mib} MiB object store each), all on this host "
          f"({os.cpu_count()} cores): warm (one cluster) and cold (a fresh cluster per run), "
          "ABC and CBA order, best run of each cell; CPU-s of the cluster and the driver")
    worst: dict[str, float] = {}
    began = time.perf_counter()
    for name, items, sizes, sample in (
            ("light", args.nodes_items, args.batch_sizes, 256),
            ("heavy", args.nodes_heavy_items, args.heavy_batch_sizes, 32)):
        if args.skip == name:
            continue
        setup = Setup(name, items, plan_for(name, sample, args.nodes, args.node_cpus),
                      ray_data_stages(name, sizes, int(cpus)))
        warm(table, setup, make, max(2, args.repeats))
        tuned = max(best_ray_data(table, name, "warm", o)[::-1] for o in ("ABC", "CBA"))[1]
        size = int(tuned.rsplit("=", 1)[1]) if "=" in tuned else sizes[0]
        cold(table, setup, make, size, max(2, args.cold_repeats))
        for row, ratio in report(table, setup, os.getloadavg()).items():
            worst[f"{name} {row}"] = ratio
    if table.adopted:
        print(f"{KEPT}: each timed warm run followed an untimed one of its own and adopted "
              f"{', '.join(map(str, table.adopted))} parked replica(s); its pool was then "
              "stopped for the next contender (cold, its run is a first run: nothing to adopt)")
    starts = table.starts or [0.0]
    print(f"bench took {time.perf_counter() - began:.0f} s; cold clusters took "
          f"{min(starts):.0f}-{max(starts):.0f} s each to start (not timed)")
    if worst:
        line = ", ".join(f"{k} {v:.2f}x" if math.isfinite(v) else f"{k} n/a (Ray Data hung "
                         "in every cell)" for k, v in worst.items())
        measured = [v for v in worst.values() if math.isfinite(v)]
        met = len(measured) == len(worst) and all(v >= 1.5 for v in measured)
        print(f"headline, the WORST cell of each (fitwork / best Ray Data): {line}; aim >= "
              f"1.5x in every cell: {'met' if met else 'NOT met'}"
              + (f" (worst of all {min(measured):.2f}x)" if measured else
                 " (no cell had a Ray Data figure)"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The multi-node flags of ``ray_engines.py``."""
    parser.add_argument("--nodes", type=int, default=1,
                        help="Ray nodes started on this host (1: the one-node bench)")
    parser.add_argument("--node-cpus", type=float, default=1.0, help="CPUs per node")
    parser.add_argument("--node-store-mib", type=int, default=150,
                        help="object store per node, MiB")
    parser.add_argument("--nodes-items", type=int, default=2_000,
                        help="items, light pipeline, with --nodes above 1")
    parser.add_argument("--nodes-heavy-items", type=int, default=40,
                        help="items, heavy pipeline, with --nodes above 1")
    parser.add_argument("--run-timeout", type=float, default=120.0,
                        help="seconds after which a run counts as hung (multi-node)")
    parser.add_argument("--cold-repeats", type=int, default=2,
                        help="cold runs of each contender, by turns in ABC and CBA order")
