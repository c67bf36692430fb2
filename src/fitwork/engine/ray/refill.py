"""Idle workers given back to Ray's pool, on the nodes whose actors took them.

Ray starts as many idle workers as a node has cores once, and an actor takes one for good
(its process ends with it), so after a run of actors the next run's task replicas (or any
Ray task) waited 1.5-2.7 s for fresh worker processes where one served by idle workers had
its first frame in 15 ms (``bench/ray_start.py``, a 2-core host at load 11-13).  A run's
end (`fitwork.engine.ray.driver`), a released warm pool (`fitwork.engine.ray.warm`) and a
parked replica that leaves (`fitwork.engine.ray.replica`) ask for workers in their place.
They serve tasks, not the next run's actors: on Ray 2.60 here, actors asked for after a
refill still started fresh processes (only the workers Ray prestarted itself, which never
ran a task, went to actors).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


def _preload() -> tuple[int, str]:
    """In a pooled Ray worker: import what a task replica runs on (so its first frame does
    not wait on it); this process's id and its node's.  A worker without fitwork just stays
    idle."""
    with contextlib.suppress(ImportError):  # by name: warmed here, not depended on
        importlib.import_module("fitwork.engine.ray.tasks")
    return os.getpid(), ray.get_runtime_context().get_node_id()


_preloader: Any = None
REFILL_WAIT_S = 10.0
"""How long a caller that must see the idle workers up (a released pool, a parked replica
leaving) waits for them."""


def refill(nodes: Iterable[str | None]) -> list[Any]:
    """Ask Ray for an idle worker on each node of ``nodes`` (a node once per worker its
    actors took; ``None``: wherever Ray starts it), at most as many on a node as it has
    CPUs, each with the task replicas' module imported; references to their process and
    node ids (nobody need wait on them: the workers start in the background and stay in
    Ray's pool, idle).  Each is pinned to its node: left to Ray, they all started on the
    driver's, and a task replica on another node of a three-node cluster still started
    cold (tasks right after a released warm pool: 1,009 items/s against 12,166 after Ray
    Data, ``bench/ray_nodes.py``)."""
    global _preloader
    wanted = Counter(nodes)
    if not wanted:
        return []
    if _preloader is None:  # no cores asked: it runs now, beside the next run's replicas
        _preloader = ray.remote(num_cpus=0, max_retries=0)(_preload)
    cpus = {n["NodeID"]: int(n["Resources"].get("CPU", 0.0)) for n in ray.nodes()
            if n.get("Alive")}
    refs = []
    for node, count in wanted.items():
        if node is None:
            refs += [_preloader.remote() for _ in range(min(count, max(cpus.values(),
                                                                      default=0)))]
            continue
        pinned = _preloader.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node, soft=False))
        refs += [pinned.remote() for _ in range(min(count, cpus.get(node, 0)))]
    return refs


__all__ = ["REFILL_WAIT_S", "refill"]
