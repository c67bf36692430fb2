"""Two Ray node processes on this host, with different resources: replicas land where planned."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fitwork.fit.plan import plan_for
from fitwork.hardware.fleet import Fleet
from fitwork.profiling.record import PipelineProfile, UnitProfile

from .ray_nodes import ROOT, TOKEN_AUTH, Node, ray_nodes

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="Ray is not installed: pip install 'fitwork[ray]'")


@pytest.fixture
def two_nodes() -> Iterator[str]:
    """A head node labelled ``cpu`` and a worker node with one H100-SXM, labelled ``gpu``."""
    with ray_nodes([Node(cpus=3, node_type="cpu"),
                    Node(cpus=1, node_type="gpu", resources={"H100-SXM": 1})],
                   prefix="fw-ray-") as cluster:
        yield cluster.address


def profile() -> PipelineProfile:
    def measured(name: str, **extra: object) -> UnitProfile:
        fields = dict(name=name, kind="map", resources={"cpu": 1.0}, device_class="cpu-x86",
                      samples=8, wall_s=0.002, cpu_s=0.002, bytes_in=100.0, bytes_out=100.0,
                      output_ratio=1.0, peak_rss=0)
        return UnitProfile(**{**fields, **extra})

    return PipelineProfile(fitwork_version="t", pipeline="placed", host_class="cpu-x86",
                           created_at=0, units=[
        measured("prepare"),
        measured("model", resources={"cpu": 0.5, "gpu": 0.5}, flops=1e9),
        measured("finish"),
    ])


FLEET = Fleet.parse({"name": "two", "node_types": [
    {"name": "cpu", "cores": 3, "memory": "8GiB"},
    {"name": "gpu", "cores": 1, "memory": "8GiB", "devices": {"H100-SXM": 1}},
]})

SCRIPT = textwrap.dedent("""
    import json, sys, ray
    import fitwork
    from fitwork import Group, Pipeline, Placement, unit
    from tests.engine.placed_units import prepare, model, finish

    placement = Placement.from_json(json.loads(sys.argv[2]))
    pipeline = Pipeline(prepare, model, finish, name="placed")
    with fitwork.run(pipeline, range(200), engine="ray", address=sys.argv[1],
                     placement=placement) as result:
        outputs, groups = [], {}
        for output in result:
            if not outputs:
                table = ray.util.placement_group_table().values()
                for g in table:  # named fitwork-RUN-TYPE@NODE: bundles per node type
                    if g["name"].startswith("fitwork-") and g["state"] == "CREATED":
                        kind = g["name"].rsplit("-", 1)[-1].split("@")[0]
                        groups[kind] = groups.get(kind, 0) + len(g["bundles"])
            outputs.append(output)
        outputs.sort()
    labels = {n["NodeID"]: n.get("Labels", {}).get("fitwork.node-type") for n in ray.nodes()}
    print(json.dumps({"outputs": outputs, "groups": groups,
                      "workers": [[w.unit, labels.get(w.node)] for w in result.record.workers]}))
""")


def test_a_plan_places_each_replica_on_its_node_type(two_nodes: str) -> None:
    plan = plan_for(profile(), FLEET)
    placement = plan.placement()
    placements = {u: [(g.device_class, g.node_type, g.replicas) for g in placement.of(u)]
                  for u in placement.units}
    assert {(d, n) for d, n, _ in placements["model"]} == {("H100-SXM", "gpu")}
    assert any(n == "cpu" for unit in ("prepare", "finish") for _, n, _ in placements[unit])
    done = subprocess.run([sys.executable, "-c", SCRIPT, two_nodes,
                           json.dumps(placement.to_json())],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **TOKEN_AUTH,
                               "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["outputs"] == [3 * x + 1 for x in range(200)]
    planned = {u: {n for _, n, _ in where} for u, where in placements.items()}
    per_type: dict[str, int] = {}
    for where in placements.values():
        for _, node_type, count in where:
            per_type[node_type] = per_type.get(node_type, 0) + count
    assert report["groups"] == per_type  # a group per planned node, a bundle each
    assert len(report["workers"]) == sum(c for w in placements.values() for _, _, c in w)
    for unit_name, node_type in report["workers"]:
        assert node_type in planned[unit_name], (unit_name, node_type)
    for unit_name, where in placements.items():  # as many replicas per node type as planned
        for _, node_type, count in where:
            ran = [w for w in report["workers"] if w == [unit_name, node_type]]
            assert len(ran) == count, (unit_name, node_type, count, report["workers"])


def test_fleet_ray_reads_the_nodes_into_node_types(two_nodes: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "fitwork.cli", "fleet", "ray",
                           "--ray-address", two_nodes, "-o", str(tmp_path / "f.yaml")],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **TOKEN_AUTH})
    assert done.returncode == 0, done.stderr[-2000:]
    fleet = Fleet.from_yaml(tmp_path / "f.yaml")
    shapes = {n.name: (n.count, n.cores, n.devices) for n in fleet.node_types}
    assert shapes == {"cpu": (1, 3.0, {}), "gpu": (1, 1.0, {"H100-SXM": 1})}


HOLDER = textwrap.dedent("""
    import sys, time, ray
    from pathlib import Path
    from ray.util.placement_group import placement_group, remove_placement_group

    ray.init(address=sys.argv[1])
    go = Path(sys.argv[2])
    def group(bundle, node_type):
        return placement_group([bundle], strategy="STRICT_PACK",
                               bundle_label_selector=[{"fitwork.node-type": node_type}])
    gpu = group({"H100-SXM": 1}, "gpu")
    assert ray.wait([gpu.ready()], timeout=60)[0], "the gpu node's device was not free"
    print("held", flush=True)
    while not go.exists():
        time.sleep(0.05)
    cpu = group({"CPU": 3}, "cpu")  # what the run holds, if it holds what it has
    got = bool(ray.wait([cpu.ready()], timeout=40)[0])
    print("got cpu" if got else "no cpu", flush=True)
    remove_placement_group(cpu)
    remove_placement_group(gpu)
""")


def test_two_runs_that_each_hold_one_node_do_not_deadlock(two_nodes: str,
                                                          tmp_path: Path) -> None:
    """Another job holds the GPU node and then asks for the CPU node, which the run asks
    for too: a run that held its CPU group while waiting for the GPU one would deadlock
    with it (each failing at its start-up timeout); the run gives its groups back, the
    other job gets the CPU node, finishes, and the run then gets both and ends."""
    env = {**os.environ, **TOKEN_AUTH, "PYTHONPATH": str(ROOT)}
    go = tmp_path / "go"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, two_nodes, str(go)], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        placement = plan_for(profile(), FLEET).placement()
        run = subprocess.Popen([sys.executable, "-c", SCRIPT, two_nodes,
                                json.dumps(placement.to_json())], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3.0)  # the run has asked for its groups: the CPU node's is free
        go.touch()
        said, err = holder.communicate(timeout=120)
        assert "got cpu" in said, err[-2000:]
        out, err = run.communicate(timeout=180)
        assert run.returncode == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1])["outputs"] == \
            [3 * x + 1 for x in range(200)]
    finally:
        holder.kill()
