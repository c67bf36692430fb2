"""Validators for emitted objects: Kubernetes' own schemas (kubernetes-validate, strict) and
KubeRay's and Kueue's CRD OpenAPI schemas (jsonschema), with unknown fields rejected as the API
server's strict field validation does."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema", reason="pip install -e '.[dev]'")
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[dev]'")

CRDS = Path(__file__).parent / "data" / "kuberay-crds"
KUEUE_CRDS = Path(__file__).parent / "data" / "kueue-crds"
KUEUE = "kueue.x-k8s.io"
K8S_VERSION = "1.34.0"  # resource.k8s.io/v1 (DRA) is GA from 1.34


def _strict(schema: Any) -> Any:
    """The schema with ``additionalProperties: false`` wherever it lists properties and does
    not keep unknown fields (what `kubectl apply --validate=strict` enforces)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def crd_validator(kind: str, group: str = "ray.io", version_name: str = "v1") -> Any:
    """A validator for KubeRay ``kind`` (RayCluster, RayJob) at ray.io/v1, or another group's
    (Kueue's ClusterQueue at kueue.x-k8s.io/v1beta2)."""
    folder = KUEUE_CRDS if group == KUEUE else CRDS
    path = folder / f"{group}_{kind.lower()}s.yaml"
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert crd["spec"]["names"]["kind"] == kind
    version = next(v for v in crd["spec"]["versions"] if v["name"] == version_name)
    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


def validate(obj: dict[str, Any]) -> None:
    """Raise if ``obj`` is not valid: built-in kinds by Kubernetes' schema, KubeRay's by its
    CRD (and its metadata as Kubernetes' ObjectMeta)."""
    group, _, version = str(obj.get("apiVersion")).rpartition("/")
    if group in ("ray.io", KUEUE):
        crd_validator(obj["kind"], group, version).validate(obj)
        holder = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}
        kubernetes_validate.validate(holder, K8S_VERSION, strict=True)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def errors(obj: dict[str, Any]) -> list[str]:
    """What is wrong with ``obj`` (empty when valid)."""
    try:
        validate(obj)
    except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as exc:
        return [str(exc).splitlines()[0]]
    return []
