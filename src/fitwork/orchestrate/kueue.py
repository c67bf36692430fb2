"""A fleet plan as Kueue objects: a ResourceFlavor per device class, a ClusterQueue and a
LocalQueue per team (all in one cohort), and a suspended RayJob per pipeline in its queue.

Each job runs as today's single-pipeline deploy writes it (`fitwork.orchestrate.kuberay`),
from its share of the fleet: the admitted job's replicas as the fleet plan places them, a
queued job's at the cheapest allocation that gives its ``min_rate`` (what it waits for).
The replicas are packed onto nodes of each node type first-fit, so each job's RayCluster
has as many worker pods as its share needs.  Kueue manages a RayJob only when the RayJob
carries its cluster (``rayClusterSpec``, no ``clusterSelector``) and deletes it when done,
so the cluster goes inside the RayJob.

Kueue admits a RayJob's pods (head, each worker group, the submitter) against one resource
group covering cpu, memory and the GPU resources; each pod set takes the first flavor that
offers what it asks for and whose node labels agree with its nodeSelector, as Kueue's flavor
assignment does.  A team's nominal quota per flavor is what its ADMITTED jobs' pods ask for
there (the plan's holding rounded up per pod to whole devices and Ray's cores, with the
head and submitter pods); queued jobs borrow free quota in the cohort or wait.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fitwork.fit.plan import Plan, group_resources
from fitwork.fit.result import Placement
from fitwork.hardware.fleet import Fleet, NodeType
from fitwork.jobs.cofit import cofit
from fitwork.jobs.plan import FleetPlan, JobPlan
from fitwork.orchestrate.cluster import ClusterError, ClusterFleet
from fitwork.orchestrate.kuberay import KUEUE_QUEUE, JobSpec, k8s_name, manifests
from fitwork.orchestrate.quantity import cpu_quantity, memory_quantity, parse_quantity
from fitwork.orchestrate.shape import MEMORY_MARGIN

API = "kueue.x-k8s.io/v1beta2"
TEAM_LABEL = "fitwork.io/team"
MAX_WORKER_GROUPS = 6
"""A Workload holds at most 8 pod sets: the head, the submitter and 6 worker groups."""
RESERVED_GROUPS = ("head", "submitter")


@dataclass(frozen=True)
class Target:
    """Where and how the jobs run: image, name prefix, namespace, and each job's run."""

    image: str
    prefix: str = "fitwork"
    namespace: str | None = None
    runs: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    """Per job: pipeline, input and output as the job's pods see them."""


@dataclass(frozen=True)
class Flavor:
    """One ResourceFlavor: a device class, the node labels that pick it, what it offers."""

    name: str
    device_class: str
    labels: dict[str, str]
    offers: tuple[str, ...]

    def takes(self, requests: Iterable[str], selector: Mapping[str, str]) -> bool:
        """Whether a pod asking for ``requests`` with ``selector`` may take this flavor."""
        return set(requests) <= set(self.offers) and all(
            selector.get(k, v) == v for k, v in self.labels.items())


@dataclass
class KueueManifests:
    """The objects by file name, each team's quota per flavor and resource, and notes."""

    objects: dict[str, list[dict[str, Any]]]
    quotas: dict[str, dict[str, dict[str, float]]]
    notes: list[str]
    plans: dict[str, Plan]


def _common(selectors: list[dict[str, str]]) -> dict[str, str]:
    """The labels every selector agrees on."""
    if not selectors:
        return {}
    first, *rest = selectors
    return {k: v for k, v in first.items() if all(s.get(k) == v for s in rest)}


def flavors(fleet: Fleet, cluster: ClusterFleet, prefix: str) -> list[Flavor]:
    """CPU classes first (in fleet order), then GPU classes, each labelled as today's worker
    pods select its node types."""
    cpu: dict[str, list[dict[str, str]]] = {}
    gpu: dict[str, list[dict[str, str]]] = {}
    gpu_resources: dict[str, set[str]] = {}
    for node in fleet.node_types:
        found = cluster.get(node.name)
        cpu.setdefault(node.cpu_class, []).append(dict(found.selector))
        for accel in found.all_accelerators:
            if accel.device_class is None:
                continue
            gpu.setdefault(accel.device_class, []).append(
                {**found.selector, **dict(accel.selector)})
            names = gpu_resources.setdefault(accel.device_class, set())
            names.update(r for r in [accel.resource, *dict(accel.mig_resources).values()] if r)
    out = [Flavor(k8s_name(f"{prefix}-{c}", 63), c, _common(s), ("cpu", "memory"))
           for c, s in cpu.items()]
    out += [Flavor(k8s_name(f"{prefix}-{c}", 63), c, _common(s),
                   ("cpu", "memory", *sorted(gpu_resources[c]))) for c, s in gpu.items()]
    return out


def _pack(groups: list[Placement], fleet: Fleet) -> list[Placement]:
    """``groups`` with a node index per replica, spread evenly: a worker group's pods are
    alike (each asks for its busiest node's load), so each node type gets the fewest nodes
    its replicas' cores, memory and device shares fill, and each replica, largest first, the
    node with the most room (a further node when none has room; an overfull one as a last
    resort, as the co-fit bounds each node type's total, not each node's)."""
    by_name = {n.name: n for n in fleet.node_types}
    where: dict[tuple[int, int], int] = {}
    for node_type in dict.fromkeys(g.node_type for g in groups):
        node = by_name[node_type]
        cap = _capacity(node)
        asks = [(i, r, _need(g)) for i, g in enumerate(groups)
                if g.node_type == node_type for r in range(g.replicas)]
        asks.sort(key=lambda a: (-a[2][2], -a[2][0], -a[2][1]))
        totals = [sum(a[2][k] for a in asks) for k in range(3)]
        start = max([1, *(math.ceil(t / c - 1e-9) for t, c in zip(totals, cap, strict=True)
                           if c > 0)])
        free = [list(cap) for _ in range(min(node.count, start))]
        for i, r, need in asks:
            key = 2 if need[2] > 0 else 0
            fits = [k for k, left in enumerate(free)
                    if all(n <= left[j] + 1e-9 for j, n in enumerate(need))]
            if not fits and len(free) < node.count:
                free.append(list(cap))
                fits = [len(free) - 1]
            slot = max(fits or range(len(free)), key=lambda k: (free[k][key], free[k][0]))
            free[slot] = [left - n for left, n in zip(free[slot], need, strict=True)]
            where[(i, r)] = slot
    return [g.model_copy(update={"nodes": [where[(i, r)] for r in range(g.replicas)]})
            for i, g in enumerate(groups)]


def _need(group: Placement) -> list[float]:
    """What one replica of ``group`` takes of a node: cores, memory, device share."""
    ask = group_resources(group)
    return [ask.cpu, float(ask.memory), ask.gpu]


def _capacity(node: NodeType) -> list[float]:
    """One node's cores (as Ray is told them), memory beside Ray's margin, and devices."""
    return [float(max(1, math.floor(node.cores + 1e-9))),
            float(max(0, node.memory - MEMORY_MARGIN)),
            float(sum(node.devices.values()))]


def _groups(job: JobPlan, x: Iterable[float], f: Iterable[float]) -> list[Placement]:
    return [o.replicas(max(1, math.ceil(xk - 1e-9)), fk)
            for o, xk, fk in zip(job.options, x, f, strict=True) if xk > 0 or fk > 0]


def _queued_share(plan: FleetPlan, job: JobPlan) -> tuple[list[Placement], float]:
    """The cheapest allocation that gives a queued job its min_rate (alone on the fleet)."""
    solved = cofit([job.spec()], [o.offer(0) for o in job.options], plan.pools,
                   objective="min_cost" if job.min_rate else "fair", alone=[job.alone_rate],
                   time_limit=plan.time_limit, mip_gap=plan.mip_gap)
    return _groups(job, solved.x, solved.f), solved.jobs[0].rate


def share_plan(plan: FleetPlan, job: JobPlan) -> Plan:
    """``job``'s own plan with its fitted side its share of the fleet, packed onto nodes."""
    groups, rate = (list(job.replicas), job.rate) if job.status == "admitted" else \
        _queued_share(plan, job)
    groups = _pack(groups, plan.fleet)
    used: dict[str, int] = {}
    for g in groups:
        used[g.node_type] = max(used.get(g.node_type, 0), max(g.nodes, default=-1) + 1)
    base = job.plan.fitted
    usage = [u.model_copy(update={"nodes_used": used[u.node_type]})
             for u in base.result.nodes if u.node_type in used]
    result = base.result.model_copy(update={"replicas": groups, "nodes": usage,
                                            "throughput": rate, "objective_value": rate})
    low, high = base.throughput_range
    point = base.throughput or 1.0
    fitted = base.model_copy(update={"result": result, "throughput_low": rate * low / point,
                                     "throughput_high": rate * high / point})
    return job.plan.model_copy(update={"fitted": fitted})


def _rayjob(plan: Plan, job: JobPlan, cluster: ClusterFleet, target: Target,
            queue: str) -> list[dict[str, Any]]:
    """The job's Secret, ConfigMap and a suspended RayJob carrying its RayCluster."""
    name = k8s_name(f"{target.prefix}-{job.name}")
    pipeline, input_path, output_path = target.runs[job.name]
    written = manifests(plan, cluster, JobSpec(
        pipeline=pipeline, input=input_path, output=output_path, image=target.image,
        name=name, namespace=target.namespace))
    cluster_spec = written["raycluster"][0]["spec"]
    groups = [g["groupName"] for g in cluster_spec["workerGroupSpecs"]]
    if len(groups) > MAX_WORKER_GROUPS or set(groups) & set(RESERVED_GROUPS):
        raise ClusterError(f"job {job.name}: its share uses node types {', '.join(groups)}; "
                           f"a Kueue-managed RayJob takes at most {MAX_WORKER_GROUPS} worker "
                           f"groups, none named {' or '.join(RESERVED_GROUPS)}: re-plan on a "
                           "fleet of fewer node types")
    rayjob = written["rayjob"][0]
    spec = {k: v for k, v in rayjob["spec"].items() if k != "clusterSelector"}
    meta = dict(rayjob["metadata"], name=name)
    meta["labels"] = {**meta["labels"], KUEUE_QUEUE: queue, TEAM_LABEL: job.team}
    why = f": {job.reason}" if job.reason else ""
    meta["annotations"] = {"fitwork.io/status": f"{job.status}{why}",
                           "fitwork.io/planned-rate": f"{plan.fitted.throughput:.6g} items/s"}
    rayjob = {"apiVersion": rayjob["apiVersion"], "kind": "RayJob", "metadata": meta,
              "spec": {**spec, "rayClusterSpec": cluster_spec,
                       "shutdownAfterJobFinishes": True, "suspend": True}}
    return [written["secret"][0], written["configmap"][0], rayjob]


def pod_sets(rayjob: Mapping[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """The pod specs Kueue admits for a RayJob, with their counts: head, workers, submitter."""
    spec = rayjob["spec"]
    cluster = spec["rayClusterSpec"]
    out = [(cluster["headGroupSpec"]["template"]["spec"], 1)]
    out += [(g["template"]["spec"], int(g["replicas"])) for g in cluster["workerGroupSpecs"]]
    if spec.get("submissionMode") == "K8sJobMode":
        out.append((spec["submitterPodTemplate"]["spec"], 1))
    return out


def requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """What one pod asks for, by resource (its containers' requests added up)."""
    total: dict[str, float] = {}
    for container in pod.get("containers", []):
        for key, value in (container.get("resources", {}).get("requests") or {}).items():
            total[key] = total.get(key, 0.0) + parse_quantity(value, f"request {key}")
    return total


def usage(rayjob: Mapping[str, Any], kinds: list[Flavor]) -> dict[str, dict[str, float]]:
    """What a RayJob's pods take of each flavor, per resource, as Kueue would assign them."""
    out: dict[str, dict[str, float]] = {}
    for pod, count in pod_sets(rayjob):
        asked = requests(pod)
        selector = pod.get("nodeSelector") or {}
        flavor = next((f for f in kinds if f.takes(asked, selector)), None)
        if flavor is None:
            raise ClusterError(f"RayJob {rayjob['metadata']['name']}: no flavor offers "
                               f"{', '.join(sorted(asked))} on nodes {selector}; re-plan for "
                               "this cluster's fleet")
        into = out.setdefault(flavor.name, {})
        for key, amount in asked.items():
            into[key] = into.get(key, 0.0) + amount * count
    return out


def _quantity(resource: str, amount: float) -> str:
    if resource == "cpu":
        return cpu_quantity(round(amount, 3))
    if resource == "memory":
        return memory_quantity(amount) if amount else "0"
    return str(math.ceil(amount - 1e-9))


def _meta(name: str, target: Target | None, team: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if target is not None and target.namespace:
        meta["namespace"] = target.namespace
    meta["labels"] = {"app.kubernetes.io/managed-by": "fitwork",
                      **({TEAM_LABEL: team} if team else {})}
    return meta


def _cluster_queue(team: str, kinds: list[Flavor], quota: dict[str, dict[str, float]],
                   target: Target) -> dict[str, Any]:
    covered = list(dict.fromkeys(r for f in kinds for r in f.offers))
    selector: dict[str, Any] = {}
    if target.namespace:
        selector = {"matchLabels": {"kubernetes.io/metadata.name": target.namespace}}
    group = {"coveredResources": covered, "flavors": [
        {"name": f.name, "resources": [
            {"name": r, "nominalQuota": _quantity(r, quota.get(f.name, {}).get(r, 0.0))}
            for r in covered]} for f in kinds]}
    return {"apiVersion": API, "kind": "ClusterQueue",
            "metadata": _meta(k8s_name(f"{target.prefix}-{team}", 63), None, team),
            "spec": {"cohortName": k8s_name(target.prefix, 63), "namespaceSelector": selector,
                     "preemption": {"reclaimWithinCohort": "Any",
                                    "withinClusterQueue": "Never"},
                     "resourceGroups": [group]}}


def _queues(plan: FleetPlan, kinds: list[Flavor], quotas: dict[str, dict[str, dict[str, float]]],
            target: Target) -> dict[str, list[dict[str, Any]]]:
    flavor_objs = [{"apiVersion": API, "kind": "ResourceFlavor",
                    "metadata": _meta(f.name, None),
                    "spec": {"nodeLabels": f.labels} if f.labels else {}} for f in kinds]
    cohort = {"apiVersion": API, "kind": "Cohort",
              "metadata": _meta(k8s_name(target.prefix, 63), None), "spec": {}}
    teams = list(dict.fromkeys(j.team for j in plan.jobs))
    cqs = [_cluster_queue(t, kinds, quotas.get(t, {}), target) for t in teams]
    lqs = [{"apiVersion": API, "kind": "LocalQueue",
            "metadata": _meta(k8s_name(f"{target.prefix}-{t}", 63), target, t),
            "spec": {"clusterQueue": k8s_name(f"{target.prefix}-{t}", 63)}} for t in teams]
    return {"resourceflavors": flavor_objs, "cohort": [cohort], "clusterqueues": cqs,
            "localqueues": lqs}


def fleet_manifests(plan: FleetPlan, cluster: ClusterFleet, target: Target) -> KueueManifests:
    """Every object to apply for ``plan`` on ``cluster``: queues, flavors and each runnable
    job's Secret, ConfigMap and RayJob; rejected jobs are left out with a note why."""
    kinds = flavors(plan.fleet, cluster, target.prefix)
    quotas: dict[str, dict[str, dict[str, float]]] = {}
    jobs: dict[str, list[dict[str, Any]]] = {"secrets": [], "configmaps": [], "rayjobs": []}
    notes, plans = [], {}
    for job in plan.jobs:
        if job.status == "rejected":
            notes.append(f"job {job.name} [{job.team}] rejected, no RayJob written: {job.reason}")
            continue
        if job.name not in target.runs:
            raise ClusterError(f"job {job.name} of the fleet plan is not in the jobs file; "
                               "give the jobs file the plan was made from")
        plans[job.name] = share_plan(plan, job)
        secret, configmap, rayjob = _rayjob(plans[job.name], job, cluster, target,
                                            k8s_name(f"{target.prefix}-{job.team}", 63))
        jobs["secrets"].append(secret)
        jobs["configmaps"].append(configmap)
        jobs["rayjobs"].append(rayjob)
        if job.status == "queued":
            notes.append(f"job {job.name} [{job.team}] queued, its RayJob waits in the queue "
                         f"for its min_rate's share: {job.reason}")
            continue
        team = quotas.setdefault(job.team, {})
        for flavor, amounts in usage(rayjob, kinds).items():
            into = team.setdefault(flavor, {})
            for key, amount in amounts.items():
                into[key] = into.get(key, 0.0) + amount
    objects = {**_queues(plan, kinds, quotas, target), **jobs}
    return KueueManifests({k: v for k, v in objects.items() if v}, quotas, notes, plans)
