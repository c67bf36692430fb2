"""Two CPU pipelines through fitwork on Ray, fitwork's local engine, and tuned Ray Data.

Each pipeline runs over the same items several ways in one script, on one Ray cluster
started here: fitwork's Ray engine (replica actors sending frames to each other), fitwork's
local engine (processes and kernel channels), and Ray Data tuned as its docs advise
(vectorised ``map_batches`` over numpy batches, a swept batch size, an actor pool for the
stage that loads state).

- ``light``: three stages of small numpy work per item (about 0.1 ms), so per-call and
  per-item overheads dominate.
- ``heavy``: the middle stage is a class that loads weights once and spends about 10 ms of
  real CPU (elementwise numpy, no sleep) per item, so overheads no longer do.

Contenders run in both orders, first to last (ABC) then last to first (CBA), at least once
each way; the best run of each order is kept and the worse order is printed beside the
better, since a contender can gain or lose from what ran just before it (Ray's pool of idle
workers is warm after tasks and cold after actors).  Start-up is included for all.  Each
run's CPU-seconds are those of every process of this script's tree (the driver, the Ray
cluster it started, its workers, the local engine's helper and its workers).  Prints items/s
and CPU-s with each contender's configuration, the ratios against the best Ray Data, and
the same plan on a one-node Ray cluster of this host against the local engine (aim: Ray at
>= 0.8x local).  Task replicas are also measured on a cold pool: right after a run of
actors.  Aim: fitwork on Ray at least matches the best tuned Ray Data.

fitwork's local engine runs in a helper process started (spawned, not forked) before Ray:
it forks its workers there, since forking a process that holds Ray's gRPC connections can
leave them unanswered (seen here: Ray Data's next tasks never reached the raylet).  The
helper times its own runs, so its figures exclude nothing the others include.

    .venv/bin/python bench/ray_engines.py [--items N] [--heavy-items N] [--repeats N]

With ``--nodes 3`` it starts a cluster of three Ray nodes on this host instead and measures
fitwork's plan (actors and task replicas) against the best tuned Ray Data cold and warm, in
both orders (``ray_nodes.py``).

The defaults take a few minutes on 2 cores; the sweeps of earlier reports were
``--items 20000 --heavy-items 400 --batch-sizes 64,256,1024,4096 --heavy-batch-sizes
4,16,64 --fitwork-batch-sizes 256,1024 --fitwork-heavy-batch-sizes 4,16``.
"""

from __future__ import annotations

import os

import fitwork

# One BLAS/OpenMP thread per process for every contender, as Ray gives its workers: idle
# OpenBLAS threads otherwise spin on the cores the pipelines need.  Set before numpy loads.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# This script drives Ray and forks (the local engine's contender): gRPC must know first.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "1")
os.environ.setdefault("GRPC_POLL_STRATEGY", "poll")

import argparse  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import multiprocessing  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterable  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from ray_engines_tally import CPU, Contender, TreeCPU, report  # noqa: E402

from fitwork import Pipeline, unit  # noqa: E402

# ----------------------------------------------------------------- light: per-item work

POINTS = 2_000
GRID = np.linspace(0.0, 1.0, POINTS)


def expand(x: int) -> np.ndarray:
    """Light stage 1: an item id to a 2,000-point array."""
    return np.linspace(0.0, 1.0, POINTS) * (x % 97)


def transform(a: np.ndarray) -> np.ndarray:
    """Light stage 2: elementwise numpy."""
    return np.sqrt(np.abs(np.sin(a) * 3.0 + a))


def reduce_(a: np.ndarray) -> float:
    """Light stage 3: a sum."""
    return float(a.sum())


LIGHT = Pipeline(unit(expand, cpu=0.5), unit(transform, cpu=0.5), unit(reduce_, cpu=0.5),
                 name="cpu-chain")

# fitwork's vectorised versions: batched units that take the batch as one numpy array
# (``batch_format="numpy"``), as fitwork's docs advise for array work, and as Ray Data's
# contenders are written below.  Rows travel between replicas as one stacked buffer.


def expand_rows(ids: np.ndarray) -> np.ndarray:
    """Light stage 1 over a batch of item ids: one row each."""
    return (ids % 97)[:, None] * GRID[None, :]


def transform_rows(a: np.ndarray) -> np.ndarray:
    """Light stage 2 over a batch of rows."""
    return np.sqrt(np.abs(np.sin(a) * 3.0 + a))


def reduce_rows(a: np.ndarray) -> np.ndarray:
    """Light stage 3 over a batch of rows: a sum per row."""
    return a.sum(axis=1)


def light_batched(size: int) -> Pipeline:
    """The light pipeline as batched units of ``size`` items."""
    return Pipeline(*(unit(fn, cpu=0.5, batch_size=size, batch_format="numpy", name=name)
                      for fn, name in ((expand_rows, "expand"), (transform_rows, "transform"),
                                       (reduce_rows, "reduce"))), name="cpu-chain-batched")


# Ray Data's versions of the same stages, vectorised over a numpy batch (rows x points).


def expand_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Light stage 1 over a batch: one row per item id."""
    return {"a": (batch["id"] % 97)[:, None] * GRID[None, :]}


def transform_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Light stage 2 over a batch."""
    a = batch["a"]
    return {"b": np.sqrt(np.abs(np.sin(a) * 3.0 + a))}


def reduce_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Light stage 3 over a batch: a sum per row."""
    return {"s": batch["b"].sum(axis=1)}


# ---------------------------------------------------- heavy: ~10 ms of real CPU per item

WIDTH = 16_384  # floats per item
ROUNDS = 300  # elementwise rounds per item: about 10 ms on this class of core


def load_weights() -> tuple[np.ndarray, np.ndarray]:
    """The state the scoring stage loads once per replica (a stand-in for a model)."""
    rng = np.random.default_rng(7)
    return rng.standard_normal(WIDTH) * 0.5, rng.standard_normal(WIDTH) * 0.1


def features(x: int) -> np.ndarray:
    """Heavy stage 1: an item id to its input vector."""
    return np.linspace(-1.0, 1.0, WIDTH) * ((x % 89) / 89.0)


def apply_rounds(h: np.ndarray, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The scoring work: ``ROUNDS`` elementwise layers; rows are independent."""
    for _ in range(ROUNDS):
        h = np.tanh(h * weights + bias)
    return h


class Score:
    """Heavy stage 2 (fitwork): loads weights once per replica, then ~10 ms per item."""

    def __init__(self) -> None:
        self.weights, self.bias = load_weights()

    def __call__(self, h: np.ndarray) -> np.ndarray:
        return apply_rounds(h, self.weights, self.bias)


def total(h: np.ndarray) -> float:
    """Heavy stage 3: a sum."""
    return float(h.sum())


HEAVY_WORKERS = {"score": max(1, os.cpu_count() or 2)}
HEAVY = Pipeline(unit(features, cpu=0.5), unit(Score, name="score", cpu=0.5),
                 unit(total, cpu=0.5), name="heavy-chain")


def features_rows(ids: np.ndarray) -> np.ndarray:
    """Heavy stage 1 over a batch of item ids (fitwork, batched)."""
    return ((ids % 89) / 89.0)[:, None] * np.linspace(-1.0, 1.0, WIDTH)[None, :]


class ScoreRows:
    """Heavy stage 2 (fitwork, batched): loads weights once per replica, scores a batch."""

    def __init__(self) -> None:
        self.weights, self.bias = load_weights()

    def __call__(self, h: np.ndarray) -> np.ndarray:
        return apply_rounds(h, self.weights[None, :], self.bias[None, :])


def total_rows(h: np.ndarray) -> np.ndarray:
    """Heavy stage 3 over a batch: a sum per row (fitwork, batched)."""
    return h.sum(axis=1)


def heavy_batched(size: int) -> Pipeline:
    """The heavy pipeline as batched units of ``size`` items."""
    def batched(fn: Any, name: str) -> Any:
        return unit(fn, cpu=0.5, batch_size=size, batch_format="numpy", name=name)

    return Pipeline(batched(features_rows, "features"), batched(ScoreRows, "score"),
                    batched(total_rows, "total"), name="heavy-chain-batched")


def features_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Heavy stage 1 over a batch."""
    scale = (batch["id"] % 89) / 89.0
    return {"h": scale[:, None] * np.linspace(-1.0, 1.0, WIDTH)[None, :]}


class ScoreBatch:
    """Heavy stage 2 (Ray Data actor): loads weights once per actor, scores a whole batch."""

    def __init__(self) -> None:
        self.weights, self.bias = load_weights()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"h": apply_rounds(batch["h"], self.weights[None, :], self.bias[None, :])}


def total_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Heavy stage 3 over a batch: a sum per row."""
    return {"s": batch["h"].sum(axis=1)}


# ------------------------------------------------------------------------------ harness


def run_pipeline(pipeline: Pipeline, items: Iterable[Any], **options: Any) -> Any:
    """The one call into fitwork's runner; a context-managed result that streams outputs."""
    return fitwork.run(pipeline, items, **options)


LAST: list[tuple[float, float]] = []
"""The last fitwork run's (seconds to its first settled frame, items/s from then on)."""
LAST_RECORD: list[Any] = []
"""The last fitwork run's record."""


def steady(record: Any) -> tuple[float, float]:
    """From a run record's settled frames: seconds until the first settled, and items/s
    from it to the last (the run past its start-up)."""
    times, done = record.completions.times_s, record.completions.completed
    if len(times) < 2 or times[-1] <= times[0]:
        return (times[0] if times else 0.0), 0.0
    return times[0], (done[-1] - done[0]) / (times[-1] - times[0])


def run_fitwork(pipeline: Pipeline, items: int, engine: str,
                workers: dict[str, int] | None, placement: Any = None,
                **options: Any) -> float:
    """The pipeline through one of fitwork's engines; the sum of its outputs (its start-up
    and steady rate go to `LAST`)."""
    with run_pipeline(pipeline, range(items), engine=engine, workers=workers,
                      placement=placement, **options) as result:
        total_ = float(sum(result))
    LAST[:] = [steady(result.record)]
    LAST_RECORD[:] = [result.record]
    return total_


def planned(pipeline: Pipeline, sample: int) -> Any:
    """fitwork's plan for ``pipeline`` on this host, profiled on ``sample`` items: what
    ``fitwork plan`` then ``fitwork run --plan`` would run.  Made once, before any timed
    run, as Ray Data's batch size is chosen before its runs."""
    from fitwork.fit.plan import plan_for

    profile = fitwork.profile_pipeline(pipeline, range(sample), samples=sample)
    return plan_for(profile, fitwork.discover_local())


def layout(plan: Any) -> str:
    """A plan's layout in a few words."""
    groups = plan.placement().groups
    if plan.fused:
        return f"fused x{sum(g.replicas for g in groups)}"
    return " ".join(f"{g.unit}={g.replicas}" for g in groups)


PIPELINES = {"light": LIGHT, "heavy": HEAVY}
HELPER: list[ProcessPoolExecutor] = []  # the local engine's process, started before Ray


def pipeline_named(name: str) -> Pipeline:
    """``light`` or ``heavy``, or ``light:N`` / ``heavy:N``: batched units of N items."""
    base, _, size = name.partition(":")
    if not size:
        return PIPELINES[base]
    return (light_batched if base == "light" else heavy_batched)(int(size))


def timed_local(name: str, items: int, workers: dict[str, int] | None,
                placement: Any = None) -> tuple[float, float, tuple[float, float]]:
    """In the helper process: one local-engine run of a pipeline; its total, seconds, and
    start-up and steady rate."""
    start = time.perf_counter()
    total_ = run_fitwork(pipeline_named(name), items, "local", workers, placement)
    return total_, time.perf_counter() - start, LAST[0]


def run_local(name: str, items: int, workers: dict[str, int] | None,
              placement: Any = None) -> tuple[float, float]:
    """The pipeline through fitwork's local engine, in the helper process (its start-up
    and steady rate go to `LAST`)."""
    total_, seconds, figures = HELPER[0].submit(timed_local, name, items, workers,
                                                placement).result()
    LAST[:] = [figures]
    return total_, seconds


def run_ray_data(items: int, stages: list[tuple[Any, dict[str, Any]]], column: str) -> float:
    """``ray.data.range`` through vectorised ``map_batches`` stages; the sum of ``column``."""
    import ray.data

    dataset = ray.data.range(items)
    for fn, options in stages:
        dataset = dataset.map_batches(fn, batch_format="numpy", **options)
    return float(sum(batch[column].sum()
                     for batch in dataset.iter_batches(batch_size=None, batch_format="numpy")))


def measure(contenders: list[Contender], items: int, repeats: int) -> None:
    """Run every contender ``repeats`` times, in the list's order and then reversed, by
    turns; check every run's total."""
    for turn in range(repeats):  # alternate: the machine is shared and noisy
        order = "ABC" if turn % 2 == 0 else "CBA"
        for contender in contenders if order == "ABC" else contenders[::-1]:
            if contender.prepare is not None:
                contender.prepare()
            LAST.clear()
            before = CPU[0].read()
            start = time.perf_counter()
            result = contender.run()
            seconds = time.perf_counter() - start
            if isinstance(result, tuple):  # timed where it ran
                result, seconds = result
            time.sleep(0.05)  # the sampler's last look at processes that just ended
            contender.cpu.setdefault(order, []).append(CPU[0].read() - before)
            contender.rates.setdefault(order, []).append(items / seconds)
            contender.totals.append(result)
            contender.steady.extend(LAST)
    reference = contenders[0].totals[0]
    for contender in contenders:
        for found in contender.totals:
            if not math.isclose(found, reference, rel_tol=1e-9):
                raise SystemExit(f"{contender.name}: total {found!r} != {reference!r}")


def plan_config(plan: Any) -> str:
    """How a contender running fitwork's plan is described."""
    return f"fitwork's plan for this host ({layout(plan)})"


def fitwork_contenders(name: str, items: int, workers: dict[str, int] | None, plan: Any,
                       sizes: list[int], shape: str) -> list[Contender]:
    """fitwork on each engine: the per-item units as written (``shape``), fitwork's plan,
    and batched units of each of ``sizes``."""
    pipeline, planned_config = PIPELINES[name], plan_config(plan)
    contenders = [
        Contender("fitwork ray", f"{shape}, per-item calls, cpu=0.5 each",
                  lambda: run_fitwork(pipeline, items, "ray", workers)),
        Contender("fitwork local", f"{shape}, per-item calls, a process each",
                  lambda: run_local(name, items, workers)),
        Contender("fitwork ray planned", planned_config,
                  lambda: run_fitwork(pipeline, items, "ray", None, plan)),
        Contender("fitwork local planned", planned_config,
                  lambda: run_local(name, items, None, plan)),
    ]
    for size in sizes:
        batched, config = f"{name}:{size}", f"{shape}, batched units (numpy) of {size}"
        contenders += [
            Contender(f"fitwork ray batch={size}", f"{config}, cpu=0.5 each",
                      lambda b=batched: run_fitwork(pipeline_named(b), items, "ray", workers)),
            Contender(f"fitwork local batch={size}", f"{config}, a process each",
                      lambda b=batched: run_local(b, items, workers)),
        ]
    return contenders


def fitwork_tasks(name: str, items: int, plan: Any) -> list[Contender]:
    """fitwork's plan on Ray with task replicas, twice: as the list's last (in ABC order it
    runs after the Ray Data contenders and finds Ray's pool of workers warm) and on a cold
    pool, right after an untimed run of the plan on actors (Ray retires idle workers beyond
    one per core while the actors hold theirs)."""
    def tasks() -> float:
        return run_fitwork(PIPELINES[name], items, "ray", None, plan, task_replicas=True)

    def actors_first() -> None:
        run_fitwork(PIPELINES[name], max(64, items // 10), "ray", None, plan)

    return [Contender("fitwork ray planned, tasks, cold",
                      f"{plan_config(plan)}, task_replicas=True, right after actors", tasks,
                      prepare=actors_first),
            Contender("fitwork ray planned, tasks",
                      f"{plan_config(plan)}, task_replicas=True", tasks)]


def light_contenders(items: int, batch_sizes: list[int], fitwork_sizes: list[int],
                     task_cpus: float, plan: Any) -> list[Contender]:
    """fitwork on Ray, fitwork local, and vectorised Ray Data at each batch size."""
    contenders = fitwork_contenders("light", items, None, plan, fitwork_sizes,
                                    "3 units x 1 replica")
    for size in batch_sizes:
        options = {"batch_size": size, "num_cpus": task_cpus}
        stages = [(expand_batch, options), (transform_batch, options), (reduce_batch, options)]
        contenders.append(Contender(
            f"ray data batch={size}",
            f"vectorised numpy batches of {size}, tasks num_cpus={task_cpus} (fused)",
            lambda stages=stages: run_ray_data(items, stages, "s")))
    return [*fitwork_tasks("light", items, plan)[:1], *contenders,
            *fitwork_tasks("light", items, plan)[1:]]


def heavy_contenders(items: int, batch_sizes: list[int], fitwork_sizes: list[int],
                     actors: int, plan: Any) -> list[Contender]:
    """The ~10 ms/item pipeline: fitwork both ways and Ray Data with an actor pool."""
    replicas = HEAVY_WORKERS["score"]
    contenders = fitwork_contenders("heavy", items, HEAVY_WORKERS, plan, fitwork_sizes,
                                    f"features x1, score x{replicas} (class), total x1")
    import ray.data

    for size in batch_sizes:
        stages = [
            (features_batch, {"batch_size": size, "num_cpus": 0.5}),
            (ScoreBatch, {"batch_size": size, "num_cpus": 0.5,
                          "compute": ray.data.ActorPoolStrategy(size=actors)}),
            (total_batch, {"batch_size": size, "num_cpus": 0.5}),
        ]
        contenders.append(Contender(
            f"ray data batch={size}",
            f"vectorised numpy batches of {size}; score: ActorPoolStrategy(size={actors}), "
            "num_cpus=0.5; features, total: tasks num_cpus=0.5",
            lambda stages=stages: run_ray_data(items, stages, "s")))
    return [*fitwork_tasks("heavy", items, plan)[:1], *contenders,
            *fitwork_tasks("heavy", items, plan)[1:]]


def per_item_ms(samples: int = 5) -> float:
    """Median CPU milliseconds of one heavy item's scoring here, measured in this process."""
    score, times = Score(), []
    for x in range(samples):
        h = features(x)
        start = time.process_time()
        score(h)
        times.append(time.process_time() - start)
    return sorted(times)[len(times) // 2] * 1e3


def sizes(text: str) -> list[int]:
    """Batch sizes from a comma-separated list."""
    return [int(part) for part in text.split(",") if part.strip()]


def _parser() -> argparse.ArgumentParser:
    """The command line, the multi-node bench's flags (`ray_nodes`) included."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=8_000, help="items, light pipeline")
    parser.add_argument("--heavy-items", type=int, default=160, help="items, heavy pipeline")
    parser.add_argument("--batch-sizes", type=sizes, default=[256, 1024],
                        help="Ray Data batch sizes swept, light pipeline")
    parser.add_argument("--heavy-batch-sizes", type=sizes, default=[4, 16],
                        help="Ray Data batch sizes swept, heavy pipeline")
    parser.add_argument("--fitwork-batch-sizes", type=sizes, default=[1024],
                        help="fitwork batched-unit sizes, light pipeline")
    parser.add_argument("--fitwork-heavy-batch-sizes", type=sizes, default=[4],
                        help="fitwork batched-unit sizes, heavy pipeline")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each contender, by turns in ABC and CBA order; the "
                             "best of each order is kept (min 2: once each way)")
    parser.add_argument("--skip", choices=("light", "heavy"), help="leave one pipeline out")
    import ray_nodes  # the multi-node bench: --nodes N (this directory is on sys.path)

    ray_nodes.add_arguments(parser)
    return parser


def main() -> None:
    """Start a small Ray cluster, measure both pipelines, print, shut the cluster down."""
    args = _parser().parse_args()
    if args.nodes > 1:
        import ray_nodes

        ray_nodes.main(args)
        return
    repeats = max(2, args.repeats)
    cores = os.cpu_count() or 2
    import ray
    import ray.data

    plans = {"light": planned(LIGHT, 256), "heavy": planned(HEAVY, 32)}
    HELPER.append(ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")))
    HELPER[0].submit(time.sleep, 0).result()  # started (and importing) before Ray is
    temp_dir = tempfile.mkdtemp(prefix="fwray-")
    CPU.append(TreeCPU())
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False,
             object_store_memory=300 * 2**20, _temp_dir=temp_dir)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)  # no per-dataset INFO lines
        print(f"fitwork vs tuned Ray Data: {cores} cores, Ray {ray.__version__}, "
              f"{repeats} runs each in ABC and CBA order by turns, best of each order, "
              "start-up included, CPU-s of the whole process tree")
        if args.skip != "light":
            light = light_contenders(args.items, args.batch_sizes, args.fitwork_batch_sizes,
                                     task_cpus=1.0, plan=plans["light"])
            measure(light, args.items, repeats)
            report(f"light: {args.items:,} items, 3 numpy stages, ~0.1 ms of work per item",
                   light)
        if args.skip != "heavy":
            heavy = heavy_contenders(args.heavy_items, args.heavy_batch_sizes,
                                     args.fitwork_heavy_batch_sizes, actors=cores,
                                     plan=plans["heavy"])
            measure(heavy, args.heavy_items, repeats)
            report(f"heavy: {args.heavy_items:,} items, score stage {per_item_ms():.1f} ms "
                   f"of CPU per item ({WIDTH:,} floats x {ROUNDS} rounds), loads weights "
                   "once per replica", heavy)
    finally:
        ray.shutdown()
        HELPER[0].shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
