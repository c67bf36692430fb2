"""A warm pool: a pipeline's replica actors kept alive between runs on a long-lived cluster.

With ``keep_warm=S`` (``--keep-warm S``) a run's replicas are named, detached actors in a
namespace keyed by the pipeline's units and their code (`namespace`), each named by its
unit's stage and what it asks Ray for (`ask_key`).  When the run ends well, each replica
`park`s: it drops everything the run set up (routes, counters, batches, the gate, a sink's
part) and waits ``S`` seconds; the next run of the same pipeline on that cluster lists the
namespace, claims the parked replicas at once (one run only can claim each), and adopts a
claimed one wherever it would start a replica of that stage with that ask, instead of
starting a new actor.  An adopted replica is set up afresh; its unit is built again when
building it took under `REBUILD_UNDER_S` (functions, cheap classes), else the instance
built for an earlier run is kept (a unit that loads a model), so a class unit that changes
its own state call by call should not be kept warm.  A parked replica nobody claims exits
after its time; one whose run's driver went silent (no call, no stats for `ORPHAN_S`)
exits too.  Replicas placed in a node type's placement group are not kept (the group goes
with the run), so a run that keeps its replicas warm on several nodes holds no group: its
replicas ask for their node type by label (`fitwork.engine.ray.placing.Placing.placing`).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import marshal
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from fitwork.engine.ray.records import ReplicaSpec
from fitwork.engine.ray.routing import key

if TYPE_CHECKING:
    from fitwork.engine.shell import Shell
    from fitwork.telemetry.record import RunRecord

    _Driver = Shell
else:
    _Driver = object

REBUILD_UNDER_S = 0.05
"""An adopted replica builds its unit again when the first build took less than this."""
ORPHAN_S = 600.0
"""A replica kept for a warm pool exits after this long without a word from its driver
(a call, a stats reading: a run asks each replica for its counters every sample interval
while its caller iterates; one paused longer loses its replicas and starts new ones)."""
PREFIX = "fitwork-warm-"
ASKED = {"num_cpus": "CPU", "num_gpus": "GPU"}
RESOURCES = ("num_cpus", "num_gpus", "memory", "resources", "label_selector")
"""The actor options a warm replica is matched by (`fitwork.resources.Resources.to_ray`,
and the node type it asked for by label)."""
PARK_WAIT_S = 1.0
"""How long the end of a run waits for its built replicas to say they parked."""
CLAIM_WAIT_S = 2.0
"""How long a run waits for the parked replicas it claims to answer (a parked one answers
at once; one that does not is left to the run's end, which parks it if it was taken)."""


class WarmState:
    """A replica's side of the pool: parked or not, claimed by which run, when it exits."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.parked = False
        self.token: str | None = None
        self.deadline = 0.0
        self.orphan = 0.0
        self.quiet: Callable[[], float] = lambda: 0.0
        self.exit: Callable[[], None] | None = None
        self.watching = False

    def park(self, keep: float, exit_: Callable[[], None]) -> None:
        """Wait ``keep`` seconds to be claimed, then exit."""
        with self.lock:
            self.parked, self.token = True, None
            self.deadline = time.monotonic() + keep
        self._watch(exit_)

    def claim(self, token: str) -> bool:
        """Taken by run ``token`` if parked, unclaimed and not yet due to exit."""
        with self.lock:
            if not self.parked or self.token is not None or time.monotonic() >= self.deadline:
                return False
            self.parked, self.token = False, token
            return True

    def owned_by(self, token: str) -> bool:
        """Whether run ``token`` claimed this replica."""
        with self.lock:
            return self.token == token

    def watch(self, orphan: float, quiet: Callable[[], float], exit_: Callable[[], None]
              ) -> None:
        """Exit once ``quiet()`` (seconds since the driver's last word) passes ``orphan``
        while not parked."""
        with self.lock:
            self.orphan, self.quiet = orphan, quiet
        self._watch(exit_)

    def _watch(self, exit_: Callable[[], None]) -> None:
        with self.lock:
            self.exit = exit_
            if self.watching:
                return
            self.watching = True
        threading.Thread(target=self._loop, daemon=True, name="fitwork-warm").start()

    def due(self) -> bool:
        """Whether this replica should exit now."""
        with self.lock:
            if self.parked:
                return time.monotonic() >= self.deadline
            return self.orphan > 0 and self.quiet() > self.orphan

    def _loop(self) -> None:
        while not self.due():
            time.sleep(0.1)
        assert self.exit is not None
        self.exit()


def _codes(value: Any, seen: set[int], depth: int = 0) -> Iterable[bytes]:
    """The bytecode reachable from a unit's callable: its function's, a class's methods',
    what closures and default arguments hold (a fused unit's stages), a few levels deep."""
    if depth > 4 or id(value) in seen:
        return
    seen.add(id(value))
    fn = getattr(value, "fn", None)  # a Unit
    if fn is not None and not inspect.isfunction(value):
        yield from _codes(fn, seen, depth + 1)
    elif inspect.isfunction(value):
        yield marshal.dumps(value.__code__)
        for cell in value.__closure__ or ():
            try:
                yield from _codes(cell.cell_contents, seen, depth + 1)
            except ValueError:  # an empty cell
                continue
        for default in value.__defaults__ or ():
            yield from _codes(default, seen, depth + 1)
    elif inspect.isclass(value):
        for attribute in vars(value).values():
            yield from _codes(getattr(attribute, "__func__", attribute), seen, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value[:64]:
            yield from _codes(item, seen, depth + 1)


def namespace(units: list[Any]) -> str:
    """The pool's namespace: the units' names and their code, hashed (not their pickles:
    a class pickled by value carries an id of its own in every driver process)."""
    digest = hashlib.sha256()
    for unit in units:
        digest.update(unit.name.encode() + b"\0")
        for code in _codes(unit, set()):
            digest.update(code)
    return PREFIX + digest.hexdigest()[:20]


def ask_key(stage: int, options: dict[str, Any]) -> str:
    """What a warm replica's name starts with: its stage and what it asks Ray for (its
    resources; not how its actor is run)."""
    asked = sorted((k, repr(v)) for k, v in options.items() if k in RESOURCES)
    return f"{stage}.{hashlib.sha256(repr(asked).encode()).hexdigest()[:12]}"


def claim_all(space: str, token: str, timeout: float,
              late: dict[Any, Any] | None = None) -> dict[str, list[Any]]:
    """Claim every parked replica in ``space`` for run ``token``, all at once: their
    handles by ask key (see `ask_key`); the claims not answered within ``timeout`` go
    into ``late`` (reference to handle), for the caller to look at again."""
    import ray

    named = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a.get("namespace") == space]
    handles: dict[Any, tuple[str, Any]] = {}
    for name in named:
        try:
            handle = ray.get_actor(name, namespace=space)
        except ValueError:  # it exited meanwhile
            continue
        handles[handle.claim.remote(token)] = (name.rsplit(".", 1)[0], handle)
    claimed: dict[str, list[Any]] = {}
    if not handles:
        return claimed
    ready, waiting = ray.wait(list(handles), num_returns=len(handles), timeout=timeout)
    if late is not None:
        late.update({ref: handles[ref][1] for ref in waiting})
    for ref in ready:
        try:
            taken = ray.get(ref, timeout=0)
        except Exception:  # it died meanwhile
            continue
        if taken:
            key_, handle = handles[ref]
            claimed.setdefault(key_, []).append(handle)
    return claimed


def park_all(handles: list[Any], keep: float, timeout: float) -> list[Any]:
    """Park each replica for ``keep`` seconds, all at once; those that would not park (or
    died), for the caller to kill.  One still building its unit (it started late in a
    short run) parks once built: its call waits in line, and nobody waits for it here."""
    import ray

    refs = {handle.park.remote(keep): handle for handle in handles}
    if not refs:
        return []
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=min(timeout, PARK_WAIT_S))
    refused = []
    for ref in ready:
        try:
            if not ray.get(ref, timeout=0):
                refused.append(refs[ref])
        except Exception:
            refused.append(refs[ref])
    return refused


def release_warm(timeout: float = CLAIM_WAIT_S) -> int:
    """Stop every replica parked in a fitwork warm pool on the Ray cluster this process is
    connected to, and give Ray back the workers they held: as many idle workers, asked for
    in their place (`fitwork.engine.ray.refill`, waited on up to its `REFILL_WAIT_S`);
    how many replicas were stopped.  A replica is stopped only once this claims it, so one
    a run has adopted (or is adopting) is left alone.

    A parked replica holds its process, so Ray's pool has no idle worker for it: a task run
    right after a pool was killed outright started cold (``bench/ray_nodes.py``'s warm
    cells, tasks after the kept-warm contender: 662 items/s, against 7,487 after Ray
    Data).  Not connected, it raises `EngineError`."""
    from fitwork.engine.registry import needs_extra
    from fitwork.errors import EngineError
    missing = needs_extra("release_warm", "ray")
    if missing is not None:
        raise EngineError(missing)
    import ray

    from fitwork.engine.ray.refill import REFILL_WAIT_S, refill
    if not ray.is_initialized():
        raise EngineError("release_warm: this process is not connected to a Ray cluster; "
                          "call ray.init(address=...) first (the cluster the warm pool is on)")

    token = f"release-{uuid.uuid4().hex}"
    spaces = {str(a.get("namespace", "")) for a in ray.util.list_named_actors(
        all_namespaces=True)}
    nodes: list[str | None] = []  # where each stopped replica ran
    for space in sorted(n for n in spaces if n.startswith(PREFIX)):
        for handles in claim_all(space, token, timeout).values():
            for handle in handles:
                node = None
                with contextlib.suppress(Exception):
                    node = ray.get(handle.hello.remote(), timeout=timeout).node
                with contextlib.suppress(Exception):
                    ray.kill(handle, no_restart=True)
                    nodes.append(node)
    refs = refill(nodes)
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=REFILL_WAIT_S)
    return len(nodes)


class WarmPool(_Driver):
    """The driver's side of a pool (a mixin of `fitwork.engine.ray.driver.RayRun`): claim
    the parked replicas as the run connects, adopt them as it starts replicas, park its
    own as it ends well; and the start-up's phases, timed, for the record."""

    ray_options: Any
    blobs: list[bytes]
    timeout: float
    tasks: bool
    marks: dict[str, float]
    by_label: set[str]

    def mark(self, phase: str, again: bool = False) -> None:
        """Note when ``phase`` of the start-up was reached (its first time, unless
        ``again``), for the record's ``ray_start`` breakdown."""
        if again or phase not in self.marks:
            self.marks[phase] = time.perf_counter()

    def record(self) -> RunRecord:
        """The run record; its host says when each phase of the start-up was reached and
        what a warm pool gave and kept (`start_notes`)."""
        record = super().record()
        record.host = {**(record.host or {}), **self.start_notes(self.marks)}
        return record

    def warm_open(self) -> None:
        """With ``keep_warm``: claim every replica the pool holds for this pipeline."""
        self.warm_space: str | None = None
        self.claimed: dict[str, list[Any]] = {}
        self.adopted: list[str] = []
        self.kept: list[str] = []
        self.parkable: list[Any] = []
        self.late_claims: dict[Any, Any] = {}
        if self.ray_options.keep_warm > 0:
            self.warm_space = namespace(self.units)
            self.claimed = claim_all(self.warm_space, self.run_id,
                                     min(self.timeout, CLAIM_WAIT_S), self.late_claims)

    def node_label(self, group: Any) -> dict[str, Any]:
        """The option that asks for ``group``'s node type by the node's label, where the run
        places its replicas so (`fitwork.engine.ray.placing.Placing.placing`)."""
        from fitwork.hardware.ray_cluster import NODE_TYPE_LABEL  # the driver's: a replica
        # imports this module and should not import the hardware package (pydantic)

        if group is None or group.node_type not in self.by_label:
            return {}
        return {"label_selector": {NODE_TYPE_LABEL: group.node_type}}

    def make_room(self) -> None:
        """If the cluster lacks what this run's new replicas ask (those it adopts aside),
        free the cores idle pools hold: other pipelines' parked replicas, and this one's
        that this run claimed but will not adopt (a plan of another shape)."""
        import ray

        demand = getattr(self, "demand")  # noqa: B009  (`Placing.demand`, a sibling mixin)
        needed: dict[str, float] = {}
        spare = {k: list(held) for k, held in self.claimed.items()}
        for stage, name in enumerate(self.names):
            for group in self.placement.of(name) or (None,):
                asked = {**demand(stage, group).to_ray(), **self.node_label(group)}
                held = spare.pop(ask_key(stage, asked), [])
                count = max(0, (group.replicas if group is not None else 1) - len(held))
                for kind in ("num_cpus", "num_gpus"):
                    needed[kind] = needed.get(kind, 0.0) + asked.get(kind, 0.0) * count
        free = ray.available_resources()
        if all(free.get(ASKED[k], 0.0) + 1e-9 >= v for k, v in needed.items()):
            return
        idle = [h for held in spare.values() for h in held]  # this run's, of another shape
        self.claimed = {k: h for k, h in self.claimed.items() if k not in spare}
        spaces = {a["namespace"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if str(a.get("namespace", "")).startswith(PREFIX)}
        for space in spaces - {self.warm_space}:  # a claim takes only idle (parked) ones
            idle += [h for held in claim_all(space, f"evict-{self.run_id}",
                                             self.timeout).values() for h in held]
        for handle in idle:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)

    def start_replica(self, remote: Any, stage: int, options: dict[str, Any],
                      spec: ReplicaSpec, placed: bool) -> tuple[Any, Any]:
        """A replica of ``stage``: a claimed warm one adopted, else a new actor (named and
        detached, with a pool; not one ``placed`` in a group); its handle and the
        reference its hello comes by."""
        if self.warm_space is None or placed:
            handle = remote.options(**options).remote(spec)
            return handle, handle.hello.remote()
        wanted = ask_key(stage, options)
        held = self.claimed.get(wanted)
        if held:
            handle = held.pop()
            self.adopted.append(key(handle))
            return handle, handle.adopt.remote(self.run_id, spec, REBUILD_UNDER_S)
        handle = remote.options(**options, name=f"{wanted}.{uuid.uuid4().hex[:12]}",
                                namespace=self.warm_space, lifetime="detached").remote(spec)
        handle.watch.remote(ORPHAN_S)
        return handle, handle.hello.remote()

    def warm_release(self) -> set[str]:
        """Park the replicas this run ended with (if it ended well) and the claimed ones
        it did not need; the keys of those parked (the rest the caller kills)."""
        import ray

        if getattr(self, "warm_space", None) is None:
            return set()
        spare = [handle for held in self.claimed.values() for handle in held]
        late = self.late_claims  # claims answered after the run stopped waiting: taken ones
        done, _ = ray.wait(list(late), num_returns=len(late), timeout=0) if late else ([], [])
        for ref in done:  # parked again (one still silent, if taken later, exits once its
            # driver has said nothing for ORPHAN_S; if not, when its own time is up)
            with contextlib.suppress(Exception):
                if ray.get(ref, timeout=0):
                    spare.append(late[ref])
        keep = (self.parkable if self.status == "completed" else []) + spare
        self.claimed = {}
        refused = {key(h) for h in park_all(keep, self.ray_options.keep_warm, self.timeout)}
        self.kept = [key(h) for h in keep if key(h) not in refused]
        return set(self.kept)

    def start_notes(self, marks: dict[str, float]) -> dict[str, Any]:
        """For the record's host: when each phase of the start-up was reached (seconds from
        the run's creation) and, with a pool, the replicas adopted and kept."""
        t0 = marks["init"]
        notes: dict[str, Any] = {
            "ray_start": {phase: round(at - t0, 4) for phase, at in marks.items()}}
        if getattr(self, "warm_space", None) is not None:
            notes["warm_pool"] = {"namespace": self.warm_space, "adopted": len(self.adopted),
                                  "adopted_ids": sorted(self.adopted),
                                  "kept": len(self.kept), "kept_ids": sorted(self.kept)}
        return notes


__all__ = ["CLAIM_WAIT_S", "ORPHAN_S", "REBUILD_UNDER_S", "WarmPool", "WarmState", "ask_key",
           "claim_all", "namespace", "park_all", "release_warm"]
