"""Where a Ray run's replicas go: what each asks Ray for, and the node types' reservations.

`Placing` is the part of `RayRun` (`fitwork.engine.ray.driver`) that turns a unit and its
planned group into a Ray ask (`demand`), fails a run at once whose asks no node could ever
hold and shares the cores the declared asks leave (`fit_asks`, see
`fitwork.engine.ray.asks`), and reserves a placement group per planned node type
(`reserve_groups`), each bundle held for the unit the plan put there (`pick_bundle`: a
replica runs on the node its plan chose, beside the units it exchanges frames with).

It also re-fits a run to the nodes it has (`NodeFit`): a node that dies takes its replicas
and its bundles with it; their replacements are asked of the nodes left, as many as those
have room for (a unit left with none keeps one, its ask cut to the room there is), and a
node that joins (or comes back) takes back the replicas the loss cost.  Each re-fit is a
`Refit` in the run record, its reason naming the node, its prediction from the rates
measured so far.
"""

from __future__ import annotations

import contextlib
import math
import random
import re
import time
from dataclasses import dataclass, replace
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fitwork.engine.core import Exited, Resize, Spawn
from fitwork.engine.options import RayOptions
from fitwork.engine.ray.asks import CPU_STEP, Ask, never_placed, share
from fitwork.errors import EngineError
from fitwork.hardware.catalog import DeviceKind, device_kind
from fitwork.hardware.ray_cluster import (
    NODE_TYPE_LABEL,
    cluster_resources,
    free_per_node,
    live_nodes,
)
from fitwork.placement import Group, Placement, allot
from fitwork.resources import Resources
from fitwork.telemetry.record import Refit, RunRecord
from fitwork.workload.unit import Unit

GROUPS_HOLD_S = 5.0
"""How long a run that needs several placement groups holds the ones it got while waiting
for the rest, before it gives them all back and asks again (`Placing._reserve_all`)."""


def _bundles(held: list[tuple[str, Resources]]) -> list[dict[str, float]]:
    """A placement group's bundles: one per replica, what it asks for."""
    bundles = []
    for _, shape in held:
        asked = {"CPU": shape.cpu, "GPU": shape.gpu, **shape.devices}
        bundles.append({k: v for k, v in asked.items() if v} or {"CPU": 0.01})
    return bundles


@dataclass
class Bundle:
    """One bundle of a node type's placement group, and the worker holding it."""

    group: Any
    index: int
    node_type: str
    shape: Resources
    holder: int | None = None
    lost: bool = False
    unit: str | None = None
    """The unit whose replica the plan put here (its node is the group's)."""
    """Its node died: no replica is placed on it again (Ray could not hold it there)."""


class Placing:
    """Asks and reservations (a part of `RayRun`, whose books these are)."""

    units: list[Unit]
    names: list[str]
    placement: Placement
    ray_options: RayOptions
    run_id: str
    nodes: list[dict[str, Any]]
    has_gpus: bool
    share: float
    groups: list[Any]
    bundles: list[Bundle]
    by_label: set[str]  # node types replicas ask for by label, not in a group
    affined: dict[tuple[int, str | None, str | None], int]  # replicas started per group

    def fit_asks(self) -> None:
        """Fail at once if no node could ever hold one replica of a declared or planned ask;
        share the cores those leave among the replicas of units that declare no cpu."""
        asks = []
        for stage, name in enumerate(self.names):
            for group in self.placement.of(name) or (None,):
                planned = allot(self.units[stage], group).planned
                wanted = self.demand(stage, group, shared=1.0)
                amounts = {"CPU": wanted.cpu, "GPU": wanted.gpu, **wanted.devices}
                asks.append(Ask(name, group.replicas if group is not None else 1, amounts,
                                fixed=planned or self._declared(stage),
                                origin="plan" if planned else "declared"))
        capacity = [n["Resources"] for n in self.nodes]
        never_placed(asks, capacity)
        self.share = share(asks, capacity)

    def _declared(self, stage: int) -> bool:
        """Whether a unit's cores are its own to hold (declared, or reserved)."""
        unit = self.units[stage]
        return bool(unit.cpu_given) or unit.reserve

    def demand(self, stage: int, group: Group | None,
               shared: float | None = None) -> Resources:
        """What one replica asks Ray for: what it is allotted (`fitwork.placement.allot`),
        its cores a share of the cluster's where neither a plan nor the unit gives them (see
        `fit_asks`), and a slot of its device class."""
        given = allot(self.units[stage], group)
        planned, wanted = given.planned, given.resources
        if not planned and not self._declared(stage):
            wanted = replace(wanted, cpu=self.share if shared is None else shared)
        devices = dict(wanted.devices)
        if given.device_class and device_kind(given.device_class) is not DeviceKind.CPU:
            devices.setdefault(given.device_class, wanted.gpu or 0.01)
        # A plan's fluid cores fill a node to the brim; rounded down to a thousandth, the
        # asks of one node's replicas never add up to more than it has.
        cpu = math.floor(wanted.cpu / CPU_STEP + 1e-9) * CPU_STEP
        if planned or self._declared(stage) or wanted.cpu > 0:
            cpu = max(CPU_STEP, cpu)  # a share of 0: the declared asks took every core
        return Resources(cpu=cpu, gpu=wanted.gpu if self.has_gpus else 0.0, memory=0,
                         devices=devices)

    def placing(self) -> set[str] | None:
        """How replicas find their nodes: None where each asks Ray for its resources
        directly, else the labelled node types, for a placement group per planned node.

        On one node there is no node type to choose; on nodes all of one type running one
        unit (a fused plan) there is neither a type to choose nor units to keep beside each
        other: there too each replica asks directly, so the replicas a run keeps warm can
        serve the next (one held in a group goes with the group).  A run asked to keep its
        replicas warm holds no group on several nodes either: each replica asks for its
        planned node type by the node's label (`by_label`) and its planned node as a soft
        affinity (`planned_node`), so it can be kept and adopted; what that gives up is the
        all-or-nothing hold of the groups (and the plan's node where that one is full)."""
        labels = {(n.get("Labels") or {}).get(NODE_TYPE_LABEL) for n in self.nodes}
        labelled = {str(label) for label in labels if label}
        if len(self.nodes) <= 1 or (len(self.units) == 1 and len(labels) == 1):
            return None
        if self.ray_options.keep_warm > 0:
            self.by_label = labelled
            return None
        return labelled

    def planned_node(self, stage: int, group: Group | None) -> dict[str, Any]:
        """Where a run that asks by label (`placing`) starts a replica of ``stage``: on the
        node its plan put it, a soft affinity (Ray places it elsewhere where that node has
        no room).  Left to Ray's own order, small replicas can fill the nodes a larger one
        needed: a plan of eight 0.08-core and two 0.57-core replicas on two one-core nodes
        left one 0.57-core replica unplaced."""
        if group is None or group.node_type not in self.by_label \
                or len(group.nodes) != group.replicas or not group.nodes:
            return {}
        ids = sorted(n["NodeID"] for n in self.nodes
                     if (n.get("Labels") or {}).get(NODE_TYPE_LABEL) == group.node_type)
        if not ids:
            return {}
        which = (stage, group.node_type, group.device_class)
        started = self.affined.get(which, 0)
        self.affined[which] = started + 1
        node = ids[group.nodes[started % len(group.nodes)] % len(ids)]
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=True)}

    def reserve_groups(self, labelled: set[str]) -> None:
        """One placement group per planned node (strictly packed: the replicas the plan put
        on one node of a type), else per planned node type (packed), a bundle per replica.

        Every replica planned on a node type gets its bundle before any starts (on nodes of
        that type, where nodes are labelled), so a run never starts half-placed.  A
        replacement takes over the bundle its predecessor held.  A cluster of one node has
        no node type to choose: its replicas ask Ray for their resources directly (a
        placement group made and removed per run cost ~1 s of start-up to runs back to
        back: Ray retried the next run's group after its view of the freed cores caught up).
        """
        by_node: dict[tuple[str, int | None], list[tuple[str, Resources]]] = {}
        for stage, name in enumerate(self.names):
            for group in self.placement.of(name):
                if group.node_type is not None:
                    shape = self.demand(stage, group)
                    nodes = group.nodes if len(group.nodes) == group.replicas else \
                        (None,) * group.replicas
                    for node in nodes:
                        by_node.setdefault((group.node_type, node), []).append((name, shape))
        made = self._reserve_all(by_node, labelled)
        for ((node_type, _), held), group in zip(by_node.items(), made, strict=True):
            self.groups.append(group)
            self.bundles += [Bundle(group, i, node_type, shape, unit=name)
                             for i, (name, shape) in enumerate(held)]

    def _reserve_all(self, by_node: dict[tuple[str, int | None], list[tuple[str, Resources]]],
                     labelled: set[str]) -> list[Any]:
        """Every placement group of ``by_node``, all ready, or none held.

        Groups held while waiting for the rest are how two runs each planned alone for the
        whole cluster deadlock (each holds one node's group and waits for the other's: three
        such runs on a two-node cluster all failed after the start-up timeout).  So where a
        run needs more than one group, it waits `GROUPS_HOLD_S` for all of them, else gives
        every one back and asks again after a random pause, until the start-up timeout."""
        startup = self.ray_options.startup_timeout
        deadline = time.monotonic() + startup
        while True:
            groups = [self._group(node_type, node, held, labelled)
                      for (node_type, node), held in by_node.items()]
            left = max(0.0, deadline - time.monotonic())
            window = left if len(groups) == 1 else min(left, GROUPS_HOLD_S)
            ready, _ = ray.wait([g.ready() for g in groups], num_returns=len(groups),
                                timeout=window)
            if len(ready) == len(groups):
                return groups
            late = next(i for i, g in enumerate(groups)
                        if not ray.wait([g.ready()], timeout=0)[0])
            for group in groups:
                with contextlib.suppress(Exception):
                    remove_placement_group(group)
            if time.monotonic() >= deadline:
                node_type, node = list(by_node)[late]
                where = "" if node is None else f" (its planned node {node})"
                raise EngineError(
                    f"node type {node_type!r}{where} could not be reserved within "
                    f"{startup:.0f} s: it needs {_bundles(by_node[(node_type, node)])}; the "
                    f"cluster has (in all) {self._available()}; plan for this cluster's "
                    "fleet (`fitwork fleet ray`)")
            time.sleep(random.uniform(0.1, 1.0))

    def _group(self, node_type: str, node: int | None, held: list[tuple[str, Resources]],
               labelled: set[str]) -> Any:
        """The placement group of one planned node (or node type): a bundle per replica."""
        bundles = _bundles(held)
        selector = ([{NODE_TYPE_LABEL: node_type}] * len(bundles)
                    if node_type in labelled else None)
        # a planned node's bundles on one node, as packed (Ray's own packing of a node
        # type's bundles missed a plan that fills two nodes to the brim)
        return placement_group(bundles, strategy="PACK" if node is None else "STRICT_PACK",
                               bundle_label_selector=selector,
                               name=f"fitwork-{self.run_id}-{node_type}"
                               + ("" if node is None else f"@{node}"))

    def pick_bundle(self, stage: int, group: Group | None, wanted: Resources) -> int | None:
        """The free bundle a new replica of ``stage`` takes: one the plan reserved for this
        unit (so it runs on the node the plan put it on, beside the units it sends to),
        else any of its node type and shape; None where the unit's group has no node type
        or no bundle is free."""
        if group is None or group.node_type is None:
            return None
        free = [i for i, b in enumerate(self.bundles)
                if b.node_type == group.node_type and b.holder is None and not b.lost
                and b.shape == wanted]
        mine = [i for i in free if self.bundles[i].unit == self.names[stage]]
        return next(iter(mine or free), None)

    def lose_bundles(self, gone: set[str], holders: dict[int, str | None]) -> None:
        """Mark lost every bundle on a node in ``gone`` (by its holder's node, else by the
        group's table) and remove each group left with none (Ray would hold its place on
        the nodes left, or wait for one that can take it whole)."""
        from ray.util.placement_group import placement_group_table

        for bundle in self.bundles:
            node = holders.get(bundle.holder) if bundle.holder is not None else None
            if node is None:
                with contextlib.suppress(Exception):
                    table = placement_group_table(bundle.group)
                    node = (table.get("bundles_to_node_id") or {}).get(bundle.index)
            if not node or node in gone:  # "": Ray is re-placing it (its node died)
                bundle.lost = True
        for group in list(self.groups):
            mine = [b for b in self.bundles if b.group is group]
            if mine and all(b.lost for b in mine):
                self.groups.remove(group)
                with contextlib.suppress(Exception):
                    remove_placement_group(group)

    def _ask(self, stage: int) -> str:
        """What one replica of a unit asks Ray for, in words."""
        groups = self.placement.of(self.names[stage]) or (None,)
        wanted = self.demand(stage, groups[0])
        amounts = {"CPU": wanted.cpu, "GPU": wanted.gpu, **wanted.devices}
        return ", ".join(f"{v:g} {k}" for k, v in amounts.items() if v) or "nothing"

    def _available(self) -> Any:
        with contextlib.suppress(Exception):
            return cluster_resources(5)
        return "(unknown: Ray did not answer)"


Room = dict[str, dict[str, float]]
NODE_CHECK_S = 1.0  # how often a run reads the node table (a GCS call of ~1 ms)
# what a Ray death report says of a replica whose node died (rather than of its own fault)
NODE_DEATH = re.compile(r"node[_ ]death|node (?:\S+ )?(?:has )?died|node (?:is )?dead|"
                        r"NodeDied", re.IGNORECASE)


class NodeFit:
    """Re-fitting a run to the nodes it has (a part of `RayRun`, whose books these are)."""

    names: list[str]
    nodes: list[dict[str, Any]]
    last_nodes: list[dict[str, Any]]
    node_ids: set[str]
    nodes_read: float
    lost_nodes: set[str]
    actors: dict[int, Any]
    initial: set[int]
    deferred: dict[int, Spawn]
    deferring: bool
    fitted: dict[int, list[Resources]]
    cut: set[int]
    joined: set[str]
    node_refits: list[Refit]
    planned_counts: list[int]
    core: Any
    timeout: float
    hellos: dict[Any, int]
    bundles: list[Bundle]

    def check_nodes(self) -> None:
        """Read the live nodes; re-fit to them where one died or joined since."""
        try:
            nodes = live_nodes(min(self.timeout, 10.0))
        except Exception:  # a GCS that did not answer: read it next time
            return
        if not self.planned_counts and self.core is not None:
            self.planned_counts = list(self.core.targets)  # what the run started with
        ids = {n["NodeID"] for n in nodes}
        gone, new = self.node_ids - ids, ids - self.node_ids
        self.last_nodes, self.nodes, self.node_ids = self.nodes, nodes, ids
        if gone:
            self.lost_nodes |= gone
            self.node_lost(gone)
        if self.core is None or not self.lost_nodes:
            return
        self.joined |= new - self.lost_nodes
        below = any(live < planned for live, planned in
                    zip(self.counts().values(), self.planned_counts, strict=False))
        if below or any(not self.actors[w].ended for w in self.cut):
            self.grow()  # Ray's view of a new node's room may lag: tried at every reading

    def lost_node(self, actor: Any) -> bool:
        """Whether ``actor`` died with its node (and the re-fit has replaced it): a node's
        death shows first as its replicas' deaths, so the node table is read now."""
        self.nodes_read = self.clock()
        self.check_nodes()
        return bool(actor.ended)

    def _node_died(self, worker: int, exc: BaseException) -> bool:
        """Whether a replica that died starting died with its node (the re-fit replaces
        it), not of its own fault."""
        self.check_nodes()
        if self.actors[worker].ended:  # on a node the check found dead
            return True
        if NODE_DEATH.search(str(exc)) or self.lost_nodes:
            self._died(worker, f"its node died while it started ({type(exc).__name__})")
            return True
        return False

    def record(self) -> RunRecord:
        """The run record, with the re-fits to the nodes the run had among its re-fits."""
        record = super().record()
        if not self.node_refits:
            return record
        refits = sorted([*record.refits, *self.node_refits], key=lambda r: r.t_s)
        return record.model_copy(update={"refits": refits})

    def withdraw(self, worker: int, cause: str) -> None:
        """End a replica that never said hello (and so holds nothing), cleanly: the core
        asks for its replacement."""
        actor = self.actors[worker]
        actor.ended = True
        if actor.bundle is not None:
            self.bundles[actor.bundle].holder = None
        self.hellos = {ref: w for ref, w in self.hellos.items() if w != worker}
        with contextlib.suppress(Exception):
            ray.kill(actor.handle, no_restart=True)
        self.handle(Exited(worker, clean=True, now=self.clock(), cause=cause))

    def counts(self) -> dict[str, int]:
        """Replicas of each unit running and not on their way out (the core's count)."""
        return {name: self.core.live(stage) for stage, name in enumerate(self.names)}

    def cores(self) -> float:
        """The cores of the live nodes."""
        return sum(n["Resources"].get("CPU", 0.0) for n in self.nodes)

    def room(self) -> Room:
        """What each live node has free now (empty where Ray did not say)."""
        with contextlib.suppress(Exception):
            free = free_per_node(min(self.timeout, 10.0))
            return {node: dict(amounts) for node, amounts in free.items()
                    if node in self.node_ids}
        return {}

    def node_lost(self, gone: set[str]) -> None:
        """Nodes died: their replicas are dead; replace them as the nodes left allow."""
        before, cores_before = self.counts(), self.cores() + self.lost_cores(gone)
        dead = [a for a in self.actors.values() if not a.ended and a.node in gone]
        # replacements asked before the node table said so (its replicas' deaths show
        # first) may wait for room there is no longer: they are fitted too
        waiting = [a for a in self.actors.values() if not a.ended and not a.ready
                   and a.worker not in self.initial]
        self.lose_bundles(gone, {a.worker: a.node for a in self.actors.values()})
        self.deferring = True  # the core asks for replacements: held until fitted
        try:
            for actor in dead:
                self._died(actor.worker, f"its node {actor.node[:8]} died")
            for actor in waiting:
                self.withdraw(actor.worker, "withdrawn unplaced: a node died, re-fitted")
        finally:
            self.deferring = False
        after = self.fit_deferred()
        there = [a for a in self.actors.values() if a.node in gone and not a.retiring]
        names = sorted({self.names[a.stage] for a in there})
        reason = (f"node {', '.join(sorted(n[:8] for n in gone))} died with {len(there)} "
                  f"replicas ({', '.join(names) or 'none'}): re-fitted to the "
                  f"{len(self.nodes)} live nodes ({self.cores():g} cores)")
        self.note_refit(reason, before, after, cores_before)

    def lost_cores(self, gone: set[str]) -> float:
        """The cores the nodes in ``gone`` had, as last read (0 where never read)."""
        return sum(n["Resources"].get("CPU", 0.0) for n in self.last_nodes if n["NodeID"] in gone)

    def fit_deferred(self) -> dict[str, int]:
        """Fit the replacements the core asked for into the room the live nodes have: each
        placed where it fits; a unit left with none keeps one (its cores cut to the room
        there is); the rest are not replaced.  Returns the replica counts now."""
        room, counts = self.room(), self.counts()
        survivors = {name: counts[name] - sum(1 for s in self.deferred.values()
                                              if self.names[s.stage] == name)
                     for name in self.names}
        placed: dict[int, list[Resources]] = {}
        order = sorted(self.deferred.values(), key=lambda s: survivors[self.names[s.stage]])
        for spawn in order:
            name, ask = self.names[spawn.stage], self.demand(spawn.stage, spawn.group)
            fitted = take_room(room, ask) if room else ask
            if fitted is None and survivors[name] + len(placed.get(spawn.stage, [])) == 0:
                fitted = take_room(room, ask, shrink=True) or replace(ask, cpu=0.0)
            if fitted is not None:
                placed.setdefault(spawn.stage, []).append(fitted)
        now = self.clock()
        for stage, name in enumerate(self.names):
            wanted = survivors[name] + len(placed.get(stage, []))
            if wanted < counts[name]:  # the core retires the newest: the replacements
                self.handle(Resize(stage, wanted, now, "its node died"))
        self.fitted = placed
        self.flush_deferred()
        return self.counts()

    def flush_deferred(self) -> None:
        """Start the replacements the re-fit kept; those it retired end unstarted."""
        deferred, self.deferred = self.deferred, {}
        for worker, spawn in deferred.items():
            if self.core.workers[worker].retiring:
                self.handle(Exited(worker, clean=True, now=self.clock(),
                                   cause="not replaced: no room on the nodes left"))
            else:
                self.spawn(spawn)

    def grow(self) -> None:
        """After a loss, units the run holds fewer replicas of than planned grow back (and
        a replica whose cores the loss cut gets a whole one beside it), as far as the room
        the live nodes have allows: a node that joined, or room freed."""
        before, room = self.counts(), self.room()
        placed: dict[int, list[Resources]] = {}
        cut = [self.actors[w].stage for w in self.cut if not self.actors[w].ended]
        for stage, name in enumerate(self.names[:len(self.planned_counts)]):
            groups = self.placement.of(name)
            ask = self.demand(stage, groups[-1] if groups else None)
            for _ in range(self.planned_counts[stage] - before[name] + cut.count(stage)):
                fitted = take_room(room, ask)
                if fitted is None:
                    break
                placed.setdefault(stage, []).append(fitted)
        if not placed:
            return
        new, self.joined = self.joined, set()
        cores_before = self.cores() - sum(n["Resources"].get("CPU", 0.0) for n in self.nodes
                                          if n["NodeID"] in new)
        self.fitted = placed
        now = self.clock()
        for stage, asks in placed.items():
            self.handle(Resize(stage, before[self.names[stage]] + len(asks), now, "room"))
        why = (f"node {', '.join(sorted(n[:8] for n in new))} joined" if new else
               "room freed on the nodes left")
        reason = (f"{why}: re-fitted to the "
                  f"{len(self.nodes)} nodes ({self.cores():g} cores), back toward the plan's "
                  f"{dict(zip(self.names, self.planned_counts, strict=True))}"
                  + (f" (and a whole replica beside each of the {len(cut)} whose cores "
                     "the loss cut, which go on sharing theirs)" if cut else ""))
        self.note_refit(reason, before, self.counts(), cores_before)

    def note_refit(self, reason: str, before: dict[str, int], after: dict[str, int],
                   cores_before: float) -> None:
        """Record a re-fit, predicted at the rates measured so far."""
        core = self.core
        books = (self.names, core.stage_items, core.stage_busy, core.stage_cpu)
        self.node_refits.append(Refit(
            t_s=self.clock() - core.t0, reason=reason, before=before, after=after,
            predicted_before=predicted(*books, before, cores_before),
            predicted_after=predicted(*books, after, self.cores())))

    def fitted_ask(self, worker: int, stage: int, wanted: Resources) -> Resources:
        """The ask a re-fit placed for a replica of ``stage``, else ``wanted``; a replica
        whose cores it cut is noted (a node that joins takes a whole one in its place)."""
        asks = self.fitted.get(stage)
        ask = asks.pop(0) if asks else wanted
        if ask.cpu + 1e-9 < wanted.cpu:
            self.cut.add(worker)
        return ask


def amounts(ask: Resources) -> dict[str, float]:
    """An ask in Ray's resource names."""
    asked = {"CPU": ask.cpu, "GPU": ask.gpu, **ask.devices}
    return {k: v for k, v in asked.items() if v}


def take_room(room: Room, ask: Resources, shrink: bool = False) -> Resources | None:
    """Place ``ask`` on the node of ``room`` with the most cores free that holds it, and
    take it from that node's room: the ask placed, or None where no node holds it.  With
    ``shrink`` the cores are cut to what the best node has free (to none: the replica
    shares the cores there) where the rest of the ask fits."""
    wanted = amounts(ask)
    nodes = sorted(room.items(), key=lambda item: -item[1].get("CPU", 0.0))
    for _, free in nodes:
        others = all(free.get(k, 0.0) + 1e-9 >= v for k, v in wanted.items() if k != "CPU")
        if not others:
            continue
        cpu = free.get("CPU", 0.0)
        if cpu + 1e-9 < ask.cpu and not shrink:
            continue
        placed = ask if cpu + 1e-9 >= ask.cpu else \
            replace(ask, cpu=math.floor(max(0.0, cpu) / CPU_STEP + 1e-9) * CPU_STEP)
        for k, v in amounts(placed).items():
            free[k] = free.get(k, 0.0) - v
        return placed
    return None


def predicted(names: list[str], items: list[int], busy: list[float], cpu: list[float],
              counts: dict[str, int], cores: float) -> float:
    """Source items/s ``counts`` replicas sustain at the rates measured so far: each unit's
    busy seconds per source item over its replicas, and the cores over the CPU per item."""
    first = items[0] if items else 0
    if not first:
        return 0.0
    bounds = [counts.get(name, 0) * first / busy[stage]
              for stage, name in enumerate(names) if busy[stage] > 0]
    per_item = sum(cpu) / first
    if per_item > 0:
        bounds.append(cores / per_item)
    return min(bounds) if bounds else 0.0


__all__ = ["NODE_CHECK_S", "NODE_DEATH", "Bundle", "NodeFit", "Placing", "amounts", "predicted",
           "take_room"]
