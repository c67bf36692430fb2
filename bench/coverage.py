"""Coverage: how often a stated p10-p90 range holds the measured truth it was not fitted on.

Two checks, each with its n:

1. Transferred rates, by cross-validation on the project's data (`fitwork.fit.coverage`): per
   kind of transfer and per vendor, the share of held-out measured rates inside the range
   built without them (splitwise leave-one-model/TP-out, Gavel leave-one-job-out, MLPerf
   leave-one-vendor-out).  Aim: 70-90%.  Then current serving stacks (TensorRT-LLM, vLLM)
   from MLPerf's Llama-2-70B Server results, leave-one-submitter-out (`fitwork.llm.mlperf`).
2. Plans, on this host: ``bench/fit_quality.py``'s pipelines (all, or ``--only``: names, or
   the sets ``trained`` and ``heldout``), in two tables: the trained shapes (fit_quality's
   own and bench/seen/'s, which the model was tuned on, changed for or read against) and
   the held-out shapes (bench/heldout/, frozen at commit 3667fd1 (HELD_OUT_AT of
   fit_quality_table.py), never used to change the model).  Each
   run ``--runs`` times (each run at least ``--seconds`` at the predicted rate, so start-up
   is a small part of it), each run from a profile and plan of its own (``--profiles K``
   spreads the runs over K profiles instead: runs of one profile share its reading of the
   host, so they hold or miss together); the share of runs whose realized
   throughput (the run record's, as fit_quality reads it) falls inside the plan's range,
   scaled to a run of that many items (`Plan.run_rate`: start-up included, as in the
   realized figure).
   Each plan's range is widened by the model's miss on whole plans measured on the OTHER
   pipelines (`fitwork.fit.layout_error`, this pipeline's rows left out), so a trained
   shape's check is on rows the widening left out; the spreads and load reach that set the
   ranges were still taken on the trained shapes, so only the held-out table is a check on
   pipelines the ranges never saw.  ``--load`` adds a background process spinning on
   one core for the whole bench; ``--write-residuals FILE`` writes every run's realized /
   predicted as ``fitwork/fit/data/plan_residuals.csv`` holds them.

    .venv/bin/python bench/coverage.py --data-only
    .venv/bin/python bench/coverage.py --runs 3 --scale 0.25 [--load] [--only cpu_numpy,...]
        [--profiles K]
    .venv/bin/python bench/coverage.py --runs 3 --scale 0.25 \
        --write-residuals src/fitwork/fit/data/plan_residuals.csv

Not used here (reserved for independent validation): Argonne's LLM-Inference-Bench, Helix
(ASPLOS'25) profiles, Alibaba GPU traces.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import math
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fitwork.fit.coverage import Coverage, coverage_table


def data_table(rows: Sequence[Coverage]) -> None:
    """Coverage per kind of transfer and per vendor, then pooled per kind and vendor."""
    print("cross-validated coverage of p10-p90 ranges (aim 70-90%)")
    print(f"{'kind of transfer':<52}{'vendor':<8}{'n':>5}{'groups':>8}{'inside':>8}"
          f"{'groups held':>13}{'P(all held)':>13}")
    for r in rows:
        held = "-" if r.groups_held is None else f"{r.groups_held}/{r.groups}"
        print(f"{r.kind:<52}{r.vendor:<8}{r.n:>5}{r.groups:>8}{r.share:>8.0%}{held:>13}"
              f"{0.8 ** r.groups:>13.2f}")
    pooled: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        counts = pooled.setdefault((r.kind.split(" ")[0], r.vendor), [0, 0])
        counts[0], counts[1] = counts[0] + r.inside, counts[1] + r.n
    print("pooled:")
    for (kind, vendor), (inside, n) in pooled.items():
        print(f"  {kind:<11}{vendor:<8} {inside}/{n} = {inside / n:.0%}")
    print("groups held: held-out groups with half their rates or more inside; P(all held): the "
          "chance a range that holds 80% of groups holds every one of them (0.8^groups)")
    print("sources: " + "; ".join(sorted({r.source for r in rows})))


def stack_table() -> None:
    """Current serving stacks (MLPerf Server): each rate predicted from rows that leave it out."""
    from fitwork.llm.mlperf import SERVER_SOURCE, stack_checks

    print("\ncurrent serving stacks, Llama-2-70B output tokens/s per GPU at MLPerf's Server SLOs, "
          "held out (aim 70-90% inside)")
    print(f"{'stack':<34}{'class':<10}{'predicted from':<30}{'n':>4}{'subm.':>7}"
          f"{'tok/s/GPU':>11}{'median err':>12}{'worst':>8}{'inside':>10}")
    for c in stack_checks():
        inside = "-" if c.inside is None else f"{c.inside}/{c.n}"
        print(f"{c.stack:<34}{c.target:<10}{c.source:<30}{c.n:>4}{c.groups:>7}"
              f"{c.tokens_per_gpu:>11,.0f}{c.median_error:>12.1%}{c.worst_error:>8.1%}"
              f"{inside:>10}")
    print(f"source: {SERVER_SOURCE}; leave-one-submitter-out ('inside' needs 3 submitters)")


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    """Keep one core busy until ``stop`` is set (the background load)."""
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


@dataclass
class Tally:
    """Runs inside their plan's range, of how many, over how many pipelines."""

    inside: int = 0
    total: int = 0
    pipelines: int = 0


def split_runs(runs: int, profiles: int) -> list[int]:
    """Runs per profile: ``runs`` spread as evenly as may be over ``profiles`` (0: one
    profile per run), the first profiles taking the remainder."""
    profiles = runs if profiles <= 0 else min(profiles, runs)
    return [runs // profiles + (1 if k < runs % profiles else 0) for k in range(profiles)]


def check_plan(spec: Any, args: argparse.Namespace, fleet: Any,
               written: list[dict[str, object]]) -> tuple[int, int] | None:
    """Profile, fit and run one pipeline's plan ``args.runs`` times, a fresh profile and plan
    for each of ``args.profiles`` groups of runs (a user profiles anew each time, and a
    profile's reading of the host moves between profiles); print a line per profile and
    return (runs inside their plan's range, runs), or None where it could not run here."""
    if spec.needs and importlib.util.find_spec(spec.needs) is None:
        print(f"  {spec.name:<14} skipped: {spec.needs} is not installed", flush=True)
        return None
    hits = total = 0
    for runs in split_runs(args.runs, args.profiles):
        result = _one_profile(spec, args, fleet, runs, written)
        if result is None:
            return None if total == 0 else (hits, total)
        hits, total = hits + result[0], total + result[1]
    return hits, total


def _one_profile(spec: Any, args: argparse.Namespace, fleet: Any, count: int,
                 written: list[dict[str, object]]) -> tuple[int, int] | None:
    """One profile and its plan, run ``count`` times: its line, (runs inside, runs)."""
    import fit_quality as fq

    import fitwork
    from fitwork.fit.layout_error import layout_spread, profiled_busy
    from fitwork.fit.plan import plan_for

    try:
        profile = fitwork.profile_pipeline(spec.pipeline,
                                           range(10_000, 10_000 + fq.PROFILE_INPUT),
                                           samples=args.samples)
    except Exception as failed:  # a pipeline that cannot run here is said, not fatal
        print(f"  {spec.name:<14} skipped: {str(failed)[:120]}", flush=True)
        return None
    busy = profiled_busy(profile)
    spread = layout_spread(exclude=spec.name, busy=busy)  # this pipeline's own rows left out
    plan = plan_for(profile, fleet, layout_error=spread)
    # long enough at the predicted rate that start-up is a small part of the run; judged
    # against what the plan predicts for a run of that many items (its replicas' builds
    # and the first item's way through included: ten replicas loading a 69 MiB model each
    # took 0.5 s of lookup_model's 3.8)
    items = max(64, int(spec.items * args.scale), int(plan.fitted.throughput * args.seconds))
    predicted = plan.run_rate(items)
    share = predicted / plan.fitted.throughput
    low, high = (share * end for end in plan.fitted.throughput_range)
    host = f"{platform.machine()} {os.cpu_count()} cores"
    runs = []
    for _ in range(count):
        contender = fq.Contender("plan", fq.plan_layout(plan), placement=plan)
        runs.append(fq.measure(spec.pipeline, items, contender).record.throughput)
        if not spec.held_out:  # held-out rows never reach the residuals the model reads
            written.append({"pipeline": spec.name, "predicted": f"{predicted:.6g}",
                            "realized": f"{runs[-1]:.6g}",
                            "load": f"{os.getloadavg()[0]:.2f}", "cores": os.cpu_count(),
                            "host": host, "profiled_busy": int(busy)})
    hits = sum(low <= r <= high for r in runs)
    shown = ", ".join(f"{r:.1f}" for r in runs)
    print(f"  {spec.name:<14} predicted {predicted:8.1f} [{low:8.1f} - {high:8.1f}] "
          f"(model's miss +-{math.expm1(spread):.0%}{', busy profile' if busy else ''})  "
          f"realized {shown}  "
          f"inside {hits}/{len(runs)}", flush=True)
    return hits, len(runs)


def plan_table(args: argparse.Namespace) -> None:
    """Each pipeline's plan run ``args.runs`` times, trained and held-out shapes in
    separate tables; realized inside its range or not."""
    import fit_quality as fq
    from fit_quality_table import TITLES

    import fitwork
    from fitwork.fit.layout_error import COLUMNS

    fleet = fitwork.discover_local()
    specs = fq.selected(args.only)
    stop = multiprocessing.Event()
    spinner = None
    if args.load:
        spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
        spinner.start()
    services = fq.start_services()
    tallies = {False: Tally(), True: Tally()}
    written: list[dict[str, object]] = []
    condition = "one core kept busy" if args.load else "no added load"
    try:
        for held_out in (False, True):
            group = [s for s in specs if s.held_out == held_out]
            if not group:
                continue
            print(f"\nplans on this host, {TITLES[held_out]} ({condition}; load average "
                  f"{os.getloadavg()[0]:.2f}): realized record throughput vs the plan's "
                  "p10-p90")
            for spec in group:
                result = check_plan(spec, args, fleet, written)
                if result is not None:
                    tally = tallies[held_out]
                    tally.inside, tally.total = tally.inside + result[0], tally.total + result[1]
                    tally.pipelines += 1
    finally:
        fq.stop_services(services)
        if spinner is not None:
            stop.set()
            spinner.join(5)
    if args.write_residuals:
        with open(args.write_residuals, "w", newline="", encoding="utf-8") as out:
            writer = csv.DictWriter(out, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(written)
        print(f"wrote {len(written)} rows to {args.write_residuals} (trained shapes only)")
    for held_out, tally in tallies.items():
        if tally.total:
            print(f"realized inside the plan's range, {'HELD-OUT' if held_out else 'trained'} "
                  f"shapes ({condition}): {tally.inside}/{tally.total} = "
                  f"{tally.inside / tally.total:.0%} ({tally.pipelines} pipelines x "
                  f"{args.runs} runs over {len(split_runs(args.runs, args.profiles))} profiles of "
                  f"{args.scale:g}x fit_quality's items, or "
                  f"{args.seconds:g} s at the predicted rate if more; aim 70-90%)")


def main() -> None:
    """Print the cross-validated table, then (unless ``--data-only``) the plans' table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-only", action="store_true", help="only the data check")
    parser.add_argument("--only", default="",
                        help="comma-separated fit_quality pipelines, or 'trained' / 'heldout'")
    parser.add_argument("--runs", type=int, default=3, help="runs of each pipeline")
    parser.add_argument("--profiles", type=int, default=0,
                        help="profiles (each with its own plan) the runs are spread over; "
                             "0 (default): a fresh profile for every run")
    parser.add_argument("--scale", type=float, default=0.25,
                        help="items per run, times fit_quality's")
    parser.add_argument("--samples", type=int, default=64, help="profile samples")
    parser.add_argument("--load", action="store_true",
                        help="keep one core busy in the background throughout")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="each run takes at least this long at the plan's predicted rate")
    parser.add_argument("--write-residuals", default="",
                        help="write each run's realized / predicted to this CSV (trained "
                             "shapes only: held-out rows never reach the model)")
    args = parser.parse_args()
    if not args.data_only:
        import fit_quality as fq

        try:
            fq.selected(args.only)
        except ValueError as unknown:
            parser.error(str(unknown))
    started = time.perf_counter()
    data_table(coverage_table())
    stack_table()
    if not args.data_only:
        plan_table(args)
    print(f"bench wall {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
