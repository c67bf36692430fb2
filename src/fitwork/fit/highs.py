"""The thin shell around HiGHS (`scipy.optimize.milp`): one call, timed, outcome as a value."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from fitwork.fit.model import MilpModel


@dataclass(frozen=True)
class Outcome:
    """What HiGHS returned: ``status`` 0 optimal (within the gap), 1 limit reached, 2
    infeasible, 3 unbounded, 4 other; ``x`` is the best solution found, if any."""

    status: int
    message: str
    x: np.ndarray | None
    objective: float | None
    dual_bound: float | None
    seconds: float


def run_highs(model: MilpModel, *, relax: bool, time_limit: float, mip_gap: float) -> Outcome:
    """Solve ``model`` (its LP relaxation when ``relax``) and time the call."""
    integrality = np.zeros_like(model.integrality) if relax else model.integrality
    constraints = ([LinearConstraint(model.a, model.row_lb, model.row_ub)]
                   if model.a.shape[0] else [])
    start = time.perf_counter()
    res = milp(
        c=model.c,
        integrality=integrality,
        bounds=Bounds(model.lb, model.ub),
        constraints=constraints,
        options={"time_limit": time_limit, "mip_rel_gap": mip_gap},
    )
    seconds = time.perf_counter() - start
    x = None if res.x is None else np.asarray(res.x, dtype=float)
    dual = getattr(res, "mip_dual_bound", None)
    return Outcome(
        status=int(res.status),
        message=str(res.message),
        x=x,
        objective=None if res.fun is None else float(res.fun),
        dual_bound=None if dual is None or not np.isfinite(dual) else float(dual),
        seconds=seconds,
    )
