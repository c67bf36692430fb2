"""`PlanReplanner`: what live re-fitting needs of a plan (its rates, predictions, re-solve)."""

from __future__ import annotations

from collections.abc import Mapping

from fitwork.fit.plan import Plan, refit
from fitwork.placement import Placement


class PlanReplanner:
    """A plan and the placement a run started from, as `fitwork.engine.adapt` uses them.

    Predictions follow the plan's own rule for a chain: a unit sustains its replicas times
    one replica's rate, divided by how many items it sees per source item; the pipeline
    sustains the least of those.
    """

    def __init__(self, plan: Plan, placement: Placement) -> None:
        self.plan = plan
        self.placement = placement
        self.multiplicity = dict(plan.multiplicity)

    def planned_rates(self) -> dict[str, float]:
        """Items/s of one replica of each unit: its groups' rates, weighted by replicas."""
        rates = {}
        for name in self.placement.units:
            groups = [g for g in self.placement.of(name) if g.rate and g.replicas]
            count = sum(g.replicas for g in groups)
            if count:
                rates[name] = sum(g.rate * g.replicas for g in groups) / count  # type: ignore[operator]
        return rates

    def predict(self, counts: Mapping[str, int], rates: Mapping[str, float]) -> float:
        """Source items/s these counts sustain at these per-replica rates."""
        sustained = [counts.get(name, 0) * rates[name] / max(self.multiplicity.get(name, 1.0),
                                                              1e-12)
                     for name in self.plan.units if name in rates]
        return min(sustained) if sustained else 0.0

    def refit(self, rates: Mapping[str, float]) -> Placement:
        """The plan re-solved with these measured rates (same solver, same fleet)."""
        return refit(self.plan, dict(rates))
