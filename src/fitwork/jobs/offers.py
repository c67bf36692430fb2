"""A profiled pipeline's solver candidates as co-fit offers: what each replica holds and uses.

The single-pipeline fit (`fitwork.fit.plan.plan_for`) solves one pipeline on the fleet alone and
chooses its layout (split, or fused into one unit).  A fleet plan keeps that choice and hands
the co-fit the same candidates that layout was solved from, rewritten in the co-fit's terms:
per replica, what it HOLDS (reserved cores, memory, a device slot) and, per item, what it
CONSUMES of the shared pools (core-seconds over the profile's core ceiling, device-seconds).
Every unit's capacity rows are then the single-pipeline model's, shared by every job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from fitwork.fit.candidates import Candidate, Problem, build_problem
from fitwork.fit.ceiling import core_ceiling
from fitwork.fit.inputs import (
    HOP_SECONDS,
    demands,
    edge_seconds,
    fleet_classes,
    fused_memory,
    sequential,
    solver_nodes,
    waiting_seconds,
)
from fitwork.fit.monolithic import fused_problem
from fitwork.fit.plan import Plan
from fitwork.fit.result import Placement as Replicas
from fitwork.fit.spec import NodeType, is_cpu_class
from fitwork.hardware.catalog import catalog
from fitwork.hardware.fleet import Fleet
from fitwork.jobs.cofit import Offer, Pool
from fitwork.profiling.record import PipelineProfile

__all__ = ["JobProblem", "Option", "job_problem", "options_of", "pools_of", "share_of"]


class Option(BaseModel):
    """One way to run replicas of one unit of a job: a device class of a node type, what a
    replica holds and what an item uses there (the co-fit's offer), and what an engine
    needs to run it."""

    unit: int
    unit_name: str
    pool: int
    node_type: str
    device_class: str
    rate: float
    held: dict[str, float]
    consumed: dict[str, float]
    per_node: int
    batch_size: int | None = None
    cpu_per_item: float = 0.0
    device_time: float = 0.0
    reserved: bool = False
    held_cores: float = 0.0
    memory: float = 0.0
    devices: float = 0.0
    threads: int | None = None
    option: int = 0

    def offer(self, job: int) -> Offer:
        """This option as the co-fit takes it, for the job at index ``job``."""
        return Offer(job=job, unit=self.unit, pool=self.pool, device_class=self.device_class,
                     rate=self.rate, held=dict(self.held), consumed=dict(self.consumed),
                     per_node=self.per_node)

    def replicas(self, count: int, flow: float) -> Replicas:
        """``count`` replicas carrying ``flow`` items/s, as a plan states a group."""
        per = flow / count if count else 0.0
        return Replicas(unit=self.unit_name, device_class=self.device_class,
                        node_type=self.node_type, replicas=count, items_per_s=flow,
                        batch_size=self.batch_size, rate=self.rate,
                        cores=self.held_cores if self.reserved else self.cpu_per_item * per,
                        reserved=self.reserved, memory=self.memory,
                        device_share=self.devices, device_time=self.device_time * per,
                        option=self.option, threads=self.threads)


@dataclass(frozen=True)
class JobProblem:
    """One job's candidates on the fleet, in the layout its own plan chose."""

    problem: Problem
    ceiling: float
    fused: bool


def job_problem(profile: PipelineProfile, plan: Plan, fleet: Fleet,
                ceiling: float | None = None) -> JobProblem:
    """The candidates ``plan`` (``profile`` fitted to ``fleet`` alone) was solved from, for
    the layout it runs: its split units, or the fused unit at the option it chose; fluid
    cores at ``ceiling`` (None: the profile's own, `core_ceiling`)."""
    known = catalog()
    profile = profile.under_load()
    classes = fleet_classes(fleet, known)
    ceiling = core_ceiling(profile) if ceiling is None else ceiling
    nodes = solver_nodes(fleet, known, ceiling)
    if not plan.fused:
        demanded = plan.demands or demands(profile, classes, known, fleet=fleet)[0]
        return JobProblem(build_problem(demanded, nodes, max_latency=plan.max_latency),
                          ceiling, False)
    stages, rates, _, swept = demands(profile, classes, known, hop=0.0, fleet=fleet)
    problem = fused_problem(sequential(stages, [*rates, *swept], profile), nodes,
                            2 * HOP_SECONDS, edge_seconds(profile), waiting_seconds(profile),
                            fused_memory(profile))
    chosen = {(p.device_class, p.option) for p in plan.fitted.result.replicas if p.replicas}
    kept = tuple(c for c in problem.candidates if (c.device_class, c.option) in chosen)
    return JobProblem(Problem(problem.unit_names, problem.multiplicity, problem.node_types,
                              kept or problem.candidates, problem.max_concurrency,
                              problem.rate_limit), ceiling, True)


def pools_of(nodes: tuple[NodeType, ...]) -> list[Pool]:
    """The fleet's node types as co-fit pools: cores, memory, and per device class its
    slots (held) and its time (fluid), per node."""
    pools = []
    for n in nodes:
        capacity = {"cores": float(n.cores), "memory": float(n.memory)}
        for device, count in n.devices.items():
            if count > 0:
                capacity[f"slot:{device}"] = float(count)
                capacity[f"time:{device}"] = float(count)
        pools.append(Pool(name=n.name, count=n.count, capacity=capacity,
                          price_per_hour=n.price_per_hour))
    return pools


def options_of(found: JobProblem, pool_index: dict[str, int]) -> list[Option]:
    """``found``'s batch options at the unit's own batch size (option 0, or the fused
    option its plan chose) as options of one job."""
    names = found.problem.unit_names
    options = []
    for c in found.problem.candidates:
        if c.option != 0 and not found.fused:
            continue
        node = found.problem.node_types[c.node]
        options.append(Option(
            unit=c.unit, unit_name=names[c.unit], pool=pool_index[node.name],
            node_type=node.name, device_class=c.device_class, rate=c.rate, held=_held(c),
            consumed=_consumed(c, found.ceiling), per_node=c.per_node,
            batch_size=c.batch_size, cpu_per_item=c.cpu, device_time=c.device_time,
            reserved=c.reserve, held_cores=c.cores, memory=c.memory, devices=c.devices,
            threads=c.concurrency if c.concurrency > 1 else None, option=c.option))
    return options


def _held(c: Candidate) -> dict[str, float]:
    held = {"memory": c.memory}
    if c.cores:
        held["cores"] = c.cores
    if c.devices and not is_cpu_class(c.device_class):
        held[f"slot:{c.device_class}"] = c.devices
    return held


def _consumed(c: Candidate, ceiling: float) -> dict[str, float]:
    used = {"cores": c.cpu / max(ceiling, 1e-6)} if c.cpu else {}
    if c.device_time:
        used[f"time:{c.device_class}"] = c.device_time
    return used


def share_of(options: Sequence[Option], x: Sequence[float], f: Sequence[float]
           ) -> tuple[list[Replicas], dict[str, float]]:
    """One job's replica groups (whole replicas, each carrying its load) and what it holds
    per class (cores busy and held; device slots), from the co-fit's ``x`` and ``f``."""
    groups: list[Replicas] = []
    held: dict[str, float] = {}
    for option, count, flow in zip(options, x, f, strict=True):
        if count <= 0 and flow <= 0:
            continue
        groups.append(option.replicas(max(1, math.ceil(count - 1e-9)), flow))
        cores = option.held.get("cores", 0.0) * count + option.cpu_per_item * flow
        held["cores"] = held.get("cores", 0.0) + cores
        if not is_cpu_class(option.device_class):
            held[option.device_class] = held.get(option.device_class, 0.0) + \
                option.devices * count
    return groups, held
