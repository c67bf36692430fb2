"""`fitwork fleet local|ray`: describe the hardware to fit to (Kubernetes and Slurm are
`fitwork.orchestrate`'s)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from fitwork.commands.common import fail
from fitwork.errors import FitworkError


@click.group()
def fleet() -> None:
    """Describe the hardware to fit to."""


_FLEET_OUTPUT = click.option(
    "--output", "-o", "output_path", type=click.Path(path_type=Path),
    help="Also write the fleet as YAML here (for `fitwork plan --fleet`).")


def _show_fleet(discover: Callable[[], Any], output_path: Path | None) -> None:
    """Discover a fleet, print it, and write it as YAML when asked."""
    from fitwork.hardware.render import render_fleet
    from fitwork.report.terminal import stdout_console

    console = stdout_console()
    try:
        found = discover()
    except FitworkError as exc:
        fail(exc)
    console.print(render_fleet(found))
    if output_path:
        output_path.write_text(found.to_yaml())
        console.print(f"wrote {output_path}", markup=False)


@fleet.command("local")
@_FLEET_OUTPUT
def fleet_local(output_path: Path | None) -> None:
    """This host as the orchestrator granted it: cores, memory, GPUs."""
    from fitwork.hardware.discover import discover_local

    _show_fleet(discover_local, output_path)


@fleet.command("ray")
@click.option("--ray-address", help="The cluster [default: RAY_ADDRESS].")
@_FLEET_OUTPUT
def fleet_ray(ray_address: str | None, output_path: Path | None) -> None:
    """A Ray cluster's live nodes, grouped into node types by label and shape."""
    def discover() -> Any:
        from fitwork.engine.registry import get_engine

        get_engine("ray")  # says which extra to install when Ray is missing
        from fitwork.hardware.ray_fleet import discover_ray

        return discover_ray(ray_address)

    _show_fleet(discover, output_path)
