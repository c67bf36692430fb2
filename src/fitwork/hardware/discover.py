"""Discover this host as the orchestrator granted it: usable cores, memory, GPUs, network.

Each figure is the smallest of what the places that can limit it say, and the node records
which place won (``NodeType.discovered_from``)::

    cores   = min(sched_getaffinity, cgroup cpu.max | cpu.cfs_quota_us/cfs_period_us,
                  SLURM_CPUS_ON_NODE, SLURM_CPUS_PER_TASK)
    memory  = min(psutil total, cgroup memory.max | memory.limit_in_bytes,
                  SLURM_MEM_PER_NODE, SLURM_MEM_PER_CPU x SLURM_CPUS_ON_NODE)
    devices = NVML GPUs restricted by CUDA_VISIBLE_DEVICES (else NVIDIA_VISIBLE_DEVICES),
              mapped to catalog classes by name; no NVML means no GPUs, not an error

The parsers take file contents and environment mappings as arguments and touch nothing, so
they are tested on real-format text; ``discover_local`` is the thin shell that reads the host.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import psutil

from fitwork.hardware.catalog import Catalog, UnknownDeviceClass, catalog
from fitwork.hardware.fleet import Fleet, NodeType
from fitwork.hardware.units import human_bytes

__all__ = [
    "GpuInfo",
    "Mount",
    "cgroup_cpu_limit",
    "cgroup_dirs",
    "cgroup_memory_limit",
    "discover_local",
    "nvml_gpus",
    "parse_cfs_quota",
    "parse_cpu_max",
    "parse_memory_limit_in_bytes",
    "parse_memory_max",
    "parse_mountinfo",
    "parse_proc_cgroup",
    "parse_visible_devices",
    "select_visible",
    "slurm_cpus",
    "slurm_memory",
]

Reader = Callable[[PurePosixPath], "str | None"]
"""Reads a file's text, or returns ``None`` when it cannot be read."""

SLURM_MB = 2**20
"""Bytes in Slurm's memory "megabyte" (Slurm counts memory in MiB: sbatch --mem)."""

_UNLIMITED_V1 = 2**62
"""cgroup v1 memory.limit_in_bytes at or above this means no limit (LONG_MAX, page-rounded)."""

_NO_DEVICES = {"", "none", "void", "nodevfiles"}
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


# ---------------------------------------------------------------- cgroup files (pure)


def parse_cpu_max(text: str) -> float | None:
    """CPUs allowed by a cgroup v2 ``cpu.max`` ("200000 100000" -> 2.0; "max 100000" -> None).

    ``None`` also for text that is not ``QUOTA PERIOD``.
    """
    fields = text.split()
    if len(fields) not in (1, 2) or fields[0] == "max":
        return None
    period_text = fields[1] if len(fields) == 2 else "100000"
    try:
        quota, period = int(fields[0]), int(period_text)
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs_quota(quota_text: str, period_text: str) -> float | None:
    """CPUs allowed by cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; -1 -> None."""
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_memory_max(text: str) -> int | None:
    """Bytes allowed by a cgroup v2 ``memory.max`` ("8589934592" -> int; "max" -> None)."""
    value = text.strip()
    return int(value) if value.isdigit() else None


def parse_memory_limit_in_bytes(text: str) -> int | None:
    """Bytes allowed by cgroup v1 ``memory.limit_in_bytes``; the near-LONG_MAX default -> None."""
    value = text.strip()
    if not value.isdigit() or int(value) >= _UNLIMITED_V1:
        return None
    return int(value)


@dataclass(frozen=True)
class Mount:
    """One line of ``/proc/self/mountinfo``: what is mounted where."""

    root: str
    mount_point: str
    fstype: str
    super_options: tuple[str, ...]


def _unescape(field: str) -> str:
    """A mountinfo path with its octal escapes (``\\040`` for a space) decoded."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts in ``/proc/self/mountinfo`` text (proc(5)); malformed lines are skipped."""
    mounts = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        before, after = head.split(), tail.split()
        if not sep or len(before) < 5 or len(after) < 2:
            continue
        options = tuple(after[2].split(",")) if len(after) > 2 else ()
        mounts.append(Mount(_unescape(before[3]), _unescape(before[4]), after[0], options))
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Cgroup path by controller from ``/proc/self/cgroup``; the v2 path is under key ``""``.

    ``"4:memory:/a"`` gives ``{"memory": "/a"}``, ``"2:cpu,cpuacct:/b"`` gives both
    controllers ``"/b"``, and ``"0::/c"`` gives ``{"": "/c"}``.
    """
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def cgroup_dirs(controller: str, proc_cgroup: str, mountinfo: str) -> list[PurePosixPath]:
    """Directories whose limits bind this process for ``controller``, leaf first.

    ``controller`` is a v1 controller name ("cpu", "memory") or ``""`` for the v2 hierarchy.
    The chain runs from the process's own cgroup up to the hierarchy's mount point, because a
    limit set on any ancestor applies too. Empty when that hierarchy is not mounted.
    """
    path = parse_proc_cgroup(proc_cgroup).get(controller)
    if path is None:
        return []
    for mount in parse_mountinfo(mountinfo):
        v2 = controller == "" and mount.fstype == "cgroup2"
        v1 = controller != "" and mount.fstype == "cgroup" and controller in mount.super_options
        if not (v1 or v2):
            continue
        top = PurePosixPath(mount.mount_point)
        root = mount.root.rstrip("/")
        inside = path[len(root) :] if path == root or path.startswith(root + "/") else ""
        leaf = top.joinpath(*[p for p in inside.split("/") if p and p != ".."])
        chain = [leaf, *leaf.parents]
        return chain[: chain.index(top) + 1]
    return []


def _tightest(limits: Iterable[tuple[float, str]]) -> tuple[float, str] | None:
    """The smallest (value, where) pair, or ``None`` for none."""
    found = list(limits)
    return min(found, key=lambda pair: pair[0]) if found else None


def cgroup_cpu_limit(proc_cgroup: str, mountinfo: str, read: Reader) -> tuple[float, str] | None:
    """The tightest CPU quota over this process's cgroups (v2 and v1), with its file."""
    limits: list[tuple[float, str]] = []
    for directory in cgroup_dirs("", proc_cgroup, mountinfo):
        text = read(directory / "cpu.max")
        value = parse_cpu_max(text) if text is not None else None
        if value is not None:
            limits.append((value, f"cgroup v2 {directory / 'cpu.max'}"))
    for directory in cgroup_dirs("cpu", proc_cgroup, mountinfo):
        quota, period = read(directory / "cpu.cfs_quota_us"), read(directory / "cpu.cfs_period_us")
        value = parse_cfs_quota(quota, period) if quota is not None and period is not None else None
        if value is not None:
            limits.append((value, f"cgroup v1 {directory / 'cpu.cfs_quota_us'}"))
    return _tightest(limits)


def cgroup_memory_limit(proc_cgroup: str, mountinfo: str, read: Reader) -> tuple[int, str] | None:
    """The tightest memory limit over this process's cgroups (v2 and v1), with its file."""
    limits: list[tuple[float, str]] = []
    for directory in cgroup_dirs("", proc_cgroup, mountinfo):
        text = read(directory / "memory.max")
        value = parse_memory_max(text) if text is not None else None
        if value is not None:
            limits.append((value, f"cgroup v2 {directory / 'memory.max'}"))
    for directory in cgroup_dirs("memory", proc_cgroup, mountinfo):
        text = read(directory / "memory.limit_in_bytes")
        value = parse_memory_limit_in_bytes(text) if text is not None else None
        if value is not None:
            limits.append((value, f"cgroup v1 {directory / 'memory.limit_in_bytes'}"))
    tightest = _tightest(limits)
    return (int(tightest[0]), tightest[1]) if tightest else None


# ---------------------------------------------------------------- environment (pure)


def _positive_number(text: str | None) -> float | None:
    """``text`` as a positive number, or ``None`` when absent or not a plain number."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value > 0 else None


def slurm_cpus(env: Mapping[str, str]) -> tuple[float, str] | None:
    """The CPUs Slurm granted: the smaller of SLURM_CPUS_PER_TASK and SLURM_CPUS_ON_NODE."""
    limits = []
    for name in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        value = _positive_number(env.get(name))
        if value is not None:
            limits.append((value, name))
    return _tightest(limits)


def slurm_memory(env: Mapping[str, str]) -> tuple[int, str] | None:
    """The memory Slurm granted in bytes: SLURM_MEM_PER_NODE, or per-CPU memory times CPUs."""
    limits = []
    per_node = _positive_number(env.get("SLURM_MEM_PER_NODE"))
    if per_node is not None:
        limits.append((per_node * SLURM_MB, "SLURM_MEM_PER_NODE"))
    per_cpu = _positive_number(env.get("SLURM_MEM_PER_CPU"))
    cpus = _positive_number(env.get("SLURM_CPUS_ON_NODE"))
    if per_cpu is not None and cpus is not None:
        limits.append((per_cpu * cpus * SLURM_MB, "SLURM_MEM_PER_CPU x SLURM_CPUS_ON_NODE"))
    tightest = _tightest(limits)
    return (int(tightest[0]), tightest[1]) if tightest else None


def parse_visible_devices(value: str | None) -> list[str] | None:
    """Entries of a ``*_VISIBLE_DEVICES`` value: ``None`` for all (unset or "all"), ``[]`` for none.

    "", "none", "void" and "NoDevFiles" mean no devices; otherwise a comma-separated list of
    indices or UUIDs ("0,2", "GPU-8f6f...").
    """
    if value is None or value.strip().lower() == "all":
        return None
    if value.strip().lower() in _NO_DEVICES:
        return []
    return [entry.strip() for entry in value.split(",")]


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML lists it."""

    index: int
    name: str
    uuid: str
    memory_bytes: int


def _pick(entries: list[str], gpus: list[GpuInfo]) -> list[GpuInfo]:
    """GPUs named by index or UUID prefix, in order; stops at the first entry naming none.

    Stopping there follows CUDA, which ignores a CUDA_VISIBLE_DEVICES list from its first
    invalid entry on.
    """
    chosen: list[GpuInfo] = []
    for entry in entries:
        if entry.isdigit():
            found = [g for g in gpus if g.index == int(entry)]
        else:
            found = [g for g in gpus if entry and g.uuid.lower().startswith(entry.lower())]
        if len(found) != 1:
            break
        if found[0] not in chosen:
            chosen.append(found[0])
    return chosen


def select_visible(gpus: list[GpuInfo], env: Mapping[str, str]) -> tuple[list[GpuInfo], str]:
    """The GPUs this process may use, and which variable said so.

    CUDA_VISIBLE_DEVICES wins when set. NVIDIA_VISIBLE_DEVICES is read by the container
    runtime, which already hides the other GPUs from NVML inside the container: an index list
    as long as what NVML shows is taken as already applied.
    """
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        if name not in env:
            continue
        entries = parse_visible_devices(env[name])
        where = f"{name}={env[name]}"
        if entries is None:
            return list(gpus), where
        applied = name == "NVIDIA_VISIBLE_DEVICES" and all(e.isdigit() for e in entries)
        if applied and len(entries) == len(gpus):
            return list(gpus), f"{where} (already applied by the container runtime)"
        return _pick(entries, gpus), where
    return list(gpus), "no *_VISIBLE_DEVICES set"


# ---------------------------------------------------------------- the host (I/O)


def nvml_gpus() -> tuple[list[GpuInfo], str]:
    """The GPUs NVML lists on this host, and a note; no pynvml or no driver means none."""
    try:
        import pynvml
    except ImportError:
        return [], "no NVML (nvidia-ml-py not installed)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and driver-library load failures
        return [], f"no NVML ({' '.join(str(exc).split()) or type(exc).__name__})"
    gpus: list[GpuInfo] = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name, uuid = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetUUID(handle)
            memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            gpus.append(GpuInfo(index, _text(name), _text(uuid), memory))
    except Exception as exc:  # a GPU that fails mid-listing: keep those read so far
        return gpus, f"NVML stopped after {len(gpus)} GPUs ({' '.join(str(exc).split())})"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return gpus, f"NVML lists {len(gpus)}"


def _text(value: str | bytes) -> str:
    """NVML strings, which older pynvml versions return as bytes."""
    return value.decode() if isinstance(value, bytes) else value


def _read(path: PurePosixPath) -> str | None:
    """The text of a file on this host, or ``None`` when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _summary(
    winner: tuple[float, str],
    candidates: list[tuple[float, str]],
    show: Callable[[float], str] = "{:g}".format,
) -> str:
    """Where a figure came from: the binding source, then every source considered."""
    considered = ", ".join(f"{label} {show(value)}" for value, label in candidates)
    return f"{winner[1]} (smallest of: {considered})"


def _usable_cores(env: Mapping[str, str], proc_cgroup: str, mountinfo: str) -> tuple[float, str]:
    """Usable CPUs and where the figure came from."""
    if hasattr(os, "sched_getaffinity"):
        candidates = [(float(len(os.sched_getaffinity(0))), "os.sched_getaffinity")]
    else:
        candidates = [(float(os.cpu_count() or 1), "os.cpu_count")]
    for found in (cgroup_cpu_limit(proc_cgroup, mountinfo, _read), slurm_cpus(env)):
        if found is not None:
            candidates.append(found)
    winner = min(candidates, key=lambda pair: pair[0])
    return winner[0], _summary(winner, candidates)


def _usable_memory(env: Mapping[str, str], proc_cgroup: str, mountinfo: str) -> tuple[int, str]:
    """Usable memory in bytes and where the figure came from."""
    candidates: list[tuple[float, str]] = [(psutil.virtual_memory().total, "psutil total")]
    for found in (cgroup_memory_limit(proc_cgroup, mountinfo, _read), slurm_memory(env)):
        if found is not None:
            candidates.append(found)
    winner = min(candidates, key=lambda pair: pair[0])
    return int(winner[0]), _summary(winner, candidates, human_bytes)


def _network() -> tuple[float | None, str]:
    """The fastest link speed among interfaces that are up, in bytes per second."""
    best: tuple[int, str] | None = None
    for name, stats in psutil.net_if_stats().items():
        if name == "lo" or not stats.isup or stats.speed <= 0:
            continue
        if best is None or stats.speed > best[0]:
            best = (stats.speed, name)
    if best is None:
        return None, "no interface reports a link speed (psutil.net_if_stats)"
    return best[0] * 1e6 / 8, f"psutil.net_if_stats: {best[1]} at {best[0]} Mbit/s"


def _cpu_class(known: Catalog) -> tuple[str, str]:
    """The catalog CPU class of this machine's architecture, via the classes' aliases."""
    machine = platform.machine()
    try:
        device = known.get(machine)
    except UnknownDeviceClass:
        device = None
    if device is not None and device.is_cpu:
        return device.name, f"platform.machine() = {machine}"
    fallback = known.of_kind("cpu")[0].name
    return fallback, f"platform.machine() = {machine!r} is not in the catalog; assumed {fallback}"


def _devices(env: Mapping[str, str], known: Catalog) -> tuple[dict[str, int], str]:
    """Visible GPUs counted by catalog class, and a note of what was seen and skipped."""
    gpus, listing = nvml_gpus()
    visible, rule = select_visible(gpus, env)
    counts: dict[str, int] = {}
    unknown: list[str] = []
    for gpu in visible:
        device = known.match(gpu.name)
        if device is None:
            unknown.append(gpu.name)
        else:
            counts[device.name] = counts.get(device.name, 0) + 1
    note = f"{listing}; {len(visible)} visible ({rule})"
    if unknown:
        note += f"; not in the catalog, left out: {', '.join(unknown)}"
    return counts, note


def usable_cores() -> float:
    """The CPUs this process may use: affinity, cgroup quota and Slurm's grant, the least."""
    return _usable_cores(os.environ, _read(PurePosixPath("/proc/self/cgroup")) or "",
                         _read(PurePosixPath("/proc/self/mountinfo")) or "")[0]


def discover_local(env: Mapping[str, str] | None = None, known: Catalog | None = None) -> Fleet:
    """A one-node fleet describing this host as granted to this process.

    ``env`` defaults to ``os.environ`` and ``known`` to the default catalog. The node's
    ``discovered_from`` says, for each figure, which source bound it.
    """
    env = os.environ if env is None else env
    known = known or catalog()
    proc_cgroup = _read(PurePosixPath("/proc/self/cgroup")) or ""
    mountinfo = _read(PurePosixPath("/proc/self/mountinfo")) or ""
    cores, cores_from = _usable_cores(env, proc_cgroup, mountinfo)
    memory, memory_from = _usable_memory(env, proc_cgroup, mountinfo)
    devices, devices_from = _devices(env, known)
    network, network_from = _network()
    cpu_class, cpu_class_from = _cpu_class(known)
    node = NodeType.model_validate(
        {
            "name": socket.gethostname() or "local",
            "count": 1,
            "cores": cores,
            "memory": memory,
            "devices": devices,
            "network_bandwidth": network,
            "cpu_class": cpu_class,
            "discovered_from": {
                "cores": cores_from,
                "memory": memory_from,
                "devices": devices_from,
                "network_bandwidth": network_from,
                "cpu_class": cpu_class_from,
            },
        },
        context={"catalog": known},
    )
    return Fleet(name="local", node_types=[node])


@functools.cache
def host_summary() -> dict[str, object]:
    """This host as a run record describes it: name, usable cores and memory, classes.

    Read once per process: a run starts often, and the host it runs on does not change.
    """
    node = discover_local().node_types[0]
    model = ""
    text = _read(PurePosixPath("/proc/cpuinfo")) or ""
    for line in text.splitlines():
        if line.startswith("model name"):
            model = line.partition(":")[2].strip()
            break
    return {"name": node.name, "cores": node.cores, "memory": node.memory,
            "cpu_class": node.cpu_class, "cpu_model": model or platform.processor(),
            "devices": dict(node.devices)}
