"""Accelerator samples on every node of a Ray cluster: one small sampler actor per GPU node."""

from __future__ import annotations

import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fitwork.hardware.ray_cluster import live_nodes
from fitwork.telemetry.devices import DeviceSampler
from fitwork.telemetry.record import DeviceSample


class NodeSampler:
    """Runs a `DeviceSampler` on its node, on the driver's wall clock (``t0`` from it)."""

    def __init__(self, interval: float, t0: float, node: str) -> None:
        self.sampler = DeviceSampler(interval, t0, node=node, clock=time.time).start()

    def stop(self) -> list[DeviceSample]:
        return self.sampler.stop()


class ClusterSamplers:
    """One `NodeSampler` per live node that has GPUs; `stop` gathers every sample."""

    def __init__(self, interval: float, t0: float, timeout: float,
                 nodes: list[dict[str, Any]] | None = None) -> None:
        self.timeout = timeout
        self.actors: list[Any] = []
        for node in nodes if nodes is not None else live_nodes(timeout):
            if node["Resources"].get("GPU", 0) <= 0:
                continue
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            self.actors.append(ray.remote(NodeSampler).options(
                num_cpus=0, scheduling_strategy=strategy).remote(interval, t0, node["NodeID"]))

    def stop(self) -> list[DeviceSample]:
        refs = [actor.stop.remote() for actor in self.actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.timeout) if refs else ([], [])
        samples: list[DeviceSample] = []
        for ref in ready:
            try:
                samples.extend(ray.get(ref))
            except Exception:
                continue
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        return sorted(samples, key=lambda s: (s.t_s, s.node or "", s.device))
