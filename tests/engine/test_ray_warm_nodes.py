"""A warm pool on a cluster of several nodes: a plan's replicas are kept and adopted.

Ray nodes on this host (each its own ``ray start``, temp dir and object store, one CPU;
token authentication), a plan fitted to that fleet, run twice with ``keep_warm`` from two
driver processes of its own; the second run adopts the replicas the first kept (a replica
in a placement group would go with the group).  A one-unit plan on nodes of one type needs
no group at all; a plan of several units, on one node type or on two, asks for each
replica's node type by the node's label instead of holding groups, and each replica runs on
a node of its planned type.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from .ray_nodes import ROOT, TOKEN_AUTH, Node, ray_nodes

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="Ray is not installed: pip install 'fitwork[ray]'")
ENV = {**TOKEN_AUTH, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def two_alike() -> Iterator[str]:
    """A head and a worker node, one CPU each, both labelled ``fitwork.node-type=cpu``."""
    with ray_nodes([Node(), Node()], prefix="fw-wn-") as cluster:
        yield cluster.address


SCRIPT = textwrap.dedent("""
    import json, sys
    import ray
    import fitwork
    from fitwork import Pipeline
    from fitwork.fit.plan import plan_for
    from fitwork.hardware.fleet import Fleet
    from fitwork.profiling.record import PipelineProfile, UnitProfile

    def square(x):
        return x * x

    def inc(x):
        return x + 1

    address, fleet, units = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    pipeline = Pipeline(*[square, inc][:units], name="sq")
    profiled = [UnitProfile(name=u.name, kind="map", resources={"cpu": 1.0},
                            device_class="cpu-x86", samples=8, wall_s=0.002, cpu_s=0.002,
                            bytes_in=100.0, bytes_out=100.0, output_ratio=1.0, peak_rss=0)
                for u in pipeline.units]
    profile = PipelineProfile(fitwork_version="t", pipeline="sq", host_class="cpu-x86",
                              created_at=0, units=profiled)
    placement = plan_for(profile, Fleet.parse(fleet), fuse=units == 1).placement()
    with fitwork.run(pipeline, range(300), engine="ray", address=address,
                     placement=placement, keep_warm=8.0) as result:
        outputs = sorted(result)
    expected = sorted(x * x + (units - 1) for x in range(300))
    if not ray.is_initialized():
        ray.init(address=address)
    labels = {n["NodeID"]: n["Labels"].get("fitwork.node-type") for n in ray.nodes()}
    planned = {}
    for group in placement.groups:
        planned.setdefault(group.unit, set()).add(group.node_type)
    print(json.dumps({"exact": outputs == expected,
                      "units": sorted({g.unit for g in placement.groups}),
                      "types": sorted({g.node_type or "" for g in placement.groups}),
                      "replicas": sum(g.replicas for g in placement.groups),
                      "misplaced": [[w.unit, labels.get(w.node)] for w in result.record.workers
                                    if labels.get(w.node) not in planned[w.unit]],
                      "warm": result.record.host["warm_pool"]}))
""")


def _run(address: str, fleet: dict, units: int) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, address, json.dumps(fleet),
                           str(units)], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env={**os.environ, **ENV})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _twice(address: str, fleet: dict, units: int) -> tuple[dict, dict]:
    """Two runs back to back: the first keeps every replica, the second adopts them all."""
    first = _run(address, fleet, units)
    assert first["exact"] and first["replicas"] >= 2 and not first["misplaced"], first
    assert first["warm"]["adopted"] == 0 and first["warm"]["kept"] == first["replicas"], first
    second = _run(address, fleet, units)
    assert second["exact"] and not second["misplaced"], second
    assert second["warm"]["adopted"] == first["warm"]["kept"], (first, second)
    assert second["warm"]["adopted_ids"] == first["warm"]["kept_ids"], (first, second)
    return first, second


ALIKE = {"name": "two", "node_types": [{"name": "cpu", "count": 2, "cores": 1,
                                        "memory": "4GiB"}]}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("units", [1, 2])
def test_a_plan_on_nodes_of_one_type_is_kept_warm_and_adopted(two_alike: str,
                                                              units: int) -> None:
    first, _ = _twice(two_alike, ALIKE, units)
    assert first["types"] == ["cpu"] and len(first["units"]) == units, first


@pytest.fixture
def two_types() -> Iterator[str]:
    """A head labelled ``a`` and a worker labelled ``b``, one CPU each."""
    with ray_nodes([Node(node_type="a"), Node(node_type="b")], prefix="fw-wt-") as cluster:
        yield cluster.address


@pytest.mark.timeout(300)
def test_a_plan_over_two_node_types_is_kept_warm_each_replica_on_its_type(
        two_types: str) -> None:
    fleet = {"name": "ab", "node_types": [{"name": t, "cores": 1, "memory": "4GiB"}
                                          for t in ("a", "b")]}
    first, _ = _twice(two_types, fleet, 2)
    assert first["types"] == ["a", "b"], first  # the plan uses both, each replica on its own
