"""Kubernetes nodes read as node types: GFD and AMD labels, MIG, DRA, taints, unknown products."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from fitwork.errors import InputError
from fitwork.hardware.fleet import Fleet
from fitwork.orchestrate.cluster import ClusterError, DraDevice
from fitwork.orchestrate.k8s_fleet import read_k8s
from fitwork.orchestrate.quantity import cpu_quantity, memory_quantity, parse_quantity

from .helpers import DATA, cluster, fitwork, nodes


def by_name(found):  # type: ignore[no-untyped-def]
    return {t.name: t for t in found.types}


def test_quantities_read_as_kubernetes_writes_them() -> None:
    assert parse_quantity("191450m") == pytest.approx(191.45)
    assert parse_quantity("2002198320Ki") == 2002198320 * 1024
    assert parse_quantity("192G") == 192e9
    assert parse_quantity("1e3") == 1000
    assert parse_quantity(8) == 8
    with pytest.raises(InputError, match="'12 cores' is not a Kubernetes quantity"):
        parse_quantity("12 cores")
    assert cpu_quantity(4.0) == "4" and cpu_quantity(1.25) == "1250m"
    assert memory_quantity(64 * 2**30) == "64Gi" and memory_quantity(2**20 + 1) == "2Mi"


def test_gpu_operator_labels_give_product_count_and_the_gpu_taint_is_tolerated() -> None:
    h100 = by_name(cluster())["p5.48xlarge"]
    assert (h100.count, h100.cores, h100.memory) == (2, 191, 2002198320 * 1024)
    accel = h100.accelerators
    assert accel is not None
    assert (accel.device_class, accel.count, accel.resource) == ("H100-SXM", 8, "nvidia.com/gpu")
    assert accel.memory == 81559 * 2**20
    assert dict(accel.selector) == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert h100.selector["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert h100.tolerations == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                 "effect": "NoSchedule"}]
    assert h100.node_type().devices == {"H100-SXM": 8}


def test_cordoned_not_ready_and_tainted_nodes_are_left_out_with_the_reason() -> None:
    found = cluster()
    assert found.excluded == {
        "ip-10-0-2-24.ec2.internal": "cordoned",
        "ip-10-0-2-25.ec2.internal": "not Ready",
        "ip-10-0-3-31.ec2.internal": "taint dedicated=ingest:NoSchedule",
        "control-plane-1": "taint node-role.kubernetes.io/control-plane:NoSchedule",
    }
    assert by_name(found)["m6i.8xlarge"].count == 3
    assert found.notes()[0].startswith("4 node(s) left out: control-plane-1 (taint")
    kept = cluster(tolerate=["dedicated"])
    assert "ip-10-0-3-31.ec2.internal" not in kept.excluded
    ingest = by_name(kept)["m6i.8xlarge-2"]  # its taint makes it a node type of its own
    assert ingest.nodes == ["ip-10-0-3-31.ec2.internal"]
    assert ingest.tolerations == [{"key": "dedicated", "operator": "Exists",
                                   "effect": "NoSchedule"}]


def test_mig_mixed_and_single_strategies_count_physical_gpus_and_keep_the_slices() -> None:
    types = by_name(cluster())
    mixed, single = types["p4d.24xlarge"].accelerators, types["p4de.24xlarge"].accelerators
    assert mixed is not None and single is not None
    assert (mixed.device_class, mixed.count, mixed.resource) == ("A100-40GB", 8, "nvidia.com/gpu")
    assert dict(mixed.mig) == {"3g.20gb": 4}
    assert dict(mixed.mig_resources) == {"3g.20gb": "nvidia.com/mig-3g.20gb"}
    # single: the product label names the slice; 56 x 1g.5gb are 8 A100s, none whole
    assert (single.product, single.device_class, single.count) == (
        "NVIDIA-A100-SXM4-40GB", "A100-40GB", 8)
    assert single.resource is None and dict(single.mig) == {"1g.5gb": 56}
    assert dict(single.mig_resources) == {"1g.5gb": "nvidia.com/gpu"}


def test_amd_node_labeller_gives_the_instinct_product_and_its_memory() -> None:
    amd = by_name(cluster())["mi300x-x8"]
    accel = amd.accelerators
    assert accel is not None
    assert (accel.vendor, accel.device_class, accel.count, accel.resource) == (
        "amd", "MI300X", 8, "amd.com/gpu")
    assert accel.memory == 192 * 10**9
    assert amd.tolerations == [{"key": "amd.com/gpu", "operator": "Exists",
                                "effect": "NoSchedule"}]


def test_dra_resource_slices_give_the_gpus_of_a_node_without_a_device_plugin() -> None:
    dra = by_name(cluster())["a3-highgpu-2g"]
    accel = dra.accelerators
    assert accel is not None
    assert (accel.device_class, accel.count, accel.resource) == ("H100-SXM", 2, None)
    assert accel.dra == DraDevice("gpu.nvidia.com", "productName", "NVIDIA H100 80GB HBM3")
    without = by_name(read_k8s(nodes(), None))["a3-highgpu-2g"]
    assert without.accelerators is None  # nothing else says it has GPUs


def test_an_unknown_product_is_named_with_the_closest_classes_and_left_out() -> None:
    found = cluster()
    rtx = by_name(found)["g6e.xlarge"]
    assert rtx.accelerators is not None and rtx.accelerators.device_class is None
    assert "g6e.xlarge" not in [n.name for n in found.fleet().node_types]
    note = next(n for n in found.notes() if "g6e.xlarge" in n)
    assert "'NVIDIA-GeForce-RTX-4090' is not in the catalog (closest: A10G, L4" in note


def test_the_fleet_has_the_usable_node_types() -> None:
    fleet = cluster().fleet()
    assert {n.name: (n.count, n.devices) for n in fleet.node_types} == {
        "a3-highgpu-2g": (1, {"H100-SXM": 2}), "p5.48xlarge": (2, {"H100-SXM": 8}),
        "p4d.24xlarge": (1, {"A100-40GB": 8}), "p4de.24xlarge": (1, {"A100-40GB": 8}),
        "mi300x-x8": (1, {"MI300X": 8}), "m6i.8xlarge": (3, {})}
    assert fleet.node_count() == 9


def test_input_that_is_not_a_node_list_gives_one_line() -> None:
    with pytest.raises(ClusterError, match=r"nodes: expected the JSON of `kubectl get nodes "
                                           r"-o json` \(a List of Node\), found an object of "
                                           r"kind 'Pod'"):
        read_k8s({"kind": "Pod", "apiVersion": "v1"})
    bad = nodes()
    bad["items"][2]["status"]["allocatable"]["cpu"] = "lots"
    with pytest.raises(InputError, match=r"node ip-10-0-2-21\.ec2\.internal: allocatable cpu: "
                                         r"'lots' is not a Kubernetes quantity"):
        read_k8s(bad)


def test_fleet_k8s_prints_the_node_types_and_writes_a_fleet(tmp_path: Path) -> None:
    out = tmp_path / "fleet.yaml"
    done = fitwork("fleet", "k8s", "--nodes", str(DATA / "nodes.json"), "--slices",
                   str(DATA / "slices.json"), "-o", str(out), env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "4 node(s) left out" in done.stdout and "NVIDIA-GeForce-RTX-4090" in done.stdout
    fleet = Fleet.from_yaml(out)
    assert fleet.name == "nodes" and fleet.device_counts()["H100-SXM"] == 18
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    done = fitwork("fleet", "k8s", "--nodes", str(broken))
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: nodes {broken}: not JSON or YAML")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_an_unreachable_cluster_gives_one_line(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes", reason="the live path needs fitwork[k8s]")
    config = tmp_path / "kubeconfig"
    config.write_text(textwrap.dedent("""\
        apiVersion: v1
        kind: Config
        clusters: [{name: gone, cluster: {server: "https://127.0.0.1:9"}}]
        users: [{name: me, user: {token: x}}]
        contexts: [{name: gone, context: {cluster: gone, user: me}}]
        current-context: gone
    """))
    done = fitwork("fleet", "k8s", env={"KUBECONFIG": str(config)}, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("error: cannot read the Kubernetes cluster at "
                               "https://127.0.0.1:9: ")
    assert lines[0].endswith("pass --nodes FILE from `kubectl get nodes -o json`")


BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "kubernetes" or name.startswith("kubernetes."):
            raise ImportError("No module named 'kubernetes'")
sys.meta_path.insert(0, Block())
sys.argv = ["fitwork", *sys.argv[1:]]
from fitwork.cli import main
assert "kubernetes" not in sys.modules
main()
"""


def test_without_the_kubernetes_client_fitwork_works_and_says_what_to_install() -> None:
    import subprocess

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", BLOCK, *args], capture_output=True,
                              text=True, timeout=60,
                              env={**os.environ, "KUBECONFIG": "/nonexistent"})

    helped = run("--help")
    assert helped.returncode == 0 and "deploy" in helped.stdout, helped.stderr
    live = run("fleet", "k8s")
    assert live.returncode == 1
    assert live.stderr.strip() == ("error: reading a live cluster needs the Kubernetes client: "
                                   "pip install 'fitwork[k8s]' (or pass --nodes FILE from "
                                   "`kubectl get nodes -o json`)")
