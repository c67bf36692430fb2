"""Packing: each node type's replicas onto its individual nodes, first-fit decreasing.

The solver's rows hold per node TYPE (the sum over its ``count`` nodes), and its per-node cap
holds per candidate alone; replicas of several units sharing a type may still not fit node by
node.  This places them: replica groups in decreasing order of their largest need (as a
share of one node), each replica on the first node with room for all it needs.  A node's room
is its cores (reserved cores plus fluid core-seconds over the ceiling), memory, network each
way, and per device its slot (shares up to 1 share a device; a larger share takes whole free
devices) and its time.  A group's fluid load is split evenly over its replicas (the router
spreads a unit's items over its replicas, and an engine asks the same for each).  Arrays
per node keep it fast at a thousand nodes.  `split` turns fluid load that did not fit into
more, smaller replicas.  `colocate` then moves replicas between a type's nodes so units that
send each other many bytes per second share nodes where the room allows (a frame that
crosses nodes goes through the object stores, `fitwork.engine.ray.costs.crossing_share`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fitwork.fit.candidates import Problem

_EPS = 1e-9
SPREAD_AT_MOST = 400
"""Replicas of one node type up to which the one-by-one spread is tried."""
_FIT_TOL = 1e-6
"""Relative slack when a replica meets a node's room: what HiGHS's feasibility tolerance
leaves on a row that is exactly full."""


@dataclass(frozen=True)
class Packing:
    """Where each replica went: ``nodes[c]`` the node index (within its type) of each
    replica of candidate ``c``, ``unplaced[c]`` how many found no node, ``used[n]`` how many
    nodes of type ``n`` hold anything, and ``short[n]`` how much did not fit there, per row
    of the solver's model that blocked it (``cores``, ``memory``, a device class's slots,
    ``time:<class>``, ``net_out``, ``net_in``), in nodes: the left-over replicas' needs plus
    the largest replica's (what fragmentation can waste)."""

    nodes: tuple[tuple[int, ...], ...]
    unplaced: np.ndarray
    used: tuple[int, ...]
    short: tuple[dict[str, float], ...] = ()

    @property
    def complete(self) -> bool:
        """Whether every replica has a node."""
        return not self.unplaced.any()


@dataclass
class _Node:
    """Room left on each node of one type (arrays over its nodes)."""

    cores: np.ndarray
    memory: np.ndarray
    net_out: np.ndarray
    net_in: np.ndarray
    slots: dict[str, np.ndarray]
    time: dict[str, np.ndarray]


def _rooms(problem: Problem, n: int, count: int) -> _Node:
    node = problem.node_types[n]
    network = math.inf if node.network is None else node.network
    return _Node(
        cores=np.full(count, node.cores, dtype=float),
        memory=np.full(count, float(node.memory)),
        net_out=np.full(count, network), net_in=np.full(count, network),
        slots={d: np.ones((count, k)) for d, k in node.devices.items() if k > 0},
        time={d: np.ones((count, k)) for d, k in node.devices.items() if k > 0},
    )


def _fits(need: float, room: np.ndarray) -> np.ndarray:
    """Replicas needing ``need`` each that ``room`` takes (per node, or per device)."""
    if need <= 0:
        return np.full(room.shape, np.inf)
    return np.floor(np.maximum(room, 0.0) / need + _FIT_TOL)


def pack(problem: Problem, replicas: np.ndarray, flows: np.ndarray,
         limit: Sequence[int] | None = None) -> Packing:
    """Every node type's replicas onto its nodes (the first ``limit[n]`` of type ``n`` only,
    when given: the nodes a min-cost plan pays for).

    First-fit decreasing first (fewest nodes); where that leaves replicas over, balanced
    decreasing (each group dealt out over the nodes in proportion to the room they have for
    it, which keeps several resources in step), then, for a few hundred replicas at most,
    spread decreasing (each replica on the node left roomiest).
    """
    cands = problem.candidates
    nodes: list[tuple[int, ...]] = [() for _ in cands]
    unplaced = np.zeros(len(cands), dtype=int)
    used, short = [], []
    for n, node in enumerate(problem.node_types):
        available = node.count if limit is None else max(0, min(node.count, int(limit[n])))
        groups = _groups(problem, n, replicas, flows)
        best = _pack_type(problem, n, available, groups, _place)
        small = sum(g[2] for g in groups) <= SPREAD_AT_MOST
        for place in (_deal, _spread) if small else (_deal,):
            if not best[1] or available <= 1:
                break
            other = _pack_type(problem, n, available, groups, place)
            if sum(other[1].values()) < sum(best[1].values()):
                best = other
        placed, left, missing, count = best
        if available > 1:
            placed, count = colocate(problem, n, available, groups, placed, flows)
        for i, where in placed.items():
            nodes[i] = tuple(sorted(where))
        for i, k in left.items():
            unplaced[i] = k
        used.append(count)
        short.append(missing)
    return Packing(tuple(nodes), unplaced, tuple(used), tuple(short))


ROWS = {"cores": "cores", "memory": "memory", "net_out": "net_out", "net_in": "net_in"}


def _capacities(problem: Problem, n: int, device_class: str) -> dict[str, float]:
    node = problem.node_types[n]
    caps = {"cores": node.cores, "memory": float(node.memory),
            "net_out": node.network or math.inf, "net_in": node.network or math.inf,
            "slot": float(node.devices.get(device_class, 0)),
            "time": float(node.devices.get(device_class, 0))}
    return caps


def _row(key: str, device_class: str) -> str:
    if key == "slot":
        return device_class
    if key == "time":
        return f"time:{device_class}"
    return ROWS[key]


def _blocked(room: _Node, device_class: str, need: Need) -> list[str]:
    """The needs no node has room for on its own (all the needs, if none alone blocks)."""
    wanted = [k for k, v in need.items() if v > 0]
    alone = []
    for key in wanted:
        if key in ("slot", "time"):
            pool = (room.slots if key == "slot" else room.time).get(device_class)
            top = float(pool.max()) if pool is not None and pool.size else 0.0
        else:
            arr = getattr(room, key)
            top = float(arr.max()) if len(arr) else 0.0
        if top < need[key] * (1 - _FIT_TOL):
            alone.append(key)
    return alone or wanted


Need = dict[str, float]


def _groups(problem: Problem, n: int, replicas: np.ndarray,
            flows: np.ndarray) -> list[tuple[float, int, int, Need]]:
    """(size, candidate, replicas, one replica's needs) on node type ``n``, largest first."""
    node = problem.node_types[n]
    groups = []
    for i, cand in enumerate(problem.candidates):
        count = int(np.rint(replicas[i]))
        if cand.node != n or count <= 0:
            continue
        per = flows[i] / count  # items/s each replica carries
        need = {
            "cores": cand.cores + cand.cpu * per / node.core_ceiling,
            "memory": cand.memory,
            "net_out": cand.bytes_out * per, "net_in": cand.bytes_in * per,
            "slot": cand.devices, "time": cand.device_time * per,
        }
        devices = node.devices.get(cand.device_class, 0)
        size = max(need["cores"] / node.cores if node.cores else 0.0,
                   need["memory"] / node.memory if node.memory else 0.0,
                   need["slot"], need["time"], 0.0)
        if devices and need["slot"] > 1:
            size = max(size, need["slot"] / devices)
        groups.append((size, i, count, need))
    groups.sort(key=lambda g: (-g[0], g[1]))
    return groups


Placer = Callable[["_Node", str, Need, int, list[int], np.ndarray], int]


def _pack_type(problem: Problem, n: int, available: int,
               groups: list[tuple[float, int, int, Need]], place: Placer
               ) -> tuple[dict[int, list[int]], dict[int, int], dict[str, float], int]:
    """One node type's groups onto ``available`` nodes: where each went, what was left
    (per candidate), what was short per model row in nodes, and how many nodes hold
    anything."""
    room = _rooms(problem, n, available)
    taken = np.zeros(available, dtype=bool)
    placed: dict[int, list[int]] = {}
    left: dict[int, int] = {}
    missing: dict[str, float] = {}
    largest: dict[str, float] = {}
    for _, i, count, need in groups:
        device_class = problem.candidates[i].device_class
        caps = _capacities(problem, n, device_class)
        for key, v in need.items():
            if v > 0 and caps[key] > 0:
                row = _row(key, device_class)
                largest[row] = max(largest.get(row, 0.0), v / caps[key])
        where: list[int] = []
        rest = place(room, device_class, need, count, where, taken)
        placed[i] = where
        if rest:
            left[i] = rest
            for key in _blocked(room, device_class, need):
                row = _row(key, device_class)
                if caps[key] > 0:
                    missing[row] = missing.get(row, 0.0) + rest * need[key] / caps[key]
    short = {row: v + largest.get(row, 0.0) for row, v in missing.items()}
    return placed, left, short, int(taken.sum())


def _node_fits(room: _Node, device_class: str, need: Need) -> np.ndarray | None:
    """Replicas each node still takes (``None``: the nodes lack the device class)."""
    fit = np.minimum.reduce([
        _fits(need["cores"], room.cores), _fits(need["memory"], room.memory),
        _fits(need["net_out"], room.net_out), _fits(need["net_in"], room.net_in)])
    if need["slot"] > 0 or need["time"] > 0:
        if device_class not in room.slots:
            return None
        fit = np.minimum(fit, _device_fits(room, device_class, need))
    return fit


def _put(room: _Node, device_class: str, need: Need, j: int, k: int) -> None:
    _put_many(room, device_class, need, np.array([j]), np.array([k]))


def _put_many(room: _Node, device_class: str, need: Need, nodes: np.ndarray,
              counts: np.ndarray) -> None:
    """Take ``counts[i]`` replicas' needs from node ``nodes[i]``."""
    room.cores[nodes] -= counts * need["cores"]
    room.memory[nodes] -= counts * need["memory"]
    room.net_out[nodes] -= counts * need["net_out"]
    room.net_in[nodes] -= counts * need["net_in"]
    if need["slot"] > 0 or need["time"] > 0:
        _take_devices(room, device_class, need, nodes, counts)


def _record(placed: list[int], taken: np.ndarray, nodes: np.ndarray,
            counts: np.ndarray) -> None:
    placed.extend(np.repeat(nodes, counts).tolist())
    taken[nodes] = True


def _deal(room: _Node, device_class: str, need: Need, count: int, placed: list[int],
          taken: np.ndarray) -> int:
    """Deal ``count`` replicas out over the nodes that still take one, each a share in
    proportion to how many it takes, the remainder one apiece to the nodes with the most
    room left."""
    left = count
    while left > 0:
        fit = _node_fits(room, device_class, need) if len(room.cores) else None
        if fit is None:
            return left
        open_ = np.flatnonzero(fit >= 1)
        if not len(open_):
            return left
        fits = np.minimum(fit[open_], left)
        give = np.minimum(fits, np.floor(left * fits / fits.sum())).astype(int)
        if not give.sum():
            order = open_[np.argsort(-_score(room, need)[open_], kind="stable")][: left]
            ones = np.ones(len(order), dtype=int)
            _put_many(room, device_class, need, order, ones)
            _record(placed, taken, order, ones)
            left -= len(order)
            continue
        mask = give > 0
        _put_many(room, device_class, need, open_[mask], give[mask])
        _record(placed, taken, open_[mask], give[mask])
        left -= int(give.sum())
    return 0


def _score(room: _Node, need: Need) -> np.ndarray:
    """Per node, the least share of any resource this replica uses that is left."""
    score = np.full(len(room.cores), np.inf)
    for r, v in ((room.cores, need["cores"]), (room.memory, need["memory"]),
                 (room.net_out, need["net_out"]), (room.net_in, need["net_in"])):
        if v > 0 and len(r) and np.isfinite(r).all():
            score = np.minimum(score, (r - v) / max(float(r.max()), _EPS))
    return score


def _spread(room: _Node, device_class: str, need: Need, count: int, placed: list[int],
            taken: np.ndarray) -> int:
    """Place ``count`` replicas one by one, each on the node with the most room left."""
    for done in range(count):
        fit = _node_fits(room, device_class, need)
        if fit is None or not len(fit) or fit.max() < 1:
            return count - done
        j = int(np.argmax(np.where(fit >= 1, _score(room, need), -np.inf)))
        _put(room, device_class, need, j, 1)
        placed.append(j)
        taken[j] = True
    return 0


def split(problem: Problem, replicas: np.ndarray, packing: Packing) -> np.ndarray | None:
    """More, smaller replicas where fluid load did not pack; ``None`` if none can be added.

    A fluid replica holds little, so splitting a candidate's load over twice the replicas
    halves what each needs of a node's cores and lets the left-over load fill the gaps
    first-fit left.  Only candidates with replicas left over, on a node type short of
    nothing but fluid rows (cores, device time), double, as far as what their replicas hold
    allows (memory, reserved cores, slots, calls in flight, the solver's per-node cap).
    """
    out = replicas.copy()
    room = _held_room(problem, replicas)
    calls = _calls_room(problem, replicas)
    grown = False
    for n in range(len(problem.node_types)):
        short = packing.short[n]
        if not short or any(not (row == "cores" or row.startswith("time:")) for row in short):
            continue
        mine = [i for i, k in enumerate(problem.candidates)
                if k.node == n and packing.unplaced[i] > 0 and (k.cpu > 0 or k.device_time > 0)]
        for i in mine:
            extra = _allowed(problem, i, replicas[i], room[n], calls)
            if extra > 0:
                _hold(problem, i, extra, room[n], calls)
                out[i] += extra
                grown = True
    return out if grown else None


def _held_room(problem: Problem, replicas: np.ndarray) -> list[dict[str, float]]:
    room = []
    for node in problem.node_types:
        here = {"cores": node.cores * node.count, "memory": float(node.memory * node.count)}
        here.update({d: float(k * node.count) for d, k in node.devices.items()})
        room.append(here)
    for i, k in enumerate(problem.candidates):
        here = room[k.node]
        here["cores"] -= k.cores * replicas[i]
        here["memory"] -= k.memory * replicas[i]
        if k.devices > 0:
            here[k.device_class] -= k.devices * replicas[i]
    return room


def _calls_room(problem: Problem, replicas: np.ndarray) -> list[float]:
    left = [math.inf if problem.limits(u)[0] is None else float(problem.limits(u)[0] or 0)
            for u in range(len(problem.unit_names))]
    for i, k in enumerate(problem.candidates):
        left[k.unit] -= k.concurrency * replicas[i]
    return left


def _allowed(problem: Problem, i: int, now: float, room: dict[str, float],
             calls: list[float]) -> int:
    """How many replicas candidate ``i`` may add (up to doubling) within what they hold."""
    k = problem.candidates[i]
    most = min(now, k.per_node * problem.node_types[k.node].count - now)
    for key, need in (("cores", k.cores), ("memory", k.memory), (k.device_class, k.devices)):
        if need > 0:
            most = min(most, math.floor(room.get(key, 0.0) / need + 1e-9))
    if calls[k.unit] < math.inf:
        most = min(most, math.floor(calls[k.unit] / k.concurrency + 1e-9))
    return max(0, int(most))


def _hold(problem: Problem, i: int, extra: int, room: dict[str, float],
          calls: list[float]) -> None:
    k = problem.candidates[i]
    room["cores"] -= k.cores * extra
    room["memory"] -= k.memory * extra
    if k.devices > 0:
        room[k.device_class] -= k.devices * extra
    calls[k.unit] -= k.concurrency * extra


def _place(room: _Node, device_class: str, need: Need, count: int, placed: list[int],
           taken: np.ndarray) -> int:
    """Place ``count`` replicas first-fit; append their node indices; return how many left."""
    if not len(room.cores):
        return count
    fit = _node_fits(room, device_class, need)
    if fit is None:
        return count
    fit = np.minimum(fit, count)
    before = np.cumsum(fit) - fit
    take = np.clip(count - before, 0, fit).astype(int)
    where = np.flatnonzero(take)
    _put_many(room, device_class, need, where, take[where])
    _record(placed, taken, where, take[where])
    return count - int(take.sum())


def _device_fits(room: _Node, device_class: str, need: dict[str, float]) -> np.ndarray:
    slots, time = room.slots[device_class], room.time[device_class]
    if need["slot"] > 1:
        whole = math.ceil(need["slot"] - _EPS)
        free = ((slots >= 1 - _EPS) & (time >= 1 - _EPS)).sum(axis=1)
        return np.floor(free / whole)
    per_device = np.minimum(_fits(need["slot"], slots), _fits(need["time"], time))
    per_device = np.where(np.isinf(per_device), 1e9, per_device)
    return per_device.sum(axis=1)


def _take_devices(room: _Node, device_class: str, need: Need, nodes: np.ndarray,
                  counts: np.ndarray) -> None:
    """Put ``counts[i]`` replicas on the devices of node ``nodes[i]``, device by device:
    as many as fit on each (a share), or on whole free devices (above 1)."""
    slots, time = room.slots[device_class], room.time[device_class]
    left = counts.astype(float)
    if need["slot"] > 1:
        left = left * math.ceil(need["slot"] - _EPS)  # whole devices wanted
        for d in range(slots.shape[1]):
            free = (slots[nodes, d] >= 1 - _EPS) & (time[nodes, d] >= 1 - _EPS) & (left > 0)
            slots[nodes[free], d] = 0.0
            time[nodes[free], d] = 0.0
            left = left - free
        return
    for d in range(slots.shape[1]):
        fits = np.minimum(_fits(need["slot"], slots[nodes, d]), _fits(need["time"], time[nodes, d]))
        put = np.minimum(left, fits)
        slots[nodes, d] -= put * need["slot"]
        time[nodes, d] -= put * need["time"]
        left = left - put


COLOCATE_NODES = 16
"""Nodes of one type up to which `colocate` tries moves (each move looks at every pair of
nodes for every replica group that sends or takes bytes: a few ms a move at 16)."""
COLOCATE_MOVES = 64
"""The most replicas `colocate` moves on one node type."""


Edge = tuple[int, int, float]


def chatty_edges(problem: Problem, n: int, flows: np.ndarray) -> list[Edge]:
    """(candidate, next unit's candidate, bytes/s between them) for each pair on node type
    ``n``: a unit's items go to the next unit's candidates in proportion to their flows."""
    cands = problem.candidates
    into: dict[int, float] = {}
    for k, cand in enumerate(cands):
        into[cand.unit] = into.get(cand.unit, 0.0) + float(flows[k])
    edges = []
    for i, a in enumerate(cands):
        if a.node != n or flows[i] <= 0 or a.bytes_out <= 0:
            continue
        for k, b in enumerate(cands):
            if b.node == n and b.unit == a.unit + 1 and flows[k] > 0:
                edges.append((i, k, float(flows[i]) * a.bytes_out * float(flows[k])
                              / into[b.unit]))
    return edges


def crossing_bytes(edges: list[Edge], counts: dict[int, np.ndarray]) -> float:
    """Bytes/s that cross nodes: each edge's bytes times the share of its frames whose
    receiver is on another node (the router spreads them over the receiving replicas
    whatever their node)."""
    total = 0.0
    for i, k, rate in edges:
        a, b = counts[i], counts[k]
        total += rate * (1.0 - float(a @ b) / max(float(a.sum() * b.sum()), _EPS))
    return total


def colocate(problem: Problem, n: int, available: int,
             groups: list[tuple[float, int, int, Need]], placed: dict[int, list[int]],
             flows: np.ndarray) -> tuple[dict[int, list[int]], int]:
    """Move replicas of node type ``n`` between the nodes that hold anything, one at a
    time, each time the move that cuts the bytes/s crossing nodes (`crossing_bytes`) the
    most, onto a node with room for the replica, until none cuts them.  Replicas on devices
    stay put.  Returns where each candidate's replicas are, and how many nodes hold any."""
    edges = chatty_edges(problem, n, flows)
    counts = {i: np.bincount(np.asarray(where, dtype=int), minlength=available).astype(float)
              for i, where in placed.items()}
    used = int(np.count_nonzero(sum(counts.values(), np.zeros(available))))
    if not edges or available > COLOCATE_NODES or \
            sum(len(w) for w in placed.values()) > SPREAD_AT_MOST or \
            any(i not in counts or k not in counts for i, k, _ in edges):
        return placed, used
    needs = {i: need for _, i, _, need in groups}
    room = _rooms(problem, n, available)
    for i, where in placed.items():
        nodes, per = np.unique(np.asarray(where, dtype=int), return_counts=True)
        _put_many(room, problem.candidates[i].device_class, needs[i], nodes, per)
    movable = sorted({c for i, k, _ in edges for c in (i, k)
                      if needs[c]["slot"] <= 0 and needs[c]["time"] <= 0})
    hold = np.flatnonzero(sum(counts.values(), np.zeros(available)) > 0)
    for _ in range(COLOCATE_MOVES):
        move = _best_move(problem, edges, counts, needs, room, movable, hold)
        if move is None:
            break
        i, src, dst = move
        cls = problem.candidates[i].device_class
        _put_many(room, cls, needs[i], np.array([src, dst]), np.array([-1, 1]))
        counts[i][src] -= 1
        counts[i][dst] += 1
    out = {i: np.repeat(np.arange(available), c.astype(int)).tolist()
           for i, c in counts.items()}
    return out, int(np.count_nonzero(sum(counts.values(), np.zeros(available))))


def _best_move(problem: Problem, edges: list[Edge], counts: dict[int, np.ndarray],
               needs: dict[int, Need], room: _Node, movable: list[int],
               hold: np.ndarray) -> tuple[int, int, int] | None:
    """The (candidate, from node, to node) move that cuts crossing bytes the most (by more
    than a millionth of them), or None."""
    now = crossing_bytes(edges, counts)
    best, found = now * (1.0 - 1e-6), None
    for i in movable:
        mine = [e for e in edges if i in (e[0], e[1])]
        base = crossing_bytes(mine, counts)
        fits = _node_fits(room, problem.candidates[i].device_class, needs[i])
        if fits is None:
            continue
        for src in np.flatnonzero(counts[i] > 0):
            for dst in hold:
                if dst == src or fits[dst] < 1:
                    continue
                counts[i][src] -= 1
                counts[i][dst] += 1
                after = now - base + crossing_bytes(mine, counts)
                counts[i][src] += 1
                counts[i][dst] -= 1
                if after < best:
                    best, found = after, (i, int(src), int(dst))
    return found
