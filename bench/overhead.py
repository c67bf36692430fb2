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
    from fitwork.fit.plan import fit

    profile = fitwork.profile_pipeline(CHAIN, range(256), samples=256)
    return fit(profile, fitwork.discover_local())


def run_pool(items: int, chunksize: int) -> Measure:
    """The fused function through multiprocessing.Pool(2).imap, pool start-up included."""
    cpu0 = time.process_time()
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        outputs = list(pool.imap(fused, range(items), chunksize=chunksize))
    wall = time.perf_counter() - start
    driver_cpu = time.process_time() - cpu0
    check(outputs, items, f"Pool.imap chunksize={chunksize}")
    return Measure(wall, driver_cpu)


def best(runs: list[Measure]) -> Measure:
    """The fastest of several runs (the least disturbed on a shared machine)."""
    return min(runs, key=lambda m: m.wall_s)


def sizes(text: str) -> tuple[int, ...]:
    """Chunk sizes from a comma-separated list."""
    return tuple(int(part) for part in text.split(",") if part.strip())


def pool_name(chunksize: int) -> str:
    """A Pool contender's label."""
    return f"Pool(2).imap chunksize={chunksize}"


def main() -> None:
    """Measure, then print items/s, driver CPU and the ratio to the best tuned chunksize."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=200_000, help="items per run")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each contender, alternating; best is kept (min 2)")
    parser.add_argument("--tuned", type=sizes, default=TUNED_CHUNKSIZES,
                        help="chunk sizes the headline baseline is the best of "
                             "(default 256,1000,4096)")
    parser.add_argument("--reference", type=sizes, default=REFERENCE_CHUNKSIZES,
                        help="chunk sizes printed for reference only (default 1,16)")
    args = parser.parse_args()
    items, repeats = args.items, max(2, args.repeats)
    if not args.tuned:
        parser.error("--tuned needs at least one chunk size")

    plan = planned_chain()
    layout = ("fused x" + str(sum(g.replicas for g in plan.placement().groups))
              if plan.fused else " ".join(f"{g.unit}={g.replicas}"
                                          for g in plan.placement().groups))
    contenders: dict[str, Callable[[], Measure]] = {
        FITWORK: lambda: run_fitwork(items), PLANNED: lambda: run_fitwork(items, plan)}
    for chunksize in (*args.reference, *args.tuned):
        contenders[pool_name(chunksize)] = lambda c=chunksize: run_pool(items, c)
    runs: dict[str, list[Measure]] = {name: [] for name in contenders}
    for _ in range(repeats):  # interleaved, so drift on the machine hits all alike
        for name, measure in contenders.items():
            runs[name].append(measure())
    results = {name: best(found) for name, found in runs.items()}
    mine = results[FITWORK]
    chosen = min(args.tuned, key=lambda c: results[pool_name(c)].wall_s)
    baseline = results[pool_name(chosen)]

    print(f"per-item overhead: {items:,} int items, 3 no-op stages, "
          f"{multiprocessing.cpu_count()} cores, best of {repeats} (alternating)")
    print(f"  {'':<34} {'items/s':>12} {'wall s':>7} {'driver CPU s':>13}  role")
    for name, m in results.items():
        if name == FITWORK:
            role = "fitwork, 1 replica per unit, unordered"
        elif name == PLANNED:
            role = f"fitwork, its own plan for this host ({layout})"
        else:
            chunksize = int(name.rsplit("=", 1)[1])
            role = ("reference only (untuned chunksize)" if chunksize in args.reference
                    else "tuned candidate" + (" <- best, the baseline" if chunksize == chosen
                                              else ""))
        print(f"  {name:<34} {items / m.wall_s:>12,.0f} {m.wall_s:7.2f} "
              f"{m.driver_cpu_s:13.2f}  {role}")
    print(f"  fitwork record: throughput {mine.record_throughput:,.0f} items/s, "
          f"workers' CPU {mine.worker_cpu_s:.2f} s")
    print(f"  fitwork driver: {mine.driver_cpu_s:.2f} CPU s, "
          f"{mine.driver_cpu_s / items * 1e6:.2f} us per item")
    tuned = ",".join(str(c) for c in args.tuned)
    print(f"  HEADLINE ratio fitwork / best tuned Pool(2).imap (chunksize={chosen}, best of "
          f"{tuned}): {baseline.wall_s / mine.wall_s:.2f}x  (aim >= 0.5x)")
    planned = results[PLANNED]
    print(f"  fitwork as planned ({layout}) / best tuned Pool(2).imap: "
          f"{baseline.wall_s / planned.wall_s:.2f}x  (issue 14 aim >= 1.0x)")
    for chunksize in args.reference:
        m = results[pool_name(chunksize)]
        print(f"  reference only: fitwork / Pool(2).imap chunksize={chunksize}: "
              f"{m.wall_s / mine.wall_s:.2f}x")


if __name__ == "__main__":
    main()
