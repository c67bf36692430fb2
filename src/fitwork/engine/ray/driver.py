"""The Ray engine's driver: a thin shell that starts replica actors and turns Ray into events.

::

    source ─▶ driver ──process()──▶ [unit 0 actors] ──process()──▶ [unit 1 actors] ─▶ …
                 ▲                                                      │
                 └──── summaries: output refs, returned weight, failures ◀┘

The driver sends frames to the first unit's replicas (its `Router` picks the less loaded
of two) and each call returns once the frame has gone all the way down; its summary
carries references to the outputs, which the driver fetches from the object store, and
the counters of the replicas it went through.  The driver holds membership: it pushes
each replica the next unit's live replicas whenever they change, under a version every
frame carries (`fitwork.engine.ray.routing`).  Every
call result, actor start, death report, retirement and counter reading becomes an event
for the run core (`fitwork.engine.core`), which keeps the books and decides; this module
only carries out what it says.  Every call the driver makes into Ray has a deadline.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import psutil
import ray
from ray.exceptions import (
    GetTimeoutError,
    ObjectLostError,
    OwnerDiedError,
)
from ray.util.placement_group import remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from fitwork.engine.contract import RunResult
from fitwork.engine.core import (
    Arrived,
    Done,
    Drain,
    Exited,
    FrameSizes,
    Lost,
    Measured,
    Retire,
    Send,
    Spawn,
    Taken,
)
from fitwork.engine.core.account import counted_items
from fitwork.engine.framing import MAX_FRAME, first_sizes, sizes_told
from fitwork.engine.options import RayOptions, RunOptions
from fitwork.engine.ray.placing import NODE_CHECK_S, Bundle, NodeFit, Placing
from fitwork.engine.ray.records import (
    LOAD_FIX,
    Hello,
    Reading,
    ReplicaSpec,
    Stats,
    Summary,
)
from fitwork.engine.ray.refill import refill
from fitwork.engine.ray.replica import DEATH, Replica
from fitwork.engine.ray.routing import Router, key
from fitwork.engine.ray.spares import Spares
from fitwork.engine.ray.startup import LATE_HELLO_S, STATS_WAIT_S, StartUp
from fitwork.engine.ray.transport import pack
from fitwork.engine.ray.warm import WarmPool
from fitwork.engine.segment import Segment
from fitwork.engine.shell import Shell, policy_for
from fitwork.errors import EngineError
from fitwork.hardware.ray_cluster import (
    DEATHS,
    connect,
    deaths_line,
    live_nodes,
)
from fitwork.placement import Placement, allot, allot_unit
from fitwork.telemetry.record import Refit, RunRecord
from fitwork.workload.pipeline import Pipeline

FRAME_TIME = 0.1  # a call costs ~1-2 ms of CPU along its path: frames carry ~100 ms of work
_REMOTE: dict[type, Any] = {}


def remote_class(cls: type) -> Any:
    """``ray.remote(cls)``, made once per process.

    Ray exports a remote class to the cluster once per job, but every fresh ``ray.remote``
    is a new class: it would be exported (and its code disassembled) at every spawn.
    """
    made = _REMOTE.get(cls)
    if made is None:
        made = _REMOTE[cls] = ray.remote(cls)
    return made


class Call(NamedTuple):
    """A call into a first-unit replica that has not come back: which worker, its number
    (the core's frame id for it), and a one-unit pipeline's outputs reference."""

    worker: int
    call: int
    outputs: Any


@dataclass
class Actor:
    """The driver's view of one replica actor."""

    worker: int
    stage: int
    handle: Any
    bundle: int | None
    pid: int = 0
    node: str | None = None
    ended: bool = False
    retiring: bool = False
    ready: bool = False  # it said hello: its unit is built and it takes calls
    forked: bool = False  # its unit runs in a child it forks (`forked.py`): rows cannot kill it


class RayRun(StartUp, WarmPool, Spares, NodeFit, Placing, Shell):
    """One run on Ray: actors, frames in flight, and the core's books."""

    engine_name = "ray"

    def __init__(self, pipeline: Pipeline, source: Iterable[Any], placement: Placement,
                 options: RunOptions, ray_options: RayOptions) -> None:
        self.marks: dict[str, float] = {"init": time.perf_counter()}  # start-up, by phase
        # frames into a batched unit hold a batch (see RunCore.sizes): in_flight of them is
        # room enough; an I/O unit may keep ``io`` calls going
        self.limits = [max(ray_options.in_flight, allot_unit(u, placement).io)
                       for u in pipeline.units]
        first = max(1, placement.replicas(pipeline.units[0].name))
        # A journaled run's outputs are released a frame at a time (spans): its frames stay
        # half as long, so checkpoints fall as often as they did.
        frame_time = FRAME_TIME / 2 if options.spans else FRAME_TIME
        policy = policy_for(options, max_frames=self.limits[0] * first * 2,
                            frame_time=frame_time, max_frame=MAX_FRAME, quiet_after=None,
                            whole_path=True, sample_interval=max(options.sample_interval, 0.2))
        super().__init__(pipeline, source, placement, options, policy)
        self.ray_options = ray_options
        self.timeout = ray_options.call_timeout
        self.version = 0  # of membership, pushed to the replicas that route
        self.router = Router(0, self.limits[0])
        self.actors: dict[int, Actor] = {}
        self.by_key: dict[str, int] = {}
        self.bundles: list[Bundle] = []
        self.groups: list[Any] = []
        self.by_label: set[str] = set()  # `Placing.placing`'s books
        self.grouped: set[str] | None = None
        self.affined: dict[tuple[int, str | None, str | None], int] = {}
        self.calls: dict[Any, Call] = {}
        self.call_ids = itertools.count(1)
        self.hellos: dict[Any, int] = {}
        self.drains: dict[Any, int] = {}
        self.stats: dict[Any, int] = {}
        self.pushes: dict[Any, int] = {}
        self.last_stats = 0.0
        self.seen: dict[int, Reading] = {}  # newest counters read per worker
        self.items_in: dict[int, int] = {}  # per worker: items of its calls that came back
        self.items_out: dict[int, int] = {}  # per worker: what those calls sent on
        # items per frame into each unit; 0: not measured (a batched unit's: a batch)
        self.hints = first_sizes([s.batch_size for s in self.stages])
        self.has_gpus = False
        self.nodes: list[dict[str, Any]] = []
        self.started = False
        self.initial: set[int] = set()  # replicas started with the run, not yet said hello
        self.ready_by = 0.0  # when the replicas started with the run must have said hello
        self.blobs: list[bytes] = []
        self.share = 1.0  # the cores each replica of a unit with no declared cpu asks for
        # nodes (`NodeFit`): those read last, lost during the run; replacements the core
        # asked for while a node's replicas died, held until re-fitted; asks re-fitted
        self.node_ids: set[str] = set()
        self.last_nodes: list[dict[str, Any]] = []
        self.nodes_read = 0.0
        self.lost_nodes: set[str] = set()
        self.deferred: dict[int, Spawn] = {}
        self.deferring = False
        self.fitted: dict[int, list[Any]] = {}
        self.cut: set[int] = set()  # replicas whose cores a re-fit cut to the room left
        self.joined: set[str] = set()  # nodes that joined since the last re-fit to them
        self.holding = False  # Ray's death notices, kept off stdout while this run goes
        self.node_refits: list[Refit] = []
        self.planned_counts: list[int] = []  # replicas per unit the run started with
        self.refilled: list[Any] = []  # idle workers asked of Ray's pool at the end

    # -- setting up ------------------------------------------------------------------------

    def connect(self) -> None:
        self.mark("connect")
        connect(self.ray_options.address, self.ray_options.startup_timeout)
        self.mark("connected")
        DEATHS.hold()  # the deaths this run handles are said in one line at its end
        self.holding = True
        # Each unit crosses as bytes a replica loads itself, so a unit its workers cannot
        # load is said in one line, not a crash; one from __main__ or a file travels by
        # value (`Unit.__reduce__`), pickled once per run.
        self.blobs = [ray.cloudpickle.dumps(unit) for unit in self.units]
        self.nodes = live_nodes(self.timeout)  # resources, labels, the host; re-read
        self.node_ids = {n["NodeID"] for n in self.nodes}  # each NODE_CHECK_S
        self.has_gpus = any(n["Resources"].get("GPU", 0) > 0 for n in self.nodes)
        self.mark("nodes read")
        self.fit_asks()
        self.warm_open()  # with keep_warm: the parked replicas this run may adopt
        self.grouped = self.placing()
        self.make_room()  # idle pools give back cores this run needs (or its groups)
        self.prepare()
        self.mark("prepared")

    def prepare(self) -> None:
        """Before the first replica starts: reserve the node types' groups `placing`
        chose, if any."""
        if self.grouped is not None:
            self.reserve_groups(self.grouped)

    def start(self) -> RunResult:
        """Start every replica and return at once, as `fitwork.run` promises: frames go out
        once each unit's replicas are placed and built, which the loop watches for (and
        says what went wrong if that takes longer than the start-up timeout)."""
        self.ready_by = self.clock() + self.ray_options.startup_timeout
        result = super().start()
        self.mark("spawned")
        return result

    def describe_host(self) -> dict[str, Any] | None:
        nodes = self.nodes or live_nodes(self.timeout)
        devices: dict[str, float] = {}
        for node in nodes:
            for name, amount in node["Resources"].items():
                if name == "GPU" or name.startswith("accelerator_type:"):
                    devices[name] = devices.get(name, 0.0) + amount
        return {"name": f"Ray cluster of {len(nodes)} nodes",
                "cores": sum(n["Resources"].get("CPU", 0.0) for n in nodes),
                "memory": int(sum(n["Resources"].get("memory", 0.0) for n in nodes)),
                "devices": devices,
                "hostnames": sorted({str(n.get("NodeManagerHostname") or "") for n in nodes}
                                    - {""})}

    def start_devices(self) -> Any:
        from fitwork.engine.ray.devices import ClusterSamplers

        return ClusterSamplers(max(0.5, self.options.sample_interval), self.started_at,
                               self.timeout, self.nodes or None)

    def publish(self) -> None:
        """Membership changed: a new version, the first unit's live replicas to this
        driver's router, and each later unit's to every replica that sends to it."""
        self.version += 1
        live: list[list[Any]] = [[] for _ in self.units]
        for actor in self.actors.values():
            if actor.ready and not actor.ended and not actor.retiring:
                live[actor.stage].append(actor.handle)
                if actor.forked and actor.stage == 0:
                    self.router.set_forked(actor.handle)
        self.router.set_members(live[0], self.version)
        for actor in self.actors.values():  # retiring ones too: they finish what they hold
            if not actor.ended and actor.stage < len(self.units) - 1:
                ref = actor.handle.set_members.remote(self.version, live[actor.stage + 1])
                self.pushes[ref] = actor.worker

    # -- carrying out the core's instructions ----------------------------------------------

    def spawn(self, instruction: Spawn) -> None:
        if self.deferring:  # a node died: its replacements wait for the re-fit
            self.deferred[instruction.worker] = instruction
            return
        stage, group = instruction.stage, instruction.group
        unit = self.units[stage]
        wanted = self.demand(stage, group)
        bundle = self.pick_bundle(stage, group, wanted)  # its planned node's, if any
        # No runtime_env: an actor with one of its own waits for a fresh worker process
        # (twice the start-up here); the replica holds its thread pools itself.
        options: dict[str, Any] = {"max_concurrency": 64, "max_restarts": 0, **(
            wanted if bundle is not None else self.fitted_ask(instruction.worker, stage,
                                                                 wanted)).to_ray()}
        if bundle is not None:
            chosen = self.bundles[bundle]
            chosen.holder = instruction.worker
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=chosen.group, placement_group_bundle_index=chosen.index)
        else:
            options.update(self.node_label(group))
            options.update(self.planned_node(stage, group))
        replicas = max(1, self.placement.replicas(unit.name))
        sink = (self.options.sink, self.run_id, instruction.worker) \
            if self.options.sink is not None and stage == len(self.units) - 1 else None
        spec = ReplicaSpec(self.blobs[stage], stage, self.names, self.limits,
                           allot(unit, group), wanted.cpu, self.timeout, replicas, sink,
                           self.forks_units(stage, options), self.ray_options.spares)
        handle, hello = (None if bundle is not None else  # a spare, built ahead, if any
                         self.take_spare(stage, options, spec, instruction.worker)) or \
            self.start_replica(remote_class(Replica), stage, options, spec, bundle is not None)
        self.keep_spares(stage, remote_class(Replica), options, spec)
        actor = Actor(instruction.worker, stage, handle, bundle, forked=spec.forked)
        # counted by the driver from the calls that came back (`record`): a replica none
        # of whose calls did has 0 in and out, whatever it worked on before it died
        self.items_in[instruction.worker] = self.items_out[instruction.worker] = 0
        self.actors[instruction.worker] = actor
        self.by_key[key(handle)] = instruction.worker
        self.hellos[hello] = instruction.worker
        if not self.started:
            self.initial.add(instruction.worker)  # held to the start-up timeout

    def retire(self, instruction: Retire) -> None:
        if instruction.worker in self.deferred:  # a replacement the re-fit does not keep
            return
        actor = self.actors.get(instruction.worker)
        if actor is None or actor.ended:
            return
        actor.retiring = True
        self.publish()
        self.drains[actor.handle.drain.remote()] = actor.worker

    def drain(self, instruction: Drain) -> None:
        for actor in self.actors.values():
            if actor.stage == instruction.stage and not actor.ended:
                actor.handle.flush.remote()

    def frame_sizes(self, instruction: FrameSizes) -> None:
        """The core's sizes, passed down with every call (`fitwork.engine.framing`)."""
        self.hints = sizes_told(instruction.sizes, instruction.measured,
                                first_sizes([s.batch_size for s in self.stages]))

    def reserve(self, alone: bool) -> Any:
        if not self.started:
            return None
        return self.router.pick(block=False, alone=alone)

    def unreserve(self, token: Any) -> None:
        self.router.release(token)

    def transmit(self, token: Any, send: Send) -> None:
        worker = self.by_key[key(token)]
        call = next(self.call_ids)
        segment = send.segment
        ref, outputs = self.call(token, segment)
        self.calls[ref] = Call(worker, call, outputs if len(self.units) == 1 else None)
        self.handle(Taken(worker, call, [(segment.frame, segment.offsets)], self.clock()))

    def call(self, token: Any, segment: Segment) -> tuple[Any, Any]:
        """One call into a first-unit replica: references to its summary and outputs."""
        ref, outputs = token.process.remote(pack([segment]), self.hints, self.version)
        return ref, outputs

    def worker_pids(self, unit: str | None = None) -> list[int]:
        if not self.started:  # the run returned at once: its replicas' pids come with hello
            self._read_hellos()
        here = self.node_id()
        return [a.pid for a in self.actors.values() if not a.ended and a.pid
                and (unit is None or self.names[a.stage] == unit)
                and (a.node != here or _running(a.pid))]  # a death not yet reported

    def node_id(self) -> str | None:
        """The Ray node this driver runs on."""
        with contextlib.suppress(Exception):
            return str(ray.get_runtime_context().get_node_id())
        return None

    # -- turning Ray into events -----------------------------------------------------------

    def wait(self) -> None:
        refs = [*self.calls, *self.hellos, *self.drains, *self.stats]
        if refs:
            ray.wait(refs, num_returns=1, timeout=0.05)
        else:
            time.sleep(0.01)

    def pump(self) -> None:
        now = self.clock()
        if now - self.nodes_read >= NODE_CHECK_S:
            self.nodes_read = now
            self.check_nodes()
        if now - self.last_stats >= self.policy.sample_interval:
            self.last_stats = now
            self._ask_stats()
        waiting = [*self.hellos, *self.calls, *self.stats, *self.drains, *self.pushes]
        ready = set(ray.wait(waiting, num_returns=len(waiting), timeout=0)[0]) \
            if waiting else set()  # one look
        for ref in [r for r in self.hellos if r in ready]:
            self._hello(ref)
        if not self.started or self.initial:
            self._check_started()
        settled = next((r for r in self.calls if r in ready), None)
        if settled is not None:  # the oldest; the caller sees its outputs (and may resize)
            self._settle(settled)  # before the next is settled
        for ref in [r for r in self.stats if r in ready]:
            self._stats(ref, self.stats.pop(ref))
        for ref in [r for r in self.drains if r in ready]:
            self._drained(ref)
        for ref in [r for r in self.pushes if r in ready]:  # a push to a replica that died
            self.pushes.pop(ref)                              # meanwhile fails; its death
            with contextlib.suppress(Exception):              # shows elsewhere
                ray.get(ref)

    def _settle(self, ref: Any) -> None:
        worker, call, own_outputs = self.calls.pop(ref)
        self.mark("first frame")
        actor = self.actors[worker]
        self.router.release(actor.handle)
        now = self.clock()
        summary = self.summary(ref, worker, call, now)
        if summary is None:
            return
        if summary.graced:  # a retry's reply is here: its replica may take the next call
            actor.handle.ack.remote(summary.graced)
        refs = list(summary.outputs) + ([own_outputs] if own_outputs is not None else [])
        try:
            batches = ray.get(refs, timeout=self.timeout) if refs else []
        except (OwnerDiedError, ObjectLostError) as exc:
            # the call's items ran; what made their outputs go (a replica on the way that
            # owned them died of another item, say) is no fault of theirs
            self.handle(Lost(worker, call, now, f"outputs lost ({type(exc).__name__})",
                             blame=False))
            return
        except GetTimeoutError:
            raise EngineError(f"Ray did not deliver a frame's outputs within {self.timeout:g} "
                              "s; check the object store of the cluster") from None
        for actor_id in summary.dead:  # seen dead by a replica on the way
            dead = self.by_key.get(actor_id)
            if dead is not None:
                self._died(dead, "the actor died (reported by a peer)")
        self.measure_call(summary)
        segments = [segment for batch in batches if batch for segment in batch]
        for written in summary.written:  # a sink's parts hold these outputs
            segments.extend(written.segments)
        self.handle(Arrived(segments, now, summary.returns, summary.failures))
        # what the dead peers held, once what came back is settled: a retry group sends
        # again only its items that did not come back
        deaths = self.fork_deaths(summary.forks)  # each counted once, with its first loss
        for lost in summary.lost:
            died = lost.stage in deaths
            if died:
                deaths.remove(lost.stage)
            self.handle(Lost(worker, call, now, lost.cause, parts=lost.parts, stage=lost.stage,
                             died=died, named=lost.named))
        self.handle(Done(worker, [call], (), (), now))

    def summary(self, ref: Any, worker: int, call: int, now: float) -> Summary | None:
        """A call's summary; None when its replica died (the core hears of it)."""
        try:
            summary: Summary = ray.get(ref)
        except DEATH as exc:
            self._died(worker, f"the actor died ({type(exc).__name__})")
            return None
        return summary

    def measure_call(self, summary: Summary) -> None:
        """The counters of the replicas a call went through, to the core."""
        for actor_id, count in summary.entered.items():  # a delivered call's items in
            seen = self.by_key.get(actor_id)
            if seen is not None:
                self.items_in[seen] = self.items_in.get(seen, 0) + count
        for actor_id, count in summary.exited.items():  # and its items out
            seen = self.by_key.get(actor_id)
            if seen is not None:
                self.items_out[seen] = self.items_out.get(seen, 0) + count
        for actor_id, reading in summary.counters.items():
            seen = self.by_key.get(actor_id)
            if seen is not None:
                self._measure(seen, reading, ())

    def record(self) -> RunRecord:
        """The run record, each replica's items in and out (and so its unit's) as the driver
        counted them: those of the calls that came back (`Summary.entered`,
        `Summary.exited`), not those of calls lost with a death, which are counted where
        they are retried.  The core's live books keep the replicas' own counts, deliveries:
        a batch a replica holds waiting for more is in there, and the core drains it at the
        run's end (`Drain`)."""
        return counted_items(super().record(), self.items_in, self.items_out)

    def _died(self, worker: int, cause: str) -> None:
        actor = self.actors.get(worker)
        if actor is None or actor.ended:
            return
        if not self.deferring and self.lost_node(actor):
            return  # its node died: the re-fit replaced it
        actor.ended = True
        if actor.bundle is not None:
            self.bundles[actor.bundle].holder = None
        if actor.stage == 0:
            self.router.drop(actor.handle)
        self.publish()
        self.spare_death(actor.stage)  # its unit keeps spares from now on
        self.handle(Exited(worker, clean=False, now=self.clock(), cause=cause))

    def _ask_stats(self) -> None:
        if self.stats:
            return
        for actor in self.live_actors():
            if actor.worker not in self.hellos.values():
                self.stats[actor.handle.stats.remote()] = actor.worker

    def live_actors(self, ended: bool = False) -> list[Actor]:
        """The replicas that are processes of their own (not ended, unless ``ended``)."""
        return [actor for actor in self.actors.values() if ended or not actor.ended]

    def _stats(self, ref: Any, worker: int) -> None:
        try:
            stats: Stats = ray.get(ref)
        except DEATH as exc:  # an idle replica's death shows here first
            self._died(worker, f"the actor died ({type(exc).__name__})")
            return
        except Exception:
            return
        self._measure(worker, stats.reading, stats.intervals)

    def _measure(self, worker: int, reading: Reading,
                 intervals: Sequence[tuple[float, float]]) -> None:
        """A replica's counters, from a call's summary or a stats reading: the core gets
        the newest ones (readings can arrive out of order) and every busy interval."""
        held = self.seen.get(worker)
        if held is not None and reading.seq <= held.seq:
            if intervals:
                self.handle(Measured(worker, held.counters, self.clock(), intervals))
            return
        self.seen[worker] = reading
        self.handle(Measured(worker, reading.counters, self.clock(), intervals))

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
        self.handle(Exited(worker, clean=True, now=self.clock(), cause="retired"))

    def stop_workers(self) -> None:
        """Collect every replica's last counters (within a deadline), and the hello of any
        that started too late to take part (so the record says where it ran)."""
        self.mark("stopping")
        pending = {actor.handle.stats.remote(): actor.worker
                   for actor in self.live_actors() if actor.ready}
        late = list(self.hellos)
        ready = ray.wait(list(pending), num_returns=len(pending),
                         timeout=STATS_WAIT_S)[0] if pending else []
        ready += ray.wait(late, num_returns=len(late), timeout=LATE_HELLO_S)[0] if late else []
        for ref in (r for r in late if r in ready):
            worker = self.hellos.pop(ref)
            with contextlib.suppress(Exception):  # one that could not start just stops
                info: Hello = ray.get(ref)
                if not info.error:
                    self._up(worker, info)
        for ref in (r for r in ready if r in pending):
            self._stats(ref, pending[ref])
        # A warm pool's to keep: those built by now.  One not yet up (never placed: the
        # cluster had no room for it) is not kept: the next run's claim of it would wait.
        self.parkable = [a.handle for a in self.live_actors()
                         if not a.retiring and a.bundle is None and a.ready]
        now = self.clock()
        for actor in self.actors.values():
            if not actor.ended:
                actor.ended = True
                self.handle(Exited(actor.worker, clean=True, now=now, cause="stopped"))

    def release(self) -> None:
        """Kill every actor of this run and free its placement groups; say in one line
        what deaths it handled."""
        if self.holding:
            self.holding = False
            DEATHS.let_go()
            said = deaths_line(self.names, self.core, self.lost_nodes, self.node_refits,
                              self.spare_books.forks)
            if said:
                print(said, file=sys.stderr, flush=True)
        self.let_spares_go()
        kept = self.warm_release()  # parked for the next run: not killed
        killed = []
        for actor in self.live_actors(ended=True):
            if key(actor.handle) not in kept:
                killed.append(actor.node)
                with contextlib.suppress(Exception):
                    ray.kill(actor.handle, no_restart=True)
        with contextlib.suppress(Exception):  # the workers they took, back to Ray's pool
            self.refilled = refill(killed)
        for group in self.groups:
            with contextlib.suppress(Exception):
                remove_placement_group(group)


def _running(pid: int) -> bool:
    """Whether process ``pid`` of this host is running (not gone, not a zombie)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


__all__ = ["LOAD_FIX", "RayRun"]
