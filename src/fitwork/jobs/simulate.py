"""Event-driven fleet simulation: pipelines arrive and finish; a policy re-fits at each event.

Time jumps from event to event (an arrival, a departure; events at one instant are taken
together, one re-fit for them). Between events every running pipeline's rate is constant,
as the last re-fit set it. Five policies, all on the same co-fit core
(`fitwork.jobs.cofit`, fair objective: weighted max-min of each pipeline's rate over its rate
alone under the same policy, relaxed, re-solved at every arrival and departure):

- ``fitwork``: the units of every running pipeline co-fitted across every node type, fluid
  replicas (a replica is allocated exactly while it is busy);
- ``job-level``: Gavel's placement as it runs: each pipeline in whole-pipeline BUNDLES (one
  GPU plus the node type's cores and memory per GPU, every unit inside, `sim_bundle`), the
  number of bundles fractional and time-shared across node types (a pipeline is on one type
  at a time); a bundle whose stages do not match its node type's shape idles part of it;
- ``static``: each team owns its weight's share of every node type (team weight = the sum of
  its pipelines' weights in the trace) and runs its pipelines there in bundles, as job-level;
- ``job-level-fluid`` and ``static-fluid``: the same placements with fluid unit replicas
  (each unit sized on its own inside the node type, busy / allocated 1 by construction): the
  strongest forms of the two, reported beside to show what the bundling costs.

Every policy alike holds a pipeline to the devices its trace line asked for (``max_gpus``,
the Philly job's scale factor, as Gavel allocates a job its requested GPUs): one quota row on
its devices over every class (job-level and static time-share a job across types, so on
average too it holds at most that many).

Per device class the simulation accounts device-seconds allocated and busy, so utilization is
reported as busy / allocated, allocated / owned, and busy / owned. Identical running pipelines
(same units and weight) are one spec with a count in the model (exact in the LP by symmetry),
so a re-fit's size follows the number of pipeline shapes running, not pipelines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from fitwork.hardware.fleet import Fleet
from fitwork.jobs.cofit import JobSpec, Offer, alone_rates, cofit
from fitwork.jobs.sim_bundle import Bundle, bundle_use, bundles_of
from fitwork.jobs.sim_inputs import (
    Shape,
    TraceLine,
    class_use,
    missing_unit,
    owned,
    pools,
    shape_of,
)

Policy = Literal["fitwork", "job-level", "static", "job-level-fluid", "static-fluid"]
POLICIES: tuple[str, ...] = ("fitwork", "job-level", "static", "job-level-fluid",
                             "static-fluid")
BUNDLED = frozenset({"job-level", "static"})
"""Policies that place pipelines in whole-pipeline bundles (`sim_bundle`)."""
WHOLE = frozenset({"job-level", "static", "job-level-fluid"})
"""Policies whose pipelines run on one node type at a time (time shares across types)."""
SILOED = frozenset({"static", "static-fluid"})
"""Policies that give each team its slice of every node type."""
Use = tuple[dict[str, float], dict[str, float]]
"""(allocated, busy) per device class (CPU classes: cores)."""
DONE = 1e-9
"""A pipeline with this share of its items left is done (float residue of rate x time)."""


@dataclass
class Refit:
    """One re-fit: HiGHS seconds, the model's size and gap, what it covered."""

    seconds: float
    variables: int
    rows: int
    gap: float
    running: int
    specs: int


@dataclass
class Fitter:
    """A policy's re-fit: rates per running pipeline, devices allocated and busy per class."""

    policy: Policy
    fleet: Fleet
    shapes: list[Shape]
    team_share: dict[str, float]
    time_limit: float = 10.0
    mip_gap: float = 1e-4
    bundles: list[tuple[Bundle, ...]] = field(default_factory=list)
    """Per shape, its bundles (bundled policies only)."""
    _alone: dict[tuple[str, int], float] = field(default_factory=dict)
    _team: dict[str, tuple[dict[str, float], Use]] = field(default_factory=dict)

    def offers(self, s: int) -> list[Offer]:
        """Shape ``s``'s offers under this policy: its bundles', or its units'."""
        if self.policy in BUNDLED:
            return [b.offer for b in self.bundles[s]]
        return list(self.shapes[s].offers)

    def spec(self, s: int, name: str, count: int = 1) -> JobSpec:
        """Shape ``s`` as a co-fit job (a bundle is one unit at the pipeline's source rate)."""
        shape = self.shapes[s]
        multiplicity = (1.0,) if self.policy in BUNDLED else shape.multiplicity
        return JobSpec(name, multiplicity, shape.weight, quota=shape.quota, count=count,
                       whole=self.policy in WHOLE)

    def share(self, team: str) -> float:
        """The share of every node type the policy gives ``team``'s pipelines."""
        return self.team_share[team] if self.policy in SILOED else 1.0

    def alone(self, team: str, s: int) -> float:
        """T* of shape ``s`` under this policy (siloed: alone in the team's slice)."""
        key = (team if self.policy in SILOED else "", s)
        if key not in self._alone:
            offers = self.offers(s)
            self._alone[key] = alone_rates(
                [self.spec(s, "alone")], offers, pools(self.fleet, self.share(team)),
                integral=False, time_limit=self.time_limit, mip_gap=self.mip_gap)[0] \
                if offers else 0.0
        return self._alone[key]

    def _solve(self, running: dict[str, tuple[int, str]], team: str,
               refits: list[Refit]) -> tuple[dict[str, float], Use]:
        """Co-fit ``running`` (id -> (shape, team)) on the whole fleet or a team's slice."""
        groups: dict[int, list[str]] = {}
        for pid, (s, _) in running.items():
            groups.setdefault(s, []).append(pid)
        specs: list[JobSpec] = []
        offers: list[Offer] = []
        alone: list[float] = []
        for g, (s, ids) in enumerate(groups.items()):
            specs.append(self.spec(s, f"shape-{s}", len(ids)))
            offers += [replace(o, job=g) for o in self.offers(s)]
            alone.append(self.alone(team, s))
        plan = cofit(specs, offers, pools(self.fleet, self.share(team)), objective="fair",
                     alone=alone, integral=False, fractional=True,
                     time_limit=self.time_limit, mip_gap=self.mip_gap)
        refits.append(Refit(plan.seconds, plan.size.variables, plan.size.rows, plan.gap,
                            len(running), len(specs)))
        rates = {pid: plan.jobs[g].rate for g, ids in enumerate(groups.values()) for pid in ids}
        if self.policy in BUNDLED:
            kinds = [b for s in groups for b in self.bundles[s]]
            return rates, bundle_use(kinds, plan.x)
        held = class_use(offers, plan.x, self.fleet)
        return rates, (held, held)

    def refit(self, running: dict[str, tuple[int, str]], changed: set[str],
              refits: list[Refit]) -> tuple[dict[str, float], Use]:
        """Rates per running pipeline and devices allocated and busy per class, after a
        change in the teams ``changed`` (siloed policies re-fit only those teams' slices)."""
        if self.policy not in SILOED:
            return self._solve(running, "", refits) if running else ({}, ({}, {}))
        for team in changed:
            mine = {pid: v for pid, v in running.items() if v[1] == team}
            self._team[team] = self._solve(mine, team, refits) if mine else ({}, ({}, {}))
        rates: dict[str, float] = {}
        allocated: dict[str, float] = {}
        busy: dict[str, float] = {}
        for team_rates, (team_allocated, team_busy) in self._team.values():
            rates.update(team_rates)
            for total, part in ((allocated, team_allocated), (busy, team_busy)):
                for cls, v in part.items():
                    total[cls] = total.get(cls, 0.0) + v
        return rates, (allocated, busy)


@dataclass
class Books:
    """What the simulation accumulates between events."""

    allocated: dict[str, float] = field(default_factory=dict)
    busy: dict[str, float] = field(default_factory=dict)
    jain_time: float = 0.0
    jain_area: float = 0.0
    finish: dict[str, float] = field(default_factory=dict)

    def advance(self, dt: float, use: Use, shares: Sequence[float]) -> None:
        """Account ``dt`` seconds of the current allocation (device-seconds per class)."""
        for books, now in ((self.allocated, use[0]), (self.busy, use[1])):
            for cls, v in now.items():
                books[cls] = books.get(cls, 0.0) + v * dt
        if shares and dt > 0:
            total = sum(shares)
            squares = sum(s * s for s in shares)
            jain = total * total / (len(shares) * squares) if squares > 0 else 1.0
            self.jain_area += jain * dt
            self.jain_time += dt


def team_shares(lines: Sequence[TraceLine]) -> dict[str, float]:
    """Each team's share of the fleet under ``static``: its pipelines' weights over all."""
    weights: dict[str, float] = {}
    for line in lines:
        weights[line.team] = weights.get(line.team, 0.0) + line.weight
    total = sum(weights.values())
    return {team: w / total for team, w in weights.items()}


@dataclass
class Prepared:
    """The trace as the policies see it: shapes, their bundles, each line's shape index,
    and the lines rejected (id -> why)."""

    shapes: list[Shape] = field(default_factory=list)
    bundles: list[tuple[Bundle, ...]] = field(default_factory=list)
    of_line: list[int] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)


def _prepare(fleet: Fleet, lines: Sequence[TraceLine], policy: Policy,
             gpu_cap: bool) -> Prepared:
    """Shapes and bundles of ``lines`` on ``fleet``; what ``policy`` cannot place, rejected."""
    out = Prepared()
    index: dict[str, int] = {}
    for line in lines:
        shape = shape_of(line, fleet, gpu_cap)
        if shape.key not in index:
            index[shape.key] = len(out.shapes)
            out.shapes.append(shape)
            out.bundles.append(bundles_of(line, fleet))
        s = index[shape.key]
        out.of_line.append(s)
        unit = missing_unit(line, shape)
        if unit is not None:
            out.rejected[line.id] = f"unit {unit} fits no node type of the fleet"
        elif policy in BUNDLED and not out.bundles[s]:
            out.rejected[line.id] = ("no node type holds a bundle of every unit (a device "
                                     "class all its GPU units run on, and the cores)")
    return out


def simulate(fleet: Fleet, lines: Sequence[TraceLine], policy: Policy, *,
             arrival_scale: float = 1.0, time_limit: float = 10.0,
             mip_gap: float = 1e-4, gpu_cap: bool = True) -> dict[str, Any]:
    """Replay ``lines`` (arrival times divided by ``arrival_scale``) under ``policy``;
    ``gpu_cap``: each pipeline holds at most its line's ``max_gpus`` devices at once, under
    every policy alike (False: no cap, the rule before the cap)."""
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
    prepared = _prepare(fleet, lines, policy, gpu_cap)
    shapes, of_line, rejected = prepared.shapes, prepared.of_line, prepared.rejected
    fitter = Fitter(policy, fleet, shapes, team_shares(lines), time_limit, mip_gap,
                    prepared.bundles)
    reference = Fitter("fitwork", fleet, shapes, {}, time_limit, mip_gap)
    order = sorted((i for i, line in enumerate(lines) if line.id not in rejected),
                   key=lambda i: (lines[i].arrival_s, i))
    arrival = {lines[i].id: lines[i].arrival_s / arrival_scale for i in order}
    left = {lines[i].id: float(lines[i].items) for i in order}
    running: dict[str, tuple[int, str]] = {}
    rates: dict[str, float] = {}
    use: Use = ({}, {})
    books = Books()
    refits: list[Refit] = []
    by_id = {lines[i].id: i for i in order}
    now, nxt = 0.0, 0
    while nxt < len(order) or running:
        soon = arrival[lines[order[nxt]].id] if nxt < len(order) else math.inf
        ends = [now + left[p] / rates[p] for p in running if rates.get(p, 0.0) > 0]
        then = min([soon, *ends])
        if not math.isfinite(then):
            break  # nothing runs and nothing arrives: the rest cannot finish
        dt = then - now
        shares = [rates.get(p, 0.0) / (reference.alone("", v[0]) * lines[by_id[p]].weight)
                  for p, v in running.items()]
        books.advance(dt, use, shares)
        changed: set[str] = set()
        for p in list(running):
            rate = rates.get(p, 0.0)
            ends_at = now + left[p] / rate if rate > 0 else math.inf
            left[p] -= rate * dt
            if ends_at <= then * (1 + 1e-12) or left[p] <= DONE * lines[by_id[p]].items:
                books.finish[p] = then
                changed.add(running.pop(p)[1])
        now = then
        while nxt < len(order) and arrival[lines[order[nxt]].id] <= now:
            line = lines[order[nxt]]
            running[line.id] = (of_line[order[nxt]], line.team)
            changed.add(line.team)
            nxt += 1
        rates, use = fitter.refit(running, changed, refits)
    return _summary(fleet, lines, policy, arrival, books, refits, rejected, reference,
                    of_line, by_id, now)


def _class_figures(books: Books, cls: str, owned: float, makespan: float) -> dict[str, float]:
    """One device class's utilization: busy / allocated, allocated / owned, busy / owned."""
    allocated = books.allocated.get(cls, 0.0)
    busy = books.busy.get(cls, 0.0)
    seconds = owned * makespan
    return {"owned": owned,
            "busy_over_allocated": busy / allocated if allocated > 0 else 0.0,
            "allocated_over_owned": allocated / seconds if seconds > 0 else 0.0,
            "busy_over_owned": busy / seconds if seconds > 0 else 0.0}


def _percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank) of ``values``; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def _summary(fleet: Fleet, lines: Sequence[TraceLine], policy: str, arrival: dict[str, float],
             books: Books, refits: list[Refit], rejected: dict[str, str], reference: Fitter,
             of_line: list[int], by_id: dict[str, int], end: float) -> dict[str, Any]:
    """The simulation's figures, as JSON-ready values."""
    start = min(arrival.values(), default=0.0)
    makespan = end - start
    completion = {p: books.finish[p] - arrival[p] for p in books.finish}
    capacity = owned(fleet)
    util = {cls: _class_figures(books, cls, n, makespan) for cls, n in capacity.items()}
    gpus = [c for c in capacity if not c.startswith("cpu")]
    gpu_owned = sum(capacity[c] for c in gpus) * makespan
    gpu_allocated = sum(books.allocated.get(c, 0.0) for c in gpus)
    per: list[dict[str, Any]] = []
    for p, seconds in completion.items():
        line = lines[by_id[p]]
        alone = reference.alone("", of_line[by_id[p]])
        per.append({"id": p, "team": line.team, "arrival_s": arrival[p],
                    "finish_s": books.finish[p], "completion_s": seconds,
                    "normalized_throughput": line.items / seconds / alone if seconds > 0 else 0.0})
    norm = [r["normalized_throughput"] for r in per]
    return {
        "policy": policy, "fleet": fleet.name, "pipelines": len(lines),
        "completed": len(completion), "rejected": rejected,
        "unfinished": sorted(set(arrival) - set(completion)),
        "avg_completion_s": sum(completion.values()) / len(completion) if completion else 0.0,
        "p99_completion_s": _percentile(list(completion.values()), 99),
        "makespan_s": makespan,
        "gpu_utilization": sum(books.busy.get(c, 0.0) for c in gpus) / gpu_owned
        if gpu_owned > 0 else 0.0,
        "gpu_allocated": gpu_allocated / gpu_owned if gpu_owned > 0 else 0.0,
        "gpu_busy_over_allocated": sum(books.busy.get(c, 0.0) for c in gpus) / gpu_allocated
        if gpu_allocated > 0 else 0.0,
        "utilization": util,
        "jain": books.jain_area / books.jain_time if books.jain_time > 0 else 1.0,
        "normalized_throughput": {"mean": sum(norm) / len(norm) if norm else 0.0,
                                  "p10": _percentile(norm, 10), "p50": _percentile(norm, 50),
                                  "p90": _percentile(norm, 90)},
        "refits": _refit_stats(refits),
        "bundled": policy in BUNDLED,
        "per_pipeline": per,
    }


def _refit_stats(refits: list[Refit]) -> dict[str, Any]:
    """Count, seconds (mean, p99, max) and the largest model of the re-fits."""
    if not refits:
        return {"count": 0}
    seconds = [r.seconds for r in refits]
    largest = max(refits, key=lambda r: (r.running, r.variables))
    return {"count": len(refits), "mean_s": sum(seconds) / len(seconds),
            "p99_s": _percentile(seconds, 99), "max_s": max(seconds),
            "max_gap": max(r.gap for r in refits),
            "largest": {"running": largest.running, "specs": largest.specs,
                        "variables": largest.variables, "rows": largest.rows,
                        "gap": largest.gap, "seconds": largest.seconds}}
