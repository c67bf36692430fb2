"""Shared test inputs: node documents shaped like `kubectl get nodes -o json`, a profile, plans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

from fitwork.fit.plan import Plan, plan_for
from fitwork.hardware.fleet import Fleet
from fitwork.orchestrate.cluster import ClusterFleet
from fitwork.orchestrate.k8s_fleet import read_k8s
from tests.engine.test_ray_multinode import profile

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]


@cache
def _nodes_text() -> str:
    return (DATA / "nodes.json").read_text()


def nodes() -> dict[str, Any]:
    """A fresh copy of the node list (GFD, MIG, AMD, DRA, tainted, unknown nodes)."""
    return json.loads(_nodes_text())


def slices() -> dict[str, Any]:
    """The DRA ResourceSlices of the node gke-dra-pool-1."""
    return json.loads((DATA / "slices.json").read_text())


def cluster(**options: Any) -> ClusterFleet:
    """The whole test cluster."""
    return read_k8s(nodes(), slices(), name="test", **options)


def plan_on(found: ClusterFleet, *types: str, **options: Any) -> Plan:
    """A plan fitted to ``types`` of ``found`` (names as the cluster reader gave them)."""
    fleet = found.fleet()
    chosen = Fleet(name=fleet.name, node_types=[n for n in fleet.node_types if n.name in types])
    assert sorted(n.name for n in chosen.node_types) == sorted(types)
    return plan_for(profile(), chosen, time_limit=5, **options)


def fitwork(*args: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The fitwork CLI in a fresh interpreter."""
    return subprocess.run([sys.executable, "-m", "fitwork.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})})
