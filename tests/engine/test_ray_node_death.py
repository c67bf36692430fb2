"""A whole Ray node dies mid-run (three nodes on this host): every output once, re-fitted.

Each node is its own ``ray start`` with its own temp dir and object store (capped), one CPU
each, labelled with one node type.  The run's plan (fitted to that fleet) reserves a
strictly packed placement group per planned node.  Once some outputs exist the run's own
script kills one worker node whole (its raylet and every process under it, found by the
node's temp dir: Ray's workers retitle themselves ``ray::...``), then, once the run has
re-fitted to the two nodes left, starts a new node; the run must end with every output
exactly once, both re-fits in its record, and replicas on the new node; the deaths are
said in fitwork's one line on stderr, and Ray's notices of them kept off stdout.

The head is told to notice a dead node within ~2 s (``RAY_health_check_*``); with Ray's
defaults it took ~14 s here, which only makes the run longer.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator

import psutil
import pytest

from .ray_nodes import ROOT, TOKEN_AUTH, Cluster, Node, node_processes, ray_nodes

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="Ray is not installed: pip install 'fitwork[ray]'")
ITEMS = 2400
FAST_DETECTION = {"RAY_health_check_initial_delay_ms": "1000",
                  "RAY_health_check_period_ms": "500",
                  "RAY_health_check_timeout_ms": "1000",
                  "RAY_health_check_failure_threshold": "3"}


@pytest.fixture
def three_nodes() -> Iterator[Cluster]:
    """A head and two worker nodes, one CPU each, and a spare temp dir for the node that
    joins."""
    with ray_nodes([Node(), Node(), Node()], spares=1, extra_env=FAST_DETECTION) as cluster:
        yield cluster


SCRIPT = textwrap.dedent("""
    import contextlib, json, os, subprocess, sys, time
    import psutil, ray
    import fitwork
    from fitwork import Pipeline
    from fitwork.fit.plan import plan_for
    from fitwork.hardware.fleet import Fleet
    from fitwork.hardware.ray_cluster import free_per_node
    from fitwork.profiling.record import PipelineProfile, UnitProfile
    from tests.engine.ray_nodes import node_processes, start_node
    from tests.engine.test_ray_node_death import ITEMS

    address, temps = sys.argv[1], json.loads(sys.argv[2])

    events = {}
    JOINED = temps[0] + "/joined"  # written once the new node took part: work speeds up

    def work():  # ~30 ms an item through the five units until then (~6 s per 200)
        time.sleep(0.002 if os.path.exists(JOINED) else 0.006)

    def square(x):
        work()
        return x * x

    def inc(x):
        work()
        return x + 1

    def double(x):
        work()
        return 2 * x

    def negate(x):
        work()
        return -x

    def shift(x):
        work()
        return x + 1000

    pipeline = Pipeline(square, inc, double, negate, shift, name="five")
    units = [UnitProfile(name=u.name, kind="map", resources={"cpu": 1.0},
                         device_class="cpu-x86", samples=8, wall_s=0.006, cpu_s=0.006,
                         bytes_in=100.0, bytes_out=100.0, output_ratio=1.0, peak_rss=0)
             for u in pipeline.units]
    profile = PipelineProfile(fitwork_version="t", pipeline="five", host_class="cpu-x86",
                              created_at=0, units=units)
    fleet = Fleet.parse({"name": "three", "node_types": [
        {"name": "cpu", "count": 3, "cores": 1, "memory": "4GiB"}]})
    placement = plan_for(profile, fleet).placement()

    def node_of(node_id):
        for node in ray.nodes():
            if node["NodeID"] == node_id:
                return next(t for t in temps if t in node["ObjectStoreSocketName"])

    def busy(temp):  # whether a node holds replicas (or reservations): less than a CPU free
        free = free_per_node()
        return any(free.get(node["NodeID"], {}).get("CPU", 0.0) < 0.999 for node in ray.nodes()
                   if node["Alive"] and temp in node["ObjectStoreSocketName"])

    outputs, joiner = [], None
    t0 = time.monotonic()
    with fitwork.run(pipeline, range(ITEMS), engine="ray", address=address,
                     placement=placement) as result:
        for output in result:
            outputs.append(output)
            if len(outputs) == 300:  # kill a worker node that holds replicas
                victim = next(t for t in temps[1:3] if busy(t))
                for process in node_processes(victim):
                    with contextlib.suppress(psutil.Error):
                        process.kill()
                events["killed_s"], events["victim"] = time.monotonic() - t0, victim
                events["victim_id"] = next(n["NodeID"] for n in ray.nodes()
                                           if victim in n["ObjectStoreSocketName"])
                joiner = subprocess.Popen([sys.executable, "-c",  # a new node joins
                    "import sys, os; from tests.engine.ray_nodes import "
                    "start_node; start_node(sys.argv[1], sys.argv[2], dict(os.environ))",
                    address, temps[3]])
            if joiner is not None and "joined_s" not in events and len(outputs) % 20 == 0 \\
                    and busy(temps[3]):
                events["joined_s"] = time.monotonic() - t0
                open(JOINED, "w").close()
    record = result.record
    events["wall_s"] = time.monotonic() - t0
    if joiner is not None:
        joiner.wait(timeout=120)
    nodes = {w.node: node_of(w.node) for w in record.workers if w.node}
    print(json.dumps({"outputs": outputs, "events": events, "status": record.status,
                      "refits": [r.model_dump() for r in record.refits],
                      "workers": [[w.unit, nodes.get(w.node), w.exit_cause, w.ended_s]
                                  for w in record.workers],
                      "units": {u.name: u.items_in for u in record.units}}))
""")


def test_a_node_dies_mid_run_and_the_run_refits(three_nodes: Cluster) -> None:
    address, temps = three_nodes.address, three_nodes.temps
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", SCRIPT, address, json.dumps(temps)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, **TOKEN_AUTH,
                               "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    events = report["events"]
    expected = sorted(-(2 * (x * x + 1)) + 1000 for x in range(ITEMS))
    brief = {k: v for k, v in report.items() if k != "outputs"}
    assert len(report["outputs"]) == ITEMS, (brief, done.stderr[-3000:])
    assert sorted(report["outputs"]) == expected  # every output, each once
    assert report["status"] == "completed"
    victim = events["victim"]
    died = [r for r in report["refits"] if "died" in r["reason"]]
    assert died, report["refits"]
    assert events["victim_id"][:8] in died[0]["reason"], died
    assert all(count >= 1 for count in died[0]["after"].values()), died
    there = [w for w in report["workers"] if w[1] == victim]
    assert there and all(w[2] != "stopped" for w in there), there  # they died there
    # the run did not wait on the dead node: it ended well within a replica's 120 s wait
    assert events["wall_s"] - events["killed_s"] < 60, events
    # the node that joined was used: replicas ran there, and a re-fit put them there (the
    # one after the loss, where the new node was up by then, or one of its own)
    assert any(w[1] == temps[3] for w in report["workers"]), report["workers"]
    grown = [r for r in report["refits"] if "joined" in r["reason"]
             and sum(r["after"].values()) > sum(r["before"].values())]
    assert grown or died[0]["after"] == died[0]["before"], report["refits"]
    # the deaths fitwork handled are said in its own one line; Ray's notice of each (its
    # multi-line "marked dead" / "A worker died" warnings) stays off the user's stdout
    assert "marked dead" not in done.stdout and "A worker died" not in done.stdout, \
        done.stdout[-2000:]
    said = [line for line in done.stderr.splitlines() if "death(s) handled" in line]
    assert len(said) == 1 and "1 node(s) lost" in said[0], done.stderr[-2000:]
    print(f"node death run: {events}; re-fits: {report['refits']}; workers: "
          f"{report['workers']}; test {time.monotonic() - started:.0f} s")


KILLER = textwrap.dedent("""
    import sys
    import ray
    import fitwork
    from fitwork import Pipeline
    from tests.engine.units import die_once_on_13

    ray.init(num_cpus=2, object_store_memory=80 * 2**20, include_dashboard=False,
             _temp_dir=sys.argv[1])  # log_to_driver on, as a user's would be
    items = [(x, sys.argv[1] + "/died") for x in range(60)]
    with fitwork.run(Pipeline(die_once_on_13, name="killer"), items, engine="ray") as result:
        outputs = sorted(result)
    print("outputs", outputs == list(range(60)), result.record.worker_restarts, flush=True)
    ray.shutdown()
""")


def test_a_worker_death_is_one_line_of_fitworks_not_rays_notice() -> None:
    temp = tempfile.mkdtemp(prefix="fw-k-")
    try:
        done = subprocess.run([sys.executable, "-c", KILLER, temp], cwd=ROOT,
                              capture_output=True, text=True, timeout=180,
                              env={**os.environ, **TOKEN_AUTH,
                                   "PYTHONPATH": str(ROOT)})
    finally:
        for process in node_processes(temp):
            with contextlib.suppress(psutil.Error):
                process.kill()
        shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "outputs True 1" in done.stdout, done.stdout[-2000:]
    assert "A worker died" not in done.stdout and "SYSTEM_ERROR" not in done.stdout, \
        done.stdout[-3000:]
    said = [line for line in done.stderr.splitlines() if "death(s) handled" in line]
    assert said == [said[0]] and "1 Ray replica death(s) handled (die_once_on_13 1)" in said[0], \
        done.stderr[-2000:]
