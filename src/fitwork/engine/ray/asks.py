"""What each replica asks Ray for: declared asks held to, default cores shared out to fit.

The local engine runs as many processes as a run has replicas, whatever the cores; Ray
places an actor only where its ask fits.  A unit that declares no ``cpu`` (one core by
default) would then keep a pipeline of more units than cores from starting, so its
replicas share the cores the declared asks leave: each asks the largest share, at most its
one core, that lets every one of them be placed on the cluster's nodes.  A declared ask
(``cpu=``, ``gpu=``, a device, or a plan's) is held to; one that no node could ever hold
fails the run at once, in one line naming the unit, the ask, what the cluster has and the
fix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fitwork.errors import EngineError

CPU_STEP = 0.001
"""Asks are rounded down to this many cores, so a node's shares never add up past it."""


@dataclass(frozen=True)
class Ask:
    """What each of ``replicas`` replicas of ``unit`` asks Ray for, by Ray resource name."""

    unit: str
    replicas: int
    amounts: Mapping[str, float]
    fixed: bool
    """Held to as asked; otherwise its ``CPU`` is a default that may be shared out."""
    origin: str = "declared"
    """Where a fixed ask came from: ``declared`` (the unit's) or ``plan``."""


def share(asks: Sequence[Ask], nodes: Sequence[Mapping[str, float]]) -> float:
    """The cores each replica of a default ask asks for: at most one, and small enough that
    all of them fit on the nodes beside the fixed asks (placed largest first), in steps of
    `CPU_STEP`; 0 when the fixed asks leave no core at all."""
    count = sum(a.replicas for a in asks if not a.fixed)
    if not count:
        return 1.0
    left = [float(n.get("CPU", 0.0)) for n in nodes]
    fixed = sorted((a.amounts.get("CPU", 0.0) for a in asks if a.fixed
                    for _ in range(a.replicas)), reverse=True)
    for cpu in fixed:  # first fit, largest first: what each node keeps for the defaults
        room = next((i for i, free in enumerate(left) if free + 1e-9 >= cpu), None)
        if room is not None:
            left[room] -= cpu
    best = 0.0
    for free in left:  # the largest share is some node's room split k ways
        for k in range(1, count + 1):
            candidate = _step(min(1.0, free / k))
            if candidate <= best:
                break
            if sum(math.floor(f / candidate + 1e-9) for f in left) >= count:
                best = candidate
                break
    return best


def _step(cpu: float) -> float:
    return math.floor(cpu / CPU_STEP + 1e-9) * CPU_STEP


def never_placed(asks: Sequence[Ask], nodes: Sequence[Mapping[str, float]]) -> None:
    """Raise, naming the unit, its ask, the cluster and the fix, if no node of the cluster
    could ever hold one replica of a fixed ask."""
    for ask in asks:
        if not ask.fixed or not ask.replicas:
            continue
        wanted = {k: v for k, v in ask.amounts.items() if v > 0}
        if any(all(node.get(k, 0.0) + 1e-9 >= v for k, v in wanted.items()) for node in nodes):
            continue
        raise EngineError(
            f"unit {ask.unit!r} asks Ray for {_amounts(wanted)} per replica "
            f"({'its plan' if ask.origin == 'plan' else 'as declared'}), but no node of the "
            f"cluster can hold that: {_cluster(nodes, wanted)}; {_fix(ask)}")


def _fix(ask: Ask) -> str:
    if ask.origin == "plan":
        return ("plan for this cluster (fitwork fleet ray, then fitwork plan --fleet), or "
                "join a larger one (--ray-address, or address= in fitwork.run)")
    return (f"lower it (@unit(cpu=..., gpu=...), or --cpus {ask.unit}=N on fitwork run), or "
            "join a cluster with larger nodes (--ray-address, or address= in fitwork.run)")


def _amounts(amounts: Mapping[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in amounts.items()) or "nothing"


def _cluster(nodes: Sequence[Mapping[str, float]], wanted: Mapping[str, float]) -> str:
    """What the cluster has of the resources asked: the most on one node, and in all."""
    if not nodes:
        return "the cluster has no live node"
    names = list(wanted) or ["CPU"]
    largest = {k: max(float(n.get(k, 0.0)) for n in nodes) for k in names}
    total = {k: sum(float(n.get(k, 0.0)) for n in nodes) for k in names}
    return (f"the most any node has is {_amounts(largest)}"
            f", the whole cluster {_amounts(total)} on "
            f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}")


__all__ = ["CPU_STEP", "Ask", "never_placed", "share"]
