"""A plan as Kubernetes objects: a KubeRay RayCluster, a RayJob, the plan's ConfigMap, DRA claims,
and the Secret holding the cluster's Ray token.

One worker group per planned node type: as many pods as the plan uses nodes of it, one Ray
node per pod, told the node type's cores and the devices its replicas need, with the
``fitwork.node-type`` label and the device class as a Ray resource (what the Ray engine's
placement groups select and ask for).  GPUs come as the device plugin's extended resource
on nodes picked by the product label, as MIG slices where the node type's GPUs are all
partitioned, or with ``dra`` as a ResourceClaimTemplate (resource.k8s.io/v1) selecting the
product by the DRA driver's device attribute.  Fractional shares on whole GPUs are
time-sliced: Ray packs the replicas' shares onto the devices the pod holds, as planned.

Ray's token authentication is on: the RayCluster's ``authOptions`` (KubeRay 1.5.1+) ask for
token mode with the token in the Secret ``NAME-ray-token`` (key ``auth_token``, 256 random
bits made when the manifests are written); KubeRay gives it to every Ray container.  The
RayJob's submitter pod reads it from the same Secret to reach the head's job API.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import shlex
from dataclasses import dataclass
from typing import Any, Literal

from fitwork.fit.plan import Plan
from fitwork.orchestrate.cluster import ClusterError, ClusterFleet, ClusterNodeType, DraDevice
from fitwork.orchestrate.k8s_fleet import dra_default
from fitwork.orchestrate.quantity import cpu_quantity, memory_quantity
from fitwork.orchestrate.shape import NodeShape, matched

PLAN_DIR = "/etc/fitwork"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
VOLCANO_QUEUE = "volcano.sh/queue-name"
SCHEDULER = "ray.io/scheduler-name"
TOKEN_KEY = "auth_token"
"""The key of the Ray token in its Secret, as KubeRay's ``authOptions.secretName`` wants it."""
CONFIGMAP_LIMIT = 1_000_000
Gang = Literal["volcano", "kueue"]


@dataclass(frozen=True)
class JobSpec:
    """What the RayJob runs: the pipeline reference, its input and output, the image."""

    pipeline: str
    input: str
    output: str
    image: str
    name: str
    namespace: str | None = None
    queue: str | None = None
    gang: Gang | None = None
    dra: bool = False
    token: str | None = None
    """The cluster's Ray token [default: a new one, 256 random bits]."""


def k8s_name(text: str, limit: int = 50) -> str:
    """``text`` as a DNS-1123 label: lower case letters, digits and '-', at most ``limit``."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return name or "fitwork"


def _meta(name: str, spec: JobSpec, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if spec.namespace:
        meta["namespace"] = spec.namespace
    meta["labels"] = {"app.kubernetes.io/managed-by": "fitwork", **(labels or {})}
    return meta


def _quoted_json(value: dict[str, int]) -> str:
    """A JSON value as KubeRay wants it in rayStartParams: quoted for the shell it runs."""
    return '"' + json.dumps(value).replace('"', '\\"') + '"'


def _mig_slices(shape: NodeShape, cluster: ClusterNodeType) -> dict[str, int]:
    """MIG slices one pod asks for: per fractional replica, the smallest profile holding it."""
    accel = cluster.accelerators
    assert accel is not None
    if shape.whole_asks:
        raise ClusterError(f"node type {cluster.name}: its GPUs are all MIG slices "
                           f"({', '.join(p for p, _ in accel.mig)}), but the plan gives "
                           "replicas whole GPUs there; re-plan, or repartition its GPUs")
    profiles = sorted(accel.mig, key=lambda item: int(item[0].split("g.")[0]))
    wanted: dict[str, int] = {}
    for share in shape.shares:
        fits = [p for p, _ in profiles if int(p.split("g.")[0]) / 7 >= share - 1e-9]
        if not fits:
            raise ClusterError(f"node type {cluster.name}: no MIG profile holds a share of "
                               f"{share:.2f} of a GPU (it offers "
                               f"{', '.join(p for p, _ in profiles)}); re-plan")
        wanted[fits[0]] = wanted.get(fits[0], 0) + 1
    offered = dict(accel.mig)
    for profile, count in wanted.items():
        if count > offered.get(profile, 0):
            raise ClusterError(f"node type {cluster.name}: the plan needs {count} MIG "
                               f"{profile} slices per node; it offers {offered.get(profile, 0)}")
    return wanted


def _dra_claim(shape: NodeShape, cluster: ClusterNodeType, name: str, spec: JobSpec,
               mig: dict[str, int]) -> dict[str, Any]:
    """A ResourceClaimTemplate asking for the devices of one pod, by product attribute."""
    accel = cluster.accelerators
    assert accel is not None
    device: DraDevice = accel.dra or dra_default(accel)

    def selector(extra: str = "") -> list[dict[str, Any]]:
        return [{"cel": {"expression": device.cel() + extra}}]

    requests: list[dict[str, Any]] = []
    if mig:
        mig_class = device.driver.replace("gpu.", "mig.", 1)
        for profile, count in sorted(mig.items()):
            profile_attr = f"device.attributes[{json.dumps(device.driver)}].profile"
            requests.append({"name": k8s_name(f"mig-{profile}", 60), "exactly": {
                "deviceClassName": mig_class, "allocationMode": "ExactCount", "count": count,
                "selectors": selector(f" && {profile_attr} == {json.dumps(profile)}")}})
    else:
        requests.append({"name": "gpus", "exactly": {
            "deviceClassName": device.driver, "allocationMode": "ExactCount",
            "count": shape.device_slots, "selectors": selector()}})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": _meta(name, spec),
            "spec": {"spec": {"devices": {"requests": requests}}}}


def _container(name: str, spec: JobSpec, requests: dict[str, str],
               limits: dict[str, str], claims: list[str], mount: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": spec.image,
                                 "resources": {"requests": requests, "limits": limits}}
    if claims:
        container["resources"]["claims"] = [{"name": c} for c in claims]
    if mount:
        container["volumeMounts"] = [{"name": "fitwork-plan", "mountPath": PLAN_DIR,
                                      "readOnly": True}]
    return container


def _worker_group(shape: NodeShape, cluster: ClusterNodeType, spec: JobSpec,
                  objects: list[dict[str, Any]]) -> dict[str, Any]:
    """One worker group (and, with DRA, its claim template appended to ``objects``)."""
    accel = cluster.accelerators
    group = k8s_name(shape.name, 40)
    requests = {"cpu": cpu_quantity(min(shape.cores, max(1, math.ceil(shape.cores_used - 1e-9)))),
                "memory": memory_quantity(shape.memory_request())}
    limits = {"cpu": cpu_quantity(shape.cores), "memory": memory_quantity(shape.node_type.memory)}
    params = shape.ray_params()
    annotations: dict[str, str] = {}
    selector = dict(cluster.selector)
    pod: dict[str, Any] = {}
    claims: list[str] = []
    if accel is not None and shape.device_slots:
        mig = _mig_slices(shape, cluster) if accel.resource is None and accel.mig else {}
        if mig:
            params["num-gpus"] = str(sum(mig.values()))
            params["resources"] = json.dumps({shape.device_class: sum(mig.values())})
            annotations["fitwork.io/gpu-sharing"] = (
                "MIG: " + ", ".join(f"{n} x {p}" for p, n in sorted(mig.items())))
        elif shape.shares:
            annotations["fitwork.io/gpu-sharing"] = (
                f"time-slicing: up to {len(shape.shares)} replica(s) per pod with shares of a "
                f"GPU, packed by Ray onto its {shape.device_slots} device(s)")
        if spec.dra:
            claim = k8s_name(f"{spec.name}-{group}-devices", 63)
            objects.append(_dra_claim(shape, cluster, claim, spec, mig))
            pod["resourceClaims"] = [{"name": "devices", "resourceClaimTemplateName": claim}]
            claims = ["devices"]
        else:
            selector.update(dict(accel.selector))
            if mig:
                for profile, count in mig.items():
                    resource = dict(accel.mig_resources)[profile]
                    requests[resource] = limits[resource] = str(count)
            elif accel.resource:
                requests[accel.resource] = limits[accel.resource] = str(shape.device_slots)
            else:
                raise ClusterError(f"node type {cluster.name}: its GPUs are published only "
                                   "through DRA (no device-plugin resource); deploy with --dra")
    if "resources" in params:
        params["resources"] = _quoted_json(json.loads(params["resources"]))
    template: dict[str, Any] = {"spec": {
        **({"nodeSelector": selector} if selector else {}),
        **({"tolerations": cluster.tolerations} if cluster.tolerations else {}),
        **pod,
        "containers": [_container("ray-worker", spec, requests, limits, claims, False)]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {"groupName": group, "replicas": shape.nodes, "minReplicas": shape.nodes,
            "maxReplicas": shape.nodes, "rayStartParams": params, "template": template}


def _submitter(spec: JobSpec, token_secret: str) -> dict[str, Any]:
    """The RayJob's submitter pod: KubeRay's default command (``ray job submit``), with the
    cluster's token from its Secret (the head's job API refuses a caller without it)."""
    env = [{"name": "RAY_AUTH_MODE", "value": "token"},
           {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {
               "name": token_secret, "key": TOKEN_KEY}}}]
    container = {"name": "ray-job-submitter", "image": spec.image, "env": env,
                 "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                               "limits": {"cpu": "1", "memory": "1Gi"}}}
    return {"spec": {"restartPolicy": "Never", "containers": [container]}}


def manifests(plan: Plan, cluster: ClusterFleet, spec: JobSpec) -> dict[str, list[dict[str, Any]]]:
    """The objects to apply, by file name: ``secret`` (the Ray token), ``configmap``,
    ``resourceclaimtemplates`` (with DRA), ``raycluster`` and ``rayjob``."""
    if spec.gang == "kueue" and not spec.queue:
        raise ClusterError("--gang kueue admits the cluster through a Kueue LocalQueue: give "
                           "--queue NAME")
    pairs = matched(plan, cluster)
    text = plan.model_dump_json()
    if len(text) > CONFIGMAP_LIMIT:
        raise ClusterError(f"plan is {len(text):,} bytes; a ConfigMap holds at most "
                           f"{CONFIGMAP_LIMIT:,}: bake the plan into the image instead")
    claims: list[dict[str, Any]] = []
    workers = [_worker_group(s, c, spec, claims) for s, c in pairs]
    labels: dict[str, str] = {}
    if spec.gang == "volcano":
        labels[SCHEDULER] = "volcano"
        if spec.queue:
            labels[VOLCANO_QUEUE] = spec.queue
    elif spec.queue:
        labels[KUEUE_QUEUE] = spec.queue
    token_secret = f"{spec.name}-ray-token"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(token_secret, spec),
              "type": "Opaque",
              "stringData": {TOKEN_KEY: spec.token or secrets.token_hex(32)}}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": _meta(f"{spec.name}-plan", spec),
                 "data": {"plan.json": text}}
    head = {"rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
            "template": {"spec": {
                "containers": [_container("ray-head", spec, {"cpu": "1", "memory": "2Gi"},
                                          {"cpu": "2", "memory": "4Gi"}, [], True)],
                "volumes": [{"name": "fitwork-plan",
                             "configMap": {"name": f"{spec.name}-plan"}}]}}}
    raycluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                  "metadata": _meta(spec.name, spec, labels),
                  "spec": {"authOptions": {"mode": "token", "secretName": token_secret},
                           "headGroupSpec": head, "workerGroupSpecs": workers}}
    if spec.queue and spec.gang != "volcano":
        raycluster["spec"]["suspend"] = True  # Kueue resumes it once the queue admits it
    command = ["fitwork", "run", spec.pipeline, "--input", spec.input, "--output",
               spec.output, "--engine", "ray", "--plan", f"{PLAN_DIR}/plan.json", "--quiet"]
    rayjob = {"apiVersion": "ray.io/v1", "kind": "RayJob",
              "metadata": _meta(f"{spec.name}-run", spec),
              "spec": {"entrypoint": shlex.join(command),
                       "clusterSelector": {"ray.io/cluster": spec.name},
                       "submissionMode": "K8sJobMode",
                       "submitterPodTemplate": _submitter(spec, token_secret)}}
    out = {"secret": [secret], "configmap": [configmap]}
    if claims:
        out["resourceclaimtemplates"] = claims
    out["raycluster"] = [raycluster]
    out["rayjob"] = [rayjob]
    return out
