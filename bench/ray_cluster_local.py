"""A Ray cluster of several nodes on this host, started and stopped by the bench that uses it.

Each node is its own ``ray start`` (the head, then the workers side by side) with its own
temp dir, a capped object store and its CPUs, labelled with one node type, as
tests/engine/test_ray_node_death.py starts them; token authentication with a fresh token
unless ``RAY_AUTH_MODE`` says otherwise (this process and its children join with it).
Its processes are found by the temp dir they were started with (Ray's workers retitle
themselves, so not by name), and only those are stopped; CPU-seconds are read over them and
their children (the workers) while it runs.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
NODE_TYPE = "cpu"


def free_port() -> int:
    """A TCP port nothing on this host listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def token_auth() -> None:
    """Token auth for this process and the clusters it starts, as every cluster fitwork
    starts has, unless ``RAY_AUTH_MODE`` says otherwise.  Call it before anything here
    touches Ray: Ray reads the mode once a process (a driver that profiled first then
    joined the clusters without a token)."""
    if "RAY_AUTH_MODE" not in os.environ:
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))


class LocalCluster:
    """``nodes`` Ray nodes of ``cpus`` CPUs each on this host (one the head)."""

    def __init__(self, nodes: int = 3, cpus: float = 1.0, store: int = 150 * 2**20) -> None:
        self.count, self.cpus, self.store = nodes, cpus, store
        self.temps: list[str] = []
        self.address = ""
        token_auth()
        self.env = dict(os.environ)  # this process joins with the same token
        self.seen: dict[tuple[int, float], float] = {}
        self.roots: list[psutil.Process] = []
        self.lock = threading.Lock()
        self.running = False

    def _start(self, temp: str, head: bool) -> None:
        where = ([f"--port={self.address.rsplit(':', 1)[1]}", "--head",
                  "--include-dashboard=false", f"--ray-client-server-port={free_port()}"]
                 if head else [f"--address={self.address}"])
        done = subprocess.run(
            [RAY, "start", *where, f"--num-cpus={self.cpus:g}", f"--temp-dir={temp}",
             f"--object-store-memory={self.store}", f"--labels=fitwork.node-type={NODE_TYPE}",
             "--disable-usage-stats"], capture_output=True, text=True, env=self.env,
            timeout=240)
        if done.returncode != 0:
            raise SystemExit(f"ray start ({'head' if head else 'worker'}) failed: "
                             f"{(done.stdout + done.stderr)[-1500:]}")

    def start(self) -> str:
        """Start every node; the head's address."""
        # short temp dirs: Ray's socket paths must stay under the OS limit
        self.temps = [tempfile.mkdtemp(prefix=f"fwn{i}-") for i in range(self.count)]
        self.address = f"127.0.0.1:{free_port()}"
        self._start(self.temps[0], head=True)
        if self.count > 1:
            with ThreadPoolExecutor(self.count - 1) as pool:
                list(pool.map(lambda t: self._start(t, head=False), self.temps[1:]))
        self.roots = self._roots()
        self.running = True
        threading.Thread(target=self._loop, daemon=True, name="cluster-cpu").start()
        return self.address

    def _roots(self) -> list[psutil.Process]:
        """The processes started with one of this cluster's temp dirs."""
        found = []
        for process in psutil.process_iter(["cmdline"]):
            args = process.info["cmdline"] or []
            if any(a.startswith("--") and t in a for a in args for t in self.temps):
                found.append(process)
        return found

    def processes(self) -> list[psutil.Process]:
        """This cluster's processes and everything under them (its workers)."""
        found: dict[int, psutil.Process] = {}
        for root in self.roots:
            with contextlib.suppress(psutil.Error):
                for each in [root, *root.children(recursive=True)]:
                    found[each.pid] = each
        return list(found.values())

    def _loop(self) -> None:
        while self.running:
            self.cpu_seconds()
            time.sleep(0.1)

    def cpu_seconds(self) -> float:
        """CPU-seconds of the cluster's processes so far (those gone as last seen)."""
        with self.lock:
            for process in self.processes():
                with contextlib.suppress(psutil.Error):
                    times = process.cpu_times()
                    self.seen[(process.pid, process.create_time())] = times.user + times.system
            return sum(self.seen.values())

    def node_of(self, node: dict[str, object]) -> int:
        """Which of this cluster's nodes (0: the head) a ``ray.nodes()`` entry is."""
        socket_name = str(node.get("ObjectStoreSocketName", ""))
        return next(i for i, t in enumerate(self.temps) if t in socket_name)

    def stop(self) -> None:
        """Kill this cluster's processes (only those) and remove its temp dirs."""
        self.running = False
        self.roots = self._roots()
        doomed = self.processes()
        for process in doomed:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(doomed, timeout=10)
        for temp in self.temps:
            shutil.rmtree(temp, ignore_errors=True)


__all__ = ["NODE_TYPE", "LocalCluster", "free_port"]
