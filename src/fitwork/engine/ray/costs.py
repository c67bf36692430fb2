"""What a run on Ray costs beyond the plan's work: replica start-up and the cost per call.

A plan predicts a steady rate; a run's throughput is its items over its whole wall time.
On the local engine a replica is a fork (milliseconds); on Ray it is a worker process that
starts Python, imports Ray and loads its unit before its first call, and each frame then
pays Ray's cost of a call at every unit on its path.  So the rate a plan can promise a Ray
run of ``items`` items is those items over the start-up and the items at the steady rate
less the calls' share (`predicted`).  This module imports nothing of Ray: the CLI prices a
Ray run with it after the run.

Measured on this repository's 2-core development host (busy: load 15-29 from other jobs),
with a one-unit pipeline on a 2-CPU Ray 2.60 cluster started in-process, CPU-seconds of
the whole process tree (driver, raylet, GCS, workers): a run of 2,000 trivial items cost
1.6-2.0 CPU-s with one replica and 4.6-5.9 with four, about 1.0-1.3 CPU-s more per replica
actor; calls of ~100 ms frames cost 1-2 ms of CPU each along their path (driver, each unit's
replica, the object store).

On a cluster of several nodes a frame whose receiving replica is on another node than its
sender costs more when it goes through the object store (`crossing_cpu`): the receiver's
node pulls it from the sender's.  The plan's packing keeps units that send each other many
bytes on the same nodes where the room allows (`fitwork.fit.packing.colocate`), and the
Ray engine holds each replica to the node its plan put it on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

ACTOR_START_CPU_S = 1.1
"""CPU-seconds for one replica actor to start (a worker process, Ray's imports, the unit
loaded), before its first call; replicas start side by side, so a run's start-up is about
this times its replicas over the cluster's cores."""
CALL_CPU_S = 0.0015
"""CPU-seconds Ray spends on one call of one frame into one unit (submit, schedule, the
summary back, the frame through the object store)."""
FRAME_TIME = 0.1
"""Seconds of work a frame carries into a unit on Ray (the driver's ``FRAME_TIME``)."""


INLINE_MAX = 100 * 1024
"""Bytes under which Ray passes a call's argument inside the call (its
``max_direct_call_object_size``); a frame of this size or more goes through the object
store."""
CROSS_NODE_FRAME_CPU_S = 3.3e-3
"""CPU-seconds a frame through the object store costs the cluster beyond the same hand-off
within one node, when its receiving replica is on another node (the receiver's node pulls
it from the sender's object store).  Measured with ``bench/ray_crossing.py`` (this
repository at 3b19436; three one-CPU nodes on this 2-core host, each its own ``ray start``
with a 150 MiB object store; an actor calling another with a numpy array, four calls in
flight, 300 frames per figure, least of 3 rounds; CPU of every process of the cluster),
load average 9-10 from other jobs: frames of 256 KiB to 4 MiB cost 3.2-7.2 ms more CPU
across nodes than within one (6.2-11.1 ms against 3.0-3.9 ms), a line of 3.34 ms per frame
plus 0.95 ns per byte (an earlier run at 512 KiB and 2 MiB: 3.28 ms + 1.75 ns per byte).
Inline frames (under `INLINE_MAX`) cost the same either way (-67 us, within the noise)."""
CROSS_NODE_BYTE_CPU_S = 1.0e-9
"""CPU-seconds per byte of such a frame beyond the same hand-off within one node (measured
with `CROSS_NODE_FRAME_CPU_S`: 0.95 and 1.75 ns per byte in two runs; wall 0.73 ns)."""


def crossing_share(here: Sequence[float], there: Sequence[float]) -> float:
    """The share of the frames from a unit with ``here[j]`` replicas on node j to the next
    unit with ``there[j]`` there whose receiver is on another node than its sender: the
    router picks a receiver among the next unit's replicas whatever their node."""
    senders, receivers = sum(here), sum(there)
    if senders <= 0 or receivers <= 0:
        return 0.0
    width = max(len(here), len(there))
    a = [*here, *[0.0] * (width - len(here))]
    b = [*there, *[0.0] * (width - len(there))]
    return max(0.0, 1.0 - sum(x * y for x, y in zip(a, b, strict=True)) / (senders * receivers))


def frame_crossing_cpu(items: float, item_bytes: float) -> float:
    """CPU-seconds per item a frame of ``items`` items of ``item_bytes`` bytes each costs
    beyond the same hand-off within one node when it crosses nodes: nothing inline, else
    `CROSS_NODE_FRAME_CPU_S` over its items plus `CROSS_NODE_BYTE_CPU_S` per byte."""
    items = max(1.0, items)
    if items * item_bytes < INLINE_MAX:
        return 0.0
    return CROSS_NODE_FRAME_CPU_S / items + CROSS_NODE_BYTE_CPU_S * item_bytes


def crossing_cpu(placement: Any, units: Sequence[str], item_bytes: Mapping[str, float],
                 items_per: Mapping[str, float] | None = None) -> float:
    """CPU-seconds per source item that frames crossing nodes cost a placement beyond the
    same frames within nodes: for each unit and the next, the share of its frames that
    cross (`crossing_share`) times `frame_crossing_cpu` of a frame of the next unit's size
    (`FRAME_TIME` of one replica's work, at the rate its group was planned at) and the
    bytes an item carries (``item_bytes[unit]``, what the unit sends per item), times the
    items the unit handles per source item (``items_per``, 1 where not given)."""
    rates = {g.unit: g.rate for g in placement.groups if g.rate}
    keys = sorted({(g.node_type, int(n)) for g in placement.groups if g.replicas > 0
                   for n in (g.nodes if len(g.nodes) == g.replicas else (0,))}, key=str)
    total = 0.0
    for sender, receiver in pairwise(units):
        nbytes = float(item_bytes.get(sender, 0.0))
        if nbytes <= 0:
            continue
        share = crossing_share(_on(placement, sender, keys), _on(placement, receiver, keys))
        items = FRAME_TIME * float(rates.get(receiver) or 1.0)
        multiplicity = (items_per or {}).get(sender, 1.0)
        total += share * multiplicity * frame_crossing_cpu(items, nbytes)
    return total


def _on(placement: Any, unit: str, keys: list[tuple[str | None, int]]) -> list[float]:
    """Replicas of ``unit`` on each of ``keys`` (node type, node)."""
    count = dict.fromkeys(keys, 0.0)
    for group in placement.groups:
        if group.unit == unit and group.replicas > 0:
            nodes = group.nodes if len(group.nodes) == group.replicas else (0,) * group.replicas
            for node in nodes:
                count[(group.node_type, int(node))] += 1.0
    return [count[k] for k in keys]


def crossed_rate(rate: float, cpu_per_item: float, cores: float) -> float:
    """``rate`` with ``cpu_per_item`` more CPU-seconds per item spent on ``cores`` cores
    (frames crossing nodes): the cores the plan fills at ``rate`` take longer per item."""
    if rate <= 0 or cpu_per_item <= 0 or cores <= 0:
        return rate
    return rate / (1.0 + cpu_per_item * rate / cores)


def startup_seconds(replicas: int, cores: float) -> float:
    """Seconds before a Ray run of ``replicas`` replica actors takes its first frame."""
    return max(0, replicas) * ACTOR_START_CPU_S / max(1.0, cores)


def steady_rate(rate: float, units: int) -> float:
    """``rate`` less Ray's calls: each frame of `FRAME_TIME` seconds of work pays
    `CALL_CPU_S` at each of ``units`` units on its path."""
    return rate / (1.0 + max(1, units) * CALL_CPU_S / FRAME_TIME)


def predicted(rate: float, items: int, replicas: int, units: int, cores: float,
              crossing: float = 0.0) -> float:
    """The throughput (items over wall time) a plan's steady ``rate`` comes to on Ray for a
    run of ``items`` items with ``replicas`` replica actors of ``units`` units on ``cores``
    cores: the start-up, then the items at the steady rate less the calls' share and less
    ``crossing`` CPU-seconds per item of frames crossing nodes (`crossing_cpu`)."""
    if rate <= 0 or items <= 0:
        return rate
    steady = crossed_rate(steady_rate(rate, units), crossing, cores)
    return items / (startup_seconds(replicas, cores) + items / steady)


def plan_crossing(plan: Any, placement: Any | None = None) -> float:
    """`crossing_cpu` of a plan's placement (its fitted side's, unless given): the bytes
    each unit sends per item and the items it handles per source item from the plan's
    solver inputs (the largest a unit sends on any class)."""
    placement = placement if placement is not None else plan.placement()
    sends = {d.name: max((c.bytes_out_per_item for c in d.classes.values()), default=0.0)
             for d in plan.demands}
    order = [u for u in plan.units if any(g.unit == u for g in placement.groups)]
    return crossing_cpu(placement, order, sends, dict(plan.multiplicity))


def for_record(rate: float, record: Any) -> tuple[float, str]:
    """`predicted` for a finished Ray run's record (its items, replicas started with it,
    units and the cluster's cores), and a few words saying what it includes."""
    workers = len(getattr(record, "workers", ()))  # less replacements: started with it
    replicas = max(1, workers - int(getattr(record, "worker_restarts", 0)))
    cores = float((getattr(record, "host", None) or {}).get("cores") or 1.0)
    units = len(getattr(record, "units", ())) or 1
    items = int(getattr(record, "items_completed", 0))
    # the start-up the run measured (its replicas up: `fitwork.engine.ray.warm`), else ours
    measured = ((getattr(record, "host", None) or {}).get("ray_start") or {}).get("feeding")
    start = startup_seconds(replicas, cores) if measured is None else float(measured)
    steady = predicted(rate, items, 0, units, cores)  # no start-up: the steady part alone
    value = items / (start + items / steady) if rate > 0 and items > 0 else rate
    return value, (f" ({rate:,.1f} steady, less Ray's start-up of {replicas} replicas "
                   f"on {cores:g} cores, {start:.2f} s{' as measured' * (measured is not None)}"
                   f", and its cost per call, for {items:,} items)")


__all__ = ["ACTOR_START_CPU_S", "CALL_CPU_S", "CROSS_NODE_BYTE_CPU_S", "CROSS_NODE_FRAME_CPU_S",
           "FRAME_TIME", "INLINE_MAX", "crossed_rate", "crossing_cpu", "crossing_share",
           "for_record", "frame_crossing_cpu", "plan_crossing", "predicted", "startup_seconds",
           "steady_rate"]
