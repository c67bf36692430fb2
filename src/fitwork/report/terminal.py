"""Rich renderings for the terminal: a live progress bar and the end-of-run summary."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from fitwork.profiling.record import PipelineProfile
from fitwork.telemetry.record import Progress as RunProgress
from fitwork.telemetry.record import RunRecord

if TYPE_CHECKING:
    from fitwork.fit.cost import RateEstimate
    from fitwork.fit.plan import Plan
    from fitwork.fit.result import Placement as Replicas


PIPED_WIDTH = 400
"""Columns results get when stdout is not a terminal (a file, a pipe) and ``COLUMNS`` is
unset: wide enough that no table is cut, where rich would otherwise assume 80."""


def stdout_console() -> Console:
    """The console results go to: a terminal's width, or `PIPED_WIDTH` when piped."""
    console = Console()
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(width=PIPED_WIDTH)


class ProgressView:
    """A progress bar with items/s and the queue in front of each unit; feed it snapshots."""

    def __init__(self, console: Console, total: int | None, label: str) -> None:
        self.bar = Progress(
            SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
            MofNCompleteColumn(), TextColumn("{task.fields[rate]:>9.1f} items/s"),
            TimeElapsedColumn(), TextColumn("[dim]{task.fields[queues]}"),
            console=console, transient=False,
        )
        self.task = self.bar.add_task(label, total=total, rate=0.0, queues="")

    def __enter__(self) -> ProgressView:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def __call__(self, snapshot: RunProgress) -> None:
        queues = " ".join(f"{name}:{depth}" for name, depth in snapshot.depths.items())
        self.bar.update(self.task, completed=snapshot.completed, rate=snapshot.rate,
                        queues=f"queued {queues}" if queues else "")


def _pct(value: float) -> str:
    return f"{100 * value:5.1f}%"


def summary(record: RunRecord) -> Group:
    """The end-of-run summary: headline figures, one row per unit, one per resource."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    latency = (f"p50 {record.latency_p50_s * 1000:.1f} ms, p95 {record.latency_p95_s * 1000:.1f} ms"
               if record.latency_p50_s is not None and record.latency_p95_s is not None else "-")
    per_s = record.outputs / record.wall_s if record.wall_s > 0 else 0.0
    head.add_row("throughput", f"{record.throughput:,.1f} source items/s, {per_s:,.1f} "
                 f"outputs/s ({record.items_completed:,} items in {record.wall_s:.2f} s, "
                 f"{record.outputs:,} outputs)")
    head.add_row("latency", latency)
    head.add_row("failures", f"{record.failures} ({record.poisoned} poison), "
                 f"{record.retries} retried, {record.worker_restarts} workers replaced")

    units = Table(title="units", title_justify="left")
    for column in ("unit", "kind", "replicas", "items in", "items out", "busy", "cpu s"):
        units.add_column(column, justify="left" if column in ("unit", "kind") else "right")
    for u in record.units:
        units.add_row(u.name, u.kind, str(u.replicas), f"{u.items_in:,}", f"{u.items_out:,}",
                      _pct(min(1.0, max(0.0, u.busy_fraction))), f"{u.cpu_s:.2f}")

    from fitwork.telemetry.utilization import record_resources

    resources = Table(title="resources (fleet utilization: used s / allocated s, allocated "
                      "at most what the host has)", title_justify="left")
    for column in ("resource", "allocated", "used s", "allocated s", "utilization"):
        resources.add_column(column, justify="left" if column == "resource" else "right")
    findings = []
    for r in record_resources(record):
        resources.add_row(r.resource, f"{r.allocated:g}", f"{r.used_s:.2f}",
                          f"{r.allocated_s:.2f}",
                          "under-allocated" if r.finding else _pct(r.utilization))
        findings += [r.finding] if r.finding else []
    return Group(head, units, resources, *findings)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.3f}"


def _bytes(count: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def profile_table(profile: PipelineProfile) -> Table:
    """One row per unit: per-item cost, what bounds it, data in and out, memory, FLOPs."""
    table = Table(title=f"profile of {profile.pipeline} on {profile.host_class} "
                  "(per input item)", title_justify="left")
    accel = any(u.accel_s for u in profile.units)
    flops = any(u.flops for u in profile.units)
    columns = ["unit", "bound", "wall ms", "cpu ms", *(["accel ms"] if accel else []),
               "in", "out", "ratio", "peak RSS", *(["FLOPs"] if flops else [])]
    for column in columns:
        table.add_column(column, justify="left" if column in ("unit", "bound") else "right",
                         no_wrap=True)
    for u in profile.units:
        row = [u.name, u.bound, _ms(u.wall_s), _ms(u.cpu_s)]
        row += [_ms(u.accel_s)] if accel else []
        row += [_bytes(u.bytes_in), _bytes(u.bytes_out), f"{u.output_ratio:.2f}",
                _bytes(u.peak_rss)]
        row += [f"{u.flops:.3g}" if u.flops else "-"] if flops else []
        table.add_row(*row)
    return table


def _money_per_million(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def _range(low: float, high: float) -> str:
    return f"{low:,.1f} - {high:,.1f}"


def _error(rate: RateEstimate | None) -> str:
    if rate is None:
        return ""
    low, high = rate.bounds()
    spread = (f"p10-p90 {low / rate.rate - 1:+.0%}/{high / rate.rate - 1:+.0%}"
              if rate.rate > 0 else "")
    if not rate.transferred:
        return f"measured, {spread}" if spread else (rate.error_basis or rate.method)
    said = f"{rate.error_median:.0%}, p90 {rate.error_p90:.0%}; {spread}"
    return said + ("; not calibrated" if UNCALIBRATED in rate.error_basis else "")


UNCALIBRATED = "not calibrated for this"  # this vendor, or this class
BUSY = "profiled on a busy host"


def range_notes(rates: list[RateEstimate]) -> list[str]:
    """What a plan's range rests on that a reader must know: rates of a vendor the
    calibration never measured, and profiles taken on a busy host (one line each)."""
    notes = []
    foreign = sorted({r.device_class for r in rates if UNCALIBRATED in r.error_basis})
    if foreign:
        basis = next(r.error_basis for r in rates if UNCALIBRATED in r.error_basis)
        notes.append(f"{', '.join(foreign)}: {basis.split(' on top of ')[0]}")
    busy = sorted({r.unit for r in rates if BUSY in r.error_basis})
    if busy:
        notes.append(f"{', '.join(busy)} {BUSY}: measured rates are low and their range "
                     "reaches up to what a quiet host gives back; re-profile on a quiet host")
    return notes


def _cores(cores: float, reserved: bool) -> str:
    """A replica's cores: ``2 reserved``, or its fluid share such as ``0.31``."""
    return f"{cores:g} reserved" if reserved else f"{cores:.3g}"


def plan_table(plan: Plan) -> Group:
    """Monolithic and fitted side by side (throughput, range, utilization, cost), then replicas.

    The predicted range and the rate columns say how far the point figures can be trusted:
    a transferred rate carries the error its kind of transfer showed on measured pairs.
    """
    rate_of = _rate_lookup(plan)
    return Group(_sides_table(plan), _replicas_table(plan, rate_of),
                 *_plan_notes(plan, rate_of))


def _sides_table(plan: Plan) -> Table:
    """The plan's two sides, a column each: throughput, utilization, cost, bound."""
    sides = (plan.monolithic, plan.fitted)
    table = Table(title=f"plan for {plan.pipeline} on fleet {plan.fleet.name} "
                  f"({plan.objective.replace('_', ' ')})", title_justify="left")
    table.add_column("")
    for side in sides:
        table.add_column(side.label, justify="right")
    table.add_row("throughput (items/s)", *(f"{s.throughput:,.1f}" for s in sides))
    table.add_row("predicted range (p10-p90)", *(_range(*s.throughput_range) for s in sides))
    table.add_row("units measured / transferred",
                  *(f"{len(s.measured)} / {len(s.transferred)}" for s in sides))
    classes = sorted({u.device_class for s in sides for u in s.result.utilization})
    for name in classes:
        table.add_row(f"{name} utilization", *(_pct(s.result.utilization_of(name)) for s in sides))
    for name in sorted({c for s in sides for c in s.mfu}):
        table.add_row(f"{name} MFU", *(_pct(s.mfu[name]) if name in s.mfu else "-"
                                        for s in sides))
    table.add_row("server-capacity utilization", *(_pct(s.capacity_utilization) for s in sides))
    table.add_row("cost per million items", *(_money_per_million(s.result.cost_per_million)
                                             for s in sides))
    table.add_row("cost per hour (nodes used)", *(f"${s.result.cost_per_hour:,.2f}"
                                                 for s in sides))
    table.add_row("bound, gap", *(f"{s.result.bound:,.1f}, {s.result.gap:.1%}" for s in sides))
    table.add_row("solver's word", *(s.result.label for s in sides))
    return table


def _rate_lookup(plan: Plan) -> Callable[[Replicas], RateEstimate | None]:
    """The rate estimate behind a group of replicas: at its batch size, else its own."""
    own = {(r.unit, r.device_class): r for r in plan.rates}
    batched = {(r.unit, r.device_class, r.batch_size): r
               for r in [*plan.rates, *plan.batch_rates]}

    def rate_of(p: Replicas) -> RateEstimate | None:
        return batched.get((p.unit, p.device_class, p.batch_size),
                           own.get((p.unit, p.device_class)))

    return rate_of


def _replicas_table(plan: Plan, rate_of: Callable[[Replicas], RateEstimate | None]
                    ) -> Table:
    """The fitted side's replicas, with where each rate comes from and its error."""
    replicas = Table(title="fitted replicas", title_justify="left")
    numbers = ("replicas", "batch", "items/s", "cores each")
    for column in ("unit", "device class", "node type", *numbers, "rate source",
                   "rate error (median, p90; range)"):
        replicas.add_column(column, justify="right" if column in numbers else "left")
    for p in plan.fitted.result.replicas:
        if p.replicas:
            rate = rate_of(p)
            source = "" if rate is None else rate.method + (
                f" from {rate.source_class}" if rate.source_class else "")
            replicas.add_row(p.unit, p.device_class, p.node_type, str(p.replicas),
                             str(p.batch_size or "-"), f"{p.items_per_s:,.1f}",
                             _cores(p.cores, p.reserved), source, _error(rate))
    return replicas


def _plan_notes(plan: Plan, rate_of: Callable[[Replicas], RateEstimate | None]
                ) -> list[Text]:
    """The lines under the tables: bottleneck, cores, capacity, rate sources, trust."""
    from fitwork.fit.plan import capacity_line

    fitted = plan.fitted
    lines = [Text(f"bottleneck: {fitted.result.bottleneck} "
                  f"({fitted.result.bottleneck_reason})"),
             Text(f"cores are planned fluid (what the load uses, 'reserved' where a unit "
                  f"holds them) up to {plan.core_ceiling:.0%} of each node's unreserved "
                  "cores, the ceiling the profile's run-queue wait gives"),
             Text(capacity_line(plan)),
             Text(f"fitted rates measured: {', '.join(fitted.measured) or 'none'}; "
                  f"transferred: {', '.join(fitted.transferred) or 'none'}")]
    if plan.layout_error > 0:
        lines.append(Text(
            f"predicted ranges include the model's own miss on whole plans "
            f"(±{math.expm1(plan.layout_error):.0%}, realized / predicted of the bench's "
            "pipelines on a 2-core host; fitwork.fit.layout_error)"))
    if plan.fused and plan.split is not None:
        lines.insert(0, Text(
            f"the plan runs the units fused: split into units it would sustain "
            f"{plan.split.throughput:,.1f} items/s, fused {fitted.throughput:,.1f} (the "
            "stages are too light to pay for moving items between them)", style="bold"))
    placed = [r for p in fitted.result.replicas if p.replicas and (r := rate_of(p)) is not None]
    used = {p.device_class for p in fitted.result.replicas if p.replicas}
    lines.extend(Text(note, style="yellow")
                 for note in range_notes([r for r in plan.rates if r.device_class in used]))
    moved = [r for r in placed if r.transferred]
    if moved:
        worst = max(moved, key=lambda r: r.error_p90)
        least, most = (f(r.error_median for r in moved) for f in (min, max))
        medians = f"{least:.0%}" if f"{least:.0%}" == f"{most:.0%}" else f"{least:.0%}-{most:.0%}"
        lines.append(Text(
            f"bound and gap are exact for the predicted rates only: transferred rates miss "
            f"measured ones by a median {medians} (p90 up to {worst.error_p90:.0%}: "
            f"{worst.error_basis})", style="yellow"))
    return lines
