"""The Ray engine's driver: a thin shell that starts replica actors and turns Ray into events.

::

    source ─▶ driver ──process()──▶ [unit 0 actors] ──process()──▶ [unit 1 actors] ─▶ …
                 ▲                                                      │
                 └──── summaries: output refs, returned weight, failures ◀┘

The driver sends frames to the first unit's replicas (its `Router` picks the less loaded
of two) and each call returns once the frame has gone all the way down; its summary
carries references to the outputs, which the driver fetches from the object store.  Every
call result, actor start, death report, retirement and counter reading becomes an event
for the run core (`fitwork.engine.core`), which keeps the books and decides; this module
only carries out what it says.  Every call the driver makes into Ray has a deadline.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, ObjectLostError, OwnerDiedError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from fitwork.engine.contract import RunResult
from fitwork.engine.core import (
    Arrived,
    Counters,
    Done,
    Exited,
    FrameSizes,
    Lost,
    Measured,
    Ready,
    Retire,
    Send,
    Spawn,
    Taken,
)
from fitwork.engine.options import RayOptions, RunOptions
from fitwork.engine.ray.registry import Registry
from fitwork.engine.ray.replica import DEATH, Replica
from fitwork.engine.ray.routing import Router, key
from fitwork.engine.shell import Shell, policy_for
from fitwork.engine.threads import variables
from fitwork.errors import EngineError
from fitwork.hardware.ray_cluster import (
    NODE_TYPE_LABEL,
    cluster_resources,
    connect,
    labelled_node_types,
    live_nodes,
)
from fitwork.placement import Group, Placement
from fitwork.resources import Resources
from fitwork.workload.pipeline import Pipeline

FRAME_TIME = 0.05  # a Ray call costs ~1 ms of CPU: frames carry ~50 ms of work
MAX_FRAME = 2048
CPU_STEP = 0.001


class RayEngine:
    """Runs a pipeline as Ray actors, on an existing cluster or one started here."""

    name = "ray"
    options = RayOptions

    def run(self, pipeline: Pipeline, source: Iterable[Any], placement: Placement,
            options: RunOptions, engine_options: RayOptions) -> RunResult:
        """Start the actors and return a result that streams outputs as they come."""
        return RayRun(pipeline, source, placement, options, engine_options).start()


@dataclass
class _Actor:
    """The driver's view of one replica actor."""

    worker: int
    stage: int
    handle: Any
    bundle: int | None
    pid: int = 0
    ended: bool = False
    retiring: bool = False


@dataclass
class _Bundle:
    """One bundle of a node type's placement group, and the worker holding it."""

    group: Any
    index: int
    node_type: str
    shape: Resources
    holder: int | None = None


class RayRun(Shell):
    """One run on Ray: actors, frames in flight, and the core's books."""

    engine_name = "ray"

    def __init__(self, pipeline: Pipeline, source: Iterable[Any], placement: Placement,
                 options: RunOptions, ray_options: RayOptions) -> None:
        self.limits = [max(ray_options.in_flight, u.batch_size or 0, u.io)
                       for u in pipeline.units]
        first = max(1, placement.replicas(pipeline.units[0].name))
        policy = policy_for(options, max_frames=self.limits[0] * first * 2,
                            frame_time=FRAME_TIME, max_frame=MAX_FRAME, quiet_after=None,
                            whole_path=True, sample_interval=max(options.sample_interval, 0.2))
        super().__init__(pipeline, source, placement, options, policy)
        self.ray_options = ray_options
        self.timeout = ray_options.call_timeout
        self.registry: Any = None
        self.version = 0
        self.router = Router(0, self.limits[0])
        self.actors: dict[int, _Actor] = {}
        self.by_key: dict[str, int] = {}
        self.bundles: list[_Bundle] = []
        self.groups: list[Any] = []
        self.calls: dict[Any, tuple[int, int, Any]] = {}
        self.call_ids = itertools.count(1)
        self.hellos: dict[Any, int] = {}
        self.drains: dict[Any, int] = {}
        self.stats: dict[Any, int] = {}
        self.reports: Any = None
        self.last_stats = 0.0
        self.hints = [1] * len(self.units)
        self.has_gpus = False
        self.started = False

    # -- setting up ------------------------------------------------------------------------

    def connect(self) -> None:
        connect(self.ray_options.address, self.ray_options.startup_timeout)
        for unit in self.units:  # a pipeline loaded from a file travels by value
            module = sys.modules.get(getattr(unit.fn, "__module__", "") or "")
            if module is not None and getattr(module, "__fitwork_by_value__", False):
                ray.cloudpickle.register_pickle_by_value(module)
        self.has_gpus = cluster_resources(self.timeout).get("GPU", 0) > 0
        self.registry = ray.remote(Registry).options(
            num_cpus=0, max_concurrency=64, name=f"fitwork-registry-{self.run_id}").remote()
        self.reserve_groups(labelled_node_types(self.timeout))

    def demand(self, stage: int, group: Group | None) -> Resources:
        """What one replica asks Ray for: the plan's resources, else the unit's own."""
        unit = self.units[stage]
        wanted = group.resources if group is not None and group.resources is not None \
            else unit.resources
        devices = dict(wanted.devices)
        if group is not None and group.device_class and \
                not group.device_class.startswith("cpu-"):
            devices.setdefault(group.device_class, wanted.gpu or 0.01)
        # A plan's fluid cores fill a node to the brim; rounded down to a thousandth, the
        # asks of one node's replicas never add up to more than it has.
        cpu = max(CPU_STEP, math.floor(wanted.cpu / CPU_STEP) * CPU_STEP)
        return Resources(cpu=cpu, gpu=wanted.gpu if self.has_gpus else 0.0, memory=0,
                         devices=devices)

    def reserve_groups(self, labelled: set[str]) -> None:
        """One placement group per planned node type, a bundle per replica, packed.

        Every replica planned on a node type gets its bundle before any starts (on nodes of
        that type, where nodes are labelled), so a run never starts half-placed.  A
        replacement takes over the bundle its predecessor held.
        """
        by_type: dict[str, list[Resources]] = {}
        for stage, name in enumerate(self.names):
            for group in self.placement.of(name):
                if group.node_type is not None:
                    shape = self.demand(stage, group)
                    by_type.setdefault(group.node_type, []).extend([shape] * group.replicas)
        startup = self.ray_options.startup_timeout
        for node_type, shapes in by_type.items():
            bundles = []
            for shape in shapes:
                asked = {"CPU": shape.cpu, "GPU": shape.gpu, **shape.devices}
                bundles.append({k: v for k, v in asked.items() if v} or {"CPU": 0.01})
            selector = ([{NODE_TYPE_LABEL: node_type}] * len(bundles)
                        if node_type in labelled else None)
            group = placement_group(bundles, strategy="PACK", bundle_label_selector=selector,
                                    name=f"fitwork-{self.run_id}-{node_type}")
            self.groups.append(group)
            ready, _ = ray.wait([group.ready()], timeout=startup)
            if not ready:
                raise EngineError(
                    f"node type {node_type!r} could not be reserved within {startup:.0f} s: "
                    f"it needs {bundles}; the cluster has (in all) {self._available()}; plan "
                    "for this cluster's fleet (`fitwork fleet ray`)")
            self.bundles += [_Bundle(group, i, node_type, shape)
                             for i, shape in enumerate(shapes)]

    def _available(self) -> Any:
        with contextlib.suppress(Exception):
            return cluster_resources(5)
        return "(unknown: Ray did not answer)"

    def start(self) -> RunResult:
        result = super().start()
        try:
            self.await_ready()
        except BaseException:
            self.status = "aborted"
            result.close()
            raise
        return result

    def await_ready(self) -> None:
        """Wait until every replica is placed and its unit built, or say what went wrong."""
        startup = self.ray_options.startup_timeout
        ready, waiting = ray.wait(list(self.hellos), num_returns=len(self.hellos),
                                  timeout=startup)
        for ref in ready:
            self._hello(ref)
        if waiting:
            stuck = sorted({self.names[self.actors[self.hellos[r]].stage] for r in waiting})
            raise EngineError(
                f"replicas of {', '.join(stuck)} were not placed within {startup:.0f} s: the "
                f"cluster has {self._available()}; lower their demands, add nodes, or "
                "check --ray-address")
        for stage in range(len(self.units)):
            handles = [a.handle for a in self.actors.values() if a.stage == stage and not a.ended]
            self.version = self._registry("set_members", stage, handles)
        self.router.set_members([a.handle for a in self.actors.values()
                                 if a.stage == 0 and not a.ended], self.version)
        self.started = True

    def describe_host(self) -> dict[str, Any] | None:
        nodes = live_nodes(self.timeout)
        devices: dict[str, float] = {}
        for node in nodes:
            for name, amount in node["Resources"].items():
                if name == "GPU" or name.startswith("accelerator_type:"):
                    devices[name] = devices.get(name, 0.0) + amount
        return {"name": f"Ray cluster of {len(nodes)} nodes",
                "cores": sum(n["Resources"].get("CPU", 0.0) for n in nodes),
                "memory": int(sum(n["Resources"].get("memory", 0.0) for n in nodes)),
                "devices": devices}

    def start_devices(self) -> Any:
        from fitwork.engine.ray.devices import ClusterSamplers

        return ClusterSamplers(max(0.5, self.options.sample_interval), self.started_at,
                               self.timeout)

    def _registry(self, method: str, *args: Any) -> Any:
        try:
            return ray.get(getattr(self.registry, method).remote(*args), timeout=self.timeout)
        except GetTimeoutError:
            raise EngineError(f"the fitwork registry did not answer {method} within "
                              f"{self.timeout:g} s; check the Ray cluster") from None

    # -- carrying out the core's instructions ----------------------------------------------

    def spawn(self, instruction: Spawn) -> None:
        stage, group = instruction.stage, instruction.group
        unit = self.units[stage]
        wanted = self.demand(stage, group)
        options: dict[str, Any] = {"max_concurrency": 64, "max_restarts": 0,
                                   "runtime_env": {"env_vars": variables(wanted.cpu)},
                                   **wanted.to_ray()}
        bundle = None
        if group is not None and group.node_type is not None:
            bundle = next((i for i, b in enumerate(self.bundles)
                           if b.node_type == group.node_type and b.holder is None
                           and b.shape == wanted), None)
            if bundle is not None:
                chosen = self.bundles[bundle]
                chosen.holder = instruction.worker
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=chosen.group, placement_group_bundle_index=chosen.index)
        batch = group.batch_size if group is not None and group.batch_size else unit.batch_size
        replicas = max(1, self.placement.replicas(unit.name))
        handle = ray.remote(Replica).options(**options).remote(
            unit, stage, self.names, self.registry, self.options.max_attempts, self.limits,
            batch, wanted.cpu, max(1, unit.io), self.timeout, replicas,
            (self.options.sink, self.run_id, instruction.worker)
            if self.options.sink is not None and stage == len(self.units) - 1 else None)
        actor = _Actor(instruction.worker, stage, handle, bundle)
        self.actors[instruction.worker] = actor
        self.by_key[key(handle)] = instruction.worker
        self.hellos[handle.hello.remote()] = instruction.worker
        if self.started:  # a replacement, or one more: tell the others at once
            self.version = self._registry("add", stage, handle)
            if stage == 0:
                self.router.set_members([*self.router.members, handle], self.version)

    def retire(self, instruction: Retire) -> None:
        actor = self.actors.get(instruction.worker)
        if actor is None or actor.ended:
            return
        actor.retiring = True
        self.version = self._registry("remove", actor.stage, key(actor.handle))
        if actor.stage == 0:
            self.router.drop(actor.handle)
        self.drains[actor.handle.drain.remote()] = actor.worker

    def frame_sizes(self, instruction: FrameSizes) -> None:
        self.hints = [min(MAX_FRAME, size) for size in instruction.sizes]

    def reserve(self, alone: bool) -> Any:
        if not self.started:
            return None
        return self.router.pick(block=False, alone=alone)

    def unreserve(self, token: Any) -> None:
        self.router.release(token)

    def transmit(self, token: Any, send: Send) -> None:
        worker = self.by_key[key(token)]
        call = next(self.call_ids)
        ref, outputs = token.process.remote([send.segment], self.hints, self.version)
        self.calls[ref] = (worker, call, outputs if len(self.units) == 1 else None)
        segment = send.segment
        self.handle(Taken(worker, call, [(segment[0], segment[2])], time.monotonic()))

    def worker_pids(self, unit: str | None = None) -> list[int]:
        return [a.pid for a in self.actors.values() if not a.ended and a.pid
                and (unit is None or self.names[a.stage] == unit)]

    # -- turning Ray into events -----------------------------------------------------------

    def wait(self) -> None:
        refs = [*self.calls, *self.hellos, *self.drains, *self.stats,
                *([self.reports] if self.reports is not None else [])]
        if refs:
            ray.wait(refs, num_returns=1, timeout=0.05)
        else:
            time.sleep(0.01)

    def pump(self) -> None:
        now = time.monotonic()
        if now - self.last_stats >= self.policy.sample_interval:
            self.last_stats = now
            self._ask_stats()
            if self.reports is None:
                self.reports = self.registry.take_reports.remote()
        for ref in self._ready(self.hellos):
            self._hello(ref)
        for ref in self._ready(self.calls):
            self._settle(ref)
        for ref in self._ready(self.stats):
            self._stats(ref, self.stats.pop(ref))
        for ref in self._ready(self.drains):
            self._drained(ref)
        if self.reports is not None:
            ready, _ = ray.wait([self.reports], timeout=0)
            if ready:
                reports, self.reports = ray.get(ready[0]), None
                for _, actor_id in reports:
                    worker = self.by_key.get(actor_id)
                    if worker is not None:
                        self._died(worker, "the actor died (reported by a peer)")

    @staticmethod
    def _ready(refs: dict[Any, Any]) -> list[Any]:
        if not refs:
            return []
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        return ready

    def _hello(self, ref: Any) -> None:
        worker = self.hellos.pop(ref)
        actor = self.actors[worker]
        try:
            info = ray.get(ref)
        except DEATH as exc:
            self.handle(Exited(worker, clean=False, now=time.monotonic(),
                               cause="the actor died starting",
                               fatal=f"its actor died while starting ({type(exc).__name__})"))
            return
        if info["error"]:  # the core aborts the run, naming the unit and the cause
            self.handle(Exited(worker, clean=False, now=time.monotonic(),
                               cause="its unit could not start", fatal=info["error"]))
            return
        actor.pid = info["pid"]
        self.handle(Ready(worker, info["pid"], time.monotonic(), info["node"]))

    def _settle(self, ref: Any) -> None:
        worker, call, own_outputs = self.calls.pop(ref)
        actor = self.actors[worker]
        self.router.release(actor.handle)
        now = time.monotonic()
        try:
            summary = ray.get(ref)
        except DEATH as exc:
            self._died(worker, f"the actor died ({type(exc).__name__})")
            return
        refs = list(summary["outputs"]) + ([own_outputs] if own_outputs is not None else [])
        try:
            batches = ray.get(refs, timeout=self.timeout) if refs else []
        except (OwnerDiedError, ObjectLostError) as exc:
            self.handle(Lost(worker, call, now, f"outputs lost ({type(exc).__name__})"))
            return
        except GetTimeoutError:
            raise EngineError(f"Ray did not deliver a frame's outputs within {self.timeout:g} "
                              "s; check the object store of the cluster") from None
        segments = [segment for batch in batches if batch for segment in batch]
        for written in summary.get("written", ()):  # a sink's parts hold these outputs
            segments.extend(written.segments)
        self.handle(Arrived(segments, now, summary["returns"], summary["failures"]))
        self.handle(Done(worker, [call], (), (), now))

    def _died(self, worker: int, cause: str) -> None:
        actor = self.actors.get(worker)
        if actor is None or actor.ended:
            return
        actor.ended = True
        if actor.bundle is not None:
            self.bundles[actor.bundle].holder = None
        if actor.stage == 0:
            self.router.drop(actor.handle)
        with contextlib.suppress(Exception):
            self.version = self._registry("remove", actor.stage, key(actor.handle))
        self.handle(Exited(worker, clean=False, now=time.monotonic(), cause=cause))

    def _ask_stats(self) -> None:
        if self.stats:
            return
        for actor in self.actors.values():
            if not actor.ended and actor.worker not in self.hellos.values():
                self.stats[actor.handle.stats.remote()] = actor.worker

    def _stats(self, ref: Any, worker: int) -> None:
        try:
            stats = ray.get(ref)
        except Exception:
            return
        self.handle(Measured(worker, _counters(stats), time.monotonic(), stats["intervals"]))

    def _drained(self, ref: Any) -> None:
        worker = self.drains.pop(ref)
        actor = self.actors[worker]
        with contextlib.suppress(Exception):
            self._stats(ref, worker)
        actor.ended = True
        if actor.bundle is not None:
            self.bundles[actor.bundle].holder = None
        with contextlib.suppress(Exception):
            ray.kill(actor.handle, no_restart=True)
        self.handle(Exited(worker, clean=True, now=time.monotonic(), cause="retired"))

    def stop_workers(self) -> None:
        """Collect every replica's last counters (within a deadline)."""
        pending = {actor.handle.stats.remote(): actor.worker
                   for actor in self.actors.values() if not actor.ended}
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=5.0)
        for ref in ready:
            self._stats(ref, pending[ref])
        now = time.monotonic()
        for actor in self.actors.values():
            if not actor.ended:
                actor.ended = True
                self.handle(Exited(actor.worker, clean=True, now=now, cause="stopped"))

    def release(self) -> None:
        """Kill every actor of this run and free its placement groups."""
        for actor in self.actors.values():
            with contextlib.suppress(Exception):
                ray.kill(actor.handle, no_restart=True)
        if self.registry is not None:
            with contextlib.suppress(Exception):
                ray.kill(self.registry, no_restart=True)
        for group in self.groups:
            with contextlib.suppress(Exception):
                remove_placement_group(group)


def _counters(stats: dict[str, Any]) -> Counters:
    return Counters(stats["items_in"], stats["items_out"], stats["bytes_in"],
                    stats["bytes_out"], stats["busy_s"], stats["blocked_s"], stats["cpu_s"],
                    stats.get("queued_s", 0.0))


__all__ = ["RayEngine", "RayRun"]
