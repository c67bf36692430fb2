"""`fitwork plan --jobs`: one fleet plan for every pipeline of a jobs file.

Each job is profiled (or its profile read) and fitted to the fleet ALONE, as `fitwork plan`
would: that plan's layout (split, or fused) and its rate on the whole fleet stand for the
job.  Then every unit of every admitted job is fitted at once (`fitwork.jobs.cofit`): one
MILP over units x device classes x node types, the capacity rows shared, each job's rate
normalised by what it gets alone on the whole fleet.  The fleet plan keeps, per job, its
options (what a replica holds and uses on each class), so a run re-fits on every arrival
and departure without profiling again (`refit`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from fitwork.document import Document
from fitwork.errors import InputError
from fitwork.fit.ceiling import core_ceiling
from fitwork.fit.plan import Plan, plan_for
from fitwork.fit.result import Placement as Replicas
from fitwork.fit.spec import is_cpu_class
from fitwork.hardware.fleet import Fleet
from fitwork.jobs.ceiling import busy_threads, session_cap, settle
from fitwork.jobs.cofit import CoFit, JobSpec, Pool, cofit
from fitwork.jobs.offers import Option, share_of
from fitwork.jobs.spec import Job, JobsFile
from fitwork.profiling.record import PipelineProfile
from fitwork.version import __version__

__all__ = ["FleetPlan", "JobPlan", "Refit", "plan_jobs", "refit"]

FleetObjective = Literal["fair", "max_throughput", "min_cost"]


class JobPlan(BaseModel):
    """One job in the fleet plan: admission, predicted rate and range, its shares."""

    name: str
    team: str
    weight: float
    pipeline: str
    status: Literal["admitted", "queued", "rejected"]
    reason: str | None = None
    units: list[str]
    multiplicity: list[float]
    fused: bool
    min_rate: float | None = None
    quota: dict[str, float] = Field(default_factory=dict)
    alone_rate: float
    """Items/s it gets alone on the whole fleet, in the co-fit's model (the normaliser)."""
    alone_plan_rate: float
    """Items/s its own `fitwork plan` predicts alone (with packing, batch options)."""
    rate: float
    rate_low: float
    rate_high: float
    held: dict[str, float] = Field(default_factory=dict)
    """Per class: cores (held and used) and devices (slots) its replicas take."""
    options: list[Option]
    replicas: list[Replicas] = Field(default_factory=list)
    plan: Plan

    @property
    def normalised(self) -> float:
        """Its rate over its alone rate."""
        return self.rate / self.alone_rate if self.alone_rate > 0 else 0.0

    def spec(self) -> JobSpec:
        """The job as the co-fit takes it."""
        return JobSpec(name=self.name, multiplicity=tuple(self.multiplicity),
                       weight=self.weight, min_rate=self.min_rate, quota=self.quota or None,
                       team=self.team)


class FleetPlan(Document):
    """Every job of a jobs file fitted together to one fleet."""

    document_kind: ClassVar[str] = "fleet plan"
    document_maker: ClassVar[str] = "`fitwork plan --jobs JOBS.yaml`"

    fitwork_version: str
    fleet: Fleet
    objective: FleetObjective
    status: str
    gap: float
    solve_seconds: float
    size: dict[str, int] = Field(default_factory=dict)
    jobs: list[JobPlan]
    pools: list[Pool]
    used: dict[str, float] = Field(default_factory=dict)
    """Per resource (cores, slot:CLASS, time:CLASS), the fleet's total the plan uses."""
    owned: dict[str, float] = Field(default_factory=dict)
    cost_per_team: dict[str, float] = Field(default_factory=dict)
    mfu: dict[str, float] = Field(default_factory=dict)
    """Per device class: the FLOP/s the plan's units do over the class's peak on the fleet
    (only where units declare or were counted FLOPs)."""
    objective_value: float = 0.0
    bound: float = 0.0
    time_limit: float = 10.0
    mip_gap: float = 1e-3

    def job(self, name: str) -> JobPlan:
        """The job named ``name``."""
        for j in self.jobs:
            if j.name == name:
                return j
        raise InputError(f"fleet plan has no job {name!r}; it has "
                         f"{', '.join(j.name for j in self.jobs)}: plan the jobs file again")

    def job_plan(self, name: str, refitted: Refit | None = None) -> Plan:
        """``name``'s own plan with its fitted side replaced by its share of the fleet: the
        fleet plan's, or ``refitted``'s where a re-fit over the jobs running now gave it
        one (a job the plan queued has none of its own)."""
        job = self.job(name)
        groups, rate = job.replicas, job.rate
        if refitted is not None and refitted.admitted(name):
            groups, rate = refitted.groups(name), refitted.rate(name)
        low, high = _range(job.plan, rate)
        result = job.plan.fitted.result.model_copy(update={
            "replicas": groups, "throughput": rate, "objective_value": rate})
        fitted = job.plan.fitted.model_copy(update={
            "result": result, "throughput_low": low, "throughput_high": high})
        return job.plan.model_copy(update={"fitted": fitted})

    def cost_over(self, seconds: float) -> dict[str, float]:
        """Each team's cost for ``seconds`` of the plan's allocation."""
        return {t: c * seconds / 3600 for t, c in self.cost_per_team.items()}

    def lines(self) -> list[str]:
        """The plan on the console: per job, then the fleet."""
        out = [f"fleet plan, {self.objective}: {self.status}, gap {self.gap:.2%}, solved in "
               f"{self.solve_seconds:.2f} s ({_size(self.size)})"]
        for j in self.jobs:
            head = f"{j.name} [{j.team}, weight {j.weight:g}]: {j.status}"
            if j.status != "admitted":
                out.append(f"{head}: {j.reason}")
                continue
            shares = ", ".join(f"{k} {v:.2f} ({self._share(k, v):.0%})"
                               for k, v in j.held.items() if v > 0)
            out.append(f"{head}: {j.rate:,.1f} items/s ({j.rate_low:,.1f}-{j.rate_high:,.1f}), "
                       f"{j.normalised:.0%} of its {j.alone_rate:,.1f} alone on the fleet "
                       f"(its own plan: {j.alone_plan_rate:,.1f}); holds {shares}; "
                       f"{'fused' if j.fused else 'split'}: {_groups(j.replicas)}")
        busy = {k: v for k, v in self.used.items() if k.startswith("time:")}
        busy["cores"] = sum(j.held.get("cores", 0.0) for j in self.jobs)  # not over ceiling
        util = ", ".join(f"{k.removeprefix('time:')} {busy.get(k, 0) / v:.0%}"
                         for k, v in self.owned.items() if v > 0 and k in busy)
        out.append(f"predicted: fleet utilization (busy / owned) {util}; MFU "
                   + (", ".join(f"{k} {v:.1%}" for k, v in self.mfu.items()) or
                      "not stated (no unit declares or was counted FLOPs)")
                   + f"; server capacity {self._capacity()} (the plan's objective over the "
                   "solver's bound on it)")
        total = sum(j.normalised for j in self.jobs if j.status == "admitted")
        out.append(f"aggregate normalised throughput {total:.2f} (the sum of each admitted "
                   "job's rate over its rate alone on the fleet)")
        if self.cost_per_team:
            out.append("cost per hour by team: " + ", ".join(
                f"{t} ${c:,.2f}" for t, c in self.cost_per_team.items()))
        return out

    def _capacity(self) -> str:
        if self.bound <= 0:
            return "n/a"
        return f"{min(self.objective_value, self.bound) / self.bound:.0%}"

    def _share(self, key: str, amount: float) -> float:
        owned = self.owned.get("cores" if key.startswith("cpu") or key == "cores"
                               else f"slot:{key}", 0.0)
        return amount / owned if owned else math.nan


def _size(size: dict[str, int]) -> str:
    return ", ".join(f"{v:,} {k}" for k, v in size.items()) or "size not stated"


def _groups(groups: Sequence[Replicas]) -> str:
    return ", ".join(f"{g.unit} {g.replicas} x {g.device_class}" for g in groups if g.replicas)


class Refit:
    """A re-solve of a fleet plan over the jobs running now: rates, replicas, admission."""

    def __init__(self, plan: FleetPlan, names: Sequence[str], solved: CoFit | None) -> None:
        self.plan, self.names, self.solved = plan, list(names), solved

    def admitted(self, name: str) -> bool:
        """Whether ``name`` runs under this re-fit."""
        return self.solved is not None and name in self.names and \
            self.solved.jobs[self.names.index(name)].status == "admitted"

    def reason(self, name: str) -> str:
        """Why ``name`` is queued or rejected under this re-fit (empty when admitted)."""
        assert self.solved is not None
        return self.solved.jobs[self.names.index(name)].reason

    def rate(self, name: str) -> float:
        """Predicted items/s of ``name``."""
        assert self.solved is not None
        return self.solved.jobs[self.names.index(name)].rate

    def replicas(self, name: str) -> dict[str, int]:
        """Replicas per unit of ``name`` (at least one of each unit)."""
        assert self.solved is not None
        job, i = self.plan.job(name), self.names.index(name)
        counts = {u: 0.0 for u in _run_units(job)}
        for k, option in self._options(i):
            counts[option.unit_name] += self.solved.x[k]
        return {u: max(1, math.ceil(n - 1e-9)) for u, n in counts.items()}

    def groups(self, name: str) -> list[Replicas]:
        """``name``'s replica groups under this re-fit."""
        assert self.solved is not None
        found = self._options(self.names.index(name))
        return share_of([o for _, o in found], [self.solved.x[k] for k, _ in found],
                      [self.solved.f[k] for k, _ in found])[0]

    def cores(self, name: str) -> float:
        """Cores ``name``'s replicas are planned to hold and use (as measured, not over the
        core ceiling)."""
        assert self.solved is not None
        i = self.names.index(name)
        return sum(o.held_cores * self.solved.x[k] + o.cpu_per_item * self.solved.f[k]
                   for k, o in self._options(i))

    def _options(self, i: int) -> list[tuple[int, Option]]:
        """(offer index, option) of the i-th job, in the order the offers were given."""
        found, k = [], 0
        for j, name in enumerate(self.names):
            for option in self.plan.job(name).options:
                if j == i:
                    found.append((k, option))
                k += 1
        return found


def _run_units(job: JobPlan) -> list[str]:
    return ["monolithic"] if job.fused else list(job.units)


def refit(plan: FleetPlan, names: Sequence[str]) -> Refit:
    """Re-solve ``plan`` over the jobs ``names`` (those running and arriving), in order."""
    if not names:
        return Refit(plan, [], None)
    chosen = [plan.job(n) for n in names]
    offers = [o.offer(i) for i, j in enumerate(chosen) for o in j.options]
    solved = cofit([j.spec() for j in chosen], offers, plan.pools, objective=plan.objective,
                   alone=[j.alone_rate for j in chosen], time_limit=plan.time_limit,
                   mip_gap=plan.mip_gap)
    return Refit(plan, names, solved)


def plan_jobs(jobs: JobsFile, fleet: Fleet, *, objective: FleetObjective = "fair",
              profiles: dict[str, PipelineProfile] | None = None,
              profile_job: Callable[[Job], PipelineProfile] | None = None,
              time_limit: float = 10.0, mip_gap: float = 1e-3,
              say: Callable[[str], None] | None = None) -> FleetPlan:
    """Fit every job of ``jobs`` to ``fleet`` together (see the module's docstring).

    Each job's profile comes from ``profiles`` (by name), else from its ``profile`` file,
    else from ``profile_job`` (profiling it on the spot)."""
    from fitwork.jobs.offers import job_problem, options_of, pools_of

    say = say or (lambda _line: None)
    pools = pools_of(tuple(_nodes(fleet)))
    index = {p.name: i for i, p in enumerate(pools)}
    found_profiles = [_profile_of(job, profiles or {}, profile_job) for job in jobs.jobs]
    alone = [plan_for(profile, fleet, objective="max_throughput", time_limit=time_limit)
             for profile in found_profiles]

    def solve_at(ceiling: float) -> tuple[tuple, float]:
        found = [job_problem(p, a, fleet, ceiling)
                 for p, a in zip(found_profiles, alone, strict=True)]
        options = [options_of(f, index) for f in found]
        specs = [JobSpec(name=j.name, multiplicity=tuple(f.problem.multiplicity),
                         weight=j.weight, min_rate=j.min_rate, quota=_quota(j.quota) or None,
                         team=j.team) for j, f in zip(jobs.jobs, found, strict=True)]
        offers = [o.offer(i) for i, opts in enumerate(options) for o in opts]
        solved = cofit(specs, offers, pools, objective=objective, time_limit=time_limit,
                       mip_gap=mip_gap)
        return (found, options, solved), busy_threads(options, solved.x, solved.f)

    ceiling, (found, options, solved) = settle(found_profiles, solve_at,
                                               _session_cap(found_profiles, jobs, fleet))
    for job, profile, plan in zip(jobs.jobs, found_profiles, alone, strict=True):
        say(f"{job.name}: alone on the fleet {plan.fitted.throughput:,.1f} items/s "
            f"({'fused' if plan.fused else 'split'}; its profile's core ceiling "
            f"{core_ceiling(profile.under_load()):.0%}, the fleet plan's {ceiling:.0%}, "
            f"settled against every job's threads)")
    return _fleet_plan(jobs, fleet, objective, solved, options,
                       list(zip(alone, found, strict=True)), pools, (time_limit, mip_gap))


def _session_cap(profiles: Sequence[PipelineProfile], jobs: JobsFile, fleet: Fleet
                 ) -> float:
    """For a fleet of one node (a host, as `fitwork run --jobs` runs here) where the run
    will hold shares by session weights (autogroups on this host), what the jobs' sessions
    get beside the others' (`session_cap`); 1.0 otherwise."""
    from fitwork.jobs.shares import AutogroupLever, choose_lever

    if sum(n.count for n in fleet.node_types) != 1:
        return 1.0

    try:
        lever = choose_lever()
    except ValueError:
        return 1.0
    if not isinstance(lever, AutogroupLever):
        return 1.0
    return session_cap(profiles, [j.weight for j in jobs.jobs])


def _nodes(fleet: Fleet) -> list:
    from fitwork.fit.inputs import solver_nodes
    from fitwork.hardware.catalog import catalog

    return solver_nodes(fleet, catalog())


def _quota(quota: dict[str, float]) -> dict[str, float]:
    """A jobs file's quota in the co-fit's keys: cores, and a device class's slots."""
    return {("cores" if k in ("cores", "cpu") or is_cpu_class(k) else f"slot:{k}"): v
            for k, v in quota.items()}


def _profile_of(job: Job, given: dict[str, PipelineProfile],
                profile_job: Callable[[Job], PipelineProfile] | None) -> PipelineProfile:
    if job.name in given:
        return given[job.name]
    if job.profile is not None:
        return PipelineProfile.load(job.profile)
    if profile_job is None:
        raise InputError(f"job {job.name!r} has no profile: give 'profile:' in the jobs file "
                         "or let `fitwork plan --jobs` profile it")
    return profile_job(job)


def _fleet_plan(jobs: JobsFile, fleet: Fleet, objective: FleetObjective, solved: CoFit,
                options: list[list[Option]], alone_plans: list, pools: list[Pool],
                limits: tuple[float, float]) -> FleetPlan:
    planned, k = [], 0
    for i, job in enumerate(jobs.jobs):
        alone, found = alone_plans[i]
        outcome = solved.jobs[i]
        mine = range(k, k + len(options[i]))
        groups, held = share_of(options[i], [solved.x[c] for c in mine],
                              [solved.f[c] for c in mine])
        k += len(options[i])
        rate = outcome.rate
        low, high = _range(alone, rate)
        planned.append(JobPlan(
            name=job.name, team=job.team, weight=job.weight, pipeline=job.pipeline,
            status=outcome.status, reason=outcome.reason or None,
            units=list(alone.units), multiplicity=list(found.problem.multiplicity),
            fused=found.fused, min_rate=job.min_rate, quota=_quota(job.quota),
            alone_rate=outcome.alone, alone_plan_rate=alone.fitted.throughput,
            rate=rate, rate_low=low, rate_high=high,
            held=held, options=options[i], replicas=groups, plan=alone))
    used: dict[str, float] = {}
    for u in solved.use:
        used[u.resource] = used.get(u.resource, 0.0) + u.used
    owned: dict[str, float] = {}
    for p in pools:
        for key, v in p.capacity.items():
            owned[key] = owned.get(key, 0.0) + v * p.count
    return FleetPlan(fitwork_version=__version__, fleet=fleet, objective=objective,
                     mfu=_mfu(planned, owned), objective_value=solved.objective_value,
                     bound=solved.bound,
                     status=solved.status, gap=solved.gap, solve_seconds=solved.seconds,
                     size=asdict(solved.size), jobs=planned, pools=pools, used=used,
                     owned=owned, cost_per_team=dict(solved.cost_per_hour),
                     time_limit=limits[0], mip_gap=limits[1])


def _range(alone: Plan, rate: float) -> tuple[float, float]:
    """The range of a job's predicted ``rate``: its own plan's range, as shares of its
    point, carried over (the same units' spreads and the host's load widen both alike)."""
    point = alone.fitted.throughput
    if point <= 0:
        return rate, rate
    low, high = alone.fitted.throughput_range
    return rate * low / point, rate * high / point


def _mfu(jobs: Sequence[JobPlan], owned: dict[str, float]) -> dict[str, float]:
    """Per device class, the FLOP/s the admitted jobs' replicas do there over its peak
    times what the fleet owns of it (cores for a CPU class)."""
    from fitwork.fit.cost import peak_flops
    from fitwork.hardware.catalog import catalog

    known, done = catalog(), dict[str, float]()
    for job in jobs:
        flops = {u: f for u, f in job.plan.flops.items() if f}
        if job.fused and flops:
            flops = {"monolithic": sum(job.plan.multiplicity.get(u, 1.0) * f
                                       for u, f in flops.items())}
        for g in job.replicas:
            if flops.get(g.unit):
                done[g.device_class] = done.get(g.device_class, 0.0) + \
                    flops[g.unit] * g.items_per_s
    figures = {}
    for name, rate in done.items():
        device = known.get(name)
        amount = owned.get("cores" if device.is_cpu else f"slot:{name}", 0.0)
        peak = device.fp32_flops if device.is_cpu else peak_flops(device, "fp16")
        if amount and peak:
            figures[name] = rate / (peak * amount)
    return figures
