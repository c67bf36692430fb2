"""Round-and-fill: a feasible max-throughput plan from the LP relaxation, by a greedy repair.

Round every replica count of the LP solution down (usage only falls, so every row still
holds). Then repeat: take the unit with the least capacity per source item and give it one
more replica on its fastest candidate that fits (node-type capacity, per-node packing cap,
network with the new replica taken as fully busy); if none fits, make room on that node type
by removing replicas of other units that stay at or above the bottleneck's new capacity.
Each step raises the sorted vector of unit capacities, so the loop ends; it stops when the
bottleneck can grow nowhere. When the result is within ``mip_gap`` of the LP bound,
branch-and-bound has nothing to prove and is skipped; otherwise the MILP runs and the better
plan is kept. Pure: arrays in, array out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fitwork.fit.candidates import Candidate, Problem
from fitwork.fit.model import MilpModel

_TOL = 1e-9


@dataclass
class _State:
    """Replicas, busy replicas, capacity per unit, and room left per node type."""

    x: np.ndarray
    busy: np.ndarray
    caps: np.ndarray
    room: list[dict[str, float]]


def _needs(cand: Candidate, flows: bool) -> dict[str, float]:
    """What one fully busy replica of ``cand`` takes from its node type."""
    needs = {"cores": cand.cores, "memory": cand.memory}
    if cand.devices > 0:
        needs[f"dev:{cand.device_class}"] = cand.devices
    if flows:
        needs["net_out"] = cand.bytes_out * cand.rate
        needs["net_in"] = cand.bytes_in * cand.rate
    return needs


def _start(problem: Problem, model: MilpModel, lp_x: np.ndarray) -> _State:
    lay = model.layout
    x = np.minimum(np.floor(lp_x[: lay.n_cand] + 1e-6), model.ub[: lay.n_cand])
    busy = np.minimum(lp_x[lay.n_cand: 2 * lay.n_cand], x) if lay.flows else x.copy()
    busy = np.maximum(busy, 0.0)
    room: list[dict[str, float]] = []
    for node in problem.node_types:
        here = {"cores": node.cores * node.count, "memory": float(node.memory * node.count)}
        here.update({f"dev:{d}": float(k * node.count) for d, k in node.devices.items()})
        network = math.inf if node.network is None else node.network * node.count
        here.update({"net_out": network, "net_in": network})
        room.append(here)
    caps = np.zeros(len(problem.unit_names))
    for i, cand in enumerate(problem.candidates):
        here = room[cand.node]
        for key, need in _needs(cand, False).items():
            here[key] -= need * x[i]
        if lay.flows:
            here["net_out"] -= cand.bytes_out * cand.rate * busy[i]
            here["net_in"] -= cand.bytes_in * cand.rate * busy[i]
        caps[cand.unit] += cand.rate * busy[i] / problem.multiplicity[cand.unit]
    return _State(x, busy, caps, room)


def _lacking(needs: dict[str, float], room: dict[str, float]) -> dict[str, float]:
    """How much of each resource is missing for ``needs`` (empty: it fits)."""
    return {k: v - room[k] for k, v in needs.items()
            if v > 0 and v > room[k] + _TOL * max(1.0, abs(room[k]))}


def _add(problem: Problem, s: _State, i: int, flows: bool) -> None:
    cand = problem.candidates[i]
    for key, need in _needs(cand, flows).items():
        s.room[cand.node][key] -= need
    s.x[i] += 1
    s.busy[i] += 1
    s.caps[cand.unit] += cand.rate / problem.multiplicity[cand.unit]


def _remove(problem: Problem, s: _State, i: int, flows: bool) -> None:
    cand = problem.candidates[i]
    room = s.room[cand.node]
    for key, need in _needs(cand, False).items():
        room[key] += need
    s.x[i] -= 1
    drop = max(0.0, s.busy[i] - s.x[i])
    s.busy[i] -= drop
    if flows:
        room["net_out"] += cand.bytes_out * cand.rate * drop
        room["net_in"] += cand.bytes_in * cand.rate * drop
    s.caps[cand.unit] -= cand.rate * drop / problem.multiplicity[cand.unit]


def _make_room(problem: Problem, s: _State, i: int, flows: bool, floor: float) -> bool:
    """Remove other units' replicas on ``i``'s node type until ``i`` fits; undo if it can't.

    A removal is allowed only while its unit keeps a capacity of at least ``floor``; the
    cheapest removal (least capacity lost) that frees a missing resource goes first.
    """
    cand = problem.candidates[i]
    saved = (s.x.copy(), s.busy.copy(), s.caps.copy(), [dict(r) for r in s.room])
    others = [j for j, k in enumerate(problem.candidates)
              if k.node == cand.node and k.unit != cand.unit and s.x[j] > 0]
    while lack := _lacking(_needs(cand, flows), s.room[cand.node]):
        if any(key.startswith("net_") for key in lack):
            break
        best: tuple[float, int] | None = None
        for j in others:
            other = problem.candidates[j]
            frees = _needs(other, False)
            if s.x[j] <= 0 or not any(frees.get(key, 0.0) > 0 for key in lack):
                continue
            m = problem.multiplicity[other.unit]
            lost = other.rate * max(0.0, s.busy[j] - (s.x[j] - 1)) / m
            if s.caps[other.unit] - lost >= floor - _TOL and (best is None or lost < best[0]):
                best = (lost, j)
        if best is None:
            break
        _remove(problem, s, best[1], flows)
    if not _lacking(_needs(cand, flows), s.room[cand.node]):
        return True
    s.x, s.busy, s.caps, s.room = saved
    return False


def round_and_fill(problem: Problem, model: MilpModel, lp_x: np.ndarray) -> np.ndarray:
    """A solution vector (the model's layout) that satisfies every row of a max-T model."""
    lay = model.layout
    s = _start(problem, model, lp_x)
    by_unit: list[list[int]] = [[] for _ in problem.unit_names]
    for i in sorted(range(lay.n_cand), key=lambda i: -problem.candidates[i].rate):
        by_unit[problem.candidates[i].unit].append(i)
    while True:
        u = int(np.argmin(s.caps))
        open_ = [i for i in by_unit[u] if s.x[i] + 1 <= model.ub[i] + _TOL]
        pick = next((i for i in open_
                     if not _lacking(_needs(problem.candidates[i], lay.flows),
                                     s.room[problem.candidates[i].node])), None)
        if pick is None:
            for i in open_:
                new_cap = s.caps[u] + problem.candidates[i].rate / problem.multiplicity[u]
                if _make_room(problem, s, i, lay.flows, new_cap):
                    pick = i
                    break
        if pick is None:
            break
        _add(problem, s, pick, lay.flows)
    v = np.zeros(lay.size)
    v[: lay.n_cand] = s.x
    if lay.flows:
        v[lay.n_cand: 2 * lay.n_cand] = s.busy
    t_max = float(model.ub[lay.t]) * model.t_scale
    v[lay.t] = min(float(s.caps.min()), t_max) / model.t_scale
    return v
