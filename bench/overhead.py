"""Per-item overhead: a 3-unit no-op chain on the local engine against a tuned fused Pool.imap."""

from __future__ import annotations

import argparse
import multiprocessing
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import fitwork
from fitwork import Pipeline, unit

TUNED_CHUNKSIZES = (256, 1000, 4096)  # the headline baseline is the best of these
REFERENCE_CHUNKSIZES = (1, 16)  # printed for reference only, never the headline
POOL_METHODS = ("imap", "imap_unordered")  # fitwork runs unordered: either may win
ITEMS = (200_000, 2_000_000)
FITWORK = "fitwork local (a -> b -> c)"
PLANNED = "fitwork local, as planned"


def step_a(x: int) -> int:
    """First no-op stage."""
    return x


def step_b(x: int) -> int:
    """Second no-op stage."""
    return x


def step_c(x: int) -> int:
    """Third no-op stage."""
    return x


def fused(x: int) -> int:
    """The three stages as one function, for the baseline."""
    return step_c(step_b(step_a(x)))


CHAIN = Pipeline(unit(name="a")(step_a), unit(name="b")(step_b), unit(name="c")(step_c),
                 name="overhead")


def run_pipeline(pipeline: Pipeline, items: Iterable[Any], **options: Any) -> Any:
    """The one call into fitwork's runner; a context-managed result that streams outputs."""
    return fitwork.run(pipeline, items, **options)


@dataclass
class Measure:
    """One timed run: wall seconds end to end (start-up included) and CPU seconds."""

    wall_s: float
    driver_cpu_s: float = 0.0
    worker_cpu_s: float = 0.0
    record_throughput: float = 0.0


def check(outputs: list[int], items: int, label: str) -> None:
    """Sanity check: the outputs are exactly the inputs, in any order."""
    if len(outputs) != items or sorted(outputs) != list(range(items)):
        raise SystemExit(f"{label}: wrong outputs ({len(outputs)} of {items})")


def run_fitwork(items: int, plan: Any = None) -> Measure:
    """The chain through fitwork's local engine, unordered: one replica per unit, or the
    placement of ``plan`` (fused or split, as fitted)."""
    cpu0 = time.process_time()
    start = time.perf_counter()
    with run_pipeline(CHAIN, range(items), ordered=False, placement=plan) as result:
        outputs = list(result)
    wall = time.perf_counter() - start
    driver_cpu = time.process_time() - cpu0
    record = result.record
    check(outputs, items, "fitwork" if plan is None else "fitwork planned")
    return Measure(wall, driver_cpu, sum(u.cpu_s for u in record.units), record.throughput)


def planned_chain() -> Any:
    """The plan fitwork makes for the chain on this host (profiled on a small sample):
    what `fitwork plan` then `fitwork run --plan` would run.  Made once, before any timed
    run, as a tuned chunksize is chosen before the Pool runs."""
    from fitwork.fit.plan import plan_for

    profile = fitwork.profile_pipeline(CHAIN, range(256), samples=256)
    return plan_for(profile, fitwork.discover_local())


def run_pool(items: int, chunksize: int, method: str) -> Measure:
    """The fused function through multiprocessing.Pool(2).imap or .imap_unordered, pool
    start-up included."""
    cpu0 = time.process_time()
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        outputs = list(getattr(pool, method)(fused, range(items), chunksize=chunksize))
    wall = time.perf_counter() - start
    driver_cpu = time.process_time() - cpu0
    check(outputs, items, f"Pool.{method} chunksize={chunksize}")
    return Measure(wall, driver_cpu)


def best(runs: list[Measure]) -> Measure:
    """The fastest of several runs (the least disturbed on a shared machine)."""
    return min(runs, key=lambda m: m.wall_s)


def sizes(text: str) -> tuple[int, ...]:
    """Numbers from a comma-separated list."""
    return tuple(int(part) for part in text.split(",") if part.strip())


def pool_name(method: str, chunksize: int) -> str:
    """A Pool contender's label."""
    return f"Pool(2).{method} chunksize={chunksize}"


def settle() -> None:
    """A pause between contenders: the end of a fitwork run gives the driver's OpenBLAS
    pool back its threads, which spin ~0.1 s (see `fitwork.engine.threads`); the next
    contender should not pay for them."""
    time.sleep(0.25)


def measure(items: int, plan: Any, tuned: tuple[int, ...], reference: tuple[int, ...],
            repeats: int, layout: str) -> None:
    """One size: every contender, alternating; prints the table and the ratio lines."""
    contenders: dict[str, Callable[[], Measure]] = {
        FITWORK: lambda: run_fitwork(items), PLANNED: lambda: run_fitwork(items, plan)}
    for chunksize in reference:
        contenders[pool_name("imap", chunksize)] = lambda c=chunksize: run_pool(items, c,
                                                                                "imap")
    for chunksize in tuned:
        for method in POOL_METHODS:
            contenders[pool_name(method, chunksize)] = \
                lambda c=chunksize, m=method: run_pool(items, c, m)
    runs: dict[str, list[Measure]] = {name: [] for name in contenders}
    for _ in range(repeats):  # interleaved, so drift on the machine hits all alike
        for name, run in contenders.items():
            settle()
            runs[name].append(run())
    results = {name: best(found) for name, found in runs.items()}
    mine = results[FITWORK]
    tuned_names = [pool_name(m, c) for c in tuned for m in POOL_METHODS]
    chosen = min(tuned_names, key=lambda name: results[name].wall_s)
    baseline = results[chosen]

    print(f"\nper-item overhead: {items:,} int items, 3 no-op stages, "
          f"{multiprocessing.cpu_count()} cores, best of {repeats} (alternating)")
    print(f"  {'':<44} {'items/s':>12} {'wall s':>7} {'driver CPU s':>13}  role")
    for name, m in results.items():
        if name == FITWORK:
            role = "fitwork, 1 replica per unit, unordered"
        elif name == PLANNED:
            role = f"fitwork, its own plan for this host ({layout})"
        elif name in tuned_names:
            role = "tuned candidate" + (" <- best, the baseline" if name == chosen else "")
        else:
            role = "reference only (untuned chunksize)"
        print(f"  {name:<44} {items / m.wall_s:>12,.0f} {m.wall_s:7.3f} "
              f"{m.driver_cpu_s:13.3f}  {role}")
    print(f"  fitwork record: throughput {mine.record_throughput:,.0f} items/s, "
          f"workers' CPU {mine.worker_cpu_s:.2f} s")
    print(f"  fitwork driver: {mine.driver_cpu_s:.3f} CPU s, "
          f"{mine.driver_cpu_s / items * 1e6:.2f} us per item")
    listed = ",".join(str(c) for c in tuned)
    print(f"  HEADLINE ratio fitwork / best tuned Pool(2) ({chosen.split('.', 1)[1]}; best of "
          f"imap and imap_unordered at chunksize {listed}): "
          f"{baseline.wall_s / mine.wall_s:.2f}x  (issue 14 aim >= 1.0x)")
    planned = results[PLANNED]
    print(f"  fitwork as planned ({layout}) / the same baseline: "
          f"{baseline.wall_s / planned.wall_s:.2f}x")
    for chunksize in (*reference, *tuned):
        m = results[pool_name("imap", chunksize)]
        tag = "reference only" if chunksize in reference else "per chunksize"
        print(f"  {tag}: fitwork / Pool(2).imap chunksize={chunksize}: "
              f"{m.wall_s / mine.wall_s:.2f}x")


def main() -> None:
    """Measure each size, then print items/s, driver CPU and the ratio to the best tuned
    Pool."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=sizes, default=ITEMS,
                        help="items per run, one table per size (default 200000,2000000)")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each contender, alternating; best is kept (min 2)")
    parser.add_argument("--tuned", type=sizes, default=TUNED_CHUNKSIZES,
                        help="chunk sizes the headline baseline is the best of "
                             "(default 256,1000,4096)")
    parser.add_argument("--reference", type=sizes, default=REFERENCE_CHUNKSIZES,
                        help="chunk sizes printed for reference only, at the smallest size "
                             "(default 1,16)")
    args = parser.parse_args()
    repeats = max(2, args.repeats)
    if not args.tuned or not args.items:
        parser.error("--items and --tuned need at least one number each")

    plan = planned_chain()
    layout = ("fused x" + str(sum(g.replicas for g in plan.placement().groups))
              if plan.fused else " ".join(f"{g.unit}={g.replicas}"
                                          for g in plan.placement().groups))
    smallest = min(args.items)
    for items in args.items:
        measure(items, plan, args.tuned, args.reference if items == smallest else (),
                repeats, layout)


if __name__ == "__main__":
    main()
