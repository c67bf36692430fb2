"""Discovery: cgroup and environment parsers on real-format text, and this host for real."""

from __future__ import annotations

import os
import sys
import types
from pathlib import PurePosixPath

import psutil
import pytest

from fitwork.hardware.discover import (
    GpuInfo,
    cgroup_cpu_limit,
    cgroup_dirs,
    cgroup_memory_limit,
    discover_local,
    nvml_gpus,
    parse_cfs_quota,
    parse_cpu_max,
    parse_memory_limit_in_bytes,
    parse_memory_max,
    parse_mountinfo,
    parse_proc_cgroup,
    parse_visible_devices,
    select_visible,
    slurm_cpus,
    slurm_memory,
)
from fitwork.hardware.fleet import Fleet

# /proc/self/cgroup and /proc/self/mountinfo as a cgroup v1 host (with the v2 hierarchy mounted
# beside it, as systemd's hybrid mode does) writes them.
V1_CGROUP = """\
9:name=systemd:/
8:pids:/
4:memory:/process_api/828b33d4f09a57d719dc663a4b6008c6
3:cpuset:/
2:cpuacct:/
1:cpu:/job42
0::/
"""
V1_MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""

# A Kubernetes pod on a cgroup v2 node, seen from the host's cgroup namespace.
POD = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-abc.scope"
V2_CGROUP = f"0::{POD}\n"
V2_MOUNTINFO = (
    "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
)


def _files(files: dict[str, str]):
    """A reader over a dict of path -> text, standing in for the cgroup filesystem."""

    def read(path: PurePosixPath) -> str | None:
        return files.get(str(path))

    return read


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("200000 100000\n", 2.0), ("150000 100000", 1.5), ("max 100000\n", None), ("", None)],
)
def test_cpu_max(text: str, cpus: float | None) -> None:
    assert parse_cpu_max(text) == cpus


@pytest.mark.parametrize(
    ("quota", "period", "cpus"),
    [("-1\n", "100000\n", None), ("150000\n", "100000\n", 1.5), ("400000", "100000", 4.0)],
)
def test_cfs_quota(quota: str, period: str, cpus: float | None) -> None:
    assert parse_cfs_quota(quota, period) == cpus


def test_memory_limits() -> None:
    assert parse_memory_max("8589934592\n") == 8 * 2**30
    assert parse_memory_max("max\n") is None
    assert parse_memory_limit_in_bytes("9223372036854771712\n") is None
    assert parse_memory_limit_in_bytes("4294967296\n") == 4 * 2**30


def test_proc_cgroup_maps_controllers_to_paths() -> None:
    paths = parse_proc_cgroup(V1_CGROUP + "2:cpu,cpuacct:/docker/abc\n")
    assert paths["memory"] == "/process_api/828b33d4f09a57d719dc663a4b6008c6"
    assert paths["cpu"] == paths["cpuacct"] == "/docker/abc"
    assert paths["name=systemd"] == "/"
    assert paths[""] == "/"


def test_mountinfo_lines_parse_with_optional_fields_and_escapes() -> None:
    mounts = parse_mountinfo(V2_MOUNTINFO + r"50 1 8:1 / /mnt/my\040disk rw - ext4 /dev/sda1 rw")
    assert mounts[0].mount_point == "/sys/fs/cgroup"
    assert mounts[0].fstype == "cgroup2"
    assert "nsdelegate" in mounts[0].super_options
    assert mounts[1].mount_point == "/mnt/my disk"


def test_cgroup_dirs_run_from_the_leaf_up_to_the_mount() -> None:
    chain = cgroup_dirs("memory", V1_CGROUP, V1_MOUNTINFO)
    assert [str(p) for p in chain] == [
        "/sys/fs/cgroup/memory/process_api/828b33d4f09a57d719dc663a4b6008c6",
        "/sys/fs/cgroup/memory/process_api",
        "/sys/fs/cgroup/memory",
    ]
    assert cgroup_dirs("", V2_CGROUP, V2_MOUNTINFO)[0] == PurePosixPath("/sys/fs/cgroup" + POD)
    assert cgroup_dirs("", V2_CGROUP, V2_MOUNTINFO)[-1] == PurePosixPath("/sys/fs/cgroup")
    assert cgroup_dirs("pids", V1_CGROUP, V1_MOUNTINFO) == []  # pids is not mounted here


def test_a_container_sees_its_cgroup_at_the_mount_root() -> None:
    mountinfo = (
        "40 31 0:35 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct"
    )
    chain = cgroup_dirs("cpu", "3:cpu,cpuacct:/docker/abc\n", mountinfo)
    assert chain == [PurePosixPath("/sys/fs/cgroup/cpu,cpuacct")]


def test_the_tightest_cgroup_cpu_quota_binds() -> None:
    read = _files(
        {
            "/sys/fs/cgroup/cpu/job42/cpu.cfs_quota_us": "300000\n",
            "/sys/fs/cgroup/cpu/job42/cpu.cfs_period_us": "100000\n",
            "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
            "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
        }
    )
    assert cgroup_cpu_limit(V1_CGROUP, V1_MOUNTINFO, read) == (
        3.0,
        "cgroup v1 /sys/fs/cgroup/cpu/job42/cpu.cfs_quota_us",
    )


def test_a_v2_parent_limit_binds_the_pod() -> None:
    parent = "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice"
    read = _files(
        {
            f"/sys/fs/cgroup{POD}/cpu.max": "max 100000\n",
            f"{parent}/cpu.max": "250000 100000\n",
            f"/sys/fs/cgroup{POD}/memory.max": "2147483648\n",
            f"{parent}/memory.max": "max\n",
        }
    )
    assert cgroup_cpu_limit(V2_CGROUP, V2_MOUNTINFO, read) == (2.5, f"cgroup v2 {parent}/cpu.max")
    assert cgroup_memory_limit(V2_CGROUP, V2_MOUNTINFO, read) == (
        2 * 2**30,
        f"cgroup v2 /sys/fs/cgroup{POD}/memory.max",
    )


def test_no_cgroup_files_means_no_cgroup_limit() -> None:
    assert cgroup_cpu_limit(V1_CGROUP, V1_MOUNTINFO, _files({})) is None
    assert cgroup_memory_limit("", "", _files({})) is None


def test_slurm_variables() -> None:
    assert slurm_cpus({}) is None
    assert slurm_cpus({"SLURM_CPUS_ON_NODE": "16", "SLURM_CPUS_PER_TASK": "4"}) == (
        4.0,
        "SLURM_CPUS_PER_TASK",
    )
    assert slurm_cpus({"SLURM_CPUS_ON_NODE": "8(x2)"}) is None
    assert slurm_memory({"SLURM_MEM_PER_NODE": "4096"}) == (4 * 2**30, "SLURM_MEM_PER_NODE")
    assert slurm_memory({"SLURM_MEM_PER_CPU": "1000", "SLURM_CPUS_ON_NODE": "2"}) == (
        2000 * 2**20,
        "SLURM_MEM_PER_CPU x SLURM_CPUS_ON_NODE",
    )


@pytest.mark.parametrize(
    ("value", "entries"),
    [
        (None, None),
        ("all", None),
        ("", []),
        ("none", []),
        ("void", []),
        ("NoDevFiles", []),
        ("0,2", ["0", "2"]),
        ("GPU-8f6f9c7e-1111, 1", ["GPU-8f6f9c7e-1111", "1"]),
    ],
)
def test_visible_devices_values(value: str | None, entries: list[str] | None) -> None:
    assert parse_visible_devices(value) == entries


GPUS = [
    GpuInfo(0, "NVIDIA H100 80GB HBM3", "GPU-aaaa1111-0000-0000-0000-000000000000", 80 * 2**30),
    GpuInfo(1, "NVIDIA H100 80GB HBM3", "GPU-bbbb2222-0000-0000-0000-000000000000", 80 * 2**30),
    GpuInfo(2, "NVIDIA H100 80GB HBM3", "GPU-cccc3333-0000-0000-0000-000000000000", 80 * 2**30),
]


def test_cuda_visible_devices_restricts_by_index_or_uuid() -> None:
    chosen, where = select_visible(GPUS, {"CUDA_VISIBLE_DEVICES": "2,GPU-aaaa"})
    assert [g.index for g in chosen] == [2, 0]
    assert where == "CUDA_VISIBLE_DEVICES=2,GPU-aaaa"
    assert select_visible(GPUS, {"CUDA_VISIBLE_DEVICES": ""})[0] == []
    # CUDA ignores the list from its first invalid entry on.
    assert [g.index for g in select_visible(GPUS, {"CUDA_VISIBLE_DEVICES": "1,7,0"})[0]] == [1]


def test_cuda_visible_devices_wins_over_nvidia_visible_devices() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "1", "NVIDIA_VISIBLE_DEVICES": "all"}
    assert [g.index for g in select_visible(GPUS, env)[0]] == [1]


def test_nvidia_visible_devices_inside_a_container_is_already_applied() -> None:
    chosen, where = select_visible(GPUS[:2], {"NVIDIA_VISIBLE_DEVICES": "5,6"})
    assert chosen == GPUS[:2]
    assert "already applied" in where
    assert select_visible(GPUS, {"NVIDIA_VISIBLE_DEVICES": "void"})[0] == []
    assert select_visible(GPUS, {"NVIDIA_VISIBLE_DEVICES": "all"})[0] == GPUS
    assert select_visible(GPUS, {})[0] == GPUS


def test_this_host_is_discovered_sanely() -> None:
    fleet = discover_local()
    assert isinstance(fleet, Fleet)
    (node,) = fleet.node_types
    assert node.count == 1
    assert 1 <= node.cores <= (os.cpu_count() or 1)
    assert 0 < node.memory <= psutil.virtual_memory().total
    assert node.cpu_class in ("cpu-x86", "cpu-arm")
    gpus, _ = nvml_gpus()
    assert sum(node.devices.values()) <= len(gpus)
    if not gpus:
        assert node.devices == {}
    assert node.discovered_from is not None
    assert set(node.discovered_from) == {
        "cores", "memory", "devices", "network_bandwidth", "cpu_class",
    }  # fmt: skip
    assert node.hourly_price() is not None or node.devices


def test_slurm_and_cuda_variables_bind_discovery() -> None:
    env = {"SLURM_CPUS_ON_NODE": "1", "SLURM_MEM_PER_NODE": "1024", "CUDA_VISIBLE_DEVICES": ""}
    (node,) = discover_local(env=env).node_types
    assert node.cores == 1
    assert node.memory == 2**30
    assert node.devices == {}
    assert node.discovered_from is not None
    assert node.discovered_from["cores"].startswith("SLURM_CPUS_ON_NODE (smallest of: ")
    assert node.discovered_from["memory"].startswith("SLURM_MEM_PER_NODE")
    assert "CUDA_VISIBLE_DEVICES=" in node.discovered_from["devices"]


def test_a_discovered_fleet_survives_a_yaml_round_trip(tmp_path) -> None:
    fleet = discover_local()
    path = tmp_path / "local.yaml"
    path.write_text(fleet.to_yaml())
    assert Fleet.from_yaml(path) == fleet


class _FakeNvml(types.ModuleType):
    """A stand-in for the pynvml module (the NVIDIA driver is not on this host)."""

    class NVMLError(Exception):
        pass

    def __init__(self, names: list[bytes | str], fail_init: bool = False) -> None:
        super().__init__("pynvml")
        self.names = names
        self.fail_init = fail_init
        self.shut_down = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes | str:
        return self.names[handle]

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle:08d}-0000"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(total=80 * 2**30)


def test_nvml_gpus_map_to_catalog_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeNvml([b"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "Tesla T4", "Odd GPU"])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpus, note = nvml_gpus()
    assert [g.name for g in gpus][:2] == ["NVIDIA H100 80GB HBM3"] * 2
    assert gpus[3].uuid == "GPU-00000003-0000" and note == "NVML lists 4"
    assert fake.shut_down
    (node,) = discover_local(env={"CUDA_VISIBLE_DEVICES": "0,2,3"}).node_types
    assert node.devices == {"H100-SXM": 1, "T4": 1}
    assert node.discovered_from is not None
    assert "not in the catalog, left out: Odd GPU" in node.discovered_from["devices"]


def test_nvml_that_fails_to_start_means_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml([b"Tesla T4"], fail_init=True))
    assert nvml_gpus() == ([], "no NVML (Driver Not Loaded)")
    (node,) = discover_local(env={}).node_types
    assert node.devices == {}


def test_no_pynvml_means_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    assert nvml_gpus() == ([], "no NVML (nvidia-ml-py not installed)")
