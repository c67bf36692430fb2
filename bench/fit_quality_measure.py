"""fit_quality's measuring: timed runs, the contenders, their layouts, a pipeline's Outcome."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
from fit_quality_shapes import SERVICE_PIDS, Spec

import fitwork
from fitwork import Pipeline
from fitwork.fit.plan import Plan, plan_for
from fitwork.placement import Placement
from fitwork.profiling.record import PipelineProfile
from fitwork.telemetry.host_speed import host_speed
from fitwork.telemetry.record import RunRecord

THREADED = tuple(itertools.product((1, 2, 4), (4, 16)))  # (processes, threads) screened

# ---------------------------------------------------------------------------------------
# Measuring.

@dataclass
class Run:
    """One timed run: end-to-end wall (start-up and shutdown included), the record, the cores
    this bench's processes (the service's included) and everything else on the host used
    meanwhile, and the service's CPU per item."""

    items: int
    wall_s: float
    outputs: int
    checksum: float
    record: RunRecord
    own_cores: float = 0.0
    other_cores: float = 0.0
    service_cpu_s: float = 0.0  # the loopback service's CPU seconds per source item
    driver_cpu_s: float = 0.0  # this (the driver's) process's CPU seconds per source item
    speed: float = math.nan  # `host_speed` just before the run and just after, their mean

    @property
    def rate(self) -> float:
        """Source items per second, end to end."""
        return self.items / self.wall_s

    @property
    def unseen_cores(self) -> float:
        """Cores the plan could not know of: other processes', and the loopback service's
        (on this host's cores, called by a unit, and not in any unit's profile)."""
        return self.other_cores + self.service_cpu_s * self.items / self.wall_s

    @property
    def steady(self) -> float:
        """Items/s between 10% and 90% of the items settled (start-up and drain left out),
        as `fitwork run` says it; the record's throughput where too few frames settled."""
        return self.record.completions.steady(self.items) or self.record.throughput


@dataclass
class Contender:
    """A layout to run: its label, its configuration in words, and how to run it."""

    label: str
    config: str
    placement: Placement | Plan | None = None
    workers: dict[str, int] | None = None
    runs: list[Run] = field(default_factory=list)
    adapt: bool = False
    key: tuple[Any, ...] = ()  # the layout it runs, comparable across contenders
    pooled: list[Run] = field(default_factory=list)  # runs of the same layout by another name

    def best(self) -> Run:
        """The fastest run end to end (the least disturbed on a shared machine)."""
        return max(self.runs, key=lambda r: r.rate)

    @property
    def sample(self) -> list[Run]:
        """Its runs, and those of a baseline that ran the same layout."""
        return [*self.runs, *self.pooled]

    def typical(self) -> Run:
        """Its own median run end to end (the lower middle of an even count)."""
        ranked = sorted(self.runs, key=lambda r: r.rate)
        return ranked[(len(ranked) - 1) // 2]

    @property
    def rate(self) -> float:
        """The median items/s end to end over `sample`: every contender gets as many runs,
        so no contender wins by drawing the luckiest of more runs."""
        return statistics.median(r.rate for r in self.sample)


def host_busy_s() -> float:
    """CPU seconds every process on this host has run so far (all cores together)."""
    times = psutil.cpu_times()
    return sum(getattr(times, name, 0.0) for name in
               ("user", "nice", "system", "irq", "softirq", "steal"))


def service_cpu_s() -> float:
    """CPU seconds the loopback services have used so far."""
    used = 0.0
    for pid in SERVICE_PIDS:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            used += times.user + times.system
    return used


def own_cpu_s() -> float:
    """CPU seconds of this process, its reaped children (the replicas) and the service."""
    times = os.times()
    return (times.user + times.system + times.children_user + times.children_system
            + service_cpu_s())


BASELINE_KINDS = ("monolith", "threaded", "hand")
QUIET_CORES = 0.25  # others below this share of cores: a quiet host


def others_now(window: float = 0.5) -> float:
    """Cores everything else on the host used over the next ``window`` seconds."""
    host0, own0 = host_busy_s(), own_cpu_s()
    time.sleep(window)
    return max(0.0, host_busy_s() - host0 - (own_cpu_s() - own0)) / window


PROFILE_QUIET_S = 5.0
"""The longest each pipeline's profile waits for a quiet host (``--quiet-wait`` if longer)."""


def settle(limit_s: float) -> float:
    """Wait (at most ``limit_s``) until other processes use under `QUIET_CORES`; the wait."""
    start = time.perf_counter()
    while limit_s > 0 and others_now() > QUIET_CORES and time.perf_counter() - start < limit_s:
        pass
    return time.perf_counter() - start


@dataclass
class Settings:
    """What the command line sets for every run."""

    quiet_wait_s: float = 0.0  # before each run, wait up to this long for a quiet host
    host_factor: int = 1  # this host's cores over the 2 the sweeps were sized for


def host_factor(cores: float) -> int:
    """How many times the 2-core host the sweeps were sized for this host is: the process
    sweeps, the hand grid's replica counts and the items per run are scaled by it."""
    return max(1, round(cores / 2))


SETTINGS = Settings()
SKIPPED: dict[str, str] = {}  # shapes left out, and why


def measure(pipeline: Pipeline, items: int, contender: Contender) -> Run:
    """Run ``contender`` over ``items`` source items, timed end to end."""
    if SETTINGS.quiet_wait_s > 0:
        settle(SETTINGS.quiet_wait_s)
    speed = host_speed()
    host0, own0, service0 = host_busy_s(), own_cpu_s(), service_cpu_s()
    driver0 = time.process_time()
    start = time.perf_counter()
    with fitwork.run(pipeline, range(items), placement=contender.placement,
                     workers=contender.workers, sample_devices=False,
                     adapt=contender.adapt) as result:
        outputs = list(result)
    wall = time.perf_counter() - start
    driver = time.process_time() - driver0
    own = own_cpu_s() - own0
    others = max(0.0, host_busy_s() - host0 - own)
    speed = (speed + host_speed()) / 2  # the probe brackets the run (not counted as ours)
    run = Run(items, wall, len(outputs), math.fsum(float(o) for o in outputs), result.record,
              own / wall, others / wall, (service_cpu_s() - service0) / items,
              driver / items, speed)
    contender.runs.append(run)
    return run


def layout(counts: dict[str, int]) -> str:
    """Replica counts in words: ``fetch=2 parse=1``."""
    return " ".join(f"{name}={count}" for name, count in counts.items())


def _side(plan: Plan, other: bool) -> tuple[bool, Any]:
    """(whether it is fused, its solved result): the side the plan runs, or the other one."""
    fused = plan.fused != other
    if not other:
        return fused, plan.fitted.result
    other_side = plan.monolithic if fused else plan.split
    assert other_side is not None, "a fused plan keeps its split side"
    return fused, other_side.result


def plan_layout(plan: Plan, other: bool = False) -> str:
    """The plan's replicas (and batch sizes), or the fused layout it chose (and its threads);
    with ``other``, those of the side it set aside."""
    fused, result = _side(plan, other)
    if fused:
        threads = max((p.threads or 0 for p in result.replicas), default=0)
        return (f"fused x{sum(p.replicas for p in result.replicas)}"
                + (f" io={threads}" if threads else ""))
    return " ".join(f"{p.unit}={p.replicas}" + (f"/b{p.batch_size}" if p.batch_size else "")
                    for p in result.replicas if p.replicas)


def plan_key(plan: Plan, pipeline: Pipeline, other: bool = False) -> tuple[Any, ...]:
    """The layout a plan runs (``other``: the side it set aside), comparable with
    `hand_key` and the monoliths' keys."""
    fused, result = _side(plan, other)
    if fused:
        threads = max((p.threads or 0 for p in result.replicas), default=0)
        return ("fused", sum(p.replicas for p in result.replicas), threads or None)
    declared = {u.name: u.batch_size for u in pipeline.units}
    return ("split", tuple((p.unit, p.replicas, p.batch_size or declared.get(p.unit))
                           for p in result.replicas if p.replicas))


def hand_key(counts: dict[str, int], pipeline: Pipeline) -> tuple[Any, ...]:
    """The layout of hand replica counts (every unit at its declared batch size)."""
    declared = {u.name: u.batch_size for u in pipeline.units}
    return ("split", tuple((name, n, declared.get(name)) for name, n in counts.items() if n))


def grid(spec: Spec) -> list[dict[str, int]]:
    """The hand layouts: every combination of the grid's replica counts."""
    names, k = list(spec.grid), SETTINGS.host_factor
    return [dict(zip(names, counts, strict=True))
            for counts in itertools.product(*(tuple(c * k for c in spec.grid[n])
                                              for n in names))]


def threads(spec: Spec) -> list[tuple[int, int]]:
    """The threaded monoliths screened: (processes, threads), processes scaled to the host."""
    return [(p * SETTINGS.host_factor, n) for p, n in THREADED]


@dataclass
class Outcome:
    """One pipeline's figures."""

    spec: Spec
    profile: PipelineProfile
    plan: Plan
    planned: Contender
    monolith: Contender
    hand: Contender
    finalists: list[Contender]
    adapted: Contender | None = None
    threaded: Contender | None = None
    at_run_load: float = math.nan  # the model's prediction at the plan's best run's load
    adapted_at_run_load: float = math.nan  # the same for the --adapt run
    set_aside: Contender | None = None  # where the plan called a tie: the other side, as run
    profile_speed: float = math.nan  # `host_speed` as the profile began

    @property
    def speed(self) -> float:
        """The host's speed during the plan's runs (their median `host_speed`) over its
        speed when the pipeline was profiled: under 1, the host ran slower than the profile
        saw it, and a prediction of CPU-bound work reads high by about that much."""
        return statistics.median(r.speed for r in self.planned.runs) / self.profile_speed

    @property
    def tie_share(self) -> float:
        """Where the plan called a tie: the side it runs over the side it set aside, median
        items/s end to end (nan without a tie)."""
        if self.set_aside is None:
            return math.nan
        return self.planned.rate / self.set_aside.rate

    @property
    def tie_held(self) -> bool:
        """Whether the tie rule's choice held: the side it runs did at least 1 - the plan's
        uncertainty times the side it set aside (a tie says they are within it)."""
        return self.tie_share >= 1 - self.plan.uncertainty

    @property
    def layout_key(self) -> tuple[Any, ...]:
        """The plan's layout: the --adapt run starts from it too, so both rows have the
        same rivals (every other layout)."""
        return plan_key(self.plan, self.spec.pipeline)

    @property
    def rivals(self) -> list[Contender]:
        """The final's baselines that ran a layout other than the plan's."""
        return [c for c in self.finalists
                if c.label in BASELINE_KINDS and c.key != self.layout_key]

    @property
    def best_rival(self) -> Contender:
        """The rival with the highest median items/s end to end."""
        return max(self.rivals, key=lambda c: c.rate)

    @property
    def best_baseline(self) -> float:
        """Median items/s end to end of the best other layout: process sweep, threaded or
        hand (a baseline that ran the plan's own layout is pooled with the plan instead)."""
        return self.best_rival.rate

    @property
    def realized(self) -> float:
        """The median of the plan's own runs' throughput as their records give it (start-up
        included)."""
        return statistics.median(r.record.throughput for r in self.planned.runs)

    @property
    def predicted_run(self) -> float:
        """What the plan predicts for a run of as many items as its runs had: the steady
        rate with its replicas' builds and the first item's way through (`Plan.run_rate`)."""
        return self.plan.run_rate(self.planned.runs[0].items)

    @property
    def in_range(self) -> bool:
        """Whether the plan's median run's steady items/s fell inside the p10-p90 range
        the plan printed for its steady rate (a claim: about 8 runs in 10 should)."""
        low, high = self.plan.fitted.throughput_range
        return low <= self.planned.typical().steady <= high

    @property
    def realized_share(self) -> float:
        """The plan's realized throughput over its prediction for a run of that length."""
        return self.realized / self.predicted_run

    @property
    def hand_share(self) -> float:
        """The plan's median items/s over the best hand layout's, both end to end."""
        return self.planned.rate / self.hand.rate

    @property
    def best_share(self) -> float:
        """The plan's median items/s over the best other layout's, both end to end."""
        return self.planned.rate / self.best_baseline

    @property
    def luckiest_share(self) -> float:
        """The plan's fastest run over the fastest run of any other layout (the old,
        best-of figure: it favours the side with more runs)."""
        return self.planned.best().rate / max(c.best().rate for c in self.rivals)

    @property
    def disturbed(self) -> str:
        """How many final runs had others using a quarter of a core or more."""
        runs = [r for c in self.finalists for r in c.runs]
        return f"{sum(r.other_cores >= QUIET_CORES for r in runs)}/{len(runs)}"

    @property
    def others(self) -> float:
        """Median cores other processes on the host used during the final runs."""
        return statistics.median(r.other_cores for c in self.finalists for r in c.runs)


def screen(spec: Spec, items: int, contenders: list[Contender], keep: int,
           say: Callable[[str], None]) -> list[Contender]:
    """One short run of each contender; the ``keep`` fastest go on to the final."""
    for contender in contenders:
        run = measure(spec.pipeline, items, contender)
        say(f"    screen {contender.label:<9} {contender.config:<38} {run.rate:8.1f} items/s"
            f" (cores: ours {run.own_cores:4.2f}, others {run.other_cores:4.2f})")
    ranked = sorted(contenders, key=lambda c: c.rate, reverse=True)
    for contender in ranked:
        contender.runs.clear()  # the final compares full-length runs only
    return ranked[:keep]


def unqueued(profile: PipelineProfile) -> PipelineProfile:
    """``profile`` with the run-queue wait taken out: each wall time less the time the unit
    sat runnable while other processes held the cores, and no wait left to derate cores by."""
    def less(wall: float, queued: float) -> float:
        return wall - queued if wall - queued > 0 else wall

    units = [u.model_copy(update={
        "wall_s": less(u.wall_s, u.queued_s), "queued_s": 0.0,
        "batches": [b.model_copy(update={"wall_s": less(b.wall_s, b.queued_s), "queued_s": 0.0})
                    for b in u.batches]}) for u in profile.units]
    return profile.model_copy(update={"units": units})


def at_load(profile: PipelineProfile, fleet: fitwork.Fleet, others: float,
            cores: float) -> Plan:
    """The plan the model makes from ``profile`` had the units been timed while others
    used ``others`` cores, as they did during the plan's run (and no run-queue wait of the
    profile's moment): what the model predicts at the run's load, the model's own error
    apart from the host's load moving between the profile and the run."""
    share = min(1.0, max(0.0, others / cores))
    clean = unqueued(profile)
    units = [u.model_copy(update={"batches": [b.model_copy(update={"others_share": share})
                                              for b in u.batches]}) for u in clean.units]
    return plan_for(clean.model_copy(update={"units": units}), fleet)


WHAT_IF_HOP_S = 10e-6  # a seventh of the engine charge per frame per crossing the fit uses


def what_ifs(profile: PipelineProfile, fleet: fitwork.Fleet) -> dict[str, Plan]:
    """The plans the model would make with the profile's run-queue wait taken out, and with
    that and a smaller engine charge per crossing (diagnostics, not contenders by default)."""
    clean = unqueued(profile)
    return {"no queue wait": plan_for(clean, fleet),
            f"no queue wait, {WHAT_IF_HOP_S * 1e6:.0f} us/frame":
                plan_for(clean, fleet, hop_seconds=WHAT_IF_HOP_S)}
