"""What a run cost: the price per hour of the servers it used, with where that price comes
from, and the cost per million items at a throughput."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fitwork.hardware.catalog import Catalog, catalog

if TYPE_CHECKING:
    from fitwork.fit.plan import Plan, PlanSide
    from fitwork.telemetry.utilization import RunFigures


def cost_per_million(price_per_hour: float | None, throughput: float) -> float | None:
    """Dollars per million items at ``throughput`` items/s on servers costing ``price``/h."""
    if price_per_hour is None or throughput <= 0:
        return None
    return price_per_hour / (throughput * 3600) * 1e6


def run_price(figures: RunFigures, plan: Plan | None = None,
              price_per_hour: float | None = None,
              known: Catalog | None = None) -> tuple[float | None, str]:
    """The price per hour of the servers a run used, and where that price comes from.

    In order: ``price_per_hour`` as given; the nodes the plan's fitted side uses, at the
    fleet's prices (the same servers run both sides); the devices the run allocated, each
    at the catalog's price per device-hour.
    """
    if price_per_hour is not None:
        return price_per_hour, f"given: ${price_per_hour:,.4g}/h"
    if plan is not None and plan.fitted.result.cost_per_hour > 0:
        return plan.fitted.result.cost_per_hour, nodes_basis(plan, plan.fitted)
    known = known or catalog()
    total, terms = 0.0, []
    for row in figures.classes:
        price = known.get(row.device_class).price_per_hour \
            if row.device_class in known else None
        if price is None:
            return None, f"no catalog price for device class {row.device_class}"
        total += row.allocated * price
        terms.append(f"{row.allocated:g} x {row.device_class} at ${price:g}/h")
    return total, "devices allocated, at catalog prices: " + " + ".join(terms)


def nodes_basis(plan: Plan, side: PlanSide) -> str:
    nodes = ", ".join(f"{n.nodes_used} x {n.node_type}" for n in side.result.nodes
                      if n.nodes_used)
    return (f"nodes the plan's {side.label} side uses on fleet {plan.fleet.name!r} "
            f"({nodes or 'none'}), at the fleet's prices")
