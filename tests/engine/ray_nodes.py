"""Ray clusters of several nodes on this host for tests: each node its own ``ray start``,
temp dir and capped object store, token authentication on, stopped by temp dir."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
TOKEN_AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
"""Token authentication for the clusters these tests start (fitwork's rule), one token."""
OBJECT_STORE = 80_000_000
"""Bytes of object store per node: several stores share this host's memory."""


@dataclass(frozen=True)
class Node:
    """One node to start: its CPUs, its ``fitwork.node-type`` label, custom resources."""

    cpus: int = 1
    node_type: str = "cpu"
    resources: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Cluster:
    """A started cluster: its address, each node's temp dir (spares after the started ones,
    for nodes a test starts later) and the environment its drivers need."""

    address: str
    temps: list[str]
    env: dict[str, str]


def free_port() -> int:
    """A port nothing listens on now, below the ephemeral range (so no port the kernel
    hands out to a connection meanwhile takes it); tests side by side start their search
    at different ports."""
    start = 6300 + os.getpid() % 1500
    for port in [*range(start, 7800), *range(6300, start)]:
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 6300-7799 for a test's Ray head")


def start_node(address: str, temp: str, env: dict[str, str], node: Node = Node()) -> None:
    """Join one node to the cluster at ``address``, or start its head where ``address`` is
    ``:PORT``."""
    head = address.startswith(":")
    where = ["--head", f"--port={address[1:]}", "--include-dashboard=false"] if head else \
        [f"--address={address}"]
    extra = [f"--resources={json.dumps(node.resources)}"] if node.resources else []
    done = subprocess.run([RAY, "start", *where, f"--num-cpus={node.cpus}", f"--temp-dir={temp}",
                           f"--object-store-memory={OBJECT_STORE}", *extra,
                           f"--labels=fitwork.node-type={node.node_type}",
                           "--disable-usage-stats"],
                          capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr


def node_processes(temp: str) -> list[psutil.Process]:
    """A node's processes: those started with its temp dir, and everything under them
    (Ray's workers retitle themselves ``ray::...``, so never by their own command line)."""
    found: dict[int, psutil.Process] = {}
    me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    for process in psutil.process_iter(["cmdline"]):
        args = process.info["cmdline"] or []
        if process.pid in me or not any(a.startswith("--") and temp in a for a in args):
            continue
        with contextlib.suppress(psutil.Error):
            for each in [process, *process.children(recursive=True)]:
                found[each.pid] = each
    return list(found.values())


@contextlib.contextmanager
def ray_nodes(nodes: list[Node], *, spares: int = 0, prefix: str = "fw-n",
              extra_env: dict[str, str] | None = None) -> Iterator[Cluster]:
    """A cluster of ``nodes`` (the first is the head; the others start side by side), for as
    long as the ``with`` lasts; every node's processes are killed and temp dirs removed."""
    temps = [tempfile.mkdtemp(prefix=f"{prefix}{i}-")  # short: Unix socket paths < 108 bytes
             for i in range(len(nodes) + spares)]
    env = {**os.environ, **TOKEN_AUTH, "PYTHONPATH": str(ROOT), **(extra_env or {})}
    address = f"127.0.0.1:{free_port()}"
    try:
        start_node(":" + address.rsplit(":", 1)[1], temps[0], env, nodes[0])
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda pair: start_node(address, pair[0], env, pair[1]),
                          zip(temps[1:len(nodes)], nodes[1:], strict=True)))
        yield Cluster(address, temps, env)
    finally:
        for temp in temps:
            for process in node_processes(temp):
                with contextlib.suppress(psutil.Error):
                    process.kill()
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)
