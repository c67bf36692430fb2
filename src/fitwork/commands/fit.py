"""`fitwork profile` and `fitwork plan`, and the lines that say why a plan changed a batch
size (also printed by `fitwork run --plan`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from fitwork.commands.common import fail
from fitwork.commands.decompose import AUTO, decompose_option, load_pipeline_for, resolve_reference
from fitwork.commands.options import UnitSettings, chosen, conflicting_paths, csv_strings_option
from fitwork.errors import FitworkError

if TYPE_CHECKING:
    from fitwork.fit.result import Objective

OBJECTIVES: tuple[Objective, ...] = ("max_throughput", "min_cost")


@click.command()
@click.argument("pipeline_ref", metavar="MODULE_OR_FILE:PIPELINE", required=False)
@click.option("--input", "input_path", required=True, type=click.Path(path_type=Path),
              help="Sample items, in any format `run` reads.")
@click.option("--samples", default=32, show_default=True, type=click.IntRange(min=1),
              help="How many items to measure each unit on.")
@click.option("--output", "-o", "output_path", type=click.Path(path_type=Path),
              default=Path("profile.json"), show_default=True, help="Where the profile goes.")
@click.option("--device-class", "device_classes", multiple=True, metavar="CLASS",
              help="Record the profile as measured on this catalog class instead of the one "
                   "discovered: a CPU class (cpu-x86, cpu-arm) for the host's cores, any other "
                   "class for the GPU that units with a GPU share run on. Repeat for both.")
@click.option("--alone", is_flag=True,
              help="Time each unit alone only; by default a unit that works the CPU is "
                   "timed again with a copy on every core, as a run that fills the host "
                   "meets it, and plans use that.")
@decompose_option
@csv_strings_option
def profile(pipeline_ref: str | None, input_path: Path, samples: int, output_path: Path,
            device_classes: tuple[str, ...], alone: bool, decompose: str | None,
            csv_strings: bool = False) -> None:
    """Measure each unit alone on sample items and save a profile."""
    from fitwork.fit.candidates import format_bytes
    from fitwork.io.inputs import read_items
    from fitwork.profiling import profile_pipeline
    from fitwork.profiling.classes import split_classes
    from fitwork.report.terminal import profile_table, stdout_console

    console = stdout_console()
    clash = conflicting_paths({"--output": output_path}, {"--input": input_path})
    if clash:
        fail(clash, code=2)
    try:
        host_class, accelerator_class = split_classes(device_classes)
        pipeline = load_pipeline_for(*resolve_reference(pipeline_ref, decompose))
        with Console(stderr=True).status("profiling") as status:
            result = profile_pipeline(
                pipeline, read_items(input_path, csv_types=not csv_strings), samples=samples,
                host_class=host_class,
                accelerator_class=accelerator_class, loaded=not alone,
                progress=lambda name: status.update(f"profiling unit [bold]{name}[/bold]"))
    except FitworkError as exc:
        fail(exc)
    result.save(output_path)
    console.print(profile_table(result))
    console.print(f"measured on: {result.classes_from}", markup=False)
    for u in result.units:
        console.print(f"{u.name} measured with {u.conditions}", markup=False, soft_wrap=True)
    if result.fused_rss is not None:
        summed = sum(u.peak_rss for u in result.units)
        console.print(f"one process running every unit in turn held "
                      f"{format_bytes(result.fused_rss)} of its own (the units alone: "
                      f"{format_bytes(summed)} summed); a fused replica is planned at that",
                      markup=False)
    if result.wire_ns_per_byte is not None:
        console.print(f"moving large items between processes: {result.wire_ns_per_byte:.2f} ns "
                      f"of CPU per byte; the fit charges bytes at {result.wire_scale:.2f}x the "
                      "host they were measured on (1.00 within that host's own spread)",
                      markup=False)
    console.print(f"wrote profile to {output_path}", markup=False)


@click.command()
@click.argument("pipeline_ref", metavar="MODULE_OR_FILE:PIPELINE", required=False)
@click.option("--profile", "profile_path", type=click.Path(path_type=Path),
              help="A profile from `fitwork profile` of this pipeline.")
@click.option("--jobs", "jobs_path", type=click.Path(path_type=Path),
              help="Plan every pipeline of a jobs file together on the fleet (one MILP over "
                   "all their units; objectives fair, max_throughput, min_cost).")
@click.option("--fleet", "fleet_ref", default="local", show_default=True,
              help="A fleet YAML file, or 'local' for this host as discovered.")
@click.option("--objective", type=click.Choice((*OBJECTIVES, "fair")),
              help="max_throughput (the default) or min_cost; with --jobs fair (the "
                   "default: weighted max-min of each job's share of its rate alone), "
                   "max_throughput or min_cost (every job's min_rate at least cost).")
@click.option("--target", type=float, help="Items/s to reach at least cost (min_cost).")
@click.option("--time-limit", type=float, default=10.0, show_default=True,
              help="Seconds the solver may take.")
@click.option("--max-latency", type=float, default=None,
              help="Seconds one call (a whole batch) of any unit may take: batch sizes "
                   "slower than this are not planned.")
@click.option("--no-fuse", is_flag=True, help="Keep the units split even where running them "
              "fused would sustain more.")
@click.option("--output", "-o", "output_path", type=click.Path(path_type=Path),
              default=Path("plan.json"), show_default=True)
@decompose_option
def plan(pipeline_ref: str | None, profile_path: Path | None, fleet_ref: str,
         objective: str | None, target: float | None, time_limit: float,
         max_latency: float | None, no_fuse: bool, output_path: Path, decompose: str | None,
         jobs_path: Path | None = None) -> None:
    """Fit the pipeline's units to a fleet; print it beside the monolithic baseline."""
    if jobs_path is not None:
        from fitwork.jobs.cli import plan_jobs_command

        return plan_jobs_command(jobs_path, fleet_ref, objective, time_limit, output_path)
    if profile_path is None:
        raise click.UsageError("Missing option '--profile' (or give --jobs JOBS.yaml)")
    if objective == "fair":
        raise click.UsageError("--objective fair shares a fleet between pipelines: give "
                               "--jobs JOBS.yaml, or use max_throughput or min_cost")
    objective = objective or "max_throughput"
    from fitwork.fit.plan import plan_for
    from fitwork.hardware.discover import discover_local
    from fitwork.hardware.fleet import Fleet
    from fitwork.profiling import PipelineProfile
    from fitwork.report.terminal import plan_table, stdout_console

    console = stdout_console()
    clash = conflicting_paths({"--output": output_path}, {
        "--profile": profile_path,
        "--fleet file": Path(fleet_ref) if fleet_ref != "local" else None,
        "--decompose file": Path(decompose) if decompose not in (None, AUTO) else None})
    if clash:
        fail(clash, code=2)
    try:
        pipeline = load_pipeline_for(*resolve_reference(pipeline_ref, decompose))
        profiled = PipelineProfile.load(profile_path)
        profiled.check_matches([u.name for u in pipeline.units], source=str(profile_path))
        fleet_ = discover_local() if fleet_ref == "local" else Fleet.from_yaml(fleet_ref)
        result = plan_for(profiled, fleet_, objective=chosen(objective, OBJECTIVES),
                     target=target, time_limit=time_limit, max_latency=max_latency,
                     fuse=not no_fuse)
    except FitworkError as exc:
        fail(exc)
    result.save(output_path)
    console.print(plan_table(result))
    for line in batch_changes(result, pipeline):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote plan to {output_path}", markup=False)


def batch_changes(plan: Any, pipeline: Any, side: str = "fitted",
                  settings: UnitSettings | None = None) -> list[str]:
    """A line for each unit whose planned batch size differs from its declared one, with why
    the fit chose it (from the rates it had at both sizes)."""
    chosen = plan.fitted if side == "fitted" else plan.monolithic
    if plan.fused or side != "fitted":
        return []
    rates = [*plan.rates, *plan.batch_rates]
    lines = []
    for p in chosen.result.replicas:
        if not p.replicas or not p.batch_size:
            continue
        try:
            declared = pipeline.unit_named(p.unit).batch_size
        except FitworkError:
            continue
        if settings is not None and p.unit in settings.batch:
            continue  # the flag set it; nothing of the plan's to explain
        if not declared or declared == p.batch_size:
            continue
        at = {r.batch_size: r for r in rates if r.unit == p.unit
              and r.device_class == p.device_class and r.rate > 0}
        swept = {r.batch_size for r in plan.batch_rates if r.unit == p.unit
                 and r.device_class == p.device_class}
        lines.append(f"plan: unit {p.unit!r} runs batch_size={p.batch_size}, not the declared "
                     f"{declared}: {_why_batch(at, swept, p.batch_size, declared, plan)} "
                     f"(--batch {p.unit}={declared} keeps the declared size)")
    return lines


def _why_batch(at: dict[int | None, Any], swept: set[int | None], planned: int,
               declared: int, plan: Any) -> str:
    """Why the fit ran ``planned`` where the unit declared ``declared``."""
    mine, theirs = at.get(planned), at.get(declared)
    if swept and declared not in swept:
        sizes = sorted(size for size in swept if size)
        largest = sizes[-1] if sizes else None
        carried = (f"its rate at {declared} is the one at {largest} carried over, so the fit "
                   "weighed them alike and took the smaller batch (less latency per call)"
                   if theirs is not None and mine is not None and planned == largest
                   else f"{declared} was not measured")
        return (f"the profile measured batch sizes {', '.join(map(str, sizes))} only (a "
                f"batch holds at most the sample items): {carried}; profile with --samples "
                f"{declared} or more to measure it")
    if theirs is None:
        return f"the profile has no rate at {declared}"
    limit = plan.max_latency
    if limit is not None and theirs.batch_latency_s is not None \
            and theirs.batch_latency_s > limit:
        return (f"a batch of {declared} takes {theirs.batch_latency_s:.3f} s, over "
                f"--max-latency {limit:g} s")
    if mine is None:
        return "the fit chose it"
    if mine.rate >= theirs.rate:
        return (f"one replica does {mine.rate:,.1f} items/s at {planned} against "
                f"{theirs.rate:,.1f} at {declared} ({mine.method})")
    return (f"one replica does {theirs.rate:,.1f} items/s at {declared} against "
            f"{mine.rate:,.1f} at {planned}, but the plan reaches the same throughput with the "
            "smaller batch (less latency and memory per call)")
