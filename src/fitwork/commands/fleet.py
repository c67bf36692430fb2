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


SIM_POLICIES = ("fitwork", "job-level", "static", "job-level-fluid", "static-fluid")
"""`fitwork fleet simulate --policy` (as `fitwork.jobs.simulate.POLICIES`, kept here so the
command line loads no solver)."""

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


@fleet.command("simulate")
@click.option("--fleet", "fleet_path", required=True, type=click.Path(path_type=Path),
              help="The fleet (YAML, as `fitwork plan --fleet` reads).")
@click.option("--jobs", "trace_path", required=True, type=click.Path(path_type=Path),
              help="The pipeline trace: one JSON object per line (id, team, weight, "
                   "arrival_s, items, units, and optionally max_gpus: the most devices "
                   "the pipeline holds at once, under every policy).")
@click.option("--policy", type=click.Choice(list(SIM_POLICIES)), default="fitwork",
              show_default=True,
              help="How the fleet is shared: fitwork (units co-fitted across node types), "
                   "job-level (whole-pipeline bundles, Gavel's placement), static (team "
                   "slices, bundles), job-level-fluid / static-fluid (the same placements "
                   "with fluid unit replicas).")
@click.option("--arrival-scale", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Divide every arrival time by this (more load).")
@click.option("--json", "json_path", type=click.Path(path_type=Path),
              help="Also write every figure (and each pipeline's) as JSON here.")
def fleet_simulate(fleet_path: Path, trace_path: Path, policy: str, arrival_scale: float,
                   json_path: Path | None) -> None:
    """Replay pipelines arriving over time on a fleet under one sharing policy."""
    import json

    from fitwork.hardware.fleet import Fleet
    from fitwork.jobs.sim_inputs import load_trace
    from fitwork.jobs.sim_table import render
    from fitwork.jobs.simulate import simulate

    try:
        result = simulate(Fleet.from_yaml(fleet_path), load_trace(trace_path),
                          policy,  # type: ignore[arg-type]
                          arrival_scale=arrival_scale)
    except FitworkError as exc:
        fail(exc)
    click.echo(render([result]))
    if json_path:
        json_path.write_text(json.dumps(result, indent=1, default=float))
        click.echo(f"wrote {json_path}")
