"""The fleet table: one row per node type, totals in the caption, sources for discovered nodes."""

from __future__ import annotations

import io

from rich.console import Console

from fitwork.hardware.discover import discover_local
from fitwork.hardware.fleet import Fleet, NodeType, example_fleet
from fitwork.hardware.render import render_fleet


def _text(fleet: Fleet) -> str:
    console = Console(file=io.StringIO(), width=240, color_system=None)
    console.print(render_fleet(fleet))
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_one_row_per_node_type_with_devices_and_prices() -> None:
    fleet = example_fleet()
    table = render_fleet(fleet).renderables[0]
    assert table.row_count == len(fleet.node_types)
    assert [c.header for c in table.columns][:3] == ["node type", "count", "cores"]
    text = _text(fleet)
    assert "8 x H100-SXM" in text
    assert "4 x V100" in text
    assert "128 GiB" in text
    assert "200 Gbit/s" in text
    assert f"${fleet.node_types[1].hourly_price():,.2f}" in text
    assert "11 nodes, 528 cores, 3.06 TiB memory, devices: 8 x V100, 8 x H100-SXM, " in text


def test_an_unpriced_node_shows_a_dash() -> None:
    node = NodeType(name="gb300", cores=72, memory="480GiB", devices={"GB300": 4})
    text = _text(Fleet(name="f", node_types=[node]))
    assert "1 node, 72 cores" in text
    assert ", -/h" in text


def test_a_discovered_fleet_shows_where_its_figures_came_from() -> None:
    fleet = discover_local()
    node = fleet.node_types[0].name
    assert f"{node}, cores: " in _text(fleet)
    assert len(render_fleet(fleet).renderables) == 2
    assert len(render_fleet(example_fleet()).renderables) == 1
