"""Fit quality: per pipeline, the plan (predicted, realized) vs the best monolith and by hand.

Two sets of pipelines, reported in separate tables:

- trained shapes, defined in fit_quality_shapes.py: six the model was tuned on, seven
  written for issue 22 as a new user would write them, lookup_model (from a user's
  pipeline after stop 30), and bench/seen/'s seven (six held out from eb8f9d5 to stop 46,
  read at every stop since, and gzip_shell, which drove a change at stop 47).  All are
  training data now: sleep_io, batch_faster, lookup_model, filter, blas_stages and
  gzip_shell each drove a model change (7b2ae79, 3fdcc1b, f72b42c, 9cbeb66, a69cfff,
  44191c1), and every one of them has been run and read while the model was changed.
- held-out shapes: bench/heldout/, frozen at commit 3667fd1 (HELD_OUT_AT, fit_quality_table.py)
  (GIL-free CPU work, seven light stages, I/O at both ends with one undeclared, I/O and CPU
  in one unit, padded batches, and file_read, added at 01b834d in gzip_shell's place),
  written before any model change of stop 47 and never used to make one; a shape that
  drives a change moves to the trained set in that commit (bench/heldout/README.md).
  ``--only trained`` / ``--only heldout`` run one set.

Each pipeline gets two rows: the plan
as planned, and a run of the same plan with ``--adapt`` (a fused plan re-fits its fused
unit's replicas), with the re-fits its record holds.  Three baselines
are screened, and the fastest of each run in the final beside the plan, every contender as
many times, alternating: the monolith's process sweep, threaded monoliths (the units fused
with ``io=N``: P processes of N threads) and the hand grid; plan/best is the plan's median
run over the best other layout's median (a baseline that ran the plan's own layout is pooled
with the plan, not counted as a rival).  Where the plan calls a tie between its split and
fused layouts, the side it set aside runs in the final too (or the baseline that runs that
layout stands for it), and the tie rule's choice is checked: it should do at least
1 - the plan's uncertainty times the other side.  On a host of more than 2 cores the
sweeps, the hand grid's replica counts and the items per run scale with its cores.
``--wire`` only measures the engine's CPU per item by item size (what the fit charges per
byte).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
from fit_quality_measure import (
    PROFILE_QUIET_S,
    SETTINGS,
    SKIPPED,
    Contender,
    Outcome,
    at_load,
    grid,
    hand_key,
    host_factor,
    layout,
    measure,
    others_now,
    plan_key,
    plan_layout,
    screen,
    settle,
    threads,
    what_ifs,
)
from fit_quality_shapes import GROUPS, SPECS, Spec, start_services, stop_services
from fit_quality_table import table

import fitwork
from fitwork.fit.monolithic import FUSED
from fitwork.fit.plan import Plan, plan_for
from fitwork.placement import Group, Placement
from fitwork.profiling.record import PipelineProfile

PROFILE_INPUT = 10_000  # items the profile is given: the first --samples timed, more counted


def bench(spec: Spec, args: argparse.Namespace, fleet: fitwork.Fleet,
          say: Callable[[str], None]) -> Outcome:
    """Profile and fit one pipeline, screen the sweeps, then the final alternation."""
    items = max(64, int(spec.items * args.scale * SETTINGS.host_factor))
    screen_items = max(32, items // 3)
    say(f"\n== {spec.name}: {spec.shape}; {items} items per final run, load average "
        f"{os.getloadavg()[0]:.2f}")
    # the profile is a moment of the host too: not one while the last pipeline's processes
    # still wind down
    settle(max(SETTINGS.quiet_wait_s, PROFILE_QUIET_S))
    start = time.perf_counter()
    # as a user's input file: its first samples timed, more of it for the output ratios
    profile = fitwork.profile_pipeline(spec.pipeline, range(10_000, 10_000 + PROFILE_INPUT),
                                       samples=args.samples)
    plan = plan_for(profile, fleet)
    profile_speed = profile.host_speed or math.nan  # the probe as the profile began
    say(f"  profile of {args.samples} samples and fit: {time.perf_counter() - start:.1f} s")
    _say_profile(profile, plan, say)
    alternatives = what_ifs(profile, fleet)
    for label, other in alternatives.items():
        say(f"  what if ({label}): [{plan_layout(other)}] predicts "
            f"{other.fitted.throughput:.1f} items/s (core ceiling {other.core_ceiling:.2f})")

    monoliths, threaded = baselines(spec, plan)
    hands = [Contender("hand", layout(c), workers=c, key=hand_key(c, spec.pipeline))
             for c in grid(spec)]
    say(f"  screening: {len(monoliths)} monolith process counts, {len(threaded)} threaded "
        f"monoliths and {len(hands)} hand layouts, one run of {screen_items} items each")
    finalists = [*screen(spec, screen_items, monoliths, args.keep_monolith, say),
                 *screen(spec, screen_items, threaded, args.keep_threaded, say),
                 *screen(spec, screen_items, hands, args.keep_hand, say)]
    contenders, set_aside = _contenders(spec, plan, finalists,
                                        alternatives if args.what_if else {})
    planned, adapted = contenders[0], contenders[1]
    _final(spec, items, contenders, args.rounds, profile_speed, say)
    for twin in (c for c in finalists if c.key == planned.key):
        planned.pooled.extend(twin.runs)
        say(f"  {twin.label} [{twin.config}] ran the plan's own layout: its runs are pooled "
            "with the plan's, and it is no rival")
    def best(label: str) -> Contender:
        return max((c for c in finalists if c.label == label), key=lambda c: c.rate)

    outcome = Outcome(spec, profile, plan, planned, best("monolith"), best("hand"), contenders,
                      adapted, best("threaded"), set_aside=set_aside,
                      profile_speed=profile_speed)
    if set_aside is not None:
        say(f"  tie rule: runs [{planned.config}] {planned.rate:.1f} items/s, set aside "
            f"[{set_aside.config}] {set_aside.rate:.1f}: {outcome.tie_share:.2f}x "
            f"({'held' if outcome.tie_held else 'MISSED'}: at least "
            f"{1 - plan.uncertainty:.2f}x, the plan's uncertainty)")
    _at_run_load(outcome, fleet, say)
    explain(outcome, say)
    return outcome


def _say_profile(profile: PipelineProfile, plan: Plan, say: Callable[[str], None]) -> None:
    """Each unit's profile (by batch size where batched), and what the plan predicts."""
    for u in profile.units:
        sweep = " ".join(f"b{b.batch_size} {b.wall_s * 1e3:.3f}/{b.cpu_s * 1e3:.3f}"
                         for b in u.batches) if u.batch_size else ""
        say(f"  profile {u.name:<14} wall {u.wall_s * 1e3:7.3f} ms  cpu {u.cpu_s * 1e3:7.3f} ms"
            f"  queued {u.queued_s * 1e3:6.3f} ms  out/in {u.output_ratio:5.2f}"
            + (f"  x{u.loaded_factor:.2f} CPU with {u.loaded_copies} copies"
               if u.loaded_factor is not None else "")
            + (f"  wall/cpu ms per item by batch: {sweep}" if sweep else ""))
    mono_count = sum(p.replicas for p in plan.monolithic.result.replicas)
    say(f"  plan [{plan_layout(plan)}] predicts {plan.fitted.throughput:.1f} items/s "
        f"(split layout {(plan.split or plan.fitted).throughput:.1f}, monolithic side "
        f"{plan.monolithic.throughput:.1f} with {mono_count} replicas; core ceiling "
        f"{plan.core_ceiling:.2f}; engine charge {plan.hop_seconds * 1e6:.0f} us per frame "
        "per crossing)")
    if plan.tie:
        say(f"  tie: {plan.tie}")
    for p in plan.fitted.result.replicas:
        if p.replicas:
            say(f"    {p.unit:<14} x{p.replicas:<3} rate/replica {p.rate:9.1f}  cores/replica "
                f"{p.cores:5.2f}  load {p.items_per_s:9.1f} items/s")


def _contenders(spec: Spec, plan: Plan, finalists: list[Contender],
                what_if: dict[str, Plan]) -> tuple[list[Contender], Contender | None]:
    """The final's contenders: the plan, the plan with --adapt, the finalists, the side a
    tie set aside (unless a baseline runs that layout: then that baseline, not added), and
    each distinct ``what_if`` layout; and that set-aside side (None without a tie)."""
    planned = Contender("plan", plan_layout(plan), placement=plan,
                        key=plan_key(plan, spec.pipeline))
    # what `fitwork run --plan --adapt` runs: the plan, re-fitted as it goes (a fused plan
    # as the one unit it runs)
    adapted = Contender("adapt", plan_layout(plan) + " --adapt", placement=plan,
                        adapt=True, key=("adapt",))
    contenders = [planned, adapted, *finalists]
    set_aside = None
    if plan.tie:  # the tie rule is checked: the side it set aside runs too, unless a
        # baseline already runs that layout
        key = plan_key(plan, spec.pipeline, other=True)
        set_aside = next((c for c in finalists if c.key == key), None)
        if set_aside is None:
            side = "monolithic" if not plan.fused else "split"
            set_aside = Contender("set aside", f"{plan_layout(plan, other=True)} (the tie's "
                                  "other side)", placement=plan.placement(side=side), key=key)
            contenders.append(set_aside)
    # each distinct what-if layout runs in the final too (not a headline)
    seen = {plan_layout(plan)}
    for label, other in what_if.items():
        if plan_layout(other) not in seen:
            seen.add(plan_layout(other))
            contenders.append(Contender("what-if", f"{plan_layout(other)} ({label})",
                                        placement=other, key=("what-if", label)))
    return contenders, set_aside


def _final(spec: Spec, items: int, contenders: list[Contender], rounds: int,
           profile_speed: float, say: Callable[[str], None]) -> None:
    """The final: ``rounds`` runs of every contender, alternating, each said; outputs checked."""
    say(f"  final: {len(contenders)} contenders x {rounds} runs of {items} items, "
        "alternating, medians compared")
    for round_ in range(rounds):
        for contender in contenders if round_ % 2 == 0 else contenders[::-1]:
            run = measure(spec.pipeline, items, contender)
            say(f"   {contender.label:<9} {contender.config:<38} {run.rate:8.1f} items/s "
                f"(record {run.record.throughput:8.1f}, steady {run.steady:8.1f}, "
                f"{run.wall_s:5.2f} s; cores: ours {run.own_cores:4.2f}, "
                f"others {run.other_cores:4.2f}; host speed x{run.speed / profile_speed:.2f})")
    check(spec, contenders)


def _at_run_load(outcome: Outcome, fleet: fitwork.Fleet, say: Callable[[str], None]) -> None:
    """What the model predicts at the load of the plan's (and the --adapt run's) median run;
    the --adapt runs' re-fits."""
    cores = sum(n.cores * n.count for n in fleet.node_types)
    planned, adapted = outcome.planned, outcome.adapted
    assert adapted is not None
    for contender in (planned, adapted):
        typical = contender.typical()
        replayed = at_load(outcome.profile, fleet, typical.unseen_cores, cores)
        side = replayed.fitted
        say(f"  {contender.label}: at its median run's load (others {typical.other_cores:.2f} "
            f"cores, the loopback service {typical.unseen_cores - typical.other_cores:.2f}) "
            f"the model predicts {side.throughput:.1f} items/s "
            f"[{plan_layout(replayed)}]")
        if contender is planned:
            outcome.at_run_load = side.throughput
        else:
            outcome.adapted_at_run_load = side.throughput
    for run in adapted.runs:
        for r in run.record.refits:
            say(f"  re-fit at {r.t_s:.1f} s: {r.before} -> {r.after}: {r.reason}")


def baselines(spec: Spec, plan: Plan) -> tuple[list[Contender], list[Contender]]:
    """The monolith's process sweep (one item at a time per process) and the threaded
    monoliths (P processes of N threads), all the units fused."""
    base = plan.placement(side="monolithic")
    fusion = (tuple(plan.units),)
    single = Placement(tuple(replace(g, io=None) for g in base.groups), "workers",
                       fusion=fusion)
    monoliths = [Contender("monolith", f"{n} processes",
                           placement=single.with_workers({FUSED: n}), key=("fused", n, None))
                 for n in (m * SETTINGS.host_factor for m in spec.monolith)]
    threaded = [Contender("threaded", f"{p} processes x {n} threads",
                          placement=Placement((Group(FUSED, p, io=n),), "workers",
                                              fusion=fusion), key=("fused", p, n))
                for p, n in threads(spec)]
    return monoliths, threaded


def check(spec: Spec, contenders: Sequence[Contender]) -> None:
    """Every final run gave as many outputs and the same sum of them (to 1e-6: a batched
    matrix product rounds differently at another batch size)."""
    runs = [r for c in contenders for r in c.runs]
    first = runs[0]
    for run in runs:
        if run.outputs != first.outputs or not math.isclose(run.checksum, first.checksum,
                                                            rel_tol=1e-6):
            raise SystemExit(f"{spec.name}: runs disagree on their outputs: {run.outputs} "
                             f"summing to {run.checksum!r} against {first.outputs} summing "
                             f"to {first.checksum!r}")


def _profiled_cpu(outcome: Outcome, name: str) -> float:
    """CPU seconds the profile measured per item a unit takes in (per source item, fused)."""
    plan, profiled = outcome.plan, {u.name: u for u in outcome.profile.units}
    if name == FUSED:
        return sum(plan.multiplicity[u] * _profiled_cpu(outcome, u) for u in plan.units)
    u = profiled[name]
    batch = next((p.batch_size for p in plan.fitted.result.replicas if p.unit == name), None)
    return next((b.cpu_s for b in u.batches if b.batch_size == batch), u.cpu_s)


def explain(outcome: Outcome, say: Callable[[str], None]) -> None:
    """Per unit: what the plan assumed against what the plan's best run measured."""
    run, plan = outcome.planned.typical(), outcome.plan
    planned_cores = sum(p.cores * p.replicas for p in plan.fitted.result.replicas)
    say(f"  plan's median run: record {run.record.throughput:.1f} items/s over "
        f"{run.record.wall_s:.2f} s (steady {run.steady:.1f}, end to end {run.rate:.1f}) "
        f"against {plan.fitted.throughput:.1f} predicted; cores: ours {run.own_cores:.2f} "
        f"(plan: {planned_cores:.2f} in replicas), others on the host {run.other_cores:.2f}; "
        f"the driver used {run.driver_cpu_s * 1e6:.0f} us of CPU per item"
        + (f"; the loopback service used {run.service_cpu_s * 1e3:.3f} ms of CPU per item, "
           "on the same cores and unseen by the profile" if run.service_cpu_s > 1e-5 else ""))
    planned = {p.unit: p for p in plan.fitted.result.replicas if p.replicas}
    for u in run.record.units:
        p = planned.get(u.name)
        busy_rate = u.items_in / u.busy_s if u.busy_s else math.nan
        cpu = u.cpu_s / u.items_in if u.items_in else math.nan
        profiled = _profiled_cpu(outcome, u.name)
        say(f"    {u.name:<14} x{u.replicas:<3} rate/replica planned "
            f"{(p.rate if p else math.nan):8.1f}, measured when busy {busy_rate:8.1f} "
            f"(busy {u.busy_fraction:5.1%}, blocked {u.blocked_s:5.2f} s); CPU per item in: "
            f"profiled {profiled * 1e3:6.3f} ms, run {cpu * 1e3:6.3f} ms "
            f"(+{(cpu - profiled) * 1e6:5.0f} us, building the unit left out)")


def wire_cost() -> None:
    """CPU per item of the local engine's wire (dumps, the datagram or /dev/shm file, loads,
    a read of every page the item holds, its release) by item size: what
    `fitwork.fit.inputs.byte_seconds` is calibrated from."""
    import socket

    from fitwork.engine.local.wire import Wire
    from fitwork.fit.inputs import byte_seconds

    wire = Wire(f"calibrate{os.getpid()}")
    send, receive = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    print("item bytes   us per item (best of 3)   ns per byte   the fit's charge (us)")
    for nbytes in (256, 8 << 10, 32 << 10, 60 << 10, 256 << 10, 900 << 10, 1 << 20, 4 << 20,
                   16 << 20):
        values = np.random.default_rng(0).standard_normal(nbytes // 8)
        count = max(20, min(3000, int(200e6 / nbytes)))
        best = math.inf
        for _ in range(3):
            start = time.process_time()
            for _ in range(count):
                data, _ = wire.dumps(values)
                if data[:1] != b"S" and len(data) < 200_000:
                    send.send(data)
                    data = receive.recv(1 << 24)
                received, _ = wire.loads(data)
                received.view(np.uint8)[::4096].sum()  # the receiving unit reads every page
                del received
            best = min(best, (time.process_time() - start) / count)
        print(f"{nbytes:>10}   {best * 1e6:>10.1f}   {best / nbytes * 1e9:>22.3f}   "
              f"{byte_seconds(nbytes) * 1e6:>10.1f}")


def selected(only: str) -> list[Spec]:
    """The specs ``--only`` names (pipelines, or a set: ``trained``, ``heldout``); all if
    it names none; a ValueError naming the unknown ones."""
    wanted: set[str] = set()
    for name in (n for n in only.split(",") if n):
        wanted.update(GROUPS.get(name, (name,)))
    unknown = wanted - {s.name for s in SPECS}
    if unknown:
        raise ValueError(f"--only: unknown pipelines {sorted(unknown)}; there are "
                         f"{', '.join(s.name for s in SPECS)}, or the sets "
                         f"{', '.join(GROUPS)}")
    return [s for s in SPECS if not wanted or s.name in wanted]


def _parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="a quarter of the items, one finalist per sweep: checks it works")
    parser.add_argument("--only", default="",
                        help="comma-separated pipeline names, or 'trained' / 'heldout'")
    parser.add_argument("--rounds", type=int, default=3,
                        help="final runs of each contender, alternating; medians compared "
                             "(min 2)")
    parser.add_argument("--samples", type=int, default=64, help="profile samples")
    parser.add_argument("--scale", type=float, default=1.0, help="items per run, times this")
    parser.add_argument("--keep-hand", type=int, default=2, help="hand layouts in the final")
    parser.add_argument("--keep-monolith", type=int, default=2,
                        help="monolith process counts in the final")
    parser.add_argument("--keep-threaded", type=int, default=1,
                        help="threaded monoliths in the final")
    parser.add_argument("--quiet-wait", type=float, default=0.0,
                        help="before each run, wait up to this many seconds for other "
                             "processes to use under a quarter of a core (each profile "
                             "waits up to 5 s, or this if longer)")
    parser.add_argument("--what-if", action="store_true",
                        help="also run the plans made without the profile's run-queue wait "
                             "and with a smaller engine charge per crossing (diagnostics)")
    parser.add_argument("--verbose", action="store_true", help="print every screening run")
    parser.add_argument("--wire", action="store_true",
                        help="only measure the local engine's CPU per item by item size (what "
                             "the fit charges per byte) and stop")
    return parser


def main() -> None:
    """Run every pipeline (or those named) and print the table."""
    parser = _parser()
    args = parser.parse_args()
    if args.wire:
        wire_cost()
        return
    args.rounds = max(2, args.rounds)
    SETTINGS.quiet_wait_s = args.quiet_wait
    if args.quick:
        args.scale *= 0.25
        args.keep_hand = args.keep_monolith = args.keep_threaded = 1
    try:
        specs = selected(args.only)
    except ValueError as unknown:
        parser.error(str(unknown))
    for spec in [s for s in specs if s.needs]:
        try:
            __import__(spec.needs)
        except ImportError:
            SKIPPED[spec.name] = f"{spec.needs} is not installed"
            specs.remove(spec)

    def say(line: str) -> None:
        if args.verbose or not line.startswith("    screen"):
            print(line, flush=True)

    fleet = fitwork.discover_local()
    cores = sum(n.cores * n.count for n in fleet.node_types)
    SETTINGS.host_factor = host_factor(cores)
    if SETTINGS.host_factor > 1:
        print(f"sweeps, hand grids and items per run scaled x{SETTINGS.host_factor} for "
              f"{cores:g} cores (sized for 2)")
    print(f"host: {cores:g} cores as granted ({fleet.node_types[0].discovered_from['cores']}); "
          f"load average {os.getloadavg()[0]:.2f}, others using {others_now():.2f} cores "
          "at the start")
    services = start_services()
    started = time.perf_counter()
    try:
        outcomes = [bench(spec, args, fleet, say) for spec in specs]
    finally:
        stop_services(services)
    print(f"\nbench wall {time.perf_counter() - started:.0f} s")
    table(outcomes, cores, args.rounds)


if __name__ == "__main__":
    main()
