"""Where a Ray run's replicas go: what each asks Ray for, and the node types' reservations.

`Placing` is the part of `RayRun` (`fitwork.engine.ray.driver`) that turns a unit and its
planned group into a Ray ask (`demand`), fails a run at once whose asks no node could ever
hold and shares the cores the declared asks leave (`fit_asks`, see
`fitwork.engine.ray.asks`), and reserves a placement group per planned node type
(`reserve_groups`).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace
from typing import Any

import ray
from ray.util.placement_group import placement_group

from fitwork.engine.options import RayOptions
from fitwork.engine.ray.asks import CPU_STEP, Ask, never_placed, share
from fitwork.errors import EngineError
from fitwork.hardware.catalog import DeviceKind, device_kind
from fitwork.hardware.ray_cluster import NODE_TYPE_LABEL, cluster_resources
from fitwork.placement import Group, Placement
from fitwork.resources import Resources
from fitwork.workload.unit import Unit


@dataclass
class Bundle:
    """One bundle of a node type's placement group, and the worker holding it."""

    group: Any
    index: int
    node_type: str
    shape: Resources
    holder: int | None = None


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

    def fit_asks(self) -> None:
        """Fail at once if no node could ever hold one replica of a declared or planned ask;
        share the cores those leave among the replicas of units that declare no cpu."""
        asks = []
        for stage, name in enumerate(self.names):
            for group in self.placement.of(name) or (None,):
                planned = group is not None and group.resources is not None
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
        """What one replica asks Ray for: the plan's resources, else the unit's own (its
        cores a share of the cluster's when it declares none, see `fit_asks`)."""
        unit = self.units[stage]
        given = group.resources if group is not None else None
        planned = given is not None
        wanted = given if given is not None else unit.resources
        if not planned and not self._declared(stage):
            wanted = replace(wanted, cpu=self.share if shared is None else shared)
        devices = dict(wanted.devices)
        if group is not None and group.device_class and \
                device_kind(group.device_class) is not DeviceKind.CPU:
            devices.setdefault(group.device_class, wanted.gpu or 0.01)
        # A plan's fluid cores fill a node to the brim; rounded down to a thousandth, the
        # asks of one node's replicas never add up to more than it has.
        cpu = math.floor(wanted.cpu / CPU_STEP + 1e-9) * CPU_STEP
        if planned or self._declared(stage) or wanted.cpu > 0:
            cpu = max(CPU_STEP, cpu)  # a share of 0: the declared asks took every core
        return Resources(cpu=cpu, gpu=wanted.gpu if self.has_gpus else 0.0, memory=0,
                         devices=devices)

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
        by_node: dict[tuple[str, int | None], list[Resources]] = {}
        for stage, name in enumerate(self.names):
            for group in self.placement.of(name):
                if group.node_type is not None:
                    shape = self.demand(stage, group)
                    nodes = group.nodes if len(group.nodes) == group.replicas else \
                        (None,) * group.replicas
                    for node in nodes:
                        by_node.setdefault((group.node_type, node), []).append(shape)
        startup = self.ray_options.startup_timeout
        for (node_type, node), shapes in by_node.items():
            bundles = []
            for shape in shapes:
                asked = {"CPU": shape.cpu, "GPU": shape.gpu, **shape.devices}
                bundles.append({k: v for k, v in asked.items() if v} or {"CPU": 0.01})
            selector = ([{NODE_TYPE_LABEL: node_type}] * len(bundles)
                        if node_type in labelled else None)
            # a planned node's bundles on one node, as packed (Ray's own packing of a node
            # type's bundles missed a plan that fills two nodes to the brim)
            group = placement_group(bundles, strategy="PACK" if node is None else "STRICT_PACK",
                                    bundle_label_selector=selector,
                                    name=f"fitwork-{self.run_id}-{node_type}"
                                    + ("" if node is None else f"@{node}"))
            self.groups.append(group)
            ready, _ = ray.wait([group.ready()], timeout=startup)
            if not ready:
                where = "" if node is None else f" (its planned node {node})"
                raise EngineError(
                    f"node type {node_type!r}{where} could not be reserved within "
                    f"{startup:.0f} s: it needs {bundles}; the cluster has (in all) "
                    f"{self._available()}; plan for this cluster's fleet (`fitwork fleet ray`)")
            self.bundles += [Bundle(group, i, node_type, shape)
                             for i, shape in enumerate(shapes)]

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


__all__ = ["Bundle", "Placing"]
