"""The LLM planner: prefill -> decode as a two-unit pipeline fitted by fitwork's solver.

A request is two units: ``prefill`` (one per request) sends its KV cache to ``decode`` (the
bytes between the units, ``kv_bytes_per_token x mean prompt``, against the fleet's network
rows).  Every (device class, tensor-parallel degree) that holds the model and meets the SLOs
is offered to the solver as one demand of the unit on that class (`fitwork.llm.options`):
its rate per replica (prefill: the utilization at which the M/G/c TTFT p90 meets the target;
decode: the largest batch whose KV fits and whose step meets the TPOT target), TP whole GPUs
held, and the max batch.  The demands of one class are not exclusive
(``UnitDemand.exclusive=False``), so the solver (`fitwork.fit.solve`, HiGHS with a time
limit and a relative gap) chooses the class, the TP degree (several side by side where that
packs better), the replicas and so the max batch of every pool: ``max_goodput`` maximises
requests/s, ``min_cost`` minimises the hourly price of the trace's rate.  The colocated
baseline is one unit ``serve`` (`colocated_option`) fitted the same way on each single class
and on all of them (the best mix).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TypedDict

import numpy as np

from fitwork.fit import ClassDemand, FitResult, TargetUnreachable, UnitDemand, solve
from fitwork.fit.errors import FitInputError, UnitFitsNowhere
from fitwork.fit.inputs import solver_nodes
from fitwork.hardware.catalog import catalog
from fitwork.hardware.fleet import Fleet
from fitwork.llm.options import (
    SLO,
    Mix,
    Option,
    colocated_option,
    colocated_tpot,
    decode_option,
    prefill_option,
)
from fitwork.llm.phases import TP_DEGREES, LLMInputError, PhaseBook, PhaseModel, default_book
from fitwork.llm.queueing import QUANTILE, mgc_wait_quantile
from fitwork.llm.result import ClassFigures, LLMPlan, Mode, Objective, PlanSet, Pool
from fitwork.llm.trace import Trace

LLM_FLEETS = ("a100", "h100", "mixed")


class Knobs(TypedDict):
    """The solver's settings every plan of a set is made with."""

    book: PhaseBook
    time_limit: float
    mip_gap: float
    burst: float


def load_fleet(ref: str) -> Fleet:
    """A fleet by path, or one shipped in ``fitwork/llm/fleets`` (a100, h100, mixed), or a
    fitwork example fleet by name."""
    from importlib import resources
    from pathlib import Path

    from fitwork.hardware.fleet import FleetError, example_fleet

    if Path(ref).is_file():
        return Fleet.from_yaml(ref)
    if ref in LLM_FLEETS:
        with resources.as_file(resources.files("fitwork.llm").joinpath("fleets",
                                                                        f"{ref}.yaml")) as p:
            return Fleet.from_yaml(p)
    try:
        return example_fleet(ref)
    except FleetError:
        raise LLMInputError(f"fleet {ref!r}: no such file, and not a shipped fleet "
                            f"({', '.join(LLM_FLEETS)}) or a fitwork example fleet") from None


def _classes(fleet: Fleet) -> dict[str, int]:
    """Accelerator classes of the fleet and the most of each one node holds."""
    out: dict[str, int] = {}
    for node in fleet.node_types:
        for name, count in node.devices.items():
            out[name] = max(out.get(name, 0), count)
    return out


def _network(fleet: Fleet, device_class: str) -> float | None:
    """The slowest network of the node types offering ``device_class`` (None: not limited)."""
    nets = [n.network_bandwidth for n in fleet.node_types if device_class in n.devices]
    known = [n for n in nets if n is not None]
    return None if len(known) < len(nets) or not nets else float(min(known))


class CannotServe(LLMInputError):
    """A rate the fleet cannot serve under the SLO; ``achievable``: the most it serves (mean
    requests/s of the trace's mix)."""

    def __init__(self, message: str, achievable: float) -> None:
        super().__init__(message)
        self.achievable = achievable


def cannot_serve(trace: Trace, achievable: float, why: str = "") -> CannotServe:
    """The one line for a rate beyond the fleet: ``achievable`` in mean requests/s."""
    return CannotServe(f"cannot serve x{trace.scale:g} under the SLO on this fleet: at most "
                       f"{achievable:.3g} req/s ({trace.name} offers {trace.rate:.3g} req/s"
                       f"{'; ' + why if why else ''}); scale the trace down (--rate-scale) "
                       "or add nodes", achievable)


def _derated(found: list[Option], factor: float) -> list[Option]:
    if factor >= 1.0:
        return found
    return [replace(o, rate=o.rate * factor,
                    limit=f"{o.limit}; held to x{factor:.2f} of that after replay")
            if o.rate > 0 else o for o in found]


def options(book: PhaseBook, model: str, fleet: Fleet, mix: Mix, slo: SLO, phase: str,
            servers: dict[tuple[str, int], int] | None = None,
            derate: dict[str, float] | None = None) -> dict[str, list[Option]]:
    """Every (class, TP) option of ``phase`` on the fleet's classes, by class (prefill:
    ``servers[class, tp]`` replicas of it share the queue, 1 when not given; ``derate[phase]``
    scales the rates, as the replay loop asks)."""
    out: dict[str, list[Option]] = {}
    for name, per_node in _classes(fleet).items():
        found = []
        for tp in TP_DEGREES:
            if tp > per_node:
                continue
            pm = book.get(model, name, tp)
            if phase == "prefill":
                if pm.kv_tokens() <= 0:
                    continue
                found.append(prefill_option(pm, mix, slo, (servers or {}).get((name, tp), 1)))
            elif phase == "decode":
                found.append(decode_option(pm, mix, slo, _network(fleet, name)))
            else:
                found.append(colocated_option(pm, mix, slo))
        out[name] = _derated(found, (derate or {}).get(phase, 1.0))
    return out


Chosen = dict[tuple[str, str], list[Option]]
"""Per (unit, class), the options the unit offers there, in the order of its demands (the
solver's ``Placement.option`` indexes it)."""


def _demand(o: Option, bytes_out: float) -> ClassDemand:
    return ClassDemand(rate=o.rate, cores=0.0, memory=0, device_share=float(o.model.tp),
                       bytes_out_per_item=bytes_out,
                       batch_size=o.max_batch if o.phase != "prefill" else None)


def _unit(name: str, opts: dict[str, list[Option]], bytes_out: float
          ) -> tuple[UnitDemand | None, Chosen]:
    """The unit with every runnable (class, TP) option as a demand on its class, none
    exclusive of the others: the solver picks TP degrees as it picks classes (None: no
    option runs)."""
    classes: dict[str, ClassDemand] = {}
    alternatives: dict[str, list[ClassDemand]] = {}
    chosen: Chosen = {}
    for device_class, found in opts.items():
        runnable = sorted((o for o in found if o.rate > 0), key=lambda o: o.model.tp)
        if not runnable:
            continue
        demands = [_demand(o, bytes_out) for o in runnable]
        classes[device_class] = demands[0]
        if len(demands) > 1:
            alternatives[device_class] = demands[1:]
        chosen[name, device_class] = runnable
    if not classes:
        return None, chosen
    return UnitDemand(name=name, classes=classes, alternatives=alternatives,
                      exclusive=False), chosen


def _unmet(phase: str, opts: dict[str, list[Option]], slo: SLO) -> LLMInputError:
    every = [o for v in opts.values() for o in v]
    if not every:
        return LLMInputError(f"{phase}: no class of the fleet holds the model's weights at any "
                             f"TP degree in {TP_DEGREES}; add larger or more GPUs per node")
    ttft = min(every, key=lambda o: o.best_ttft)
    tpot = min(every, key=lambda o: o.best_tpot)
    best = []
    if phase != "decode" and math.isfinite(ttft.best_ttft):
        best.append(f"ttft_p90 {ttft.best_ttft:.3g}s ({ttft.model.device_class} "
                    f"TP{ttft.model.tp}, no queueing)")
    if phase != "prefill" and math.isfinite(tpot.best_tpot):
        best.append(f"tpot_p90 {tpot.best_tpot * 1e3:.3g}ms ({tpot.model.device_class} "
                    f"TP{tpot.model.tp}, batch 1)")
    return LLMInputError(f"SLO {slo.text()} cannot be met by {phase} on any class of the "
                         f"fleet; best achievable: {', '.join(best) or 'none'}; relax the SLO "
                         "or add faster GPUs")


def _solve(units: list[UnitDemand], fleet: Fleet, objective: Objective, trace: Trace,
           burst: float, time_limit: float, mip_gap: float) -> FitResult:
    nodes = solver_nodes(fleet, catalog())
    if objective == "max_goodput":
        return solve(units, nodes, objective="max_throughput", time_limit=time_limit,
                     mip_gap=mip_gap)
    try:
        return solve(units, nodes, objective="min_cost", target=trace.rate * burst,
                     time_limit=time_limit, mip_gap=mip_gap)
    except TargetUnreachable as exc:
        raise cannot_serve(trace, exc.achievable / burst,
                           f"provisioned x{burst:.2f} for its busiest minute") from None


def _figures(pools: Sequence[Pool], book: PhaseBook, model: str, mix: Mix, burst: float
             ) -> list[ClassFigures]:
    """The three utilization figures (and memory held) per class, at the pools' mean load
    (their planned load over ``burst``)."""
    acc: dict[str, dict[str, float]] = {}
    for pool in pools:
        pm = book.get(model, pool.device_class, pool.tp)
        per = pool.load / pool.replicas / burst
        n = pm.shape.params
        kv = pm.shape.kv_bytes_per_token
        flops = bytes_ = busy = held = 0.0
        if pool.phase in ("prefill", "colocated"):
            service = pm.prefill_s(mix.prompt, 1.0)
            busy += per * float(service.mean())
            flops += per * 2 * n * mix.mean_prompt / pool.tp
            bytes_ += per * (2 * n + kv * mix.mean_prompt) / pool.tp
        if pool.phase in ("decode", "colocated"):
            batch, step = _decode_batch(pm, mix, per, pool.phase == "colocated")
            steps = per * mix.mean_output / max(batch, 1e-9)
            busy += min(1.0, steps * step)
            flops += per * mix.mean_output * 2 * n / pool.tp
            bytes_ += steps * (2 * n + kv * batch * mix.mean_context) / pool.tp
            held = kv * batch * mix.reserve_tokens
        row = acc.setdefault(pool.device_class, {"gpus": 0, "busy": 0.0, "flops": 0.0,
                                                 "bytes": 0.0, "mem": 0.0, "cap": 0.0})
        row["gpus"] += pool.gpus
        row["cap"] += min(1.0, per / pool.rate_per_replica) * pool.gpus
        row["busy"] += min(1.0, busy) * pool.gpus
        row["flops"] += min(flops, pm.device.fp16_flops) * pool.gpus
        row["bytes"] += min(bytes_, pm.device.memory_bandwidth or math.inf) * pool.gpus
        row["mem"] += (pm.weight_bytes + held) * pool.replicas
    out = []
    for name, row in sorted(acc.items()):
        dev = catalog().get(name)
        g = row["gpus"]
        out.append(ClassFigures(
            device_class=name, gpus=int(g), busy=row["busy"] / g,
            compute=row["flops"] / g / dev.fp16_flops, capacity=row["cap"] / g,
            bandwidth=row["bytes"] / g / (dev.memory_bandwidth or math.inf),
            memory=min(1.0, row["mem"] / (g * dev.memory_bytes))))
    return out


def _decode_batch(pm: PhaseModel, mix: Mix, per: float, colocated: bool
                  ) -> tuple[float, float]:
    """Mean sequences in a replica's batch at ``per`` requests/s (Little's law on a step that
    grows with the batch), and the step at that batch."""
    d0, d1, d2 = pm.decode_linear(mix.mean_context)
    slope = d1 + d2 * mix.mean_context
    stall = 1.0
    if colocated:
        stall = max(1e-3, 1.0 - per * float(pm.prefill_s(mix.prompt, 1.0).mean()))
    work = per * mix.mean_output / stall
    batch = work * d0 / max(1e-9, 1.0 - work * slope)
    return batch, d0 + slope * batch


def _predicted(pools: Sequence[Pool], book: PhaseBook, model: str, mix: Mix
               ) -> tuple[float | None, float | None]:
    """Predicted TTFT and TPOT p90 at the planned loads (the worst pool of each)."""
    ttft: list[float] = []
    tpot: list[float] = []
    for pool in pools:
        pm = book.get(model, pool.device_class, pool.tp)
        per = pool.load / pool.replicas
        service = pm.prefill_s(mix.prompt, 1.0)
        mean, second = float(service.mean()), float((service ** 2).mean())
        q = float(np.quantile(service, QUANTILE))
        if pool.phase in ("prefill", "colocated"):
            rho = min(0.999, per * mean)
            extra = 0.0
            if pool.phase == "colocated":
                extra = _decode_batch(pm, mix, per, True)[1]
            servers = pool.replicas if pool.phase == "prefill" else 1
            ttft.append(q + mgc_wait_quantile(rho, mean, second, servers) + extra)
        if pool.phase in ("decode", "colocated"):
            step = _decode_batch(pm, mix, per, pool.phase == "colocated")[1]
            if pool.phase == "colocated":
                tpot.append(float(colocated_tpot(np.array([step]), np.array([per]), mean,
                                                 mix.output)[0]))
                continue
            many = mix.output > 1
            xfer = mix.prompt[many] * pm.shape.kv_bytes_per_token / pool.network \
                if pool.network and pool.phase == "decode" else np.zeros(int(many.sum()))
            spread = float(np.quantile(xfer / (mix.output[many] - 1), QUANTILE)) \
                if many.any() else 0.0
            tpot.append(step + spread)
    return (max(ttft) if ttft else None), (max(tpot) if tpot else None)


def _plan(units: list[UnitDemand], chosen: Chosen, *, mode: Mode,
          label: str, model: str, trace: Trace, mix: Mix, fleet: Fleet, slo: SLO,
          objective: Objective, book: PhaseBook, time_limit: float, mip_gap: float,
          burst: float, derate: dict[str, float] | None = None) -> LLMPlan:
    result = _solve(units, fleet, objective, trace, burst, time_limit, mip_gap)
    nets = {n.name: n.network_bandwidth for n in fleet.node_types}
    pools = []
    for p in result.replicas:
        o = chosen[p.unit, p.device_class][p.option]
        pools.append(Pool(phase=p.unit if p.unit != "serve" else "colocated",
                          device_class=p.device_class, node_type=p.node_type, tp=o.model.tp,
                          replicas=p.replicas, max_batch=o.max_batch, rate_per_replica=o.rate,
                          load=p.items_per_s, source=o.model.source, limit=o.limit,
                          network=nets.get(p.node_type)))
    goodput = result.throughput / burst
    tokens = goodput * (mix.mean_prompt + mix.mean_output)
    cost = result.cost_per_hour
    ttft, tpot = _predicted(pools, book, model, mix)
    unit = result.bottleneck or ""
    limits = sorted({f"{p.device_class} TP{p.tp}: {p.limit}" for p in pools
                     if (p.phase == unit or (unit == "serve" and p.phase == "colocated"))})
    bottleneck = f"{unit}: {result.bottleneck_reason}" + (f"; per replica {'; '.join(limits)}"
                                                          if limits else "")
    return LLMPlan(
        model=model, trace=trace.name, mode=mode, label=label, objective=objective,
        slo={"ttft_p90": slo.ttft_p90, "tpot_p90": slo.tpot_p90}, feasible=goodput > 0,
        goodput=goodput, tokens_per_s=tokens, cost_per_hour=cost,
        cost_per_million_tokens=cost / (tokens * 3600) * 1e6 if tokens > 0 else None,
        pools=pools, utilization=_figures(pools, book, model, mix, burst), ttft_p90=ttft,
        tpot_p90=tpot, bottleneck=bottleneck,
        transferred=sorted({f"{p.device_class} TP{p.tp}: {p.source}" for p in pools
                            if p.source != "measured"}),
        solver={"status": result.status, "method": result.method, "gap": result.gap,
                "bound": result.bound, "lp_bound": result.lp_bound,
                "seconds": result.solve_seconds},
        mean_prompt=mix.mean_prompt, mean_output=mix.mean_output, burst=burst,
        capacity=result.throughput, trace_rate=trace.rate,
        stack=book.stack_of(model, [(p.device_class, p.tp) for p in pools]),
        derate={k: v for k, v in (derate or {}).items() if v < 1.0})


def _empty(mode: Mode, label: str, model: str, trace: Trace, mix: Mix, slo: SLO,
           objective: Objective, why: str) -> LLMPlan:
    return LLMPlan(model=model, trace=trace.name, mode=mode, label=label, objective=objective,
                   slo={"ttft_p90": slo.ttft_p90, "tpot_p90": slo.tpot_p90}, feasible=False,
                   goodput=0.0, tokens_per_s=0.0, cost_per_hour=0.0,
                   cost_per_million_tokens=None, pools=[], utilization=[], ttft_p90=None,
                   tpot_p90=None, bottleneck=why, transferred=[], solver={},
                   mean_prompt=mix.mean_prompt, mean_output=mix.mean_output,
                   trace_rate=trace.rate)


def plan_split(model: str, trace: Trace, fleet: Fleet, slo: SLO, *,
               objective: Objective = "max_goodput", book: PhaseBook | None = None,
               time_limit: float = 10.0, mip_gap: float = 0.01,
               burst: float | None = None, derate: dict[str, float] | None = None) -> LLMPlan:
    """The phase-split plan: prefill and decode pools fitted together by the solver.

    ``burst`` (None: the trace's `Trace.burstiness`; 1.0: a steady rate) is how far above
    its mean rate the plan provisions; ``derate`` (phase -> factor < 1) holds that phase's
    replicas below their queue-model rate (the replay loop of `fitwork.llm.verify` sets it).
    A ``min_cost`` rate beyond the fleet raises `CannotServe`."""
    book = book or default_book()
    mix = Mix.of(trace)
    burst = trace.burstiness() if burst is None else burst

    def attempt(servers: dict[tuple[str, int], int], goal: Objective
                ) -> tuple[LLMPlan, dict[str, int]]:
        units, chosen = split_units(book, model, fleet, mix, slo, servers, derate)
        try:
            plan = _plan(units, chosen, mode="split", label="phase-split", model=model,
                         trace=trace, mix=mix, fleet=fleet, slo=slo, objective=goal,
                         book=book, time_limit=time_limit, mip_gap=mip_gap, burst=burst,
                         derate=derate)
        except (UnitFitsNowhere, FitInputError) as exc:
            raise LLMInputError(f"the phase-split plan does not fit the fleet: {exc}") from None
        return plan, _prefill_gpus(plan)

    best: LLMPlan | None = None
    refused: CannotServe | None = None
    try:
        best, first = attempt({}, objective)
    except CannotServe as exc:  # one queue per replica is too pessimistic; size it by the
        refused = exc  # prefill GPUs the fleet's most goodput would use, then ask again
        first = attempt({}, "max_goodput")[1]
    lo, hi, share = 0.0, 1.0, 1.0
    for _ in range(REFINE_ROUNDS):
        assumed = {(c, tp): max(1, int(g * share) // tp) for c, g in first.items()
                   for tp in TP_DEGREES}
        try:
            plan, gpus = attempt(assumed, objective)
        except CannotServe as exc:
            if refused is None or exc.achievable > refused.achievable:
                refused = exc
            hi = share
            share = (lo + hi) / 2
            continue
        if all(gpus[p.device_class] >= assumed.get((p.device_class, p.tp), 1) * p.tp
               for p in plan.pools if p.phase == "prefill"):
            lo = share
            if best is None or _better(plan, best, objective):
                best = plan
            if share == 1.0:
                break
        else:
            hi = share
        share = (lo + hi) / 2
    if best is None:
        assert refused is not None
        raise refused
    return best


def _prefill_gpus(plan: LLMPlan) -> dict[str, int]:
    """GPUs of each class the plan's prefill pools hold."""
    out: dict[str, int] = {}
    for pool in plan.pools:
        if pool.phase == "prefill":
            out[pool.device_class] = out.get(pool.device_class, 0) + pool.gpus
    return out


REFINE_ROUNDS = 5
"""Rounds of the prefill queue refinement: the first plan assumes one replica per queue
(M/G/1); later rounds assume that a share of the prefill GPUs that plan chose on each class
share one queue, as GPUs / TP replicas at each TP degree (M/G/c), bisecting on the share, and
keep a plan only where each class holds at least the prefill GPUs its queue model assumed for
the TP degrees the plan runs there."""


def _better(a: LLMPlan, b: LLMPlan, objective: Objective) -> bool:
    if objective == "max_goodput":
        return a.goodput > b.goodput * (1 + 1e-9)
    return a.cost_per_hour < b.cost_per_hour * (1 - 1e-9)


def split_units(book: PhaseBook, model: str, fleet: Fleet, mix: Mix, slo: SLO,
                servers: dict[tuple[str, int], int] | None = None,
                derate: dict[str, float] | None = None) -> tuple[list[UnitDemand], Chosen]:
    """The two units the solver fits, each with a demand per runnable (class, TP) option
    (prefill: ``servers[class, tp]`` replicas share its queue, 1 when not given), and the
    options by (unit, class) in the order of those demands."""
    units, chosen = [], {}
    for phase in ("prefill", "decode"):
        opts = options(book, model, fleet, mix, slo, phase, servers, derate)
        every = [o for found in opts.values() for o in found]
        out = every[0].model.shape.kv_bytes_per_token * mix.mean_prompt \
            if phase == "prefill" and every else 0.0
        unit, found = _unit(phase, opts, out)
        if unit is None:
            raise _unmet(phase, opts, slo)
        units.append(unit)
        chosen.update(found)
    return units, chosen


def plan_colocated(model: str, trace: Trace, fleet: Fleet, slo: SLO, *,
                   classes: Sequence[str] | None = None, objective: Objective = "max_goodput",
                   book: PhaseBook | None = None, time_limit: float = 10.0,
                   mip_gap: float = 0.01, burst: float | None = None,
                   derate: dict[str, float] | None = None) -> LLMPlan:
    """The colocated baseline on ``classes`` (all of the fleet's: the best mix); an empty,
    infeasible plan saying why where it cannot serve (``derate`` as `plan_split` takes it)."""
    book = book or default_book()
    mix = Mix.of(trace)
    opts = options(book, model, fleet, mix, slo, "colocated", derate=derate)
    if classes is not None:
        opts = {k: v for k, v in opts.items() if k in set(classes)}
    label = "colocated " + ("+".join(sorted(opts)) if classes is not None else "best mix")
    unit, chosen = _unit("serve", opts, 0.0)
    if unit is None:
        why = str(_unmet("colocated", opts, slo)) if any(opts.values()) else \
            "no class of the fleet holds the model"
        return _empty("colocated", label, model, trace, mix, slo, objective, why)
    try:
        return _plan([unit], chosen, mode="colocated",
                     label=label, model=model, trace=trace, mix=mix, fleet=fleet, slo=slo,
                     objective=objective, book=book, time_limit=time_limit, mip_gap=mip_gap,
                     burst=trace.burstiness() if burst is None else burst, derate=derate)
    except (LLMInputError, UnitFitsNowhere, FitInputError) as exc:
        return _empty("colocated", label, model, trace, mix, slo, objective, str(exc))


def plan_llm(model: str, trace: Trace, fleet: Fleet, slo: SLO, *,
             objective: Objective = "max_goodput", book: PhaseBook | None = None,
             time_limit: float = 10.0, mip_gap: float = 0.01,
             burst: float | None = None) -> PlanSet:
    """The phase-split plan and the colocated baselines (each single class, the best mix)."""
    book = book or default_book()
    book.get(model, next(iter(_classes(fleet)), "H100-SXM"), 8)  # unknown model: say so
    burst = trace.burstiness() if burst is None else burst
    split = plan_split(model, trace, fleet, slo, objective=objective, book=book,
                       time_limit=time_limit, mip_gap=mip_gap, burst=burst)
    kw: Knobs = {"book": book, "time_limit": time_limit, "mip_gap": mip_gap, "burst": burst}
    names = sorted(_classes(fleet))
    colocated = [plan_colocated(model, trace, fleet, slo, classes=[n], objective=objective,
                                **kw)
                 for n in names]
    if len(names) > 1:
        colocated.append(plan_colocated(model, trace, fleet, slo, objective=objective, **kw))
    return PlanSet(split=split, colocated=colocated)
