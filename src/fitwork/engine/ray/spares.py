"""Warm spare replicas on Ray: started and built ahead, so a death costs a hand-over, not a start.

Once a unit has lost a replica (an unclean exit), the driver keeps spares of it: actors
started with the same spec as its replicas, which build their unit and then wait.  The
next replica the run core asks for (`fitwork.engine.core.Spawn`) takes the oldest spare
of its unit whose ask and spec match (built or still building: either is further along
than a fresh actor), and a new spare is started behind it.  A unit keeps `SPARES` spares;
one more each time a death found none built (deaths came closer together than a spare
starts), up to `SPARES` plus one per replica, as the local engine's zygote does
(`fitwork.engine.local.spare`).

What a spare holds: the replica's ask where the cluster has it free when the spare starts;
else the ask without its cores (an idle spare runs nothing; once handed over it runs on the
cores its dead predecessor gave back).  On several nodes such a spare is handed over only
where its node has the cores free then (`Spares.spare_has_cores`): after a node died, a
coreless spare on a full node took the replica a node that joined was there for.  Units
that ask for a GPU or another device, or are placed in a node type's placement group, keep
no spares.

The replacements of a unit that lost a replica (spares included) run the unit in a child
process they fork (`fitwork.engine.ray.forked`, not for units that hold a device): from
then on a row that kills its process costs that replica a fork from a child built ahead,
not an actor, and the record counts those deaths per unit (``forked_deaths``) and in its
worker restarts.  A unit whose replacements fork keeps spares only for its replicas that
do not (the first ones), as no row can kill the others.  With the engine's ``spares=0`` a
unit keeps no spare actors and its forked replicas no spare children.  The record's host
says, per unit, how many spares were started, handed over (and how many of those were built
by then), let go unused, and the cores each held and for how long (``ray_spares``).  Every
spare not handed over is killed at the end of the run.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray

from fitwork.engine.ray.records import ReplicaSpec
from fitwork.hardware.ray_cluster import free_per_node

if TYPE_CHECKING:
    from collections.abc import Callable

    from fitwork.engine.options import RayOptions
    from fitwork.telemetry.record import RunRecord

SPARES = 1
"""Spares a unit that lost a replica keeps to begin with."""
DEVICE_ASKS = ("num_gpus", "resources")
"""Actor options a replica holds a device by: a unit that asks for one keeps no spares."""


@dataclass
class Spare:
    """One spare actor: its handle, the reference its hello comes by, what it was started
    with, the cores it holds, and when it started and ended (handed over or let go)."""

    handle: Any
    hello: Any
    stage: int
    options: dict[str, Any]
    spec: ReplicaSpec
    cpu: float
    born: float
    ended: float | None = None
    worker: int | None = None  # the worker it became
    built: bool = False  # it had said hello (its unit built) when it was handed over

    def fits(self, stage: int, options: dict[str, Any], spec: ReplicaSpec) -> bool:
        """Whether it can serve as a replica of ``stage`` started with ``options``, ``spec``."""
        asked = {k: v for k, v in options.items() if k != "num_cpus"}
        mine = {k: v for k, v in self.options.items() if k != "num_cpus"}
        return (self.stage == stage and asked == mine
                and self.spec._replace(sink=None) == spec._replace(sink=None))


class Spares:
    """The driver's spares (a part of `fitwork.engine.ray.driver.RayRun`)."""

    core: Any
    names: list[str]
    placement: Any
    clock: Callable[[], float]
    warm_space: str | None
    actors: dict[int, Any]
    ray_options: RayOptions
    nodes: list[dict[str, Any]]

    @property
    def spare_books(self) -> SpareBooks:
        books = self.__dict__.get("_spare_books")
        if books is None:
            books = self.__dict__["_spare_books"] = SpareBooks()
        return books

    def spare_death(self, stage: int) -> None:
        """A replica of ``stage`` died: the unit keeps spares from now on."""
        self.spare_books.stages.add(stage)

    def forks_units(self, stage: int, options: dict[str, Any]) -> bool:
        """Whether a replica of ``stage`` runs its unit in a forked child
        (`fitwork.engine.ray.forked`): once the unit has lost a replica (from the start
        with the option ``fork_first``), unless it holds a device (a device context does
        not survive a fork)."""
        return ((self.ray_options.fork_first or stage in self.spare_books.stages)
                and not any(options.get(k) for k in DEVICE_ASKS))

    def fork_deaths(self, deaths: list[tuple[int, str, int]]) -> list[int]:
        """Forked unit processes that died (their actors lived; `Summary.forks`), each
        counted once per unit however many calls it took with it: the stages of those not
        seen before."""
        books = self.spare_books
        new: list[int] = []
        for death in deaths:
            if death not in books.fork_deaths:
                books.fork_deaths.add(death)
                new.append(death[0])
        return new

    def take_spare(self, stage: int, options: dict[str, Any], spec: ReplicaSpec,
                   worker: int) -> tuple[Any, Any] | None:
        """A spare of ``stage`` that fits, made worker ``worker``: its handle and the
        reference its hello comes by; None where the unit has none.  A spare that died
        waiting is dropped; a death that finds none built makes the unit keep one more."""
        books = self.spare_books
        if stage not in books.stages:
            return None
        kept = books.kept.setdefault(stage, [])
        taken = None
        while kept and taken is None:
            spare = kept.pop(0)
            built = _built(spare.hello)
            if built is False or not spare.fits(stage, options, spec) \
                    or not self.spare_has_cores(spare, built, options):
                self.end_spare(spare)
                continue
            taken, spare.built = spare, bool(built)
        if taken is None or not taken.built:  # deaths outrun the spares' start
            cap = SPARES + max(1, self.placement.replicas(self.names[stage]))
            books.want[stage] = min(cap, books.want.get(stage, SPARES) + 1)
        if taken is None:
            return None
        taken.ended, taken.worker = self.clock(), worker
        books.used.append(taken)
        if spec.sink is not None:  # a sink's part is named by its worker
            return taken.handle, taken.handle.serve_as.remote(worker)
        return taken.handle, taken.hello

    def spare_has_cores(self, spare: Spare, built: bool | None,
                        options: dict[str, Any]) -> bool:
        """Whether ``spare`` can run a replica asking ``options`` where it is: it holds the
        cores asked, or the cluster is one node (the cores a dead replica gave back are
        there), or its node has them free now.  On several nodes a spare started without
        cores may sit on a node whose cores are taken while the room is elsewhere (a node
        that died took its cores, one that joined has them): there a new actor, placed by
        its ask, runs where the room is."""
        missing = float(options.get("num_cpus", 0.0)) - spare.cpu
        if missing <= 1e-9 or len(self.nodes) <= 1:
            return True
        if not built:  # still building: where it runs is not known yet
            return False
        try:
            node = ray.get(spare.hello, timeout=0).node
            free = float(free_per_node().get(node, {}).get("CPU", 0.0))
        except Exception:
            return False
        return free + 1e-9 >= missing

    def keep_spares(self, stage: int, remote: Any, options: dict[str, Any],
                    spec: ReplicaSpec) -> None:
        """Start spares of ``stage`` until it keeps as many as it wants (only a unit that
        lost a replica, asks for no device and is placed by its ask alone)."""
        books = self.spare_books
        if (stage not in books.stages or self.ray_options.spares < 1
                or "scheduling_strategy" in options
                or any(options.get(k) for k in DEVICE_ASKS)
                or (self.core is not None and self.core.stopping)):
            return
        kept = books.kept.setdefault(stage, [])
        want = books.want.get(stage, SPARES)
        if spec.forked:  # a row kills only a child of these: a spare waits for the others
            want = min(want, sum(1 for a in self.actors.values()
                                 if a.stage == stage and not a.ended and not a.forked))
        while len(kept) < want:
            kept.append(self.start_spare(stage, remote, options, spec, len(books.all) + 1))
            books.all.append(kept[-1])

    def start_spare(self, stage: int, remote: Any, options: dict[str, Any],
                    spec: ReplicaSpec, number: int) -> Spare:
        """One spare actor, holding the replica's cores where the cluster has them free."""
        cpu = float(options.get("num_cpus", 0.0))
        free = 0.0
        with contextlib.suppress(Exception):
            free = float(ray.available_resources().get("CPU", 0.0))
        held = cpu if free + 1e-9 >= cpu else 0.0
        asked = {**options, "num_cpus": held}
        if self.warm_space is not None:  # a warm pool's replicas are detached and named
            asked.update(name=f"spare.{stage}.{uuid.uuid4().hex[:12]}",
                         namespace=self.warm_space, lifetime="detached")
        sink = spec.sink
        mine = spec._replace(sink=None if sink is None else (sink[0], sink[1], -number))
        handle = remote.options(**asked).remote(mine)
        return Spare(handle, handle.hello.remote(), stage, options, spec, held, self.clock())

    def end_spare(self, spare: Spare) -> None:
        """Kill a spare never handed over."""
        spare.ended = self.clock()
        self.spare_books.gone.append(spare)
        with contextlib.suppress(Exception):
            ray.kill(spare.handle, no_restart=True)

    def let_spares_go(self) -> None:
        """The run is ending: kill every spare not handed over."""
        books = self.spare_books
        for kept in books.kept.values():
            while kept:
                self.end_spare(kept.pop())

    def record(self) -> RunRecord:
        """The run record; its host says, per unit, what its spares held and did."""
        record = super().record()  # type: ignore[misc]
        books = self.spare_books
        if not books.all and not books.forks:
            return record
        t0 = self.core.t0 if self.core is not None else 0.0
        record.host = {**(record.host or {}), "ray_spares": books.notes(self.names, t0,
                                                                        self.clock())}
        return record


class SpareBooks:
    """Which units keep spares, how many each wants, and every spare started."""

    def __init__(self) -> None:
        self.stages: set[int] = set()
        self.want: dict[int, int] = {}
        self.kept: dict[int, list[Spare]] = {}  # waiting, oldest first
        self.used: list[Spare] = []  # handed over
        self.gone: list[Spare] = []  # let go unused
        self.all: list[Spare] = []
        self.fork_deaths: set[tuple[int, str, int]] = set()  # (stage, actor, number) seen

    @property
    def forks(self) -> dict[int, int]:
        """Per stage: forked unit processes that died."""
        return dict(Counter(stage for stage, _, _ in self.fork_deaths))

    def notes(self, names: list[str], t0: float, now: float) -> dict[str, Any]:
        """Per unit: spares started, handed over (built by then), let go; forked unit
        processes that died inside live replicas; the cores each spare held and the
        core-seconds they held idle (to the hand-over, or to the end)."""
        notes: dict[str, Any] = {}
        forks = self.forks
        for stage in sorted({s.stage for s in self.all} | set(forks)):
            mine = [s for s in self.all if s.stage == stage]
            used = [s for s in mine if s.worker is not None]
            notes[names[stage]] = {
                "kept": self.want.get(stage, SPARES), "started": len(mine),
                "handed_over": len(used), "built_when_handed": sum(s.built for s in used),
                "let_go": len(mine) - len(used),
                "forked_deaths": forks.get(stage, 0),
                "cores": [s.cpu for s in mine],
                "idle_core_s": round(sum(s.cpu * ((s.ended or now) - s.born) for s in mine), 3),
                "spares": [{"cpu": s.cpu, "started_s": round(s.born - t0, 4),
                            "ended_s": round((s.ended or now) - t0, 4), "worker": s.worker,
                            "built": s.built} for s in mine]}
        return notes


def _built(hello: Any) -> bool | None:
    """Whether a spare has said hello (True), is still building (None), or died (False)."""
    ready, _ = ray.wait([hello], timeout=0)
    if not ready:
        return None
    try:
        ray.get(hello, timeout=0)
    except Exception:
        return False
    return True


__all__ = ["SPARES", "Spare", "SpareBooks", "Spares"]
