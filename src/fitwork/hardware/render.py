"""Terminal rendering of a fleet: one row per node type, totals in the caption (display only)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from fitwork.hardware.catalog import Catalog
from fitwork.hardware.fleet import Fleet, NodeType
from fitwork.hardware.units import human_bytes, human_rate

__all__ = ["render_fleet"]


def _money(amount: float | None) -> str:
    """USD per hour, or a dash when unknown."""
    return "-" if amount is None else f"${amount:,.2f}"


def _cores(cores: float) -> str:
    """A core count without a needless ".0"."""
    return f"{cores:g}"


def _devices(node: NodeType) -> str:
    """Devices per node as "8 x H100-SXM", one class per line; a dash for none."""
    return "\n".join(f"{n} x {name}" for name, n in node.devices.items()) or "-"


def _sources(node: NodeType) -> str:
    """Where each discovered figure came from, one per line."""
    found = node.discovered_from or {}
    return "\n".join(f"{field}: {where}" for field, where in found.items())


def render_fleet(fleet: Fleet, known: Catalog | None = None) -> Group:
    """A rich table of ``fleet``: count, cores, memory, devices, network and price per node type.

    The caption totals nodes, cores, memory, devices and the fleet's hourly price.  Below the
    table, for node types that were discovered rather than declared, where each figure came
    from.
    """
    table = Table(title=f"fleet {fleet.name}", title_justify="left")
    table.add_column("node type")
    table.add_column("count", justify="right")
    table.add_column("cores", justify="right")
    table.add_column("memory", justify="right")
    table.add_column("devices")
    table.add_column("network", justify="right")
    table.add_column("cpu class")
    table.add_column("$/h per node", justify="right")
    for node in fleet.node_types:
        row = [
            node.name,
            str(node.count),
            _cores(node.cores),
            human_bytes(node.memory),
            _devices(node),
            "-" if node.network_bandwidth is None else human_rate(node.network_bandwidth),
            node.cpu_class,
            _money(node.hourly_price(known)),
        ]
        table.add_row(*row)
    capacity = fleet.capacity()
    devices = ", ".join(f"{n} x {name}" for name, n in fleet.device_counts().items()) or "none"
    nodes = fleet.node_count()
    table.caption = (
        f"{nodes} node{'' if nodes == 1 else 's'}, {_cores(capacity.cpu)} cores, "
        f"{human_bytes(capacity.memory)} memory, devices: {devices}, "
        f"{_money(fleet.hourly_price(known))}/h"
    )
    table.caption_justify = "left"
    notes = [Text(f"{node.name}, {_sources(node)}".replace("\n", f"\n{node.name}, "),
                  style="dim") for node in fleet.node_types if node.discovered_from]
    return Group(table, *notes)
