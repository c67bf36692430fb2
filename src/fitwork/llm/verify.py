"""Simulation in the loop: replay each plan at the rate it promises, re-provision what misses.

The planner's rates come from queue models (M/G/c prefill at the trace's busiest minute, a
decode batch bound); the trace's shorter bursts and the one shared prefill queue are not in
them.  So every plan is replayed (`fitwork.llm.sim.simulate_llm`) at the rate it promises:
``min_cost`` at the trace's rate, ``max_goodput`` at its planned goodput.  Where fewer than
`ATTAIN` of the requests finish within both SLOs, the phase that missed (prefill for TTFT,
decode for TPOT, the colocated replicas for either) has its replicas' planned rate held to
a share of what the queue model allowed, and the plan is solved again: ``min_cost`` then buys
more replicas of that phase, ``max_goodput`` moves GPUs to it and promises less.  As
DistServe searches placements with its simulator, but bounded: at most `MAX_ROUNDS` rounds
and `BUDGET_S` seconds per plan.  A ``min_cost`` target the re-provisioned plan cannot reach
says so in one line (`fitwork.llm.plan.CannotServe`): the most the fleet serves.

The replay runs the whole trace when it has at most `MAX_REPLAY` requests (the shipped
traces: conv 19,366, code 8,819), else its first `MAX_REPLAY`; `ReplayCheck.window` says
which.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from fitwork.hardware.fleet import Fleet
from fitwork.llm.options import SLO
from fitwork.llm.phases import PhaseBook, default_book
from fitwork.llm.plan import (
    CannotServe,
    Knobs,
    LLMPlan,
    Objective,
    PlanSet,
    _classes,
    cannot_serve,
    plan_colocated,
    plan_split,
)
from fitwork.llm.result import Mode, ReplayCheck
from fitwork.llm.sim import SimResult, simulate_llm
from fitwork.llm.trace import Trace

ATTAIN = 0.9
"""Share of requests within both SLOs a replayed plan must reach to hold (the SLOs are
90th percentiles)."""
MAX_ROUNDS = 8
BUDGET_S = 60.0
MAX_REPLAY = 50_000
SHARPEST = 0.6
"""The most one round cuts a phase's planned rate to (a share of what it was)."""


def replay_window(trace: Trace) -> tuple[Trace, str]:
    """The part of ``trace`` a check replays, and its description."""
    if len(trace) <= MAX_REPLAY:
        return trace, f"whole trace ({len(trace):,} requests)"
    return trace.head(MAX_REPLAY), f"first {MAX_REPLAY:,} of {len(trace):,} requests"


def promised(plan: LLMPlan, trace: Trace) -> Trace:
    """``trace`` at the rate ``plan`` promises: its goodput (``min_cost``: the trace's rate)."""
    if plan.objective == "min_cost" or plan.goodput <= 0:
        return trace
    return trace.scaled(plan.goodput / trace.rate)


AIM = 0.93
"""What a re-provisioned phase aims its own share within its SLO at (above `ATTAIN`, so
both together reach it)."""


def _next(points: list[tuple[float, float]]) -> float:
    """The next log-share of its queue-model rate for a phase, from the (log-share,
    attainment) of the rounds so far: interpolated where two rounds bracket `AIM`, else the
    secant through the last two (a heuristic cut after one round), at most `SHARPEST` per
    round and at least 3%."""
    x, a = points[-1]
    lo_cut, hi_cut = x + math.log(SHARPEST), x + math.log(0.97)
    below = [p for p in points if p[1] < AIM]
    above = [p for p in points if p[1] >= AIM]
    if below and above:
        (x1, a1), (x2, a2) = min(below, key=lambda p: p[0]), max(above, key=lambda p: p[0])
        t = (AIM - a1) / (a2 - a1) if a2 != a1 else 0.5
        return x1 + min(0.9, max(0.1, t)) * (x2 - x1)
    if len(points) >= 2:
        (x1, a1), (x2, a2) = points[-2], points[-1]
        slope = (a2 - a1) / (x2 - x1) if x2 != x1 else 0.0
        if slope < -1e-6:
            return min(hi_cut, max(lo_cut, x2 + (AIM - a2) / slope))
    return min(hi_cut, max(lo_cut, x + math.log(max(1e-3, 1.0 - 1.5 * (AIM - a)))))


def _phases(plan: LLMPlan, sim: SimResult) -> dict[str, float]:
    """Phase -> its share within its SLO, for the phases to re-provision."""
    if plan.mode == "colocated":
        return {"colocated": sim.attained}
    both = {"prefill": sim.ttft_attained, "decode": sim.tpot_attained}
    out = {p: a for p, a in both.items() if a < AIM}
    if not out:  # each alone within, both together short: the lower one, at the joint share
        out[min(both, key=lambda p: both[p])] = sim.attained
    return out


def _check(plan: LLMPlan, sim: SimResult, run: Trace, window: str, rounds: int,
           seconds: float, history: list[str]) -> ReplayCheck:
    return ReplayCheck(rate=run.rate, requests=len(run), window=window,
                       attained=sim.attained, ttft_attained=sim.ttft_attained,
                       tpot_attained=sim.tpot_attained, ttft_p90=sim.ttft.get("p90"),
                       tpot_p90=sim.tpot.get("p90"), goodput=sim.goodput, target=ATTAIN,
                       holds=sim.attained >= ATTAIN, rounds=rounds, seconds=seconds,
                       history=list(history))


def hold(make: Callable[[dict[str, float]], LLMPlan], trace: Trace, *,
         book: PhaseBook | None = None, seed: int = 0, rounds: int = MAX_ROUNDS,
         budget_s: float = BUDGET_S) -> LLMPlan:
    """Plan (``make(derate)``), replay at the promised rate, re-provision the phase that
    missed, repeat: the first plan that holds.  Once ``rounds`` or ``budget_s`` run out, the
    last plan tried promises what it holds at instead (`_promise_less`).  A ``min_cost``
    target beyond the re-provisioned fleet raises `CannotServe`, as does a ``min_cost`` plan
    that holds only below the trace's rate."""
    book = book or default_book()
    start = time.perf_counter()
    derate: dict[str, float] = {}
    points: dict[str, list[tuple[float, float]]] = {}
    history: list[str] = []
    window_trace, window = replay_window(trace)
    for k in range(1, rounds + 1):
        plan = make(dict(derate))
        if not plan.feasible:
            if history:
                return plan.model_copy(update={
                    "bottleneck": f"{plan.bottleneck} (re-provisioned after replay: "
                                  f"{history[-1]})"})
            return plan
        run = promised(plan, window_trace)
        sim = simulate_llm(plan, run, seed=seed, book=book)
        history.append(f"round {k}: {plan.goodput:.3g} req/s promised, {sim.attained:.1%} "
                       f"within both SLOs (TTFT {sim.ttft_attained:.1%}, TPOT "
                       f"{sim.tpot_attained:.1%})"
                       + (f", rates held to {_held(derate)}" if derate else ""))
        seconds = time.perf_counter() - start
        if sim.attained >= ATTAIN:
            return plan.model_copy(update={"replay": _check(plan, sim, run, window, k,
                                                            seconds, history)})
        if k == rounds or seconds > budget_s:
            return _promise_less(plan, window_trace, window, trace, k, history, start,
                                 book, seed)
        for phase, attained in _phases(plan, sim).items():
            points.setdefault(phase, []).append((math.log(derate.get(phase, 1.0)), attained))
            derate[phase] = math.exp(_next(points[phase]))
    raise AssertionError("unreachable")  # pragma: no cover


LESS = (0.9, 0.8, 0.65, 0.5, 0.35, 0.2, 0.1)
"""Shares of its promised rate a plan that did not hold within its rounds is replayed at,
largest first, for `_promise_less`."""


def _promise_less(plan: LLMPlan, window_trace: Trace, window: str, trace: Trace, rounds: int,
                  history: list[str], start: float, book: PhaseBook, seed: int) -> LLMPlan:
    """The plan as it is, promising the largest share of its rate (`LESS`, then one bisection
    step) at which it holds in replay.  ``min_cost`` promises the trace's rate, so a plan
    that holds only below it raises `CannotServe` with the rate it holds at."""
    base = promised(plan, window_trace)
    ok, fail, found = 0.0, 1.0, None
    for share in LESS:
        sim = simulate_llm(plan, base.scaled(share), seed=seed, book=book)
        if sim.attained >= ATTAIN:
            ok, found = share, sim
            break
        fail = share
    if found is not None:
        mid = (ok + fail) / 2
        sim = simulate_llm(plan, base.scaled(mid), seed=seed, book=book)
        if sim.attained >= ATTAIN:
            ok, found = mid, sim
    history.append(f"after {rounds} round(s) short of {ATTAIN:.0%}: "
                   + (f"holds at x{ok:.2f} of the rate it promised" if found is not None
                      else f"does not hold even at x{LESS[-1]:g} of it"))
    if plan.objective == "min_cost":
        raise cannot_serve(trace, ok * base.rate, "the best plan found holds in replay only "
                           f"below its rate ({'; '.join(history[-2:])})")
    if found is None:
        ok = LESS[-1]
        found = simulate_llm(plan, base.scaled(ok), seed=seed, book=book)
    run = base.scaled(ok)
    goodput = plan.goodput * ok
    tokens = plan.tokens_per_s * ok
    cost = plan.cost_per_hour / (tokens * 3600) * 1e6 if tokens > 0 else None
    return plan.model_copy(update={
        "goodput": goodput, "tokens_per_s": tokens, "cost_per_million_tokens": cost,
        "replay": _check(plan, found, run, window, rounds, time.perf_counter() - start,
                         history)})


def _held(derate: dict[str, float]) -> str:
    return ", ".join(f"{p} x{f:.2f}" for p, f in sorted(derate.items()))


def plan_held(model: str, trace: Trace, fleet: Fleet, slo: SLO, *,
              objective: Objective = "max_goodput", book: PhaseBook | None = None,
              time_limit: float = 10.0, mip_gap: float = 0.01, burst: float | None = None,
              seed: int = 0, rounds: int = MAX_ROUNDS, budget_s: float = BUDGET_S) -> PlanSet:
    """`fitwork.llm.plan.plan_llm` with every plan held in replay (`hold`): the phase-split
    plan and the colocated baselines (each class, the best mix).  A plan the fleet cannot
    serve under the SLO comes back infeasible, its ``bottleneck`` the `CannotServe` line."""
    from fitwork.llm.options import Mix
    from fitwork.llm.plan import _empty

    book = book or default_book()
    book.get(model, next(iter(_classes(fleet)), "H100-SXM"), 8)  # unknown model: say so
    burst = trace.burstiness() if burst is None else burst
    kw: Knobs = {"book": book, "time_limit": time_limit, "mip_gap": mip_gap, "burst": burst}
    mix = Mix.of(trace)
    Make = Callable[[dict[str, float], Objective], LLMPlan]

    def attempt(make: Make, goal: Objective) -> tuple[LLMPlan | None, str]:
        try:
            plan = hold(lambda d: make(d, goal), trace, book=book, seed=seed, rounds=rounds,
                        budget_s=budget_s)
        except CannotServe as exc:  # the split plan's min_cost target beyond the fleet
            return None, str(exc)
        if not plan.feasible and plan.bottleneck.startswith("cannot serve"):
            return None, plan.bottleneck
        return plan, ""

    def held(make: Make, mode: Mode, label: str) -> LLMPlan:
        plan, why = attempt(make, objective)
        if plan is not None:
            return plan
        if objective == "min_cost":  # the most this layout holds in replay, not the queue
            most, _ = attempt(make, "max_goodput")  # model's figure
            if most is not None and most.feasible and most.replay and most.replay.holds:
                why = str(cannot_serve(trace, most.goodput, "the most such a plan holds "
                                       f"in replay, {ATTAIN:.0%} of requests within both "
                                       "SLOs"))
        return _empty(mode, label, model, trace, mix, slo, objective, why)

    split = held(lambda d, o: plan_split(model, trace, fleet, slo, derate=d, objective=o,
                                         **kw),
                 "split", "phase-split")
    names = sorted(_classes(fleet))
    groups: list[list[str] | None] = [[n] for n in names]
    if len(names) > 1:
        groups.append(None)

    def colocated_on(group: list[str] | None) -> Make:
        return lambda d, o: plan_colocated(model, trace, fleet, slo, classes=group, derate=d,
                                           objective=o, **kw)

    colocated = []
    for group in groups:
        label = "colocated " + ("+".join(group) if group else "best mix")
        colocated.append(held(colocated_on(group), "colocated", label))
    return PlanSet(split=split, colocated=colocated)
