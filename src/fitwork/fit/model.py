"""The MILP as arrays (objective, bounds, sparse rows) built from a `Problem`; no solving here.

Variables, in this order: ``x[c]`` integer replicas per candidate; ``b[c]`` busy replicas of
candidate ``c``, i.e. items/s routed to it over its rate (only when a network row exists);
``T / t_scale`` with T items/s at the source; ``y[n]`` integer nodes in use per node type
(``min_cost`` only). Rows and columns are scaled for HiGHS: every capacity row is divided by
one node's capacity (coefficients are fractions of a node), and T by ``t_scale``, the
geometric mean of ``rate / m_u`` over the candidates, so throughput rows have coefficients
near 1 whatever the rates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from fitwork.fit.candidates import Problem


@dataclass(frozen=True)
class Layout:
    """Where each variable sits in the vector HiGHS solves for."""

    n_cand: int
    n_nodes: int
    flows: bool
    min_cost: bool

    def x(self, c: int) -> int:
        """Column of ``x[c]``."""
        return c

    def f(self, c: int) -> int:
        """Column of ``b[c]``, busy replicas (only with flows)."""
        return self.n_cand + c

    @property
    def t(self) -> int:
        """Column of ``T``."""
        return self.n_cand * (2 if self.flows else 1)

    def y(self, n: int) -> int:
        """Column of ``y[n]`` (only for ``min_cost``)."""
        return self.t + 1 + n

    @property
    def size(self) -> int:
        """Number of variables."""
        return self.t + 1 + (self.n_nodes if self.min_cost else 0)


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


def network_active(problem: Problem) -> bool:
    """Whether any node type's network can bind: it has a capacity and carries traffic."""
    for cand in problem.candidates:
        node = problem.node_types[cand.node]
        if node.network is not None and (cand.bytes_out > 0 or cand.bytes_in > 0):
            return True
    return False


class _Rows:
    """Accumulates sparse rows ``lo <= sum coef·v <= hi``."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.names: list[str] = []

    def add(self, name: str, terms: dict[int, float], lo: float, hi: float) -> None:
        row = len(self.lo)
        for col, val in terms.items():
            if val != 0.0:
                self.rows.append(row)
                self.cols.append(col)
                self.vals.append(val)
        self.lo.append(lo)
        self.hi.append(hi)
        self.names.append(name)


def _add(terms: dict[int, float], col: int, val: float) -> None:
    terms[col] = terms.get(col, 0.0) + val


def build_model(problem: Problem, *, min_cost: bool, target: float | None) -> MilpModel:
    """The MILP for ``problem``: maximise T, or (``min_cost``) minimise price at T = target."""
    cands = problem.candidates
    nodes = problem.node_types
    lay = Layout(len(cands), len(nodes), network_active(problem), min_cost)
    inf = np.inf
    lb = np.zeros(lay.size)
    ub = np.zeros(lay.size)
    integrality = np.zeros(lay.size)
    c = np.zeros(lay.size)
    for i, cand in enumerate(cands):
        ub[lay.x(i)] = cand.per_node * nodes[cand.node].count
        integrality[lay.x(i)] = 1
        if lay.flows:
            ub[lay.f(i)] = ub[lay.x(i)]
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

    rows = _Rows()
    # Throughput: the replicas of unit u carry m_u items per source item.
    for u, m in enumerate(problem.multiplicity):
        terms: dict[int, float] = {lay.t: 1.0}
        for i, cand in enumerate(cands):
            if cand.unit == u:
                _add(terms, lay.f(i) if lay.flows else lay.x(i), -cand.rate / (m * t_scale))
        rows.add(f"throughput[{problem.unit_names[u]}]", terms, -inf, 0.0)
    # Busy replicas: a candidate is busy at most with all its replicas.
    if lay.flows:
        for i in range(len(cands)):
            rows.add(f"busy[{i}]", {lay.f(i): 1.0, lay.x(i): -1.0}, -inf, 0.0)
    # Capacity per node type and resource, in nodes: sum demand/node_capacity · x <= nodes.
    for n, node in enumerate(nodes):
        here = [(i, cand) for i, cand in enumerate(cands) if cand.node == n]
        resources: list[tuple[str, float, list[tuple[int, float]]]] = [
            ("cores", node.cores, [(lay.x(i), k.cores) for i, k in here]),
            ("memory", float(node.memory), [(lay.x(i), k.memory) for i, k in here]),
        ]
        for dev, count in node.devices.items():
            resources.append((dev, float(count), [(lay.x(i), k.devices) for i, k in here
                                                 if k.device_class == dev]))
        if lay.flows and node.network is not None:
            resources.append(("net_out", node.network,
                              [(lay.f(i), k.bytes_out * k.rate) for i, k in here]))
            resources.append(("net_in", node.network,
                              [(lay.f(i), k.bytes_in * k.rate) for i, k in here]))
        for resource, capacity, demand in resources:
            if not any(v > 0 for _, v in demand) or capacity <= 0:
                continue
            terms = {}
            for col, v in demand:
                _add(terms, col, v / capacity)
            if min_cost:
                _add(terms, lay.y(n), -1.0)
                rows.add(f"{resource}[{node.name}]", terms, -inf, 0.0)
            else:
                rows.add(f"{resource}[{node.name}]", terms, -inf, float(node.count))
        if min_cost:
            for i, cand in here:
                rows.add(f"per_node[{i}]", {lay.x(i): 1.0, lay.y(n): -float(cand.per_node)},
                         -inf, 0.0)

    a = sp.csr_array((rows.vals, (rows.rows, rows.cols)), shape=(len(rows.lo), lay.size))
    return MilpModel(lay, c, integrality, lb, ub, a, np.array(rows.lo), np.array(rows.hi),
                     tuple(rows.names), t_scale)

