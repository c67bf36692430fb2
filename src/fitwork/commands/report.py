"""The `fitwork report` command: run records (and a plan) in, one self-contained HTML page out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console

from fitwork.errors import FitworkError, InputError
from fitwork.telemetry.record import RunRecord

if TYPE_CHECKING:
    from fitwork.llm.section import LLMSection


def _parse_classes(values: tuple[str, ...]) -> dict[str, str]:
    classes: dict[str, str] = {}
    for value in values:
        name, sep, device_class = value.partition("=")
        if not sep or not name or not device_class:
            raise click.BadParameter(f"{value!r}: write UNIT=CLASS, e.g. model=H100-SXM",
                                     param_hint="--device-class")
        classes[name] = device_class
    return classes


def _fleet_report(fleet_path: Path, output_path: Path) -> None:
    """`fitwork report --fleet`: write the fleet page and print its verdict."""
    from fitwork.report.fleet import write_fleet_report

    console = Console(stderr=True)
    try:
        verdict, pipelines = write_fleet_report(fleet_path, output_path)
    except FitworkError as exc:
        console.print(f"error: {exc}", soft_wrap=True, highlight=False, markup=False,
                      style="red")
        sys.exit(1)
    console.print(verdict.text, soft_wrap=True, highlight=False, markup=False)
    console.print(f"wrote fleet report of {pipelines} pipelines to {output_path}")


def _run_record(path: Path) -> RunRecord:
    """A run record; a fleet record given in its place is pointed to --fleet."""
    try:
        return RunRecord.load(path)
    except InputError:
        if not _is_fleet_record(path):
            raise
    raise InputError(f"{path}: a fleet record, not a run record; render it with "
                     f"`fitwork report --fleet {path} -o fleet.html`")


def _is_fleet_record(path: Path) -> bool:
    from fitwork.jobs.record import FleetRecord

    try:
        FleetRecord.load(path)
    except InputError:
        return False
    return True


@click.command()
@click.argument("records", nargs=-1, metavar="RECORD...", type=click.Path(path_type=Path))
@click.option("--label", "labels", multiple=True, metavar="L",
              help="A name per record, in order, e.g. --label monolithic --label fitted.")
@click.option("--plan", "plan_path", type=click.Path(path_type=Path),
              help="A plan from `fitwork plan`: predicted figures beside the realized ones.")
@click.option("--price-per-hour", type=float, default=None,
              help="USD per hour of the servers the runs used [default: the plan's nodes, "
                   "else catalog prices of the devices each run allocated].")
@click.option("--device-class", "device_classes", multiple=True, metavar="UNIT=CLASS",
              help="The device class a unit ran on (default cpu-x86); repeat per unit.")
@click.option("--fleet", "fleet_path", type=click.Path(path_type=Path),
              help="A fleet record from `fitwork run --jobs ... --fleet-record`: every "
                   "pipeline of that run on one page (given alone, without RECORD...).")
@click.option("--output", "-o", "output_path", type=click.Path(path_type=Path),
              default=Path("report.html"), show_default=True, help="Where the HTML goes.")
def report(records: tuple[Path, ...], labels: tuple[str, ...], plan_path: Path | None,
           price_per_hour: float | None, device_classes: tuple[str, ...],
           fleet_path: Path | None, output_path: Path,
           llm: LLMSection | None = None) -> None:
    """Write one HTML report of run records: the verdict, correctness, host and workload,
    throughput and latency, utilization, timeline, replicas, devices, queues, cost; and the
    LLM serving section when given plans to replay (--llm)."""
    from fitwork.report.html import default_labels, headline, render_report

    if fleet_path is not None:
        if records or labels or plan_path or device_classes or llm is not None:
            raise click.UsageError("--fleet renders a fleet record on a page of its own; "
                                   "give run records, --plan or --llm to another `fitwork "
                                   "report`")
        _fleet_report(fleet_path, output_path)
        return
    if not records and llm is None:
        raise click.UsageError("Missing argument 'RECORD...'.")
    console = Console(stderr=True)
    classes = _parse_classes(device_classes)
    try:
        if labels and len(labels) != len(records):
            raise InputError(f"{len(labels)} --label for {len(records)} records; give one "
                             "label per record, in order, or none")
        loaded = [_run_record(path) for path in records]
        plan = None
        if plan_path is not None:
            from fitwork.fit.plan import Plan

            plan = Plan.load(plan_path)
        page = render_report(loaded, list(labels) or None, plan,
                             price_per_hour=price_per_hour, classes=classes or None, llm=llm)
        verdict = headline(loaded, list(labels) or default_labels(loaded, plan), plan) \
            if loaded else None
    except FitworkError as exc:
        console.print(f"error: {exc}", soft_wrap=True, highlight=False, markup=False,
                      style="red")
        sys.exit(1)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    output_path.write_text(page, encoding="utf-8")
    if verdict is not None:
        console.print(verdict.text, soft_wrap=True, highlight=False, markup=False)
    if not loaded:
        console.print(f"wrote the LLM serving report to {output_path}")
        return
    section = " with the LLM serving section" if llm is not None else ""
    console.print(f"wrote report of {len(loaded)} run{'s' if len(loaded) > 1 else ''}{section} "
                  f"to {output_path}")
