"""Replay a trace through an LLM plan: discrete events, iteration-level continuous batching.

Phase-split plans: every prefill replica takes prompts one at a time from ONE FCFS queue (an
idle replica of the fastest class first); a finished prefill emits the first token (TTFT),
picks a decode replica by the power of two choices (two drawn in proportion to their planned
rate, the one with fewer requests outstanding per batch slot wins; seeded), and sends its KV
cache over that replica's link (node bandwidth, one transfer at a time, FCFS).  A decode
replica admits waiting requests, FIFO, at iteration boundaries while its batch is under the
plan's max batch and its KV memory holds the request's prompt + output (reserved whole; a
request larger than the whole KV room is dropped).  Each iteration emits one token per
sequence and takes ``d0 + d1 N + d2 sum(context)`` (the phase model, linear in the batch
near the trace's context), so between admissions and completions a replica jumps whole runs
of iterations in closed form: iteration k of a run takes s0 + g k with g = d2 N.  Colocated
plans: requests go to a replica at arrival (power of two choices), and each admission runs
the prompt's prefill at the iteration boundary, pausing the batch.

Per request: TTFT = first token - arrival; TPOT = (last token - first token) / (output - 1).
Busy time per replica (a prefill running, or a non-empty batch), FLOPs and HBM bytes per GPU
give the three utilization figures per pool, in total and per time bin.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from fitwork.llm.phases import LLMInputError, PhaseBook, PhaseModel, default_book
from fitwork.llm.plan import LLMPlan
from fitwork.llm.result import Pool
from fitwork.llm.trace import Trace

BIN_S = 60.0
"""Width of the busy-over-time bins: a minute, or a thirtieth of a replay shorter than 30."""


class _Replica:
    """One decode (or colocated) replica's batch, advanced lazily to a given time."""

    __slots__ = ("assigned", "batch", "busy", "bytes", "capacity", "coloc", "d0", "d1", "d2",
                 "ends", "finished", "flops", "kv", "kv_free", "link", "link_free",
                 "max_batch", "now", "params2", "pool", "prefill", "seg_bytes", "seg_flops",
                 "starts", "steps",
                 "sum_ctx", "tp", "waiting")

    def __init__(self, pool: int, pm: PhaseModel, max_batch: int, ctx: float,
                 link: float | None, coloc: bool, prefill: np.ndarray | None) -> None:
        self.pool, self.max_batch, self.coloc, self.prefill = pool, max_batch, coloc, prefill
        self.d0, self.d1, self.d2 = pm.decode_linear(ctx)
        self.capacity = self.kv_free = pm.kv_tokens()
        self.kv = pm.shape.kv_bytes_per_token
        self.params2 = 2 * pm.shape.params
        self.tp = pm.tp
        self.link, self.link_free = link, 0.0
        self.now = 0.0
        self.steps = 0
        self.sum_ctx = 0.0
        self.batch: list[tuple[int, int]] = []
        self.waiting: deque[int] = deque()
        self.assigned = self.finished = 0
        self.busy = self.flops = self.bytes = 0.0
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.seg_flops: list[float] = []
        self.seg_bytes: list[float] = []


@dataclass
class RequestTimes:
    """Per-request arrays the replay fills in (seconds; NaN where it never happened):
    ``ready`` when the request could join a decode batch (KV arrived), ``first`` its first
    token, ``admitted`` when a batch took it, ``last`` its last token, ``transfer`` the KV
    transfer time including the wait for the link."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    ready: np.ndarray
    first: np.ndarray
    admitted: np.ndarray
    last: np.ndarray
    transfer: np.ndarray


def _steps_within(s0: float, g: float, span: float) -> int:
    """Most whole iterations k with k s0 + g k (k - 1) / 2 <= span."""
    if span <= 0:
        return 0
    if g <= 1e-15:
        k = int(span / s0)
    else:
        b = s0 - g / 2
        k = int((-b + math.sqrt(b * b + 2 * g * span)) / g)
    while k > 0 and k * s0 + g * k * (k - 1) / 2 > span * (1 + 1e-12):
        k -= 1
    while (k + 1) * s0 + g * (k + 1) * k / 2 <= span:
        k += 1
    return k


def _admit(r: _Replica, run: RequestTimes, dropped: list[int]) -> None:
    """Admit waiting requests that are ready at ``r.now`` while batch and KV allow."""
    waiting = r.waiting
    while waiting:
        i = waiting[0]
        if run.ready[i] > r.now:
            return
        need = int(run.prompt[i] + run.output[i])
        if need > r.capacity:
            waiting.popleft()
            dropped.append(i)
            r.finished += 1
            continue
        if len(r.batch) >= r.max_batch or need > r.kv_free:
            return
        waiting.popleft()
        run.admitted[i] = r.now
        p = float(run.prompt[i])
        if r.coloc:
            assert r.prefill is not None
            took = float(r.prefill[i])
            r.starts.append(r.now)
            r.now += took
            r.ends.append(r.now)
            r.busy += took
            flops, nbytes = r.params2 * p / r.tp, (r.params2 + r.kv * p) / r.tp
            r.flops += flops
            r.bytes += nbytes
            r.seg_flops.append(flops)
            r.seg_bytes.append(nbytes)
            run.first[i] = r.now
        if run.output[i] <= 1:
            run.last[i] = run.first[i]
            r.finished += 1
            continue
        r.kv_free -= need
        r.sum_ctx += p
        heapq.heappush(r.batch, (r.steps + int(run.output[i]) - 1, i))


def _advance(r: _Replica, t: float, run: RequestTimes, dropped: list[int]) -> None:
    """Run ``r`` through every iteration that ends by ``t`` (``inf``: until it drains)."""
    while True:
        _admit(r, run, dropped)
        n = len(r.batch)
        if n == 0:
            if r.waiting and run.ready[r.waiting[0]] <= t:
                r.now = max(r.now, float(run.ready[r.waiting[0]]))
                continue
            if t != math.inf:
                r.now = max(r.now, t)
            return
        s0 = r.d0 + r.d1 * n + r.d2 * r.sum_ctx
        g = r.d2 * n
        k = r.batch[0][0] - r.steps
        if r.waiting and len(r.batch) < r.max_batch:
            nxt = float(run.ready[r.waiting[0]])
            need = int(run.prompt[r.waiting[0]] + run.output[r.waiting[0]])
            if need <= r.kv_free or need > r.capacity:
                within = _steps_within(s0, g, nxt - r.now)
                reach = within * s0 + g * within * (within - 1) / 2
                k = min(k, within if reach >= nxt - r.now else within + 1)
        if t != math.inf:
            k = min(k, _steps_within(s0, g, t - r.now))
            if k == 0:
                return
        k = max(k, 1)
        took = k * s0 + g * k * (k - 1) / 2
        r.starts.append(r.now)
        r.now += took
        r.ends.append(r.now)
        r.busy += took
        flops = r.params2 * n * k / r.tp
        nbytes = (k * r.params2 + r.kv * (k * r.sum_ctx + n * k * (k - 1) / 2)) / r.tp
        r.flops += flops
        r.bytes += nbytes
        r.seg_flops.append(flops)
        r.seg_bytes.append(nbytes)
        r.steps += k
        r.sum_ctx += n * k
        while r.batch and r.batch[0][0] <= r.steps:
            _, i = heapq.heappop(r.batch)
            run.last[i] = r.now
            r.kv_free += int(run.prompt[i] + run.output[i])
            r.sum_ctx -= float(run.prompt[i] + run.output[i] - 1)
            r.finished += 1


class PoolFigures(BaseModel):
    """One pool in the replay: fitwork's three utilization figures, ``busy`` (fleet
    utilization), ``compute`` (MFU: FLOPs over peak FLOP/s x GPU-seconds) and ``capacity``
    (server capacity: requests it served per second over its replicas' planned rate), with
    ``bandwidth`` (HBM bytes over peak); busy, compute and bandwidth also per time bin
    (``SimResult.bin_s``; a run's FLOPs and bytes spread over the bins it spans).

    Every figure is a share of what exists, at most 1 by construction: ``capacity`` is
    carried over planned, capped at 1; a pool that carried more than its plan said it would
    has ``over_plan`` > 1 (carried / planned), which says the plan under-predicted its load
    (the one prefill queue sends work to whichever replica is idle)."""

    phase: str
    device_class: str
    tp: int
    replicas: int
    busy: float
    compute: float
    capacity: float
    bandwidth: float
    busy_over_time: list[float]
    compute_over_time: list[float] = []
    bandwidth_over_time: list[float] = []
    over_plan: float = 0.0


class SimResult(BaseModel):
    """The replay's figures: latency distributions, SLO attainment, goodput, utilization."""

    plan: str
    trace: str
    requests: int
    completed: int
    dropped: int
    duration_s: float
    offered_s: float
    seed: int
    ttft: dict[str, float]
    tpot: dict[str, float]
    slo: dict[str, float]
    ttft_attained: float
    tpot_attained: float
    attained: float
    goodput: float
    meets_p90: bool
    admission_wait_p90: float
    transfer_mean: float
    burst_window_s: float = 60.0
    burst: float = 1.0
    burst_short: float = 1.0
    pools: list[PoolFigures]
    bin_s: float
    wall_s: float
    ttft_values: list[float] = []
    tpot_values: list[float] = []


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {}
    q = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(q[0]), "p90": float(q[1]),
            "p99": float(q[2]), "max": float(values.max())}


def _bins(starts: np.ndarray, ends: np.ndarray, width: float, count: int) -> np.ndarray:
    """Busy seconds per bin of the intervals [start, end)."""
    out = np.zeros(count + 1)
    if len(starts) == 0:
        return out[:count]
    first = np.minimum((starts // width).astype(int), count)
    last = np.minimum((ends // width).astype(int), count)
    same = first == last
    np.add.at(out, first[same], ends[same] - starts[same])
    cross = ~same
    np.add.at(out, first[cross], (first[cross] + 1) * width - starts[cross])
    np.add.at(out, last[cross], ends[cross] - last[cross] * width)
    for a, b in zip(first[cross], last[cross], strict=True):
        if b > a + 1:
            out[a + 1:b] += width
    return out[:count]


def _share(value: float) -> float:
    """A utilization figure as a share of what exists: within [0, 1]."""
    return float(min(1.0, max(0.0, value)))


def _spread(starts: np.ndarray, ends: np.ndarray, amounts: np.ndarray, width: float,
            count: int) -> np.ndarray:
    """``amounts`` done over [start, end) each, spread over the bins in proportion to time."""
    out = np.zeros(count)
    if len(starts) == 0:
        return out
    span = np.maximum(ends - starts, 1e-12)
    rate = amounts / span
    edges = np.arange(count + 1) * width
    cum = np.zeros(count + 1)  # amount done by each edge, summed over the runs
    for i in range(count + 1):
        cum[i] = float((rate * np.clip(edges[i] - starts, 0.0, span)).sum())
    out = np.diff(cum)
    out[-1] += float(amounts.sum()) - cum[-1]  # work past the last edge
    return out


def simulate_llm(plan: LLMPlan, trace: Trace, *, seed: int = 0, book: PhaseBook | None = None,
             keep_values: bool = False) -> SimResult:
    """Replay ``trace`` through ``plan`` (see the module docstring); deterministic under seed.

    ``keep_values`` keeps every request's TTFT and TPOT in the result (for CDFs)."""
    return replay(plan, trace, seed=seed, book=book, keep_values=keep_values)[0]


def replay(plan: LLMPlan, trace: Trace, *, seed: int = 0, book: PhaseBook | None = None,
           keep_values: bool = False) -> tuple[SimResult, RequestTimes]:
    """`simulate_llm`, with the per-request times."""
    import time

    start = time.perf_counter()
    if not plan.pools:
        raise LLMInputError(f"plan {plan.label}: no pools to replay (infeasible plan)")
    book = book or default_book()
    n = len(trace)
    run = RequestTimes(arrival=trace.arrival.astype(float), prompt=trace.prompt.astype(np.int64),
               output=trace.output.astype(np.int64), ready=np.full(n, np.inf),
               first=np.full(n, np.nan), admitted=np.full(n, np.nan), last=np.full(n, np.nan),
               transfer=np.zeros(n))
    ctx = float((run.output * (run.prompt + (run.output - 1) / 2)).sum() / run.output.sum())
    rng = np.random.default_rng(seed)
    dropped: list[int] = []
    split = plan.mode == "split"
    models = {k: book.get(plan.model, p.device_class, p.tp) for k, p in enumerate(plan.pools)}
    replicas, w = _replicas(plan, models, run, ctx)
    picks = rng.choice(len(replicas), size=(n, 2), p=w)
    slots = [max(1, r.max_batch) for r in replicas]
    prefill_busy: dict[int, list[tuple[float, float, int]]] = {}
    prefill_work = {k: [0.0, 0.0, 0.0] for k in range(len(plan.pools))}

    def route(i: int, t: float) -> _Replica:
        a, b = int(picks[i, 0]), int(picks[i, 1])
        ra, rb = replicas[a], replicas[b]
        _advance(ra, t, run, dropped)
        if b != a:
            _advance(rb, t, run, dropped)
            if (rb.assigned - rb.finished) / slots[b] < (ra.assigned - ra.finished) / slots[a]:
                ra = rb
        ra.assigned += 1
        return ra

    if split:
        first = _prefill(plan, models, run, prefill_busy, prefill_work)
        order = np.argsort(first, kind="stable")
        for i in order.tolist():
            t = float(first[i])
            r = route(i, t)
            size = float(run.prompt[i]) * r.kv
            begin = max(t, r.link_free)
            done = begin + (size / r.link if r.link else 0.0)
            r.link_free = done
            run.transfer[i] = done - t
            run.ready[i] = done
            r.waiting.append(i)
    else:
        for i in range(n):
            t = float(run.arrival[i])
            r = route(i, t)
            run.ready[i] = t
            r.waiting.append(i)
    for r in replicas:
        _advance(r, math.inf, run, dropped)
    return _result(plan, trace, run, replicas, prefill_busy, prefill_work, models, dropped,
                   seed, time.perf_counter() - start, keep_values), run


def _replicas(plan: LLMPlan, models: dict[int, PhaseModel], run: RequestTimes,
              ctx: float) -> tuple[list[_Replica], np.ndarray]:
    """Every decoding replica of the plan and the share of requests routed to each."""
    split = plan.mode == "split"
    replicas: list[_Replica] = []
    weights: list[float] = []
    for k, pool in enumerate(plan.pools):
        if pool.phase not in ("decode", "colocated"):
            continue
        pm = models[k]
        pre = None if split else pm.prefill_s(run.prompt.astype(float), 1.0)
        for _ in range(pool.replicas):
            replicas.append(_Replica(k, pm, max(1, pool.max_batch), ctx, pool.network,
                                     not split, pre))
            weights.append(pool.rate_per_replica)
    return replicas, np.array(weights) / sum(weights)


def _prefill(plan: LLMPlan, models: dict[int, PhaseModel], run: RequestTimes,
             busy: dict[int, list[tuple[float, float, int]]],
             work: dict[int, list[float]]) -> np.ndarray:
    """One FCFS queue over every prefill replica; returns each request's first-token time."""
    servers = []  # (rank: faster first, pool)
    service = {}
    for k, pool in enumerate(plan.pools):
        if pool.phase != "prefill":
            continue
        service[k] = models[k].prefill_s(run.prompt.astype(float), 1.0)
        mean = float(service[k].mean())
        servers += [(mean, k)] * pool.replicas
        busy[k] = []
    servers.sort()
    idle = list(range(len(servers)))  # heap of ranks
    heapq.heapify(idle)
    running: list[tuple[float, int]] = []
    first = np.empty(len(run.arrival))
    served = np.empty(len(run.arrival), dtype=np.int64)
    arrival = run.arrival
    for i in range(len(arrival)):
        t = float(arrival[i])
        while running and running[0][0] <= t:
            heapq.heappush(idle, heapq.heappop(running)[1])
        if idle:
            s = heapq.heappop(idle)
            begin = t
        else:
            begin, s = heapq.heappop(running)
        k = servers[s][1]
        end = begin + float(service[k][i])
        heapq.heappush(running, (end, s))
        first[i] = end
        served[i] = s
        busy[k].append((begin, end, i))
    for k in busy:
        mine = np.zeros(len(arrival), dtype=bool)
        mine[[i for i, s in enumerate(served) if servers[s][1] == k]] = True
        p = run.prompt[mine].astype(float)
        flops, nbytes = models[k].prefill_work(p, np.ones_like(p))
        work[k] = [float(service[k][mine].sum()), float(flops.sum()), float(nbytes.sum())]
    run.first[:] = first
    return first


def _result(plan: LLMPlan, trace: Trace, run: RequestTimes, replicas: list[_Replica],
            prefill_busy: dict[int, list[tuple[float, float, int]]],
            prefill_work: dict[int, list[float]], models: dict[int, PhaseModel],
            dropped: list[int], seed: int, wall: float, keep: bool) -> SimResult:
    n = len(run.arrival)
    ok = ~np.isnan(run.last)
    ok[dropped] = False
    ttft = run.first - run.arrival
    many = ok & (run.output > 1)
    tpot = np.full(n, np.nan)
    tpot[many] = (run.last[many] - run.first[many]) / (run.output[many] - 1)
    slo_ttft, slo_tpot = plan.slo["ttft_p90"], plan.slo["tpot_p90"]
    ttft_ok = ok & (ttft <= slo_ttft)
    tpot_ok = ok & ((run.output <= 1) | (np.nan_to_num(tpot, nan=np.inf) <= slo_tpot))
    good = ttft_ok & tpot_ok
    end = float(np.nanmax(run.last[ok])) if ok.any() else trace.duration
    span = max(end - float(run.arrival[0]), 1e-9)
    width = min(BIN_S, max(1.0, span / 30))
    # The plan's burst window (a minute of the trace it was planned on), at this rate.
    window = 60.0 * (plan.trace_rate / trace.rate if plan.trace_rate > 0 else 1.0)
    count = max(1, math.ceil(span / width))
    admitted = run.admitted - run.ready
    t_q = _quantiles(ttft[ok])
    p_q = _quantiles(tpot[many])
    t0 = float(run.arrival[0])
    pools = [_pool_figures(k, pool, run, replicas, prefill_busy, prefill_work, models,
                           (t0, span, width, count))
             for k, pool in enumerate(plan.pools)]
    return SimResult(
        plan=plan.label, trace=trace.name, requests=n, completed=int(ok.sum()),
        dropped=len(dropped), duration_s=span, offered_s=trace.duration, seed=seed,
        ttft=t_q, tpot=p_q,
        slo=dict(plan.slo), ttft_attained=float(ttft_ok.mean()),
        tpot_attained=float(tpot_ok.mean()), attained=float(good.mean()),
        goodput=float(good.sum()) / trace.duration,
        meets_p90=bool(t_q and p_q and t_q["p90"] <= slo_ttft and p_q["p90"] <= slo_tpot),
        admission_wait_p90=float(np.nanpercentile(admitted, 90)) if ok.any() else 0.0,
        transfer_mean=float(run.transfer.mean()), burst_window_s=window,
        burst=trace.burstiness(window), burst_short=trace.burstiness(window / 6),
        pools=pools, bin_s=width, wall_s=wall,
        ttft_values=[float(v) for v in ttft[ok]] if keep else [],
        tpot_values=[float(v) for v in tpot[many]] if keep else [])


def _pool_figures(k: int, pool: Pool, run: RequestTimes, replicas: list[_Replica],
                  prefill_busy: dict[int, list[tuple[float, float, int]]],
                  prefill_work: dict[int, list[float]], models: dict[int, PhaseModel],
                  bins: tuple[float, float, float, int]) -> PoolFigures:
    """One pool's utilization figures over the replay (each bounded by what exists)."""
    t0, span, width, count = bins
    dev = models[k].device
    if pool.phase == "prefill":
        iv = np.array(prefill_busy.get(k, []), dtype=float).reshape(-1, 3)
        starts, ends = iv[:, 0], iv[:, 1]
        p = run.prompt[iv[:, 2].astype(np.int64)].astype(float)
        seg_flops, seg_bytes = models[k].prefill_work(p, np.ones_like(p))
        busy, flops, nbytes = prefill_work[k]
        served = len(iv)
    else:
        mine = [r for r in replicas if r.pool == k]
        starts = np.array([s for r in mine for s in r.starts])
        ends = np.array([e for r in mine for e in r.ends])
        seg_flops = np.array([f for r in mine for f in r.seg_flops])
        seg_bytes = np.array([b for r in mine for b in r.seg_bytes])
        busy = sum(r.busy for r in mine)
        flops = sum(r.flops for r in mine)
        nbytes = sum(r.bytes for r in mine)
        served = sum(r.finished for r in mine)
    seconds = span * pool.replicas
    over = _bins(starts - t0, ends - t0, width, count)
    peak = dev.fp16_flops * width * pool.replicas
    hbm = (dev.memory_bandwidth or math.inf) * width * pool.replicas
    carried = served / span / (pool.replicas * pool.rate_per_replica)
    return PoolFigures(
        phase=pool.phase, device_class=pool.device_class, tp=pool.tp,
        replicas=pool.replicas, busy=_share(busy / seconds),
        compute=_share(flops / seconds / dev.fp16_flops),
        capacity=_share(carried), over_plan=carried,
        bandwidth=_share(nbytes / seconds / (dev.memory_bandwidth or math.inf)),
        busy_over_time=[_share(v) for v in over / (width * pool.replicas)],
        compute_over_time=[_share(v) for v in
                           _spread(starts - t0, ends - t0, seg_flops, width, count) / peak],
        bandwidth_over_time=[_share(v) for v in
                             _spread(starts - t0, ends - t0, seg_bytes, width, count)
                             / hbm])


def compare(plan: LLMPlan, sim: SimResult) -> list[str]:
    """The planner's predictions beside the replay's, and which constraint the planner missed
    where they disagree."""
    offered = sim.requests / max(sim.offered_s, 1e-9)
    lines = [f"goodput      plan {plan.goodput:8.3f} req/s   replay {sim.goodput:8.3f} req/s "
             f"of {offered:.3f} offered ({sim.attained:.1%} of requests within both SLOs)"]
    for key, label in (("ttft_p90", "TTFT p90"), ("tpot_p90", "TPOT p90")):
        planned = plan.ttft_p90 if key == "ttft_p90" else plan.tpot_p90
        got = (sim.ttft if key == "ttft_p90" else sim.tpot).get("p90")
        lines.append(f"{label:12} plan {planned or 0:8.3f} s       replay {got or 0:8.3f} s   "
                     f"SLO {plan.slo[key]:g} s")
    if sim.dropped:
        lines.append(f"missed: {sim.dropped} request(s) need more KV than a replica holds "
                     "(prompt + output > KV room): the planner sizes batches on the mean")
    if sim.ttft.get("p90", 0) > plan.slo["ttft_p90"]:
        lines.append("missed: TTFT p90 over the SLO: prefill queued longer than the queue "
                     f"model (Poisson arrivals) says: the plan provisions x{plan.burst:.2f} "
                     f"the mean rate (the 99th-percentile {sim.burst_window_s:.3g}s window "
                     f"here: x{sim.burst:.2f}); windows a sixth as long reach "
                     f"x{sim.burst_short:.2f}"
                     + ("; prefills also wait for the decode iteration in progress"
                        if plan.mode == "colocated" else ""))
    if sim.tpot.get("p90", 0) > plan.slo["tpot_p90"]:
        why = []
        if sim.admission_wait_p90 > 0.05 * plan.slo["tpot_p90"]:
            why.append(f"requests waited for a batch slot or KV room (p90 "
                       f"{sim.admission_wait_p90:.3g}s): the batch bound or FILL share")
        if sim.transfer_mean > 0.05 * plan.slo["tpot_p90"]:
            why.append(f"KV transfer took {sim.transfer_mean:.3g}s on average (link contention)")
        if plan.mode == "colocated":
            why.append("prefills paused decode more often than the mean stall share")
        lines.append("missed: TPOT p90 over the SLO: " + ("; ".join(why) or
                                                          "decode batches ran fuller than "
                                                          "planned"))
    return lines
