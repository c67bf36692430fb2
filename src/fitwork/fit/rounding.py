"""Rounding: integer replicas from the LP relaxation, repaired to fit what replicas hold.

In the fluid model a replica HOLDS memory, reserved cores, a device slot and its calls in
flight, and CONSUMES cores, device time and network in proportion to its busy share ``b``.
The LP's busy shares already satisfy every fluid row, so rounding keeps them and only picks
replicas: per (unit, class) the batch option the LP loaded most, then ``x = ceil(b)`` (every
busy share keeps a replica, so the fluid rows still hold).  Rounding up can overfill what
replicas hold; each overfilled row (per node type, or a unit's ``max_concurrency``) is repaired
by removing the replica whose loss of capacity is least (an idle replica loses none), its busy
share cut to what is left.  Then a greedy fill gives the unit with the least capacity per
source item more busy share (on a replica with slack) or one more replica where what
replicas hold and the fluid rows still have room; where they have none, it makes room on
that node type by removing replicas of other units that stay at or above the bottleneck's
new capacity.  Each step raises the least capacity or blocks a unit, so the loop ends.  The
solver then fixes these replicas and re-solves the flows (an LP) for the most T they carry.
Pure: arrays in, array out.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from fitwork.fit.candidates import Candidate, Problem
from fitwork.fit.model import MilpModel

_TOL = 1e-7


def _held(cand: Candidate) -> dict[str, float]:
    """What one replica of ``cand`` holds of its node type, busy or not."""
    held = {"cores": cand.cores, "memory": cand.memory}
    if cand.devices > 0:
        held[f"slot:{cand.device_class}"] = cand.devices
    return {k: v for k, v in held.items() if v > 0}


def _fluid(cand: Candidate, ceiling: float) -> dict[str, float]:
    """What one fully busy replica of ``cand`` consumes of its node type."""
    used = {"cores": cand.cpu * cand.rate / ceiling,
            f"time:{cand.device_class}": cand.device_time * cand.rate,
            "net_out": cand.bytes_out * cand.rate, "net_in": cand.bytes_in * cand.rate}
    return {k: v for k, v in used.items() if v > 0}


_Snapshot = tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, float]], list[float],
                  list[float]]
"""x, b, caps, room, conc and rate, as `_State.snapshot` copies them."""


class _State:
    """Replicas, busy shares, and what is left per node type and per unit."""

    def __init__(self, problem: Problem, x: np.ndarray, b: np.ndarray) -> None:
        self.problem = problem
        self.x, self.b = x, b
        self.room: list[dict[str, float]] = []
        for node in problem.node_types:
            here = {"cores": node.cores * node.count, "memory": float(node.memory * node.count)}
            for d, k in node.devices.items():
                here[f"slot:{d}"] = here[f"time:{d}"] = float(k * node.count)
            network = math.inf if node.network is None else node.network * node.count
            here.update({"net_out": network, "net_in": network})
            self.room.append(here)
        self.calls = [problem.limits(u)[0] for u in range(len(problem.unit_names))]
        self.per_s = [problem.limits(u)[1] for u in range(len(problem.unit_names))]
        self.conc = [math.inf if c is None else float(c) for c in self.calls]
        self.rate = [math.inf if r is None else float(r) for r in self.per_s]
        self.caps = np.zeros(len(problem.unit_names))
        for i in range(len(problem.candidates)):
            self._take(i, x[i], b[i])

    def _take(self, i: int, replicas: float, busy: float) -> None:
        cand = self.problem.candidates[i]
        room = self.room[cand.node]
        ceiling = self.problem.node_types[cand.node].core_ceiling
        for key, need in _held(cand).items():
            room[key] -= need * replicas
        for key, need in _fluid(cand, ceiling).items():
            room[key] -= need * busy
        self.conc[cand.unit] -= cand.concurrency * replicas
        self.rate[cand.unit] -= cand.calls * cand.rate * busy
        self.caps[cand.unit] += cand.rate * busy / self.problem.multiplicity[cand.unit]

    def change(self, i: int, replicas: float, busy: float) -> None:
        """Add ``replicas`` and ``busy`` (either may be negative) to candidate ``i``."""
        self.x[i] += replicas
        self.b[i] += busy
        self._take(i, replicas, busy)

    def over(self) -> list[tuple[int | None, int, str]]:
        """Overfilled held rows: (node type, or None for a unit's calls; index; resource)."""
        out: list[tuple[int | None, int, str]] = []
        for n, room in enumerate(self.room):
            out += [(n, n, key) for key, left in room.items()
                    if not key.startswith(("time:", "net_")) and left < -_TOL * max(1.0, abs(left))]
        out += [(None, u, "calls") for u, left in enumerate(self.conc) if left < -_TOL]
        return out

    def fluid_room(self, i: int) -> float:
        """The most busy share the fluid rows leave for candidate ``i`` (inf: unbounded)."""
        cand = self.problem.candidates[i]
        room = self.room[cand.node]
        ceiling = self.problem.node_types[cand.node].core_ceiling
        most = math.inf
        for key, need in _fluid(cand, ceiling).items():
            most = min(most, max(0.0, room[key]) / need)
        if cand.calls * cand.rate > 0:
            most = min(most, max(0.0, self.rate[cand.unit]) / (cand.calls * cand.rate))
        return most

    def snapshot(self) -> _Snapshot:
        """Everything `change` touches, to undo a failed attempt."""
        return (self.x.copy(), self.b.copy(), self.caps.copy(), [dict(r) for r in self.room],
                list(self.conc), list(self.rate))

    def restore(self, saved: _Snapshot) -> None:
        """Undo back to a `snapshot`."""
        x, b, caps, room, conc, rate = saved
        self.x[:], self.b[:], self.caps[:] = x, b, caps
        self.room = room
        self.conc, self.rate = conc, rate

    def lacking(self, i: int) -> set[str]:
        """What candidate ``i``'s node type lacks for one more fully busy replica."""
        cand = self.problem.candidates[i]
        room = self.room[cand.node]
        ceiling = self.problem.node_types[cand.node].core_ceiling
        needs = dict(_held(cand))
        for key, need in _fluid(cand, ceiling).items():
            needs[key] = needs.get(key, 0.0) + need
        return {key for key, need in needs.items()
                if need > room[key] + _TOL * max(1.0, abs(room[key]))}

    def holds(self, i: int) -> bool:
        """Whether one more replica of candidate ``i`` fits what replicas hold."""
        cand = self.problem.candidates[i]
        room = self.room[cand.node]
        if any(need > room[key] + _TOL * max(1.0, abs(room[key]))
               for key, need in _held(cand).items()):
            return False
        return cand.concurrency <= self.conc[cand.unit] + _TOL


def _chosen(problem: Problem, b: np.ndarray) -> dict[int, int]:
    """Per (unit, class) group: the batch option the LP loaded most."""
    load: dict[tuple[int, int], float] = defaultdict(float)
    for i, cand in enumerate(problem.candidates):
        load[cand.group, cand.choice] += cand.rate * b[i]
    best: dict[int, tuple[float, int]] = {}
    for (group, choice), value in load.items():
        if group not in best or value > best[group][0]:
            best[group] = (value, choice)
    return {g: choice for g, (value, choice) in best.items() if value > 0}


def _repair(problem: Problem, s: _State) -> None:
    """Remove replicas until every held row fits, least capacity lost first."""
    while over := s.over():
        node, index, key = over[0]
        best: tuple[float, int] | None = None
        for i, cand in enumerate(problem.candidates):
            if s.x[i] < 1:
                continue
            if node is None:
                if cand.unit != index:
                    continue
            elif cand.node != node or _held(cand).get(key, 0.0) <= 0:
                continue
            lost = cand.rate * max(0.0, s.b[i] - (s.x[i] - 1)) / problem.multiplicity[cand.unit]
            if best is None or lost < best[0]:
                best = (lost, i)
        if best is None:  # nothing to remove: the row cannot be met (should not happen)
            return
        i = best[1]
        s.change(i, -1.0, -max(0.0, s.b[i] - (s.x[i] - 1)))


def _frees(cand: Candidate, ceiling: float) -> set[str]:
    return set(_held(cand)) | set(_fluid(cand, ceiling))


def _make_room(problem: Problem, s: _State, i: int, floor: float) -> bool:
    """Remove other units' replicas on ``i``'s node type until one more busy replica of
    ``i`` fits; undo and say False if it cannot.  A removal is allowed only while its unit
    keeps a capacity of at least ``floor``; the one losing least capacity goes first."""
    cand = problem.candidates[i]
    ceiling = problem.node_types[cand.node].core_ceiling
    saved = s.snapshot()
    others = [j for j, k in enumerate(problem.candidates)
              if k.node == cand.node and k.unit != cand.unit and s.x[j] > 0]
    while lack := s.lacking(i):
        if any(key.startswith("net_") for key in lack) and not any(
                key.startswith("net_") for j in others
                for key in _frees(problem.candidates[j], ceiling)):
            break
        best: tuple[float, int] | None = None
        for j in others:
            other = problem.candidates[j]
            if s.x[j] < 1 or not lack & _frees(other, ceiling):
                continue
            m = problem.multiplicity[other.unit]
            lost = other.rate * max(0.0, s.b[j] - (s.x[j] - 1)) / m
            if s.caps[other.unit] - lost >= floor - _TOL and (best is None or lost < best[0]):
                best = (lost, j)
        if best is None:
            break
        j = best[1]
        s.change(j, -1.0, -max(0.0, s.b[j] - (s.x[j] - 1)))
    if s.lacking(i) and not s.holds(i):
        s.restore(saved)
        return False
    return True


def _fill(problem: Problem, model: MilpModel, s: _State, chosen: dict[int, int]) -> None:
    """One more replica for the least-served unit while one fits and adds capacity."""
    by_unit: list[list[int]] = [[] for _ in problem.unit_names]
    for i in sorted(range(len(problem.candidates)), key=lambda i: -problem.candidates[i].rate):
        by_unit[problem.candidates[i].unit].append(i)
    blocked: set[int] = set()
    for _ in range(4 * len(problem.candidates) + 100):
        open_units = [u for u in range(len(by_unit)) if u not in blocked]
        if not open_units:
            return
        u = min(open_units, key=lambda k: s.caps[k])
        step = None
        for i in by_unit[u]:
            cand = problem.candidates[i]
            if chosen.get(cand.group, cand.choice) != cand.choice:
                continue
            room = s.fluid_room(i)
            if s.x[i] - s.b[i] > _TOL and room > _TOL:
                step = (i, 0.0, min(s.x[i] - s.b[i], room))
                break
            if s.x[i] + 1 <= model.ub[i] + _TOL and room > 1e-3 and s.holds(i):
                step = (i, 1.0, min(1.0, room))
                break
        if step is None:
            for i in by_unit[u]:
                cand = problem.candidates[i]
                if chosen.get(cand.group, cand.choice) != cand.choice or \
                        s.x[i] + 1 > model.ub[i] + _TOL:
                    continue
                floor = s.caps[u] + cand.rate / problem.multiplicity[u]
                if _make_room(problem, s, i, floor) and s.holds(i):
                    room = s.fluid_room(i)
                    if room > 1e-3:
                        step = (i, 1.0, min(1.0, room))
                        break
        if step is None:
            blocked.add(u)
            continue
        i, replicas, busy = step
        chosen.setdefault(problem.candidates[i].group, problem.candidates[i].choice)
        s.change(i, replicas, busy)


def round_and_fill(problem: Problem, model: MilpModel, lp_x: np.ndarray) -> np.ndarray:
    """Integer replicas (and busy shares) in the model's layout that fit every held row."""
    lay = model.layout
    n = lay.n_cand
    b = np.clip(lp_x[n: 2 * n], 0.0, None)
    chosen = _chosen(problem, b)
    for i, cand in enumerate(problem.candidates):
        if chosen.get(cand.group, cand.choice) != cand.choice:
            b[i] = 0.0
    x = np.minimum(np.ceil(b - 1e-6), model.ub[:n])
    x = np.maximum(x, 0.0)
    s = _State(problem, x, np.minimum(b, x))
    _repair(problem, s)
    _fill(problem, model, s, chosen)
    v = np.zeros(lay.size)
    v[:n] = s.x
    v[n: 2 * n] = np.minimum(s.b, s.x)
    t_max = float(model.ub[lay.t]) * model.t_scale
    v[lay.t] = min(float(s.caps.min()), t_max) / model.t_scale
    return v
