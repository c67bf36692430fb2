"""`fitwork deploy k8s`: every manifest variant valid against Kubernetes' and KubeRay's schemas,
worker groups as planned, and bad input as one line."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fitwork.fit.plan import Plan
from fitwork.hardware.ray_cluster import NODE_TYPE_LABEL
from fitwork.orchestrate.cluster import ClusterError, ClusterFleet
from fitwork.orchestrate.k8s_fleet import read_k8s
from fitwork.orchestrate.kuberay import JobSpec, manifests
from fitwork.orchestrate.shape import plan_shapes

from .helpers import DATA, cluster, fitwork, nodes, plan_on, slices
from .schemas import errors, validate

SPEC = JobSpec(pipeline="tests.engine.placed_units:pipeline", input="/data/in.jsonl",
               output="/data/out.jsonl", image="registry.example/fitwork:1", name="fw-placed")


@pytest.fixture(scope="module")
def whole() -> ClusterFleet:
    return cluster()


@pytest.fixture(scope="module")
def mixed_plan(whole: ClusterFleet) -> Plan:
    """H100 nodes and CPU nodes; the model's replicas take half a GPU each."""
    return plan_on(whole, "p5.48xlarge", "m6i.8xlarge")


def objects(plan: Plan, found: ClusterFleet, **spec: Any) -> list[dict[str, Any]]:
    written = manifests(plan, found, JobSpec(**{**SPEC.__dict__, **spec}))
    every = [o for items in written.values() for o in items]
    for obj in every:
        assert errors(obj) == [], (obj["kind"], errors(obj))
    return every


def kind(every: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [o for o in every if o["kind"] == name]


def test_plain_manifests_validate_and_carry_one_worker_group_per_node_type(
        whole: ClusterFleet, mixed_plan: Plan) -> None:
    every = objects(mixed_plan, whole)
    assert [o["kind"] for o in every] == ["Secret", "ConfigMap", "RayCluster", "RayJob"]
    cluster_obj = kind(every, "RayCluster")[0]
    groups = {g["groupName"]: g for g in cluster_obj["spec"]["workerGroupSpecs"]}
    shapes = {s.name: s for s in plan_shapes(mixed_plan)}
    assert set(groups) == {"p5-48xlarge", "m6i-8xlarge"}
    gpu, cpu = groups["p5-48xlarge"], groups["m6i-8xlarge"]
    for group, name in ((gpu, "p5.48xlarge"), (cpu, "m6i.8xlarge")):
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == \
            shapes[name].nodes
        params = group["rayStartParams"]
        assert params["labels"] == f"{NODE_TYPE_LABEL}={name}"  # what the engine selects
        assert params["num-cpus"] == str(shapes[name].cores)
    # the device class is a Ray resource, quoted for the shell KubeRay starts Ray in
    slots = shapes["p5.48xlarge"].device_slots
    assert slots >= 1
    assert json.loads(json.loads(gpu["rayStartParams"]["resources"])) == {"H100-SXM": slots}
    assert gpu["rayStartParams"]["num-gpus"] == str(slots)
    assert cpu["rayStartParams"]["num-gpus"] == "0" and "resources" not in cpu["rayStartParams"]
    pod = gpu["template"]["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == \
        str(slots)
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge",
                                   "kubernetes.io/arch": "amd64",
                                   "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}]
    assert "time-slicing" in gpu["template"]["metadata"]["annotations"][
        "fitwork.io/gpu-sharing"]  # the plan packs half-GPU replicas onto devices
    assert resources["limits"]["cpu"] == "191"
    assert "nvidia.com/gpu" not in cpu["template"]["spec"]["containers"][0]["resources"][
        "requests"]
    head = cluster_obj["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # no replica on the head
    job = kind(every, "RayJob")[0]
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": "fw-placed"}
    assert job["spec"]["entrypoint"] == (
        "fitwork run tests.engine.placed_units:pipeline --input /data/in.jsonl --output "
        "/data/out.jsonl --engine ray --plan /etc/fitwork/plan.json --quiet")
    stored = Plan.model_validate_json(kind(every, "ConfigMap")[0]["data"]["plan.json"])
    assert stored.fitted.result.replicas == mixed_plan.fitted.result.replicas


def test_dra_claims_select_the_product_by_the_drivers_attribute(whole: ClusterFleet) -> None:
    plan = plan_on(whole, "a3-highgpu-2g", "m6i.8xlarge")
    with pytest.raises(ClusterError, match=r"a3-highgpu-2g: its GPUs are published only "
                                           r"through DRA .*; deploy with --dra"):
        manifests(plan, whole, SPEC)
    every = objects(plan, whole, dra=True)
    assert [o["kind"] for o in every] == ["Secret", "ConfigMap", "ResourceClaimTemplate",
                                          "RayCluster", "RayJob"]
    claim = kind(every, "ResourceClaimTemplate")[0]
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    request = claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    slots = {s.name: s for s in plan_shapes(plan)}["a3-highgpu-2g"].device_slots
    assert request["deviceClassName"] == "gpu.nvidia.com" and request["count"] == slots
    assert request["selectors"][0]["cel"]["expression"] == (
        'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].'
        'productName == "NVIDIA H100 80GB HBM3"')
    group = next(g for g in kind(every, "RayCluster")[0]["spec"]["workerGroupSpecs"]
                 if g["groupName"] == "a3-highgpu-2g")
    pod = group["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "devices",
                                      "resourceClaimTemplateName": claim["metadata"]["name"]}]
    assert pod["containers"][0]["resources"]["claims"] == [{"name": "devices"}]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]


def test_dra_for_a_labelled_node_compares_the_product_as_the_label_writes_it(
        whole: ClusterFleet, mixed_plan: Plan) -> None:
    every = objects(mixed_plan, whole, dra=True)
    claim = kind(every, "ResourceClaimTemplate")[0]
    expression = claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0][
        "cel"]["expression"]
    assert expression.endswith(""".productName.replace(' ', "-") == "NVIDIA-H100-80GB-HBM3\"""")
    pod = next(g for g in kind(every, "RayCluster")[0]["spec"]["workerGroupSpecs"]
               if g["groupName"] == "p5-48xlarge")["template"]["spec"]
    assert "nvidia.com/gpu.product" not in pod["nodeSelector"]  # DRA picks the devices


def test_kueue_queue_and_volcano_gang_label_the_cluster(
        whole: ClusterFleet, mixed_plan: Plan) -> None:
    queued = kind(objects(mixed_plan, whole, queue="team-a"), "RayCluster")[0]
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert queued["spec"]["suspend"] is True
    kueue = kind(objects(mixed_plan, whole, queue="team-a", gang="kueue"), "RayCluster")[0]
    assert kueue["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    volcano = kind(objects(mixed_plan, whole, queue="q1", gang="volcano"), "RayCluster")[0]
    labels = volcano["metadata"]["labels"]
    assert labels["ray.io/scheduler-name"] == "volcano"
    assert labels["volcano.sh/queue-name"] == "q1"
    assert "kueue.x-k8s.io/queue-name" not in labels and "suspend" not in volcano["spec"]
    with pytest.raises(ClusterError, match=r"--gang kueue .* give --queue NAME"):
        manifests(mixed_plan, whole, JobSpec(**{**SPEC.__dict__, "gang": "kueue"}))


def test_fractional_shares_on_mig_partitioned_gpus_ask_for_slices() -> None:
    doc = nodes()
    node = next(n for n in doc["items"] if n["metadata"]["name"] == "ip-10-0-4-42.ec2.internal")
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-40GB-MIG-4g.20gb"
    node["status"]["allocatable"]["nvidia.com/gpu"] = "8"  # one 4g.20gb slice per GPU
    found = read_k8s(doc, slices())
    plan = plan_on(found, "p4de.24xlarge", "m6i.8xlarge")
    every = objects(plan, found)
    shape = {s.name: s for s in plan_shapes(plan)}["p4de.24xlarge"]
    assert shape.shares and max(shape.shares) <= 4 / 7
    group = next(g for g in kind(every, "RayCluster")[0]["spec"]["workerGroupSpecs"]
                 if g["groupName"] == "p4de-24xlarge")
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == str(len(shape.shares))  # a slice per replica
    assert group["rayStartParams"]["num-gpus"] == str(len(shape.shares))
    assert group["template"]["metadata"]["annotations"]["fitwork.io/gpu-sharing"] == \
        f"MIG: {len(shape.shares)} x 4g.20gb"
    # 1g.5gb slices are too small for half a GPU: one line, not a manifest
    with pytest.raises(ClusterError, match=r"no MIG profile holds a share of 0\.50 of a GPU "
                                           r"\(it offers 1g\.5gb\)"):
        manifests(plan_on(cluster(), "p4de.24xlarge", "m6i.8xlarge"), cluster(), SPEC)


def test_a_broken_object_is_rejected(whole: ClusterFleet, mixed_plan: Plan) -> None:
    every = objects(mixed_plan, whole, dra=True)
    raycluster = copy.deepcopy(kind(every, "RayCluster")[0])
    raycluster["spec"]["workerGroupSpecs"][0]["replica"] = 2  # a typo: unknown field
    assert "'replica' was unexpected" in errors(raycluster)[0]
    missing = copy.deepcopy(kind(every, "RayCluster")[0])
    del missing["spec"]["workerGroupSpecs"][0]["groupName"]
    assert "'groupName' is a required property" in errors(missing)[0]
    job = copy.deepcopy(kind(every, "RayJob")[0])
    job["spec"]["entrypoint"] = ["fitwork", "run"]  # a list where a string belongs
    assert "is not of type 'string'" in errors(job)[0]
    claim = copy.deepcopy(kind(every, "ResourceClaimTemplate")[0])
    claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    assert "'two' is not of type 'integer'" in errors(claim)[0]
    configmap = copy.deepcopy(kind(every, "ConfigMap")[0])
    configmap["metadata"]["labelz"] = {}
    assert errors(configmap)
    with pytest.raises(Exception, match="labelz"):
        validate(configmap)


def test_deploy_k8s_writes_the_files_and_prints_cost_and_throughput(
        tmp_path: Path, mixed_plan: Plan) -> None:
    plan_path = tmp_path / "plan.json"
    mixed_plan.save(plan_path)
    out = tmp_path / "k8s"
    done = fitwork("deploy", "k8s", str(plan_path), "-o", str(out), "--pipeline", "m:p",
                   "--input", "/in", "--output", "/out", "--nodes", str(DATA / "nodes.json"),
                   "--slices", str(DATA / "slices.json"), "--gang", "volcano")
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in out.iterdir())
    assert written == ["01-secret.yaml", "02-configmap.yaml", "03-raycluster.yaml",
                       "04-rayjob.yaml"]
    for path in out.iterdir():
        for obj in yaml.safe_load_all(path.read_text()):
            assert errors(obj) == []
    shapes = plan_shapes(mixed_plan)
    price = sum(s.hourly_price() or 0 for s in shapes)
    assert f"at ${price:,.2f} per hour at the fleet's prices" in done.stdout
    assert f"plan predicts {mixed_plan.fitted.throughput:,.1f} items/s" in done.stdout


def test_the_cluster_has_token_auth_with_the_token_in_a_secret(whole: ClusterFleet,
                                                               mixed_plan: Plan) -> None:
    every = objects(mixed_plan, whole)
    secret = kind(every, "Secret")[0]
    name = secret["metadata"]["name"]
    assert name == "fw-placed-ray-token" and secret["type"] == "Opaque"
    token = secret["stringData"]["auth_token"]  # the key KubeRay's secretName wants
    assert re.fullmatch(r"[0-9a-f]{64}", token)
    raycluster = kind(every, "RayCluster")[0]
    assert raycluster["spec"]["authOptions"] == {"mode": "token", "secretName": name}
    submitter = kind(every, "RayJob")[0]["spec"]["submitterPodTemplate"]["spec"]
    assert submitter["restartPolicy"] == "Never"
    env = {e["name"]: e for e in submitter["containers"][0]["env"]}
    assert env["RAY_AUTH_MODE"]["value"] == "token"
    assert env["RAY_AUTH_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": name,
                                                                   "key": "auth_token"}}
    assert "command" not in submitter["containers"][0]  # KubeRay's own `ray job submit`
    for obj in every:  # the token is in the Secret only
        assert obj is secret or token not in json.dumps(obj)
    again = kind(objects(mixed_plan, whole), "Secret")[0]["stringData"]["auth_token"]
    assert again != token  # a new token each time
    given = kind(objects(mixed_plan, whole, token="ab" * 32), "Secret")[0]
    assert given["stringData"]["auth_token"] == "ab" * 32
    broken = copy.deepcopy(raycluster)
    broken["spec"]["authOptions"]["mode"] = "tokens"
    assert "'tokens' is not one of ['disabled', 'token']" in errors(broken)[0]


def test_deploy_k8s_writes_the_token_readable_by_the_user_only(tmp_path: Path,
                                                                mixed_plan: Plan) -> None:
    plan_path = tmp_path / "plan.json"
    mixed_plan.save(plan_path)
    out = tmp_path / "k8s"
    out.mkdir()
    (out / "01-secret.yaml").write_text("old")
    (out / "01-secret.yaml").chmod(0o644)  # an earlier file, readable by all, is narrowed
    old = os.umask(0o022)
    try:
        done = fitwork("deploy", "k8s", str(plan_path), "-o", str(out), "--pipeline", "m:p",
                       "--input", "/in", "--output", "/out", "--nodes",
                       str(DATA / "nodes.json"))
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    secret = out / "01-secret.yaml"
    assert secret.stat().st_mode & 0o777 == 0o600
    assert (out / "03-raycluster.yaml").stat().st_mode & 0o777 == 0o644
    token = yaml.safe_load(secret.read_text())["stringData"]["auth_token"]
    assert len(token) == 64 and token not in done.stdout
    assert f"kubectl apply -f {secret} -f {out / '02-configmap.yaml'}" in done.stdout


def test_a_plan_for_a_node_type_the_cluster_lacks_names_what_is_missing(
        tmp_path: Path, mixed_plan: Plan) -> None:
    plan_path = tmp_path / "plan.json"
    mixed_plan.save(plan_path)
    doc = nodes()
    doc["items"] = [n for n in doc["items"] if "p5" not in
                    n["metadata"]["labels"].get("node.kubernetes.io/instance-type", "")]
    smaller = tmp_path / "nodes.json"
    smaller.write_text(json.dumps(doc))
    done = fitwork("deploy", "k8s", str(plan_path), "-o", str(tmp_path / "k8s"), "--pipeline",
                   "m:p", "--input", "/in", "--output", "/out", "--nodes", str(smaller))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: the plan needs node type 'p5.48xlarge', which k8s "
                               "cluster 'nodes' does not offer; it offers ")
    assert "m6i.8xlarge (3 x 31 cores)" in lines[0] and "mi300x-x8 (1 x 8 x MI300X" in lines[0]
    assert not (tmp_path / "k8s").exists()


def test_fewer_nodes_or_other_devices_than_planned_are_refused(mixed_plan: Plan) -> None:
    used = {s.name: s.nodes for s in plan_shapes(mixed_plan)}["p5.48xlarge"]
    assert used == 2
    doc = nodes()
    doc["items"] = [n for n in doc["items"]
                    if n["metadata"]["name"] != "ip-10-0-1-12.ec2.internal"]
    with pytest.raises(ClusterError, match=r"the plan uses 2 nodes of type p5\.48xlarge; k8s "
                                           r"cluster 'k8s' has 1; re-plan"):
        manifests(mixed_plan, read_k8s(doc), SPEC)
    doc = nodes()
    for node in doc["items"][:2]:
        node["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    with pytest.raises(ClusterError, match=r"node type p5.48xlarge: the plan has \{'H100-SXM': "
                                           r"8\} per node, k8s cluster 'k8s' \{'H100-SXM': 4\}"):
        manifests(mixed_plan, read_k8s(doc), SPEC)
