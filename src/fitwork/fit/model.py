"""The MILP as arrays (objective, bounds, sparse rows) built from a `Problem`; no solving here.

Variables, in this order: ``x[c]`` integer replicas per candidate; ``b[c]`` busy replicas of
candidate ``c`` (items/s routed to it over its rate, so ``f_c = r_c·b_c``); ``T / t_scale``
with T items/s at the source; ``y[n]`` integer nodes in use per node type (``min_cost``
only); ``z[k]`` binary, one per batch option of a (unit, class) that offers several (the
option its replicas run).  Rows and columns are scaled for HiGHS: every capacity row is
divided by one node's capacity (coefficients are fractions of a node), limits by their own
value, and T by ``t_scale``, the geometric mean of ``rate / m_u`` over the candidates, so
throughput rows have coefficients near 1 whatever the rates.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from fitwork.fit.candidates import Problem


@dataclass(frozen=True)
class Layout:
    """Where each variable sits in the vector HiGHS solves for."""

    n_cand: int
    n_nodes: int
    min_cost: bool
    choices: tuple[int, ...] = ()
    """The choice ids that get a binary ``z`` (their group offers several)."""

    def x(self, c: int) -> int:
        """Column of ``x[c]``."""
        return c

    def f(self, c: int) -> int:
        """Column of ``b[c]``, busy replicas."""
        return self.n_cand + c

    @property
    def t(self) -> int:
        """Column of ``T``."""
        return 2 * self.n_cand

    def y(self, n: int) -> int:
        """Column of ``y[n]`` (only for ``min_cost``)."""
        return self.t + 1 + n

    def z(self, k: int) -> int:
        """Column of the binary of the ``k``-th entry of ``choices``."""
        return self.t + 1 + (self.n_nodes if self.min_cost else 0) + k

    @property
    def size(self) -> int:
        """Number of variables."""
        return self.t + 1 + (self.n_nodes if self.min_cost else 0) + len(self.choices)


@dataclass(frozen=True)
class MilpModel:
    """``minimise c·v  s.t.  row_lb <= A v <= row_ub,  lb <= v <= ub,  v[integral] integer``."""

    layout: Layout
    c: np.ndarray
    integrality: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    a: sp.csr_array
    row_lb: np.ndarray
    row_ub: np.ndarray
    row_names: tuple[str, ...]
    t_scale: float


def choice_groups(problem: Problem) -> dict[int, list[int]]:
    """Per (unit, class) group with several batch options: its choice ids, in order."""
    seen: dict[int, set[int]] = defaultdict(set)
    for cand in problem.candidates:
        seen[cand.group].add(cand.choice)
    return {g: sorted(ids) for g, ids in seen.items() if len(ids) > 1}


class Rows:
    """Accumulates sparse rows ``lo <= sum coef·v <= hi`` (the co-fit's model builds on it
    too): terms as a column -> coefficient mapping, or as (column, coefficient) pairs, where
    a column named twice adds up."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.names: list[str] = []

    def add(self, name: str, terms: Mapping[int, float] | Iterable[tuple[int, float]],
            lo: float, hi: float) -> None:
        """One row, named ``name``."""
        row = len(self.lo)
        pairs = terms.items() if isinstance(terms, Mapping) else terms
        for col, val in pairs:
            if val != 0.0:
                self.rows.append(row)
                self.cols.append(col)
                self.vals.append(val)
        self.lo.append(lo)
        self.hi.append(hi)
        self.names.append(name)

    def matrix(self, width: int) -> sp.csr_array:
        """The rows as a sparse matrix of ``width`` columns."""
        return sp.csr_array((self.vals, (self.rows, self.cols)), shape=(len(self.lo), width))


def _add(terms: dict[int, float], col: int, val: float) -> None:
    terms[col] = terms.get(col, 0.0) + val


def node_rows(problem: Problem, lay: Layout, n: int
              ) -> list[tuple[str, float, list[tuple[int, float]]]]:
    """The capacity rows of node type ``n``: (resource, one node's capacity, terms).

    ``cores`` holds reserved cores per replica plus fluid core-seconds over the ceiling
    (``sum R·x + sum cpu·r·b / rho <= cores``), which also keeps the reservations within the
    cores; ``memory`` and each device class's slots are held per replica; ``time:<class>``
    is fluid device time; ``net_out``/``net_in`` only where the node type has a network.
    """
    node = problem.node_types[n]
    here = [(i, k) for i, k in enumerate(problem.candidates) if k.node == n]
    cores = [(lay.x(i), k.cores) for i, k in here]
    cores += [(lay.f(i), k.cpu * k.rate / node.core_ceiling) for i, k in here]
    rows: list[tuple[str, float, list[tuple[int, float]]]] = [
        ("cores", node.cores, cores),
        ("memory", float(node.memory), [(lay.x(i), k.memory) for i, k in here]),
    ]
    for dev, count in node.devices.items():
        mine = [(i, k) for i, k in here if k.device_class == dev]
        rows.append((dev, float(count), [(lay.x(i), k.devices) for i, k in mine]))
        rows.append((f"time:{dev}", float(count),
                     [(lay.f(i), k.device_time * k.rate) for i, k in mine]))
    if node.network is not None:
        rows.append(("net_out", node.network, [(lay.f(i), k.bytes_out * k.rate) for i, k in here]))
        rows.append(("net_in", node.network, [(lay.f(i), k.bytes_in * k.rate) for i, k in here]))
    return rows


def _variables(problem: Problem, lay: Layout, *, min_cost: bool, target: float | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """The objective, integrality, bounds and ``t_scale`` of every variable."""
    cands = problem.candidates
    nodes = problem.node_types
    lb = np.zeros(lay.size)
    ub = np.zeros(lay.size)
    integrality = np.zeros(lay.size)
    c = np.zeros(lay.size)
    for i, cand in enumerate(cands):
        ub[lay.x(i)] = ub[lay.f(i)] = cand.per_node * nodes[cand.node].count
        integrality[lay.x(i)] = 1
    t_max = min(
        sum(cand.rate * ub[lay.x(i)] for i, cand in enumerate(cands) if cand.unit == u) / m
        for u, m in enumerate(problem.multiplicity)
    )
    t_scale = float(np.exp(np.mean([np.log(k.rate / problem.multiplicity[k.unit])
                                    for k in cands])))
    if min_cost:
        assert target is not None
        lb[lay.t] = ub[lay.t] = target / t_scale
        for n, node in enumerate(nodes):
            ub[lay.y(n)] = node.count
            integrality[lay.y(n)] = 1
            c[lay.y(n)] = node.price_per_hour
    else:
        ub[lay.t] = t_max / t_scale
        c[lay.t] = -1.0
    for k in range(len(lay.choices)):
        ub[lay.z(k)] = 1.0
        integrality[lay.z(k)] = 1
    return c, integrality, lb, ub, t_scale


def _flow_rows(rows: Rows, problem: Problem, lay: Layout, t_scale: float) -> None:
    """Throughput rows (unit u's replicas carry m_u items per source item) and busy rows."""
    cands = problem.candidates
    for u, m in enumerate(problem.multiplicity):
        terms: dict[int, float] = {lay.t: 1.0}
        for i, cand in enumerate(cands):
            if cand.unit == u:
                _add(terms, lay.f(i), -cand.rate / (m * t_scale))
        rows.add(f"throughput[{problem.unit_names[u]}]", terms, -np.inf, 0.0)
    # Busy replicas: a candidate is busy at most with all its replicas.
    for i in range(len(cands)):
        rows.add(f"busy[{i}]", {lay.f(i): 1.0, lay.x(i): -1.0}, -np.inf, 0.0)


def _capacity_rows(rows: Rows, problem: Problem, lay: Layout, *, min_cost: bool,
                   derate: dict[tuple[int, str], float] | None) -> None:
    """Capacity per node type and resource, in nodes: sum demand/node_capacity · v <= nodes."""
    inf = np.inf
    for n, node in enumerate(problem.node_types):
        for resource, capacity, demand in node_rows(problem, lay, n):
            if not any(v > 0 for _, v in demand):
                continue
            share = derate.get((n, resource), 1.0) if derate else 1.0
            terms: dict[int, float] = {}
            for col, v in demand:
                _add(terms, col, v / capacity if capacity > 0 else v)
            if min_cost:
                _add(terms, lay.y(n), -share if capacity > 0 else 0.0)
                rows.add(f"{resource}[{node.name}]", terms, -inf, 0.0)
            else:
                rows.add(f"{resource}[{node.name}]", terms, -inf,
                         share * node.count if capacity > 0 else 0.0)
        if min_cost:
            for i, cand in enumerate(problem.candidates):
                if cand.node == n:
                    rows.add(f"per_node[{i}]", {lay.x(i): 1.0,
                                                lay.y(n): -float(cand.per_node)}, -inf, 0.0)


def _limit_rows(rows: Rows, problem: Problem, lay: Layout) -> None:
    """External limits: calls in flight and calls per second of all replicas together."""
    for u, name in enumerate(problem.unit_names):
        most, per_s = problem.limits(u)
        mine = [(i, k) for i, k in enumerate(problem.candidates) if k.unit == u]
        if most is not None:
            rows.add(f"max_concurrency[{name}]",
                     {lay.x(i): k.concurrency / most for i, k in mine}, -np.inf, 1.0)
        if per_s is not None:
            rows.add(f"rate_limit[{name}]",
                     {lay.f(i): k.calls * k.rate / per_s for i, k in mine}, -np.inf, 1.0)


def _batch_rows(rows: Rows, problem: Problem, lay: Layout, groups: dict[int, list[int]],
                ub: np.ndarray) -> None:
    """Batch size: one option per (unit, class); a replica runs only on the chosen one."""
    column = {k: lay.z(j) for j, k in enumerate(lay.choices)}
    for g, ids in groups.items():
        rows.add(f"one_batch[{g}]", {column[k]: 1.0 for k in ids}, -np.inf, 1.0)
    for i, cand in enumerate(problem.candidates):
        if cand.choice in column:
            rows.add(f"chosen[{i}]", {lay.x(i): 1.0 / ub[lay.x(i)], column[cand.choice]: -1.0},
                     -np.inf, 0.0)


def build_model(problem: Problem, *, min_cost: bool, target: float | None,
                derate: dict[tuple[int, str], float] | None = None) -> MilpModel:
    """The MILP for ``problem``: maximise T, or (``min_cost``) minimise price at T = target.

    ``derate`` maps (node type, row) to the share of that row's capacity the plan may use:
    the cut a failed packing adds (see solver.py).
    """
    groups = choice_groups(problem)
    choices = tuple(k for ids in groups.values() for k in ids)
    lay = Layout(len(problem.candidates), len(problem.node_types), min_cost, choices)
    c, integrality, lb, ub, t_scale = _variables(problem, lay, min_cost=min_cost, target=target)
    rows = Rows()
    _flow_rows(rows, problem, lay, t_scale)
    _capacity_rows(rows, problem, lay, min_cost=min_cost, derate=derate)
    _limit_rows(rows, problem, lay)
    _batch_rows(rows, problem, lay, groups, ub)
    a = rows.matrix(lay.size)
    return MilpModel(lay, c, integrality, lb, ub, a, np.array(rows.lo), np.array(rows.hi),
                     tuple(rows.names), t_scale)
