"""The co-fit's inputs and outputs as values: pools, offers, jobs, and the plan it returns."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from fitwork.errors import InputError

Objective = Literal["fair", "max_throughput", "min_cost"]
OBJECTIVES: tuple[str, ...] = ("fair", "max_throughput", "min_cost")
JobStatus = Literal["admitted", "queued", "rejected"]
SolveStatus = Literal["optimal", "feasible", "infeasible"]


GAP_ZERO = 1e-5
"""A gap this small reads as 0 ("optimal"): HiGHS's own tolerances, and the fair second
stage's hold on z, are below it."""


class CoFitInputError(InputError):
    """Pools, offers or jobs handed to the co-fit that it cannot use; one line, with the fix."""


@dataclass(frozen=True)
class Pool:
    """A node type: ``count`` identical nodes, each with ``capacity`` per resource key."""

    name: str
    count: int
    capacity: Mapping[str, float]
    """Per node, e.g. {"cores": 64, "memory": 2.5e11, "slot:H100": 8, "time:H100": 8}."""
    price_per_hour: float = 0.0
    """Per node."""


@dataclass(frozen=True)
class Offer:
    """Replicas of unit ``unit`` of job ``job`` on ``device_class`` of pool ``pool``."""

    job: int
    unit: int
    pool: int
    device_class: str
    rate: float
    """Items/s one busy replica sustains."""
    held: Mapping[str, float]
    """Held per replica, busy or not (memory, device slots, reserved cores)."""
    consumed: Mapping[str, float]
    """Consumed per item processed (fluid: "cores" core-seconds, "time:H100" device-seconds)."""
    per_node: int
    """Most replicas one node holds alone."""


@dataclass(frozen=True)
class JobSpec:
    """A pipeline to co-fit: its units' multiplicities and what it is owed or allowed."""

    name: str
    multiplicity: tuple[float, ...]
    """Items each unit processes per source item, in unit order."""
    weight: float = 1.0
    min_rate: float | None = None
    """Source items/s it must get, or it is not admitted."""
    quota: Mapping[str, float] | None = None
    """Resource key -> the most of it this job holds plus consumes, over every pool."""
    team: str = "default"
    whole: bool = False
    """Place the job whole: every unit on one pool (job-level placement, as Gavel's). In an
    integral model one binary per (job, pool) picks the pool; relaxed, the job's rate is a sum
    over pools each carrying every unit (time-sharing across types, as Gavel's allocation)."""
    count: int = 1
    """Identical copies this spec stands for (relaxed models only): the model carries them as
    one, each getting 1/count of the load (exact in the LP: by symmetry an optimum exists that
    treats identical jobs alike). ``JobResult.rate`` is per copy, ``use`` for all of them."""


@dataclass(frozen=True)
class JobResult:
    """One job in a co-fit: admission, its rate, and its share of what it gets alone."""

    name: str
    team: str
    status: JobStatus
    reason: str
    """Why queued or rejected (one line); empty when admitted."""
    rate: float
    """T_p, source items/s."""
    alone: float
    """T*_p, what it gets alone on the whole fleet."""
    share: float
    """rate / alone (0 when alone is 0)."""
    use: Mapping[str, float] = field(default_factory=dict)
    """Resource key -> what its replicas hold plus what its load consumes, over every pool."""


@dataclass(frozen=True)
class ModelSize:
    """A model's size as HiGHS saw it."""

    variables: int
    integers: int
    rows: int


@dataclass(frozen=True)
class Stage:
    """One HiGHS solve of the plan: what it maximised, its status, objective, bound and gap."""

    name: str
    status: SolveStatus
    objective: float
    bound: float
    gap: float
    seconds: float
    size: ModelSize


@dataclass(frozen=True)
class PoolUse:
    """Predicted use of one resource of one pool: held plus consumed, against capacity."""

    pool: str
    resource: str
    used: float
    capacity: float


@dataclass(frozen=True)
class CoFit:
    """A fleet plan for many jobs: per job, per offer, per pool, and how it was solved."""

    objective: Objective
    jobs: tuple[JobResult, ...]
    x: tuple[float, ...]
    """Replicas per offer (aligned with the offers given; 0 for jobs not admitted)."""
    f: tuple[float, ...]
    """Items/s routed to each offer."""
    status: SolveStatus
    """"optimal" only at a proven gap of 0; else "feasible" with ``gap`` stated."""
    gap: float
    bound: float
    """Bound on the objective of the first stage (z for fair, the sum for max_throughput,
    the price for min_cost)."""
    objective_value: float
    seconds: float
    """HiGHS seconds of the plan's stages (admission solves apart)."""
    admission_seconds: float
    size: ModelSize
    stages: tuple[Stage, ...]
    use: tuple[PoolUse, ...]
    nodes_paid: tuple[float, ...]
    """Per pool: nodes in use for min_cost, every node otherwise."""
    cost_per_hour: Mapping[str, float]
    """Per team: pro rata of the pools' prices by what its replicas hold and use."""
    idle_cost_per_hour: float
    """What the paid nodes cost that no team's replicas hold or use."""
    integral: bool
    """False: the LP relaxation, rounded to whole replicas unless ``fractional``."""
    fractional: bool
    """True: replicas are the relaxation's fractions (a fluid model, for simulation)."""

    def job(self, name: str) -> JobResult:
        """The result of the job called ``name``."""
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)


def check(jobs: Sequence[JobSpec], offers: Sequence[Offer], pools: Sequence[Pool]) -> None:
    """Raise `CoFitInputError` on the first input the co-fit cannot use."""
    for n, pool in enumerate(pools):
        if pool.count < 1 or any(v < 0 or not math.isfinite(v) for v in pool.capacity.values()):
            raise CoFitInputError(f"pool {n} ({pool.name}): count must be >= 1 and every "
                                  "capacity finite and >= 0; fix the pool")
    for p, job in enumerate(jobs):
        if not job.multiplicity or job.weight <= 0 or min(job.multiplicity) < 0:
            raise CoFitInputError(f"job {p} ({job.name}): needs at least one unit, weight > 0 "
                                  "and multiplicities >= 0; fix the job")
        if job.count < 1:
            raise CoFitInputError(f"job {p} ({job.name}): count must be >= 1")
        if job.min_rate is not None and job.min_rate < 0:
            raise CoFitInputError(f"job {p} ({job.name}): min_rate must be >= 0")
    for k, o in enumerate(offers):
        where = f"offer {k} (job {o.job}, unit {o.unit}, pool {o.pool})"
        if not (0 <= o.job < len(jobs) and 0 <= o.pool < len(pools)
                and 0 <= o.unit < len(jobs[o.job].multiplicity)):
            raise CoFitInputError(f"{where}: job, unit or pool index out of range; fix the offer")
        if not (o.rate > 0 and math.isfinite(o.rate)) or o.per_node < 0:
            raise CoFitInputError(f"{where}: rate must be > 0 and per_node >= 0")
        cap = pools[o.pool].capacity
        for key, v in [*o.held.items(), *o.consumed.items()]:
            if v < 0:
                raise CoFitInputError(f"{where}: {key} must be >= 0")
            if v > 0 and cap.get(key, 0.0) <= 0:
                raise CoFitInputError(f"{where}: uses {key!r}, which pool "
                                      f"{pools[o.pool].name} has none of; drop the offer")
