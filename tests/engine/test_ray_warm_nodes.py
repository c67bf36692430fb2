"""A warm pool on a cluster of several nodes of one type: a fused plan's replicas are kept.

Two Ray nodes on this host (each its own ``ray start``, temp dir and object store, one CPU,
both labelled with one node type; token authentication), and a one-unit plan fitted to
that fleet, run twice with ``keep_warm`` from two driver processes of its own: with one node
type and one unit there is nothing to choose or keep together, so no placement group is
made and the second run adopts the replicas the first kept (in a group they went with it).
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
    import fitwork
    from fitwork import Pipeline
    from fitwork.fit.plan import plan_for
    from fitwork.hardware.fleet import Fleet
    from fitwork.profiling.record import PipelineProfile, UnitProfile

    def square(x):
        return x * x

    pipeline = Pipeline(square, name="sq")
    unit = UnitProfile(name="square", kind="map", resources={"cpu": 1.0},
                       device_class="cpu-x86", samples=8, wall_s=0.002, cpu_s=0.002,
                       bytes_in=100.0, bytes_out=100.0, output_ratio=1.0, peak_rss=0)
    profile = PipelineProfile(fitwork_version="t", pipeline="sq", host_class="cpu-x86",
                              created_at=0, units=[unit])
    fleet = Fleet.parse({"name": "two", "node_types": [
        {"name": "cpu", "count": 2, "cores": 1, "memory": "4GiB"}]})
    placement = plan_for(profile, fleet).placement()
    with fitwork.run(pipeline, range(300), engine="ray", address=sys.argv[1],
                     placement=placement, keep_warm=8.0) as result:
        outputs = sorted(result)
    print(json.dumps({"exact": outputs == sorted(x * x for x in range(300)),
                      "types": sorted({g.node_type or "" for g in placement.groups}),
                      "replicas": sum(g.replicas for g in placement.groups),
                      "warm": result.record.host["warm_pool"]}))
""")


def _run(address: str) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, address], cwd=ROOT,
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, **ENV})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_a_fused_plan_on_nodes_of_one_type_is_kept_warm_and_adopted(two_alike: str) -> None:
    first = _run(two_alike)
    assert first["exact"] and first["types"] == ["cpu"] and first["replicas"] >= 2, first
    assert first["warm"]["adopted"] == 0 and first["warm"]["kept"] == first["replicas"], first
    second = _run(two_alike)
    assert second["exact"], second
    assert second["warm"]["adopted"] == first["warm"]["kept"], (first, second)
    assert second["warm"]["adopted_ids"] == first["warm"]["kept_ids"], (first, second)
