"""Kubernetes nodes (``kubectl get nodes -o json``, DRA ResourceSlices) read as node types.

Per node: allocatable CPU and memory; whole GPUs from ``nvidia.com/gpu`` / ``amd.com/gpu``;
MIG slices from ``nvidia.com/mig-<profile>`` (mixed strategy) or a ``-MIG-<profile>``
product (single strategy); the product and its memory from the labels NVIDIA's GPU feature
discovery (``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory`` in MiB), AMD's node
labeller (``amd.com/gpu.product-name``, ``amd.com/gpu.vram``) or the cloud
(``cloud.google.com/gke-accelerator``) set; devices a DRA driver publishes in
ResourceSlices for the node.  Cordoned, not-Ready and tainted nodes are left out, with the
reason (taints a GPU node pool carries for its GPUs, and those passed as tolerated, are
kept and tolerated).  Alike nodes are grouped into node types by instance type, devices
and taints.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from fitwork.hardware.catalog import Catalog, catalog
from fitwork.orchestrate.cluster import (
    Accelerators,
    ClusterError,
    ClusterFleet,
    ClusterNodeType,
    DraDevice,
)
from fitwork.orchestrate.products import product_class
from fitwork.orchestrate.quantity import parse_quantity

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GPU_TAINTS = ("nvidia.com/gpu", "amd.com/gpu")
"""Taint keys GPU node pools carry to keep other pods off: tolerated by GPU workers."""

_NVIDIA_PRODUCT = "nvidia.com/gpu.product"
_PRODUCT_LABELS = (
    ("nvidia", _NVIDIA_PRODUCT),
    ("amd", "amd.com/gpu.product-name"),
    ("amd", "beta.amd.com/gpu.product-name"),
    ("nvidia", "cloud.google.com/gke-accelerator"),
    ("nvidia", "k8s.amazonaws.com/accelerator"),
)
_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\w+)$")
_MIG_PRODUCT = re.compile(r"^(.*)-MIG-(\d+g\.\w+)$")
_PRODUCT_ATTRIBUTES = ("productName", "product", "model")
_DRA_DRIVERS = {"nvidia": "gpu.nvidia.com", "amd": "gpu.amd.com"}


def _items(doc: Any, kind: str, place: str) -> list[dict[str, Any]]:
    """The objects of ``kind`` in a List (``kubectl get -o json``), a single object, or a list."""
    if isinstance(doc, list):
        items = doc
    elif isinstance(doc, Mapping) and isinstance(doc.get("items"), list):
        items = doc["items"]
    elif isinstance(doc, Mapping) and doc.get("kind") == kind:
        items = [doc]
    else:
        found = (f"an object of kind {doc.get('kind')!r}" if isinstance(doc, Mapping)
                 else type(doc).__name__)
        raise ClusterError(f"{place}: expected the JSON of `kubectl get {kind.lower()}s -o "
                           f"json` (a List of {kind}), found {found}")
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or item.get("kind", kind) != kind:
            raise ClusterError(f"{place}: item {index} is not a {kind}")
    return [dict(i) for i in items]


def _why_left_out(node: Mapping[str, Any], tolerated: set[str]) -> str | None:
    """Why a node takes no new pods (cordoned, not Ready, a taint), or ``None``."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    if spec.get("unschedulable"):
        return "cordoned"
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    if ready and ready[0].get("status") != "True":
        return "not Ready"
    for taint in spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and \
                taint.get("key") not in tolerated:
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"taint {taint.get('key')}{value}:{taint.get('effect')}"
    return None


def _tolerations(node: Mapping[str, Any], tolerated: set[str]) -> list[dict[str, str]]:
    """Tolerations for the taints of ``node`` that were tolerated."""
    out = []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and taint.get("key") in tolerated:
            out.append({"key": taint["key"], "operator": "Exists", "effect": taint["effect"]})
    return sorted(out, key=lambda t: (t["key"], t["effect"]))


def _slice_devices(slices: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[str, str, str]]]:
    """(driver, attribute, product) of each whole GPU ResourceSlices publish, by node."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        node, driver = spec.get("nodeName"), spec.get("driver", "")
        if not node:
            continue
        for device in spec.get("devices") or []:
            attributes = device.get("attributes") or (device.get("basic") or {}).get(
                "attributes") or {}
            kind = _attribute(attributes.get("type"))
            if kind not in (None, "gpu"):
                continue  # MIG slices and VFIO devices are counted by their parent GPU
            for name in _PRODUCT_ATTRIBUTES:
                value = _attribute(attributes.get(name))
                if value:
                    out.setdefault(node, []).append((driver, name, value))
                    break
    return out


def _attribute(value: Any) -> str | None:
    """The value of a DRA device attribute (``{"string": "..."}``)."""
    if isinstance(value, Mapping):
        for key in ("string", "version", "int", "bool"):
            if key in value:
                return str(value[key])
    return None


def _accelerators(node: Mapping[str, Any], dra: list[tuple[str, str, str]],
                  known: Catalog) -> Accelerators | None:
    """The accelerators one node offers, or ``None`` for a CPU node."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    vendor, label, product = None, None, None
    for who, key in _PRODUCT_LABELS:
        if labels.get(key):
            vendor, label, product = who, key, labels[key]
            break
    mig: dict[str, int] = {}
    mig_resources: dict[str, str] = {}
    for resource, amount in allocatable.items():
        found = _MIG_RESOURCE.match(resource)
        if found and parse_quantity(amount) > 0:
            profile = f"{found.group(1)}g.{found.group(2)}"
            mig[profile] = int(parse_quantity(amount))
            mig_resources[profile] = resource
    whole = {who: int(parse_quantity(allocatable.get(r, 0), f"node resource {r}"))
             for who, r in _RESOURCES.items()}
    if vendor is None:
        vendor = next((who for who, n in whole.items() if n), "nvidia" if mig else None)
    single = _MIG_PRODUCT.match(product) if product and label == _NVIDIA_PRODUCT else None
    if single:  # MIG single strategy: every nvidia.com/gpu is one slice
        product = single.group(1)
        mig[single.group(2)] = whole["nvidia"]
        mig_resources[single.group(2)] = _RESOURCES["nvidia"]
        whole["nvidia"] = 0
    drivers = [d for d in dra if d]
    if product is None and drivers:
        product = drivers[0][2]
        vendor = vendor or ("amd" if "amd" in drivers[0][0] else "nvidia")
    if vendor is None or (not whole.get(vendor) and not mig and not drivers):
        return None
    product = product or "(no product label)"
    memory = _memory(labels, vendor)
    count = whole.get(vendor, 0)
    if mig:  # physical GPUs under the slices: 7 // g slices of a "<g>g.<mem>" profile per GPU
        count += math.ceil(sum(n / max(1, 7 // int(p.split("g.")[0])) for p, n in mig.items())
                           - 1e-9)
    if not count and drivers:
        count = len(drivers)
    device_class, suggestions = product_class(product, known, memory)
    if drivers:
        driver, attribute, value = drivers[0]
        published = DraDevice(driver, attribute, value)
    else:
        published = None
    selector = ((label, labels[label]),) if label else ()
    return Accelerators(product=product, device_class=device_class, count=count,
                        vendor=vendor, resource=_RESOURCES[vendor] if whole.get(vendor) else None,
                        memory=memory, selector=selector, mig=tuple(sorted(mig.items())),
                        mig_resources=tuple(sorted(mig_resources.items())), dra=published,
                        suggestions=suggestions)


def _memory(labels: Mapping[str, str], vendor: str) -> int | None:
    """Bytes per device from the labels (NVIDIA: MiB; AMD: "192G")."""
    try:
        if vendor == "nvidia" and labels.get("nvidia.com/gpu.memory"):
            return int(labels["nvidia.com/gpu.memory"]) * 2**20
        vram = labels.get("amd.com/gpu.vram") or labels.get("beta.amd.com/gpu.vram")
        if vram:
            return int(parse_quantity(vram.removesuffix("B")))
    except (ValueError, ArithmeticError):
        return None
    return None


def _devices_source(accel: Accelerators | None) -> str:
    if accel is None:
        return ""
    if accel.dra is not None and accel.resource is None and not accel.mig:
        return f"DRA ResourceSlices of driver {accel.dra.driver} ({accel.dra.attribute})"
    counted = ", ".join(filter(None, [accel.resource, *(r for _, r in accel.mig_resources)]))
    labelled = f", product from label {accel.selector[0][0]}" if accel.selector else ""
    return f"node allocatable {counted}{labelled}"


def _slug(text: str) -> str:
    """A name fit for a label value and a worker group: lower case, [a-z0-9.-]."""
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.") or "node"


def read_k8s(nodes: Any, slices: Any = None, name: str = "k8s",
             tolerate: Iterable[str] = (), known: Catalog | None = None,
             place: str = "nodes") -> ClusterFleet:
    """A cluster's node types from the JSON of its nodes (and its ResourceSlices)."""
    known = known or catalog()
    tolerated = {*GPU_TAINTS, *tolerate}
    published = _slice_devices(_items(slices, "ResourceSlice", "slices")) if slices else {}
    excluded: dict[str, str] = {}
    groups: dict[tuple[Any, ...], ClusterNodeType] = {}
    for index, node in enumerate(_items(nodes, "Node", place)):
        meta = node.get("metadata") or {}
        node_name = meta.get("name") or f"node {index}"
        why = _why_left_out(node, tolerated)
        if why:
            excluded[node_name] = why
            continue
        labels = meta.get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        where = f"{place}: node {node_name}"
        cores = float(math.floor(parse_quantity(allocatable.get("cpu", 0),
                                                f"{where}: allocatable cpu") + 1e-9))
        memory = int(parse_quantity(allocatable.get("memory", 0), f"{where}: allocatable memory"))
        if cores <= 0 or memory <= 0:
            excluded[node_name] = "no allocatable cpu or memory"
            continue
        accel = _accelerators(node, published.get(node_name, []), known)
        tolerations = _tolerations(node, tolerated)
        instance = labels.get(INSTANCE_TYPE)
        shape = (instance,) if instance else (round(cores), memory // 2**30)
        key = (*shape, labels.get("kubernetes.io/arch"), accel,
               tuple((t["key"], t["effect"]) for t in tolerations))
        group = groups.get(key)
        if group is None:
            selector = {INSTANCE_TYPE: instance} if instance else {}
            if labels.get("kubernetes.io/arch"):
                selector["kubernetes.io/arch"] = labels["kubernetes.io/arch"]
            group = groups[key] = ClusterNodeType(
                name="", count=0, cores=cores, memory=memory, accelerators=accel,
                selector=selector, tolerations=tolerations,
                sources={"cores": "node allocatable cpu, rounded down to whole cores",
                         "memory": "node allocatable memory",
                         "devices": _devices_source(accel)})
        group.count += 1
        group.cores = min(group.cores, cores)
        group.memory = min(group.memory, memory)
        group.nodes.append(node_name)
    types = sorted(groups.values(), key=lambda t: (t.accelerators is None, t.nodes[0]))
    _name(types)
    return ClusterFleet("k8s", name, types, excluded)


def _name(types: list[ClusterNodeType]) -> None:
    """Name node types by instance type, else by devices and shape; unique."""
    seen: dict[str, int] = {}
    for t in types:
        base = t.selector.get(INSTANCE_TYPE)
        if base is None:
            accel = t.accelerators
            if accel is not None:
                base = f"{accel.device_class or accel.product}-x{accel.count}"
            else:
                base = f"cpu-{t.cores:g}c-{t.memory // 2**30}gi"
        base = _slug(base)
        seen[base] = seen.get(base, 0) + 1
        t.name = base if seen[base] == 1 else f"{base}-{seen[base]}"


def dra_default(accel: Accelerators) -> DraDevice:
    """The DRA device of a node whose product only its labels name: the vendor's driver, its
    ``productName`` compared with spaces written as the label writes them ("NVIDIA-H100-...",
    "AMD_Instinct_...")."""
    return DraDevice(_DRA_DRIVERS.get(accel.vendor, "gpu.nvidia.com"), "productName",
                     accel.product, spaces="_" if accel.vendor == "amd" else "-")


def read_live(name: str | None = None, tolerate: Iterable[str] = (), timeout: float = 15.0,
              known: Catalog | None = None) -> ClusterFleet:
    """The current kubeconfig context's cluster, read-only: its nodes and ResourceSlices."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise ClusterError("reading a live cluster needs the Kubernetes client: pip install "
                           "'fitwork[k8s]' (or pass --nodes FILE from `kubectl get nodes -o "
                           "json`)") from None
    try:
        try:
            context = config.list_kube_config_contexts()[1]["name"]
            config.load_kube_config()
        except config.ConfigException:
            context = "in-cluster"
            try:
                config.load_incluster_config()
            except config.ConfigException:
                raise ClusterError("no Kubernetes cluster to read: no kubeconfig (KUBECONFIG, "
                                   "~/.kube/config) and not inside a cluster; pass --nodes "
                                   "FILE from `kubectl get nodes -o json`") from None
        api = client.ApiClient()
        api.configuration.retries = 0
        nodes = api.sanitize_for_serialization(
            client.CoreV1Api(api).list_node(_request_timeout=(timeout, timeout)))
    except ClusterError:
        raise
    except Exception as exc:
        host = getattr(getattr(locals().get("api"), "configuration", None), "host", "")
        reason = " ".join(str(getattr(exc, "reason", None) or exc).split())[:200]
        raise ClusterError(f"cannot read the Kubernetes cluster{' at ' + host if host else ''}: "
                           f"{type(exc).__name__}: {reason}; check `kubectl get nodes`, or "
                           "pass --nodes FILE from `kubectl get nodes -o json`") from None
    slices = None
    for version in ("v1", "v1beta2", "v1beta1"):  # GA from 1.34; betas from 1.32 and 1.26
        try:
            slices = client.CustomObjectsApi(api).list_cluster_custom_object(
                "resource.k8s.io", version, "resourceslices",
                _request_timeout=(timeout, timeout))
            break
        except Exception:  # not served by this cluster: try the next, else no slices
            continue
    return read_k8s(nodes, slices, name=name or _slug(context), tolerate=tolerate,
                    known=known, place=f"cluster {context}")
