"""`fitwork deploy k8s FLEET --jobs JOBS`: Kueue queues per team from a real fleet plan, every
manifest valid against Kubernetes', KubeRay's and Kueue's schemas, quotas what the admitted
jobs' pods ask for, queued jobs' RayJobs in the queue and rejected ones left out."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from fitwork.fit.plan import group_resources
from fitwork.hardware.fleet import Fleet
from fitwork.jobs.plan import FleetPlan, plan_jobs
from fitwork.jobs.spec import load_jobs
from fitwork.orchestrate.kueue import Target, fleet_manifests, share_plan
from fitwork.orchestrate.quantity import parse_quantity
from fitwork.orchestrate.shape import plan_shapes
from tests.engine.test_ray_multinode import profile

from .helpers import DATA, cluster, fitwork
from .schemas import errors

TYPES = ("p5.48xlarge", "m6i.8xlarge")
JOBS = [  # two teams; e waits for a's min_rate to leave room, d never fits
    {"name": "a", "team": "vision", "weight": 2, "min_rate": 70000},
    {"name": "b", "team": "vision"},
    {"name": "c", "team": "nlp"},
    {"name": "e", "team": "nlp", "min_rate": 50000},
    {"name": "d", "team": "nlp", "min_rate": 1e9},
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, FleetPlan]:
    """A jobs file, and its fleet plan solved (real co-fit) on two node types of the test
    cluster, written where the CLI reads them."""
    root = tmp_path_factory.mktemp("kueue")
    entries = [{**j, "pipeline": "tests.engine.placed_units:pipeline",
                "input": f"data/{j['name']}.jsonl", "output": f"out/{j['name']}.jsonl"}
               for j in JOBS]
    jobs_path = root / "jobs.yaml"
    jobs_path.write_text(yaml.safe_dump({"jobs": entries}))
    found = cluster().fleet()
    fleet = Fleet(name=found.name, node_types=[n for n in found.node_types if n.name in TYPES])
    jobs = load_jobs(jobs_path)
    plan = plan_jobs(jobs, fleet, profiles={j.name: profile() for j in jobs.jobs},
                     time_limit=5)
    assert [j.status for j in plan.jobs] == ["admitted", "admitted", "admitted", "queued",
                                             "rejected"]
    plan_path = root / "fleet.json"
    plan.save(plan_path)
    return jobs_path, plan_path, plan


def _objects(folder: Path) -> list[dict[str, Any]]:
    return [o for path in sorted(folder.glob("*.yaml"))
            for o in yaml.safe_load_all(path.read_text()) if o]


def _pods(rayjob: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    spec, cluster_spec = rayjob["spec"], rayjob["spec"]["rayClusterSpec"]
    return [(cluster_spec["headGroupSpec"]["template"]["spec"], 1),
            *((g["template"]["spec"], g["replicas"]) for g in cluster_spec["workerGroupSpecs"]),
            (spec["submitterPodTemplate"]["spec"], 1)]


def _asked(rayjob: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per flavor: what the job's pods request (GPU pods on the H100 flavor, the rest on
    the CPU class's), summed by hand from the written pods."""
    out: dict[str, dict[str, float]] = {}
    for pod, count in _pods(rayjob):
        requests = {k: parse_quantity(v) for c in pod["containers"]
                    for k, v in c["resources"]["requests"].items()}
        flavor = "fitwork-h100-sxm" if "nvidia.com/gpu" in requests else "fitwork-cpu-x86"
        for key, value in requests.items():
            into = out.setdefault(flavor, {})
            into[key] = into.get(key, 0.0) + value * count
    return out


def test_cli_writes_valid_queues_per_team_and_rayjobs_in_them(
        setup: tuple[Path, Path, FleetPlan], tmp_path: Path) -> None:
    jobs_path, plan_path, plan = setup
    out = tmp_path / "k8s"
    done = fitwork("deploy", "k8s", str(plan_path), "--jobs", str(jobs_path), "-o", str(out),
                   "--nodes", str(DATA / "nodes.json"), "--slices", str(DATA / "slices.json"),
                   "--namespace", "pipelines", "--image", "registry.example/fitwork:1")
    assert done.returncode == 0, done.stderr
    every = _objects(out)
    for obj in every:
        assert errors(obj) == [], (obj["kind"], obj["metadata"]["name"], errors(obj))
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in every:
        by_kind.setdefault(obj["kind"], []).append(obj)
    assert sorted(by_kind) == ["ClusterQueue", "Cohort", "ConfigMap", "LocalQueue", "RayJob",
                               "ResourceFlavor", "Secret"]
    # a flavor per device class, labelled as the worker pods select their nodes
    flavors = {f["metadata"]["name"]: f["spec"].get("nodeLabels", {})
               for f in by_kind["ResourceFlavor"]}
    assert flavors == {
        "fitwork-cpu-x86": {"kubernetes.io/arch": "amd64"},
        "fitwork-h100-sxm": {"node.kubernetes.io/instance-type": "p5.48xlarge",
                             "kubernetes.io/arch": "amd64",
                             "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
    # one cohort for borrowing; a ClusterQueue and a LocalQueue per team
    cohort = by_kind["Cohort"][0]["metadata"]["name"]
    queues = {q["metadata"]["name"]: q["spec"] for q in by_kind["ClusterQueue"]}
    assert sorted(queues) == ["fitwork-nlp", "fitwork-vision"]
    assert {q["cohortName"] for q in queues.values()} == {cohort}
    assert {(q["metadata"]["name"], q["metadata"]["namespace"], q["spec"]["clusterQueue"])
            for q in by_kind["LocalQueue"]} == {
        ("fitwork-nlp", "pipelines", "fitwork-nlp"),
        ("fitwork-vision", "pipelines", "fitwork-vision")}
    # a RayJob per admitted or queued job, in its team's queue, suspended for Kueue
    rayjobs = {r["metadata"]["name"]: r for r in by_kind["RayJob"]}
    assert sorted(rayjobs) == ["fitwork-a", "fitwork-b", "fitwork-c", "fitwork-e"]
    for job in plan.jobs[:4]:
        rayjob = rayjobs[f"fitwork-{job.name}"]
        assert rayjob["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == f"fitwork-{job.team}"
        spec = rayjob["spec"]
        assert spec["suspend"] is True and spec["shutdownAfterJobFinishes"] is True
        assert "clusterSelector" not in spec and spec["rayClusterSpec"]["workerGroupSpecs"]
        assert rayjob["metadata"]["annotations"]["fitwork.io/status"].startswith(job.status)
        assert f"--input data/{job.name}.jsonl" in spec["entrypoint"]
    assert "job d [nlp] rejected" in done.stderr and "min_rate" in done.stderr
    assert "job e [nlp] queued" in done.stderr
    # quotas: what the admitted jobs' pods ask for, per team and flavor, in every flavor
    for team, spec in queues.items():
        group = spec["resourceGroups"][0]
        covered = group["coveredResources"]
        assert covered == ["cpu", "memory", "nvidia.com/gpu"]
        admitted = [rayjobs[f"fitwork-{j.name}"] for j in plan.jobs
                    if j.status == "admitted" and f"fitwork-{j.team}" == team]
        want: dict[str, dict[str, float]] = {}
        for rayjob in admitted:
            for flavor, amounts in _asked(rayjob).items():
                for key, value in amounts.items():
                    into = want.setdefault(flavor, {})
                    into[key] = into.get(key, 0.0) + value
        for flavor in group["flavors"]:
            assert [r["name"] for r in flavor["resources"]] == covered  # Kueue's CEL rule
            got = {r["name"]: parse_quantity(r["nominalQuota"]) for r in flavor["resources"]}
            for key in covered:
                assert got[key] == pytest.approx(want.get(flavor["name"], {}).get(key, 0.0),
                                                 abs=2**20), (team, flavor["name"], key)


def test_quotas_cover_what_each_team_holds_in_the_plan(
        setup: tuple[Path, Path, FleetPlan]) -> None:
    """Per team, the nominal quota is the plan's holding rounded up per pod: at least the
    cores and devices its admitted jobs hold, and no more than a whole device and core per
    worker pod (plus each job's head and submitter) above it, beside 2% for whole replicas
    rounding the co-fit's fractional ones up."""
    jobs_path, _, plan = setup
    jobs = load_jobs(jobs_path)
    target = Target(image="i:1", runs={j.name: (j.pipeline, "in", "out") for j in jobs.jobs})
    written = fleet_manifests(plan, cluster(), target)
    for team in ("vision", "nlp"):
        mine = [j for j in plan.jobs if j.team == team and j.status == "admitted"]
        quota = written.quotas[team]
        cores = sum(f.get("cpu", 0.0) for f in quota.values())
        gpus = sum(f.get("nvidia.com/gpu", 0.0) for f in quota.values())
        held_cores = sum(j.held.get("cores", 0.0) for j in mine)
        held_gpus = sum(j.held.get("H100-SXM", 0.0) for j in mine)
        pods = sum(s.nodes for j in mine for s in plan_shapes(written.plans[j.name]))
        assert held_cores <= cores <= held_cores * 1.02 + pods + 1.5 * len(mine)
        assert held_gpus <= gpus <= held_gpus + pods
    assert "rejected" in written.notes[-1] and "d" not in written.plans


def test_each_share_keeps_the_plans_replicas_and_packs_them_onto_few_nodes(
        setup: tuple[Path, Path, FleetPlan]) -> None:
    _, _, plan = setup
    nodes = {n.name: n for n in plan.fleet.node_types}
    for job in plan.jobs[:3]:
        share = share_plan(plan, job)
        counts = {(g.unit, g.node_type): g.replicas for g in share.fitted.result.replicas}
        assert counts == {(g.unit, g.node_type): g.replicas for g in job.replicas}
        for shape in plan_shapes(share):
            node = nodes[shape.name]
            assert shape.cores_used <= node.cores + 1e-6
            assert shape.device_slots <= sum(node.devices.values())
            asked = sum(g.replicas * group_resources(g).cpu
                        for g in job.replicas if g.node_type == shape.name)
            assert shape.nodes == max(1, math.ceil(asked / math.floor(node.cores)))


def test_a_queued_job_is_sized_for_its_min_rate(setup: tuple[Path, Path, FleetPlan]) -> None:
    _, _, plan = setup
    queued = plan.job("e")
    share = share_plan(plan, queued)
    assert queued.min_rate is not None
    assert share.fitted.throughput >= queued.min_rate * 0.99
    assert share.fitted.throughput < queued.alone_rate  # not the whole fleet


def test_bad_input_is_one_line(setup: tuple[Path, Path, FleetPlan], tmp_path: Path) -> None:
    jobs_path, plan_path, _ = setup
    nodes = ["--nodes", str(DATA / "nodes.json")]
    mixed = fitwork("deploy", "k8s", str(plan_path), "--jobs", str(jobs_path), "-o",
                    str(tmp_path / "a"), "--pipeline", "m:p", "--gang", "kueue", *nodes)
    assert mixed.returncode == 1
    assert mixed.stderr.strip() == (
        "error: --pipeline, --gang: not with --jobs (each job's pipeline, input and output "
        "come from the jobs file, its queue is its team's); drop them")
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"jobs": [
        {"name": "zz", "pipeline": "m:p", "input": "i", "output": "o"}]}))
    wrong = fitwork("deploy", "k8s", str(plan_path), "--jobs", str(other), "-o",
                    str(tmp_path / "b"), *nodes)
    assert wrong.returncode == 1 and len(wrong.stderr.strip().splitlines()) == 1
    assert "job a of the fleet plan is not in the jobs file" in wrong.stderr
    missing = fitwork("deploy", "k8s", str(plan_path), "-o", str(tmp_path / "c"), *nodes)
    assert missing.returncode == 2 and "Missing option '--pipeline'" in missing.stderr
    not_a_plan = tmp_path / "plan.json"
    not_a_plan.write_text(json.dumps({"jobs": []}))
    bad = fitwork("deploy", "k8s", str(not_a_plan), "--jobs", str(jobs_path), "-o",
                  str(tmp_path / "d"), *nodes)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1


def test_the_kueue_schemas_reject_a_broken_queue(setup: tuple[Path, Path, FleetPlan]) -> None:
    jobs_path, _, plan = setup
    jobs = load_jobs(jobs_path)
    target = Target(image="i:1", runs={j.name: (j.pipeline, "in", "out") for j in jobs.jobs})
    queue = fleet_manifests(plan, cluster(), target).objects["clusterqueues"][0]
    assert errors(queue) == []
    assert errors({**queue, "spec": {**queue["spec"], "cohort": "old-field"}})
    assert errors({**queue, "spec": {**queue["spec"], "resourceGroups": [
        {"coveredResources": [], "flavors": []}]}})
