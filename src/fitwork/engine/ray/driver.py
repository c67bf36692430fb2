"""The Ray engine's driver: starts, watches and replaces replica actors; never relays items.

::

    source ─▶ driver ──process()──▶ [unit 0 actors] ──process()──▶ [unit 1 actors] ─▶ …
                 ▲                                                      │ ray.put (owned
                 └──────── summaries: output refs, failures ◀───────────┘  by the registry)

The driver feeds frames to the first unit's replicas (the less loaded of two at random,
a bounded number in flight) and each call returns once the frame has gone all the way
down; its summary carries references to the outputs, which the driver fetches from the
object store, and the dead letters.  Replicas report dead peers to the registry; the
driver replaces them.  Outputs are deduplicated by (source id, path), so a frame retried
after a death delivers each output once.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, ObjectLostError, OwnerDiedError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from fitwork.engine.base import RunOptions, RunResult
from fitwork.engine.books import RunBooks
from fitwork.engine.ray.registry import Registry
from fitwork.engine.ray.replica import (
    DEATH,
    Record,
    Replica,
    after_death,
    pick_member,
    release,
)
from fitwork.errors import EngineError
from fitwork.telemetry.record import (
    RunRecord,
    WorkerRecord,
)
from fitwork.workload.pipeline import Pipeline

_FRAME_TIME = 0.05  # a Ray call costs ~1 ms of CPU: frames carry ~50 ms of work
_MAX_FRAME = 2048
_IN_FLIGHT = 4
_STARTUP = 60.0
NODE_TYPE_LABEL = "fitwork.node-type"


class RayEngine:
    """Runs a pipeline as Ray actors, on an existing cluster or one started here."""

    name = "ray"

    def run(self, pipeline: Pipeline, source: Iterable[Any], options: RunOptions) -> RunResult:
        """Start the actors and return a result that streams outputs as they come."""
        return _RayRun(pipeline, source, options).start()


def connect(address: str | None) -> None:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``), or start one on this host."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address=address or os.environ.get("RAY_ADDRESS"), log_to_driver=True,
             include_dashboard=False)


Where = tuple[str | None, str | None, tuple[Any, int] | None]
"""A replica's device class, node type, and (placement group, bundle index)."""


@dataclass
class _Actor:
    """The driver's view of one replica actor."""

    stage: int
    handle: Any
    where: Where
    started: float
    hello: Any = None
    pid: int = 0
    node: str | None = None
    ended: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    intervals: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class _Frame:
    """A frame the driver has sent to the first unit and not yet seen through."""

    records: list[Record]
    target: Any
    outputs: Any


class _RayRun(RunBooks):
    """One run on Ray: its actors, frames in flight, and books."""

    engine_name = "ray"

    def __init__(self, pipeline: Pipeline, source: Iterable[Any], options: RunOptions) -> None:
        connect(options.address)
        super().__init__(pipeline, source, options)
        self.registry: Any = None
        self.actors: dict[str, _Actor] = {}
        self.groups: list[Any] = []
        self.labelled = {n.get("Labels", {}).get(NODE_TYPE_LABEL) for n in ray.nodes()
                         if n.get("Alive")} - {None}
        self.lock = threading.Condition()  # for the helpers shared with replicas
        self.members: list[Any] = []
        self.version = -1
        self.in_flight: dict[str, int] = {}
        self.alone: set[str] = set()
        self.max_attempts = options.max_attempts
        self.limits = [max(_IN_FLIGHT, u.batch_size or 0, u.resources.io) for u in self.units]
        self.max_in_flight = self.limits[0]
        self.frames: dict[Any, _Frame] = {}
        self.retry: deque[list[Record]] = deque()
        self.pending: dict[int, float] = {}
        self.delivered: dict[int, set[tuple[int, ...]]] = {}
        self.buffered: dict[int, list[tuple[tuple[int, ...], Any]]] = {}
        self.hints = [1] * len(self.units)
        self.reports: Any = None
        self.stats_refs: dict[Any, str] = {}
        self.last_sample = 0.0
        self.has_gpus = ray.cluster_resources().get("GPU", 0) > 0
        self.shut = False

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> RunResult:
        """Enter the pipeline's context, start every replica, and hand back the result."""
        try:
            self.enter_context()
            self.registry = ray.remote(Registry).options(
                num_cpus=0, max_concurrency=64, name=f"fitwork-registry-{self.run_id}").remote()
            wheres = [self.placement(stage, unit.replicas)
                      for stage, unit in enumerate(self.units)]
            wheres = self.reserve(wheres)
            for stage, placed in enumerate(wheres):
                handles = [self.spawn(stage, where) for where in placed]
                ray.get(self.registry.set_members.remote(stage, handles))
            self.await_hellos()
            self.members = [a.handle for a in self.actors.values() if a.stage == 0]
        except BaseException:
            self.shutdown()
            raise
        events = self.events()
        return RunResult(events, self.build_record, lambda: self.close(events),
                         lambda: [a.pid for a in self.actors.values()
                                  if a.ended is None and a.pid])

    def placement(self, stage: int, replicas: int) -> list[Where]:
        """(device class, node type, no bundle yet) of each replica, from the plan if given."""
        planned = (self.options.placements or {}).get(self.names[stage])
        if not planned:
            return [(None, None, None)] * replicas
        return [(device, node, None) for device, node, count in planned for _ in range(count)]

    def demand(self, stage: int, device_class: str | None) -> dict[str, float]:
        """What one replica of ``stage`` holds, in Ray's resource names."""
        unit = self.units[stage]
        held = {"CPU": unit.resources.cpu}
        if unit.resources.gpu and self.has_gpus:
            held["GPU"] = unit.resources.gpu
        if device_class and not device_class.startswith("cpu-"):
            held[device_class] = unit.resources.gpu or 0.01
        return {name: amount for name, amount in held.items() if amount}

    def reserve(self, wheres: list[list[Where]]) -> list[list[Where]]:
        """One placement group per planned node type, a bundle per replica, packed.

        The plan's per-node packing becomes a gang reservation: every replica planned on a
        node type gets its bundle before any starts (on nodes of that type, where nodes are
        labelled), so a run never starts half-placed.  A replacement reuses its bundle.
        """
        by_type: dict[str, list[tuple[int, int]]] = {}
        for stage, placed in enumerate(wheres):
            for index, (_, node_type, _) in enumerate(placed):
                if node_type is not None:
                    by_type.setdefault(node_type, []).append((stage, index))
        result = [list(placed) for placed in wheres]
        for node_type, members in by_type.items():
            bundles = [self.demand(stage, wheres[stage][index][0]) or {"CPU": 0.01}
                       for stage, index in members]
            selector = ([{NODE_TYPE_LABEL: node_type}] * len(bundles)
                        if node_type in self.labelled else None)
            group = placement_group(bundles, strategy="PACK", bundle_label_selector=selector,
                                    name=f"fitwork-{self.run_id}-{node_type}")
            self.groups.append(group)
            ready, _ = ray.wait([group.ready()], timeout=_STARTUP)
            if not ready:
                raise EngineError(
                    f"node type {node_type!r} could not be reserved within {_STARTUP:.0f} s: "
                    f"it needs {bundles}; the cluster has {ray.available_resources()}; "
                    "plan for this cluster's fleet (`fitwork fleet ray`)")
            for bundle, (stage, index) in enumerate(members):
                device_class, _, _ = wheres[stage][index]
                result[stage][index] = (device_class, node_type, (group, bundle))
        return result

    def spawn(self, stage: int, where: Where) -> Any:
        """Start one replica actor of ``stage``'s unit, asking for what the plan gives it.

        Cores and GPUs come from the unit's demand (GPUs only where the cluster has any); a
        replica planned on an accelerator class asks for a custom resource of that name, so
        it lands only on a node that advertises one; a planned replica runs in its bundle of
        its node type's placement group.
        """
        unit = self.units[stage]
        device_class, _, bundle = where
        held = self.demand(stage, device_class)
        options: dict[str, Any] = {"num_cpus": unit.resources.cpu, "max_concurrency": 64,
                                   "max_restarts": 0}
        if "GPU" in held:
            options["num_gpus"] = held.pop("GPU")
        held.pop("CPU", None)
        if held:
            options["resources"] = held
        if bundle is not None:
            group, index = bundle
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=index)
        handle = ray.remote(Replica).options(**options).remote(
            unit, stage, self.names, self.registry, self.options.max_attempts, self.limits)
        actor = _Actor(stage, handle, where, time.monotonic(), hello=handle.hello.remote())
        self.actors[handle._actor_id.hex()] = actor
        return handle

    def await_hellos(self) -> None:
        """Wait until every replica is placed and running, or say what the cluster lacks."""
        waiting = {a.hello: a for a in self.actors.values() if a.hello is not None}
        ready, not_ready = ray.wait(list(waiting), num_returns=len(waiting), timeout=_STARTUP)
        for ref in ready:
            self.on_hello(waiting[ref], ray.get(ref))
        if not_ready:
            stuck = sorted({self.names[waiting[r].stage] for r in not_ready})
            raise EngineError(
                f"replicas of {', '.join(stuck)} were not placed within {_STARTUP:.0f} s: "
                f"the cluster has {ray.available_resources()}; lower their demands, add "
                "nodes, or check --ray-address")

    def on_hello(self, actor: _Actor, info: dict[str, Any]) -> None:
        actor.pid, actor.node, actor.hello = info["pid"], info["node"], None

    def close(self, events: Iterator[Any]) -> None:
        """Stop early if still running; always kill the actors."""
        close = getattr(events, "close", None)
        if close:
            close()
        self.shutdown()

    def shutdown(self) -> None:
        """Kill every actor of this run; safe to call twice."""
        if self.shut:
            return
        self.shut = True
        for actor in self.actors.values():
            if actor.ended is None:
                actor.ended = time.monotonic()
            with contextlib.suppress(Exception):  # already gone
                ray.kill(actor.handle, no_restart=True)
        if self.registry is not None:
            with contextlib.suppress(Exception):
                ray.kill(self.registry, no_restart=True)
        for group in self.groups:
            with contextlib.suppress(Exception):
                remove_placement_group(group)
        self.ended = self.ended or time.monotonic()
        self.ledger.close()
        self.exit_context()

    # -- the event loop --------------------------------------------------------------------

    def events(self) -> Iterator[Any]:
        """Drive the run; yields outputs as they finish (in source order if ``ordered``)."""
        try:
            while not (self.source_done and not self.frames and not self.retry):
                self.feed()
                if self.frames:
                    refs = list(self.frames)
                    ready, _ = ray.wait(refs, num_returns=1, timeout=0.05)
                    if ready:
                        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                    for ref in ready:
                        self.settle(ref)
                self.replace_dead()
                self.tick()
                self.abort = self.abort or self.ledger.abort
                if self.abort:
                    raise self.abort
                while self.out:
                    yield self.out.popleft()
            self.collect_stats(final=True)
            self.ended = time.monotonic()
            self.report_progress(force=True)
            if self.source_error:
                raise self.source_error
        finally:
            self.shutdown()

    def feed(self) -> None:
        """Send retried frames, then new ones from the source, while slots are free."""
        while self.retry or not self.source_done:
            if not self.retry and self.window_full():
                return
            retrying = bool(self.retry)
            target = pick_member(self, 0, block=False, alone=retrying)
            if target is None:
                return
            records = self.retry.popleft() if retrying else self.take_source(self.hints[0])
            if not records:
                release(self, target)
                return
            ref, outputs = target.process.remote(records, self.hints)
            self.frames[ref] = _Frame(records, target, outputs)

    def take_source(self, count: int) -> list[Record]:
        """Up to ``count`` new records from the source, each pending until finished."""
        def make(src: int, item: Any, now: float) -> Record:
            self.pending[src] = now
            return (src, (), 0, item)

        return self.take(count, make)

    def settle(self, ref: Any) -> None:
        """A frame came back: deliver its outputs and dead letters, or retry it."""
        frame = self.frames.pop(ref)
        release(self, frame.target)
        try:
            summary = ray.get(ref)
        except DEATH as exc:
            failures: list[dict[str, Any]] = []
            retries = after_death(self, 0, frame.target, frame.records, exc, failures)
            self.retries += len(retries)
            self.retry.extend(retries)
            for failure in failures:
                self.ledger.dead_letter(failure)
                self.finish(failure["item"])
            return
        if len(self.units) == 1:
            summary["outputs"].append(frame.outputs)
        try:
            batches = [b for b in ray.get(summary["outputs"]) if b]
        except (OwnerDiedError, ObjectLostError):
            self.retry.append(frame.records)
            return
        for batch in batches:
            for src, path, _, value in batch:
                self.deliver(src, path, value)
        for failure in summary["failures"]:
            self.ledger.dead_letter(failure)
        for src, *_ in frame.records:
            self.finish(src)

    def deliver(self, src: int, path: tuple[int, ...], value: Any) -> None:
        """Hand one output on, once per (source id, path)."""
        if src not in self.pending:
            return
        seen = self.delivered.setdefault(src, set())
        if path in seen:
            return
        seen.add(path)
        self.outputs += 1
        if self.options.ordered:
            self.buffered.setdefault(src, []).append((path, value))
        else:
            self.out.append(value)

    def finish(self, src: int) -> None:
        """A source item is done; release its outputs in order if ``ordered``."""
        fed = self.pending.pop(src, None)
        if fed is None:
            return
        self.delivered.pop(src, None)
        parts = sorted(self.buffered.pop(src, []), key=lambda pv: pv[0])
        self.complete(src, fed, [value for _, value in parts])

    def replace_dead(self) -> None:
        """Start a replacement for every replica reported dead."""
        if self.reports is None:
            self.reports = self.registry.take_reports.remote()
        ready, _ = ray.wait([self.reports], timeout=0)
        if not ready:
            return
        reports, self.reports = ray.get(self.reports), None
        for stage, actor_id in reports:
            actor = self.actors.get(actor_id)
            if actor is None or actor.ended is not None:
                continue
            actor.ended = time.monotonic()
            self.restarts += 1
            self.deaths_since_progress += 1
            limit = 3 * self.max_attempts + 2 * sum(u.replicas for u in self.units)
            if self.deaths_since_progress > limit and not self.abort:
                self.abort = EngineError(
                    f"replicas of unit {self.names[stage]!r} keep dying and no item has "
                    f"finished in {self.deaths_since_progress} restarts; check its memory "
                    "demand and native code")
                return
            handle = self.spawn(stage, actor.where)
            ray.get(self.registry.replace.remote(stage, actor_id, handle))
            if stage == 0:
                with self.lock:
                    self.members = [m for m in self.members if m._actor_id.hex() != actor_id]
                    self.members.append(handle)

    # -- housekeeping ----------------------------------------------------------------------

    def collect_stats(self, final: bool = False) -> None:
        """Gather replicas' counters (waiting for them when ``final``)."""
        if not self.stats_refs or final:
            for key, actor in self.actors.items():
                if actor.ended is None:
                    self.stats_refs[actor.handle.stats.remote()] = key
        refs = list(self.stats_refs)
        try:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=5.0 if final else 0)
        except GetTimeoutError:
            ready = []
        for ref in ready:
            key = self.stats_refs.pop(ref)
            actor = self.actors[key]
            try:
                stats = ray.get(ref)
            except Exception:
                continue
            if actor.hello is not None and stats:
                actor.hello = None
            actor.intervals.extend((s - self.t0, e - self.t0) for s, e in stats["intervals"])
            actor.stats = stats
        for ref in [r for r, k in self.stats_refs.items() if self.actors[k].ended is not None]:
            del self.stats_refs[ref]

    def tick(self) -> None:
        """Sample queue depths, tune frame sizes, report progress."""
        now = time.monotonic()
        if now - self.last_sample >= max(self.options.sample_interval, 0.2):
            self.last_sample = now
            self.collect_stats()
            waiting = [0] * len(self.units)
            items = [0] * len(self.units)
            busy = [0.0] * len(self.units)
            for actor in self.actors.values():
                waiting[actor.stage] += actor.stats.get("waiting", 0) if actor.ended is None \
                    else 0
                items[actor.stage] += actor.stats.get("items_in", 0)
                busy[actor.stage] += actor.stats.get("busy_s", 0.0)
            self.samples.append((now - self.t0, waiting))
            for stage in range(len(self.units)):
                if items[stage]:
                    per_item = max(busy[stage] / items[stage], 1e-7)
                    self.hints[stage] = int(min(_MAX_FRAME, max(1, _FRAME_TIME / per_item)))
        self.report_progress()

    def report_progress(self, force: bool = False) -> None:
        """Hand the progress callback a snapshot, with each unit's live counters."""
        if self.options.progress is not None:
            figures = self.live_figures((a.stage, a.stats) for a in self.actors.values())
            super().report_progress(figures, force)

    def build_record(self) -> RunRecord:
        """Assemble the run record, in the same form as the local engine's."""
        return self.assemble([
            WorkerRecord(
                worker_id=index + 1, unit=self.names[actor.stage], pid=actor.pid,
                node=actor.node, started_s=actor.started - self.t0,
                ended_s=(actor.ended - self.t0) if actor.ended is not None else None,
                items_in=actor.stats.get("items_in", 0),
                items_out=actor.stats.get("items_out", 0),
                bytes_in=actor.stats.get("bytes_in", 0),
                bytes_out=actor.stats.get("bytes_out", 0),
                busy_s=actor.stats.get("busy_s", 0.0), cpu_s=actor.stats.get("cpu_s", 0.0),
                busy_intervals=actor.intervals)
            for index, actor in enumerate(self.actors.values())
        ])
