"""The share of a host's cores a plan may count on, from what its profile read of the host.

`core_ceiling` is what one process met (run-queue wait and the cores others left);
`share_ceiling` what a plan of several busy threads gets where the host's other work is
shared fairly; `settled_ceiling` the highest ceiling a plan's own threads bear out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from fitwork.fit.result import FitResult, Placement
from fitwork.fit.spec import is_cpu_class
from fitwork.profiling.record import PipelineProfile, UnitProfile

__all__ = ["BUSY_CORES", "FLOOR", "FREE_QUANTILE", "borne", "busy_threads", "contended_speed",
           "core_ceiling", "free_readings", "processes_of", "quantile", "settled_ceiling",
           "share_ceiling", "shares_read", "threads_of", "yielded", "yields_read"]

FREE_QUANTILE = 0.75
"""The quantile of the profile's readings of the cores others left that the ceiling takes.
Load from other processes only ever lowers a reading (a moment when another job held the
cores says little about the next minute), so a high quantile, not the mean, estimates what
the plan may count on; not the largest, which one reading's tick rounding can lift."""
FLOOR = 0.05
"""The least ceiling: a plan always has some share of the cores to work with."""


def core_ceiling(profile: PipelineProfile) -> float:
    """The share of a node's (unreserved) cores fluid load may be planned to use.

    Derived from the profile's run-queue measurement.  Every unit was timed in its own
    process; ``queued_s`` is the time per item it sat runnable in the kernel's run queue
    while another process held the core, ``cpu_s`` the time it ran.  Weighted by how many
    items each unit processes per source item (its multiplicity ``m_u``)::

        q   = sum_u m_u·queued_u / sum_u m_u·(cpu_u + queued_u)
        rho = 1 - q

    ``q``, the share of this pipeline's runnable time that found no free core, is what
    sharing cores with other processes costs this work; a plan's replicas are such
    processes, so each node's fluid budget is ``rho`` of its unreserved cores.  A unit's
    wait is its least-waiting pass's (`_least_queued`): a transient load only adds wait.
    None measured gives 1.0.  Per profile: the wait was measured on its host only.

    One process's wait does not see what a plan of several meets (beside others keeping 0.7
    of 2 cores busy, ``bench/fit_quality.py``'s plans at a ceiling of 0.83-0.90 used what
    others left them), so the ceiling is also at most the `FREE_QUANTILE` of the profile's
    readings of the share of the cores others left (`free_readings`), where it took any.
    Single readings minutes apart gave 25% to 100% (issue 37); the run's re-fit grows the
    replicas where it finds more cores free (`fitwork.engine.adapt`).
    """
    m, weighted_cpu, weighted_queue = 1.0, 0.0, 0.0
    for u in profile.units:
        view = u.at_batch(u.batch_size)
        weighted_cpu += m * view.cpu_s
        weighted_queue += m * view.cpu_s * _least_queued(u)
        m *= u.output_ratio
    total = weighted_cpu + weighted_queue
    ceiling = 1.0 if total <= 0 else 1.0 - weighted_queue / total
    free = free_readings(profile)
    if free:
        ceiling = min(ceiling, quantile(free, FREE_QUANTILE))
    return max(FLOOR, ceiling)


BUSY_CORES = 0.05
"""A replica planned under this many cores of CPU work mostly waits: it adds no thread
competing for the cores (`busy_threads`)."""
SETTLE_STEPS = 6
"""The most re-solves `settled_ceiling` takes to reach a ceiling the plan bears out."""


def share_ceiling(profile: PipelineProfile, threads: float,
                  processes: float | None = None) -> float:
    """The core ceiling a plan of ``threads`` busy threads in ``processes`` processes may
    count on: the largest of `core_ceiling` (what one process met), what ``threads``
    processes got at once (`shares_read`: where the host's other work is shared with them
    fairly, more runnable threads get more of it; beside one process spinning on 2 cores
    four get 1.6 cores where one gets 1) and, where the profile read them, what
    ``processes`` spinners got (`yields_read`: work that waits, beside other work that
    shares with it, takes what that work leaves between its waits; a process's threads
    take the interpreter lock in turn, as the fit's threaded rate has them, so it counts
    once).  Linear between the counts read, the largest count's held beyond it (work that
    waits is read up to as many processes as ask for four times the cores,
    `fitwork.profiling.shares.counts`), never above 1."""
    share = _at(shares_read(profile), threads)
    if processes is not None:
        share = max(share, _at(yields_read(profile), processes))
    return min(1.0, max(core_ceiling(profile), share))


def _at(got: dict[int, float], count: float) -> float:
    """``got`` at ``count``: linear between the counts read, the nearest end's beyond them;
    0 where nothing was read."""
    if not got:
        return 0.0
    counts = sorted(got)
    if count <= counts[0] or count >= counts[-1]:
        return got[counts[0] if count <= counts[0] else counts[-1]]
    high = next(k for k in counts if k >= count)
    low = max(k for k in counts if k < count)
    return got[low] + (got[high] - got[low]) * (count - low) / (high - low)


def shares_read(profile: PipelineProfile) -> dict[int, float]:
    """The share of the host each count of processes got (`fitwork.profiling.shares`)."""
    return _read(profile.share_readings)


def yields_read(profile: PipelineProfile) -> dict[int, float]:
    """The share of the host each count of spinning processes got, where the profile's
    duty-cycled readings got all they asked (`PipelineProfile.yield_readings`)."""
    return _read(profile.yield_readings)


def _read(readings: dict[int, list[float]]) -> dict[int, float]:
    """Each count's `FREE_QUANTILE` reading."""
    return {k: quantile([(v, 1.0) for v in values], FREE_QUANTILE)
            for k, values in readings.items() if values}


def contended_speed(profile: PipelineProfile) -> float | None:
    """How fast each of many threads gets through its items here against one process alone
    (as the units were timed): what each of the most processes read got over what one got,
    at most 1; ``None`` on a free host (one count read) or where more processes got no more
    than one (the host's other work is not shared with them: more threads only queue)."""
    got = shares_read(profile)
    if len(got) < 2:
        return None
    most, one = max(got), min(got)
    if got[one] <= 0 or got[most] <= got[one]:
        return None
    return min(1.0, got[most] / most / (got[one] / one))


def busy_threads(result: FitResult) -> float:
    """Threads a solved side keeps runnable at most (`threads_of` its replicas)."""
    return threads_of(result.replicas)


def borne(profile: PipelineProfile, result: FitResult) -> float:
    """The ceiling a solved side's own replicas claim: `share_ceiling` at its threads and
    processes, less where some of its processes would get fewer cores than planned
    (`yielded`)."""
    ceiling = share_ceiling(profile, busy_threads(result), processes_of(result.replicas))
    cores = _host_cores(result)
    if cores is None:
        return ceiling
    demands = [p.cores for p in _busy(result.replicas) for _ in range(p.replicas)]
    got = yielded(profile, demands, cores)
    return ceiling if got is None else min(ceiling, max(got, core_ceiling(profile),
                                                        _at(shares_read(profile),
                                                            busy_threads(result))))


def yielded(profile: PipelineProfile, demands: list[float], cores: float) -> float | None:
    """The share of a host of ``cores`` that processes planned ``demands`` cores each get,
    where some would get less than planned; ``None`` where each gets its plan (or the
    profile read no spinners).

    The spinners read (`yields_read`) say how many threads the host's other work runs
    against them: ``k`` spinners that got ``s`` of the host left ``1 - s`` to others at the
    same per-thread share, so others run ``k (1 - s) / s`` (one, beside one spinner of the
    session).  Shared fairly, a process that asks less than the level every thread gets
    keeps what it asks and leaves the rest: the level ``λ`` solves
    ``sum_i min(d_i, λ) + others · min(1, λ) = cores`` and the plan gets
    ``sum_i min(d_i, λ)``.  Counting each process as a spinner over-claims for a split plan
    of many processes that mostly wait: 7 fetch and 2 parse processes beside a spinner of
    their session were planned at 0.89 of 2 cores and realized 0.62x (issue 37)."""
    got = yields_read(profile)
    if not got or not demands:
        return None
    others = _at({k: k * (1 - s) / s for k, s in got.items() if s > 0}, len(demands))
    if sum(demands) + others <= cores:
        return None
    low, high = 0.0, cores
    for _ in range(60):
        level = (low + high) / 2
        used = sum(min(d, level) for d in demands) + others * min(1.0, level)
        low, high = (level, high) if used < cores else (low, level)
    kept = sum(min(d, low) for d in demands)
    return None if kept >= sum(demands) - 1e-6 else kept / cores


def _host_cores(result: FitResult) -> float | None:
    """The cores of the one node a solved side runs on (``None`` for a fleet of several)."""
    if len(result.nodes) != 1 or result.nodes[0].count != 1:
        return None
    return result.nodes[0].cores_capacity


def threads_of(groups: Iterable[Placement]) -> float:
    """Threads replica ``groups`` keep runnable at most: each replica's calls at once (its
    ``threads``, else 1), counting only replicas planned at least `BUSY_CORES` of CPU."""
    return float(sum(p.replicas * (p.threads or 1) for p in _busy(groups)))


def processes_of(groups: Iterable[Placement]) -> float:
    """Processes replica ``groups`` run that `threads_of` counts: one per replica."""
    return float(sum(p.replicas for p in _busy(groups)))


def _busy(groups: Iterable[Placement]) -> Iterator[Placement]:
    """The CPU groups planned at least `BUSY_CORES` a replica."""
    return (p for p in groups if p.cores >= BUSY_CORES and is_cpu_class(p.device_class))


def settled_ceiling(profile: PipelineProfile, solve_at: Callable[[float], FitResult]
                    ) -> tuple[float, FitResult]:
    """The highest ceiling a side's own plan bears out, and that plan.

    A plan's share of a busy host grows with the threads it keeps runnable
    (`share_ceiling`), and the threads it runs grow with the share it is planned at.  From
    the share the most processes read got, each step solves at the ceiling (``solve_at``),
    counts the plan's threads (`busy_threads`) and lowers the ceiling to what they get,
    until the plan bears its ceiling out (at most `SETTLE_STEPS` re-solves).  From the
    one-process figure, one replica planned at its share never shows that four get more
    (the demo beside a spinning core, issue 37: 0.29x the best monolith of four).  Without
    share readings: `core_ceiling` and one solve."""
    most = max(profile.share_readings, default=1)
    ceiling = share_ceiling(profile, most, most)
    result = solve_at(ceiling)
    for _ in range(SETTLE_STEPS):
        claimed = borne(profile, result)
        if claimed >= ceiling - 1e-3:
            break
        ceiling = claimed
        result = solve_at(ceiling)
    return ceiling, result


def trimmed_threads(profile: PipelineProfile, ceiling: float, base: FitResult,
                    resolve: Callable[[FitResult], FitResult], mip_gap: float) -> FitResult:
    """``base`` re-solved by ``resolve`` with each threaded replica sized to the items/s it
    carries, where that keeps its throughput within ``mip_gap`` and its threads still claim
    ``ceiling`` (`share_ceiling`); else ``base``.

    A threaded replica is first given the threads that would carry the most one replica
    alone could; where the cores are shared among several, each carries less and the rest
    only hold items in flight.  Beside a busy core the demo's fused plan ran 2 x 8 threads
    at 30 ms and 2 x 16 at 150 ms, at 0.178 CPU-s a page where 2 processes of one item at a
    time used 0.136 and 2 x 4 threads 0.146, and reached 0.89x and 0.81x of those."""
    if not any(p.threads for p in base.replicas):
        return base
    fewer = resolve(base)
    if fewer.throughput < (1 - mip_gap) * base.throughput or \
            borne(profile, fewer) < ceiling - 1e-3:
        return base
    return fewer


def free_readings(profile: PipelineProfile) -> list[tuple[float, float]]:
    """Every reading the profile took of the share of its cores others left, each with its
    weight: each pass's windows (`BatchMeasurement.others_readings`), else the pass's own
    figure, weighted as the run-queue wait is (its unit's multiplicity times its CPU and
    queued seconds per item, shared among the pass's windows).  A unit that mostly sleeps
    asks for little of a core, so others take what it leaves and its readings say little of
    what the plan's CPU work would get (``bench/fit_quality.py``'s io_service: its fetch's
    windows read 0-9% free where its CPU units' read 14-34%)."""
    m, free = 1.0, []
    for u in profile.units:
        for b in u.batches:
            taken = b.others_readings or ([] if b.others_share is None else [b.others_share])
            weight = m * (b.cpu_s + b.queued_s) / max(len(taken), 1)
            free += [(1.0 - share, weight) for share in taken if weight > 0]
        m *= u.output_ratio
    return free


def _least_queued(u: UnitProfile) -> float:
    """Run-queue seconds per CPU second of the unit's least-waiting pass (its own figure
    where no pass was kept)."""
    passes = [b for b in u.batches if b.cpu_s > 0] or [u.at_batch(u.batch_size)]
    shares = [b.queued_s / b.cpu_s for b in passes if b.cpu_s > 0]
    return min(shares) if shares else 0.0


def quantile(weighted: list[tuple[float, float]], q: float) -> float:
    """The ``q`` quantile of (value, weight) pairs: the least value whose weight, with all
    below it, reaches ``q`` of the whole."""
    ordered = sorted(weighted)
    total = sum(w for _, w in ordered)
    seen = 0.0
    for value, w in ordered:
        seen += w
        if seen >= q * total - 1e-12:
            return value
    return ordered[-1][0]
