"""The monolithic baseline: the same work as ONE fused unit, replicated as far as the fleet allows.

On a node type n and one of its accelerator classes d, every stage runs on whichever of d and
n's CPU class gives it the higher rate.  The fused replica runs the stages in sequence for
each source item, so its rate is ``1 / sum_u m_u / rate_u``.  It is fitted under the SAME
fluid model as a plan: it consumes its stages' measured CPU in sequence,
``sum_u m_u · cpu_u`` core-seconds per source item, and ``sum_{u on d} m_u · a_u``
device-seconds; so fused replicas may outnumber cores too, as a person runs more processes
than cores to hide a stage's waiting.  Each stage runs at the rate one process can carry
(`ClassDemand.within_parallelism`), and the fused replica keeps busy at most the cores of
the stage it is in (its parallelism: the stages', weighted by their time).  It holds the
memory one process running its stages was measured to hold (their own figures summed where
it was not: they count the libraries the stages share once each) and the largest device slot
of the stages on d; if any stage reserves cores, the fused replica reserves the most any
stage declares (one container, one request).  A stage's ``max_concurrency`` bounds the fused
replicas (each has at most one call of it in flight) and its ``rate_limit`` R bounds the
fused rate to ``R / m_u``.  For utilization it keeps its slot of d busy only while a stage
on d runs (``share · sum_{u on d} m_u / rate_u`` device-seconds per source item) and its
cores ``sum_u m_u · cpu_u``.  The engine's work per item per channel crossed
(``hop_seconds`` per frame, spread over the frame's items by `crossing_seconds`) is paid
twice per source item (in, out), where a fitted chain of n units pays it n + 1 times.  A
fused unit whose stages all run on CPU is a candidate on the CPU class.  It is then solved
by the same MILP as a plan (a one-unit pipeline: no traffic between units), so the two sit
side by side.

The threaded monolith (``Pipeline.fused(io=N)``: N items in flight per process) is a second
option of the same candidate on a CPU class, where its stages wait (`threaded_option`).
Threads overlap waiting, not CPU: a process's threads share one interpreter lock, so the
time each item holds it (its stages' CPU at their own parallelism, and the engine's work)
is served one item at a time, and the rest of its wall time overlaps.  One replica's rate
at N threads is the exact mean-value analysis of that closed queue (`threaded_rate`): N
items, each waiting ``Z`` (what the profile measured as waiting, not a loaded host's run
queue) and then holding the lock ``G``; it reaches neither N / (G + Z) nor `GIL_SHARE` / G,
so a threaded replica keeps under one core of GIL-bound work busy and more replicas are
what use more cores.  The MILP picks one option (unthreaded or threaded) for the
candidate's replicas, and `monolithic` prefers the threaded one by a stated rule, so a fused
plan is never worse than the threaded monolith the fit could itself have chosen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from fitwork.fit.candidates import (
    Candidate,
    Problem,
    candidate,
    check_inputs,
    fits_nowhere_message,
    fluid,
    packed_share,
)
from fitwork.fit.errors import UnitFitsNowhere
from fitwork.fit.inputs import DRIVER_SECONDS, ITEM_SHARE, crossing_seconds, frame_items
from fitwork.fit.result import FitResult, Objective
from fitwork.fit.solver import solve_problem
from fitwork.fit.spec import ClassDemand, NodeType, UnitDemand, is_cpu_class

FUSED = "monolithic"
MOST_THREADS = 64
"""The most threads a fused replica is planned with."""
THREAD_FILL = 0.95
"""A threaded replica gets the fewest threads (a power of two) that reach this share of the
most its interpreter lock lets it carry, or that carry the rate it is planned at over this
share where that is less (`threaded_option`'s ``need``): more only hold more items in
flight."""
THREAD_GAIN = 0.05
"""Threads are offered only where they carry this much more than one item at a time."""
GIL_SHARE = 0.9
"""The most of one core a process's threads keep busy with work that holds the interpreter
lock, however many wait: handing the lock on costs the rest.  Measured on this repository's
2-core host (threads that sleep 30 ms, then spin 0.9 ms of CPU): 0.48 of a core at 16
threads (the queue's analysis: 0.47), 0.93 at 32, 0.905 at 64, where the analysis alone
says 1.0; CPU per item stayed within 5% of one thread's."""

Stage = tuple[str, ClassDemand, float]


def monolithic(units: Sequence[UnitDemand], node_types: Sequence[NodeType], *,
               objective: Objective = "max_throughput", target: float | None = None,
               time_limit: float = 10.0, mip_gap: float = 0.01,
               hop_seconds: float = 0.0, edge_seconds: float = 0.0,
               waiting: float | None = None, memory: int | None = None,
               carried: dict[str, float] | None = None) -> FitResult:
    """The baseline plan: ``units`` fused into one unit named ``monolithic``, then fitted.

    ``hop_seconds`` is the engine's work per item per channel crossed: the fused unit pays it
    twice per source item (in and out, in core-seconds and in its replica's time), where a
    chain of n units pays it n + 1 times.  ``edge_seconds`` is what moving a source item in
    and its outputs out costs beyond that (their bytes), per source item.  ``waiting`` is
    the seconds per source item the stages wait on something other than a core (I/O, a
    sleep: what threads overlap), where the profile measured it apart from the run-queue
    wait a loaded host adds (which threads do not overlap); ``None``: a stage's wall time
    beyond its CPU time.  ``memory`` is what one fused replica was measured to hold
    (`fitwork.profiling.record.PipelineProfile.fused_rss`); ``None``: its stages' summed.
    ``carried`` sizes a threaded replica's threads to the items/s it carries (per node type;
    `carried_rates` of an earlier solve) rather than to the most one replica could.
    """
    def solved(problem: Problem) -> FitResult:
        return solve_problem(problem, objective=objective, target=target,
                             time_limit=time_limit, mip_gap=mip_gap)

    problem = fused_problem(units, node_types, 2 * hop_seconds, edge_seconds, waiting,
                            memory, carried=carried)
    best = solved(problem)
    threaded = tuple(c for c in problem.candidates if c.concurrency > 1)
    if objective != "max_throughput" or not threaded or any(p.threads for p in best.replicas):
        return best
    # The tie rule between the two options: the fluid cores do not charge single-threaded
    # processes for meeting each other on the cores (the fewest whose load fills them
    # collide most), which a process's threads absorb; so the threaded monolith runs unless
    # one item at a time predicts more than THREAD_GAIN above it.
    alone = solved(replace(problem, candidates=threaded))
    return alone if alone.throughput * (1 + THREAD_GAIN) >= best.throughput else best


def carried_rates(result: FitResult) -> dict[str, float]:
    """Items/s each threaded replica of ``result`` carries, per node type."""
    return {p.node_type: p.items_per_s / p.replicas for p in result.replicas
            if p.threads and p.replicas}


def _stages(units: Sequence[UnitDemand], accel: str | None,
            cpu: str | None) -> list[Stage] | None:
    """Each unit's faster class among ``accel`` and ``cpu``; ``None`` if one runs on neither."""
    stages: list[Stage] = []
    for unit in units:
        options = [(cls, unit.classes[cls].within_parallelism()) for cls in (accel, cpu)
                   if cls is not None and cls in unit.classes and unit.classes[cls].rate > 0]
        if not options:
            return None
        cls, demand = max(options, key=lambda o: o[1].rate)
        stages.append((cls, demand, unit.multiplicity))
    return stages


def _fused(stages: list[Stage], accel: str | None,
           hop: float = 0.0, edge: float = 0.0, memory: int | None = None
           ) -> tuple[ClassDemand, tuple[tuple[str, float], ...]]:
    """The fused replica's demand and its busy device-seconds per source item, per class;
    ``hop`` per frame and ``edge`` per item are the engine's work moving items in and out.
    It holds ``memory`` where that was measured, else its stages' summed; each further
    call in flight, the most one stage's call holds (a thread is in one stage at a time)."""
    work = sum(m / d.rate for _, d, m in stages)
    driver = DRIVER_SECONDS / frame_items(work) if hop else 0.0  # the driver's, per item
    hop = (crossing_seconds(hop, work) if hop else 0.0) + edge
    seconds = work + hop
    on_accel = [(cls, d, m) for cls, d, m in stages if cls == accel]
    share = max((d.device_share for _, d, _ in on_accel), default=0.0)
    reserve = any(d.reserve for _, d, _ in stages)
    cpu = sum(m * d.core_seconds() for _, d, m in stages) + hop + driver
    # The stages run in turn, so the fused process keeps busy at once what the stage it is
    # in does: its parallelism is the stages', weighted by the time each takes (the engine's
    # work on the item, a plain Python call, by one core).
    bounds = [d.parallelism for _, d, _ in stages]
    parallelism = None if None in bounds or seconds <= 0 else (
        sum(m / d.rate * (d.parallelism or 1.0) for _, d, m in stages) + hop) / seconds
    if parallelism is not None and driver:  # the driver's share is not the replica's
        parallelism *= cpu / (cpu - driver)
    device = sum(m * fluid(d, cls)[1] for cls, d, m in on_accel)
    demand = ClassDemand(
        rate=1.0 / seconds,
        cores=max(d.cores for _, d, _ in stages),  # the stages run in turn, not at once
        memory=sum(d.memory for _, d, _ in stages) if memory is None else memory,
        call_memory=max(d.call_memory for _, d, _ in stages),
        device_share=share,
        cpu_seconds=cpu,
        device_seconds=device if on_accel and share <= 1.0 else None,
        reserve=reserve,
        parallelism=parallelism,
    )
    busy: list[tuple[str, float]] = []
    if on_accel:
        assert accel is not None
        busy.append((accel, packed_share(share) * sum(m / d.rate for _, d, m in on_accel)))
    cpus = [cls for cls, _, _ in stages if is_cpu_class(cls)]
    if cpus:
        busy.append((cpus[0], cpu))
    return demand, tuple(busy)


def threaded_rate(threads: int, hold: float, wait: float, most: float = math.inf) -> float:
    """Items/s of one process running ``threads`` items at once, each waiting ``wait``
    seconds (overlapped) and holding the interpreter lock ``hold`` seconds (one at a time):
    the exact mean-value analysis of that closed queue (one server, a delay station), and
    with more than one thread at most `GIL_SHARE` of what the lock serves, and ``most``
    (what the node's cores carry of its CPU per item)."""
    if hold <= 0:
        return min(threads / wait if wait > 0 else 0.0, most)
    queued = rate = 0.0
    for n in range(1, threads + 1):
        response = hold * (1.0 + queued)
        rate = n / (wait + response)
        queued = rate * response
    return min(rate if threads == 1 else min(rate, GIL_SHARE / hold), most)


def threaded_option(hold: float, wait: float, most: float = math.inf,
                    need: float | None = None) -> tuple[int, float] | None:
    """(threads, items/s) of a threaded replica: the fewest threads, a power of two up to
    `MOST_THREADS`, that carry `THREAD_FILL` of the most the lock lets them
    (``GIL_SHARE / hold``) or the node's cores do (``most``), or, where the replica is
    planned to carry ``need`` items/s, that rate over `THREAD_FILL` if less (two where one
    item at a time carries ``need``); ``None`` where threads carry under `THREAD_GAIN`
    more than one item at a time.

    Two, not none, where one item at a time would do: the fluid cores do not charge
    processes of one item at a time for meeting on the cores, which threads absorb (the
    tie rule of `monolithic`).  With none, the OCR demo at 30 ms on a near-quiet host ran
    3 processes (3 x 2 threads before the trim): 0.91x the threaded monolith of 2 x 4, a
    stable loss, realizing 0.78x its prediction (0.165 CPU-s and 0.16 s off the cores a
    page against 0.129 and 0.06 profiled: three processes on two cores queue for them); with
    two, 3 x 2 did 0.99x (too noisy to call), realizing 1.08x."""
    alone = threaded_rate(1, hold, wait, most)
    ceiling = min(GIL_SHARE / max(hold, 1e-12), most)
    wanted = THREAD_FILL * ceiling if need is None else min(THREAD_FILL * ceiling,
                                                            need / THREAD_FILL)
    threads = 2
    while threads < MOST_THREADS and threaded_rate(threads, hold, wait, most) < wanted:
        threads *= 2
    rate = threaded_rate(threads, hold, wait, most)
    if rate < alone * (1 + THREAD_GAIN):
        return None
    return threads, rate


def _held(d: ClassDemand) -> float:
    """Seconds of one item a stage holds the interpreter lock: its CPU at its own
    parallelism, at most its wall time.

    The profile's ``lock_share`` and ``concurrent_cpu`` are not planned with yet.  Tried on
    the OCR demo at 150 ms (2-core host): its models hold the lock for 4-7% of their CPU,
    and one process of 8 threads planned from that at 18 pages/s did 11.7, 1.2 cores busy
    (its threads queue for the cores too, and hand the lock on in fetch and store); charging
    threads their 1.13x CPU with calls at once, and not processes theirs (1.06x at 8 on 2
    cores), planned 9 processes, which did 0.88x the threaded monolith's pages/s."""
    return min(1.0 / d.rate, d.core_seconds() / (d.parallelism or 1.0))


def _threaded(stages: list[Stage], demand: ClassDemand, hop: float = 0.0,
              edge: float = 0.0, waiting: float | None = None, cores: float = math.inf,
              need: float | None = None) -> tuple[ClassDemand, int] | None:
    """The threaded monolith beside the fused replica ``demand`` (stages all on CPU), and its
    threads; ``None`` where its stages do not wait enough for threads to help.  Each stage
    holds the lock its CPU time at its own parallelism (`_held`); the engine's work on an
    item (at the frames a replica of that many threads gets) holds it too.  The items
    wait ``waiting`` seconds each (`fitwork.fit.inputs.waiting_seconds`: on a contended
    host, more than the profile's wall time beyond the lock's), else that wall time.  One replica
    carries at most what ``cores`` (the node's) do of its CPU per item."""
    stages = [(cls, d.threaded(), m) for cls, d, m in stages]  # its calls in threads
    work = sum(m / d.rate for _, d, m in stages)
    held = sum(m * _held(d) for _, d, m in stages)
    wait = work - held if waiting is None else max(waiting, 0.0)
    spent = sum(m * d.core_seconds() for _, d, m in stages)
    most = cores / spent if spent > 0 else math.inf
    trial = threaded_option(held + edge, wait, most, need)
    if trial is None:
        return None
    threads = trial[0]
    frame = frame_items(work, threads)
    moved = (hop * (1.0 / frame + ITEM_SHARE) if hop else 0.0) + edge
    driver = DRIVER_SECONDS / frame if hop else 0.0
    hold = held + moved
    cpu = spent + moved + driver
    rate = threaded_rate(threads, hold, wait, cores / cpu if cpu > 0 else math.inf)
    if rate < (1 + THREAD_GAIN) * demand.rate:
        return None
    # Busy, it keeps the lock's share of cores busy: rate <= parallelism / cpu.
    return demand.model_copy(update={
        "rate": rate, "cpu_seconds": cpu,
        "parallelism": GIL_SHARE * cpu / hold if hold > 0 else None}), threads


def _options(stages: list[Stage], accel: str | None, hop: float, edge: float, *,
             threaded: bool, waiting: float | None = None, cores: float = math.inf,
             memory: int | None = None, need: float | None = None
             ) -> list[tuple[ClassDemand, tuple[tuple[str, float], ...], int]]:
    """The fused replica's options (demand, busy seconds per item per class, threads): one
    item at a time, and where ``threaded`` (every stage on CPU) and its stages wait, the
    threaded monolith (on a node of ``cores``; sized to carry ``need`` items/s if given)."""
    demand, busy = _fused(stages, accel, hop, edge, memory)
    found = [(demand, busy, 1)]
    more = _threaded(stages, demand, hop, edge, waiting, cores, need) if threaded else None
    if more is not None:
        threads_demand, threads = more
        found.append((threads_demand, tuple((c, threads_demand.core_seconds() if
                                             is_cpu_class(c) else t) for c, t in busy),
                      threads))
    return found


def unit_limits(units: Sequence[UnitDemand]) -> tuple[int | None, float | None]:
    """The fused unit's (max_concurrency, rate_limit) from its stages'."""
    most = [u.max_concurrency for u in units if u.max_concurrency is not None]
    per_s = [u.rate_limit / u.multiplicity for u in units if u.rate_limit is not None]
    return (min(most) if most else None), (min(per_s) if per_s else None)


def fused_problem(units: Sequence[UnitDemand], node_types: Sequence[NodeType],
                  hop_seconds: float = 0.0, edge_seconds: float = 0.0,
                  waiting: float | None = None, memory: int | None = None,
                  carried: dict[str, float] | None = None) -> Problem:
    """The baseline as a one-unit `Problem` (``memory``: one replica's, where measured;
    ``carried``: per node type, the items/s a threaded replica is sized to carry, where a
    solve planned it); raises `UnitFitsNowhere` if it fits no node."""
    check_inputs(units, node_types)
    fleet = tuple(n for n in node_types if n.count > 0)
    most, per_s = unit_limits(units)
    candidates: list[Candidate] = []
    group = 0
    for n, node in enumerate(fleet):
        accels: list[str | None] = [None, *(d for d, k in node.devices.items() if k > 0)]
        for accel in accels:
            stages = _stages(units, accel, node.cpu_class)
            if stages is None:
                continue
            uses_accel = any(cls == accel for cls, _, _ in stages)
            if accel is not None and not uses_accel:
                continue
            cls = accel if uses_accel and accel is not None else node.cpu_class
            assert cls is not None
            found = _options(stages, accel, hop_seconds, edge_seconds,
                             threaded=not uses_accel, waiting=waiting,
                             cores=node.cores * node.core_ceiling, memory=memory,
                             need=(carried or {}).get(node.name))
            for option, (demand, busy, threads) in enumerate(found):
                cand = candidate(0, n, node, cls, demand, UnitDemand(name=FUSED, classes={},
                                                                     concurrency=threads),
                                 0.0, last=True, choice=len(candidates), group=group,
                                 option=option)
                if cand is not None:
                    candidates.append(replace(cand, busy=busy))
            group += 1
    if not candidates:
        wanted = _wanted(units)
        if not wanted:
            raise UnitFitsNowhere(FUSED, (
                f"unit {FUSED!r} fits no node: its stages run only on different accelerator "
                "classes, and one fused replica uses one accelerator class; give a stage a CPU "
                "class or a class the others share"))
        raise UnitFitsNowhere(FUSED, fits_nowhere_message(FUSED, wanted, fleet))
    return Problem(unit_names=(FUSED,), multiplicity=(1.0,), node_types=fleet,
                   candidates=tuple(candidates), max_concurrency=(most,), rate_limit=(per_s,))


def _wanted(units: Sequence[UnitDemand]) -> dict[str, ClassDemand]:
    """What the fused replica would need on each class, for the error message."""
    classes = {c for u in units for c, d in u.classes.items() if d.rate > 0}
    cpus: list[str | None] = [*sorted(c for c in classes if is_cpu_class(c))] or [None]
    accels: list[str | None] = [*sorted(c for c in classes if not is_cpu_class(c))] or [None]
    wanted: dict[str, ClassDemand] = {}
    for cpu in cpus:
        for accel in accels:
            stages = _stages(units, accel, cpu)
            if stages is None:
                continue
            uses_accel = any(cls == accel for cls, _, _ in stages)
            key = accel if uses_accel and accel is not None else cpu
            if key is not None and key not in wanted:
                wanted[key] = _fused(stages, accel if uses_accel else None)[0]
    return wanted
