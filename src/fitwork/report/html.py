"""One self-contained HTML report of run records: timeline, utilization, throughput, queues, cost.

``render_report`` returns a single page with inline CSS and inline SVG (no scripts, nothing
fetched when it is viewed).  Its sections carry stable ids::

    summary      one row per run: items, wall seconds, throughput, latency, failures
    timeline     every worker's busy intervals per unit and run (grey where alive and idle)
    utilization  the three figures, never mixed: fleet, MFU, server capacity; predicted
                 beside realized when a plan is given
    throughput   source items/s over time per run (and the plan's prediction)
    queues       items waiting in front of each unit over time, per run
    cost         cost per million items per run, with the price's basis
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from html import escape

from fitwork.errors import InputError
from fitwork.fit.plan import Plan, PlanSide
from fitwork.hardware.catalog import Catalog, catalog
from fitwork.report.svg import (
    BarSeries,
    GanttRow,
    LineSeries,
    bar_chart,
    colour,
    gantt,
    line_chart,
)
from fitwork.telemetry.figures import merge_intervals
from fitwork.telemetry.record import RunRecord
from fitwork.telemetry.utilization import RunFigures, run_figures, throughput_series

SECTIONS = ("summary", "timeline", "utilization", "throughput", "queues", "cost")
THROUGHPUT_BUCKETS = 30
CHART_WIDTH = 1100
STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1180px;
       color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 32px; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
p.basis { color: #555; font-size: 12px; margin: 4px 0 12px; }
svg { display: block; margin: 6px 0; }
"""


def default_labels(records: Sequence[RunRecord]) -> list[str]:
    """Each record's pipeline name, with its run id where two pipelines share a name."""
    names = [r.pipeline for r in records]
    return [f"{r.pipeline} ({r.run_id})" if names.count(r.pipeline) > 1 else r.pipeline
            for r in records]


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
        return plan.fitted.result.cost_per_hour, _nodes_basis(plan, plan.fitted)
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


def _nodes_basis(plan: Plan, side: PlanSide) -> str:
    nodes = ", ".join(f"{n.nodes_used} x {n.node_type}" for n in side.result.nodes
                      if n.nodes_used)
    return (f"nodes the plan's {side.label} side uses on fleet {plan.fleet.name!r} "
            f"({nodes or 'none'}), at the fleet's prices")


def _unit_colours(records: Sequence[RunRecord]) -> dict[str, str]:
    names: dict[str, str] = {}
    for record in records:
        for u in record.units:
            names.setdefault(u.name, colour(len(names)))
    return names


def _figures(record: RunRecord, plan: Plan | None, classes: Mapping[str, str] | None,
             known: Catalog) -> RunFigures:
    names = {u.name for u in record.units}
    classes = {unit: name for unit, name in (classes or {}).items() if unit in names}
    try:
        return run_figures(record, plan, classes=classes, known=known)
    except InputError:
        return run_figures(record, plan, flops_per_item={}, classes=classes, known=known)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]],
           left: Sequence[int] = (0,)) -> str:
    """A table; columns in ``left`` are text (left-aligned), the rest numbers."""
    def cell(tag: str, index: int, content: str) -> str:
        align = ' class="l"' if index in left else ""
        return f"<{tag}{align}>{escape(content)}</{tag}>"

    cells = "".join(cell("th", i, h) for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def _section(name: str, title: str, *parts: str) -> str:
    return f'<section id="{name}"><h2>{escape(title)}</h2>{"".join(parts)}</section>'


def _basis(text: str) -> str:
    return f'<p class="basis">{escape(text)}</p>'


def _summary(records: Sequence[RunRecord], labels: Sequence[str]) -> str:
    rows = []
    for label, r in zip(labels, records, strict=True):
        started = datetime.datetime.fromtimestamp(r.started_at, datetime.UTC)
        latency = ("-" if r.latency_p50_s is None or r.latency_p95_s is None else
                   f"{r.latency_p50_s * 1000:.1f} / {r.latency_p95_s * 1000:.1f}")
        rows.append([label, r.pipeline, " -> ".join(f"{u.name} x{u.replicas}" for u in r.units),
                     started.strftime("%Y-%m-%d %H:%M:%S UTC"), f"{r.items_completed:,}",
                     f"{r.outputs:,}", f"{r.wall_s:.2f}", f"{r.throughput:,.1f}", latency,
                     f"{r.failures} ({r.poisoned} poison)"])
    return _section("summary", "Runs", _table(
        ["run", "pipeline", "units x replicas", "started", "items", "outputs", "wall s",
         "items/s", "latency p50 / p95 ms", "failures"], rows, left=(0, 1, 2, 3)))


def _timeline(records: Sequence[RunRecord], labels: Sequence[str], colours: dict[str, str],
              x_max: float) -> str:
    seconds_per_px = x_max / CHART_WIDTH
    charts = []
    for label, record in zip(labels, records, strict=True):
        order = {u.name: i for i, u in enumerate(record.units)}
        rows = []
        for w in sorted(record.workers, key=lambda w: (order.get(w.unit, 0), w.worker_id)):
            end = w.ended_s if w.ended_s is not None else record.wall_s
            busy = merge_intervals(w.busy_intervals, gap=seconds_per_px / 2)
            share = w.busy_s / (end - w.started_s) if end > w.started_s else 0.0
            rows.append(GanttRow(
                label=f"{w.unit} #{w.worker_id}", group=w.unit, alive=(w.started_s, end),
                busy=busy, colour=colours[w.unit],
                tooltip=f"{w.unit} worker {w.worker_id} (pid {w.pid}"
                        + (f" on {w.node}" if w.node else "") + f"): busy {w.busy_s:.2f} s "
                        f"of {end - w.started_s:.2f} s alive ({share:.0%}), "
                        f"{w.items_in:,} items in"))
        charts.append(gantt(rows, x_max, width=CHART_WIDTH,
                            label=f"{label}: {record.pipeline}, {record.wall_s:.2f} s"))
    return _section("timeline", "Worker timeline (busy vs idle)", *charts, _basis(
        "Each row is one worker process, from its start to its end; coloured where it was "
        "busy on an item or batch, grey where it was alive and waiting. All runs share one "
        "time scale."))


def _side_colour(side: PlanSide, labels: Sequence[str], fallback: str) -> str:
    return colour(labels.index(side.label)) if side.label in labels else fallback


def _predicted_sides(plan: Plan | None) -> list[tuple[PlanSide, str]]:
    if plan is None:
        return []
    return [(plan.monolithic, "#9a9a9a"), (plan.fitted, "#444444")]


def _utilization(labels: Sequence[str], figures: Sequence[RunFigures],
                 plan: Plan | None) -> str:
    sides = _predicted_sides(plan)
    fleet = [BarSeries(label, {c.device_class: c.utilization for c in f.classes}, colour(i))
             for i, (label, f) in enumerate(zip(labels, figures, strict=True))]
    fleet += [BarSeries(f"predicted: plan {side.label}",
                        {u.device_class: u.utilization for u in side.result.utilization},
                        _side_colour(side, labels, grey), hatched=True)
              for side, grey in sides]
    classes = list(dict.fromkeys(name for s in fleet for name in s.values))
    parts = [bar_chart(classes, fleet, width=CHART_WIDTH, label="Fleet utilization per "
                       "device class", caption="busy device-seconds / allocated device-seconds"),
             _basis("; ".join(sorted({f"{c.device_class}: {c.basis}" for f in figures
                                      for c in f.classes})))]
    mfu = [BarSeries(label, {c.device_class: c.mfu for c in f.classes if c.mfu is not None},
                     colour(i)) for i, (label, f) in enumerate(zip(labels, figures, strict=True))]
    mfu += [BarSeries(f"predicted: plan {side.label}", dict(side.mfu),
                      _side_colour(side, labels, grey), hatched=True) for side, grey in sides]
    mfu = [s for s in mfu if s.values]
    if mfu:
        names = list(dict.fromkeys(name for s in mfu for name in s.values))
        parts.append(bar_chart(names, mfu, width=CHART_WIDTH, label="Model-FLOPs utilization "
                               "(MFU) per device class",
                               caption="FLOPs the work needed / (peak FLOP/s x devices x s)"))
    else:
        parts.append(_basis("MFU: no FLOPs per item were counted or declared for these units, "
                            "so no MFU is shown."))
    capacity = [BarSeries(label, {"server capacity": share}, colour(i))
                for i, (label, f) in enumerate(zip(labels, figures, strict=True))
                if (share := f.capacity_utilization) is not None]
    capacity += [BarSeries(f"predicted: plan {side.label}",
                           {"server capacity": side.capacity_utilization},
                           _side_colour(side, labels, grey), hatched=True)
                 for side, grey in sides]
    if capacity:
        parts.append(bar_chart(["server capacity"], capacity, width=CHART_WIDTH,
                               label="Server-capacity utilization",
                               caption="achieved items/s / the most these servers sustain"))
        parts.append(_basis("; ".join(sorted({f.capacity_basis for f in figures
                                              if f.capacity_basis}))))
    else:
        parts.append(_basis("Server-capacity utilization: no plan or bound was given."))
    rows = [[label, c.device_class, f"{c.allocated:g}", f"{c.busy_s:,.2f}",
             f"{c.allocated_s:,.2f}", _pct(c.utilization),
             "-" if c.flops is None else f"{c.flops:.3g}", _pct(c.mfu),
             _pct(f.capacity_utilization)]
            for label, f in zip(labels, figures, strict=True) for c in f.classes]
    parts.append(_table(["run", "device class", "devices", "busy device-s",
                         "allocated device-s", "fleet utilization", "FLOPs needed", "MFU",
                         "server capacity"], rows, left=(0, 1)))
    return _section("utilization", "Utilization: three figures, never mixed", *parts)


def _throughput(records: Sequence[RunRecord], labels: Sequence[str], plan: Plan | None,
                x_max: float) -> str:
    width = x_max / THROUGHPUT_BUCKETS
    series = []
    for i, (label, record) in enumerate(zip(labels, records, strict=True)):
        points = [p for start, rate in throughput_series(record, width)
                  for p in ((start, rate), (min(start + width, record.wall_s), rate))]
        series.append(LineSeries(f"{label} ({record.throughput:,.1f} items/s overall)",
                                 points, colour(i)))
    for side, grey in _predicted_sides(plan):
        series.append(LineSeries(f"predicted: plan {side.label} ({side.throughput:,.1f})",
                                 [(0.0, side.throughput), (x_max, side.throughput)],
                                 _side_colour(side, labels, grey), dashed=True))
    chart = line_chart(series, x_max, width=CHART_WIDTH, height=300,
                       label="Throughput over time", x_caption="seconds from the start",
                       y_caption="source items/s")
    return _section("throughput", "Throughput over time", chart, _basis(
        f"Source items completed per second in {width:.3g} s buckets. A record keeps busy "
        "intervals, not completion times, so each run's last working unit is taken to finish "
        "items at a constant rate while busy, scaled to the run's completed items."))


def _queues(records: Sequence[RunRecord], labels: Sequence[str], colours: dict[str, str],
            x_max: float) -> str:
    parts = []
    for label, record in zip(labels, records, strict=True):
        times = record.queue.times_s
        if not times:
            parts.append(_basis(f"{label}: no queue depth samples in the record."))
            continue
        series = [LineSeries(name, list(zip(times, depths, strict=False)), colours.get(
            name, "#777777"), step=True) for name, depths in record.queue.depths.items()]
        parts.append(line_chart(series, x_max, width=CHART_WIDTH, height=240,
                                label=f"{label}: items waiting in front of each unit",
                                x_caption="seconds from the start", y_caption="items"))
    return _section("queues", "Queue depth over time", *parts, _basis(
        "Sampled by the driver while the run went on; a queue that stays full sits in front "
        "of the bottleneck."))


def _cost(records: Sequence[RunRecord], labels: Sequence[str], figures: Sequence[RunFigures],
          plan: Plan | None, price_per_hour: float | None, known: Catalog) -> str:
    rows = []
    for label, record, f in zip(labels, records, figures, strict=True):
        price, basis = run_price(f, plan, price_per_hour, known)
        rows.append([label, f"{record.throughput:,.1f}",
                     "-" if price is None else f"${price:,.4f}", basis,
                     _money(cost_per_million(price, record.throughput))])
    for side in (plan.monolithic, plan.fitted) if plan is not None else ():
        rows.append([f"predicted: plan {side.label}", f"{side.throughput:,.1f}",
                     f"${side.result.cost_per_hour:,.4f}", _nodes_basis(plan, side),
                     _money(side.result.cost_per_million)])
    return _section("cost", "Cost per million items", _table(
        ["run", "items/s", "price per hour", "basis of the price", "cost per million items"],
        rows, left=(0, 3)),
        _basis("cost per million items = price per hour / (items/s x 3600) x 1e6"))


def render_report(records: list[RunRecord], labels: list[str] | None = None,
                  plan: Plan | None = None, figures: list[RunFigures] | None = None, *,
                  price_per_hour: float | None = None,
                  classes: Mapping[str, str] | None = None, title: str | None = None,
                  known: Catalog | None = None) -> str:
    """The report of ``records`` (e.g. labels ``["monolithic", "fitted"]``) as one HTML page.

    ``figures`` default to `run_figures` of each record with ``plan`` and ``classes`` (unit
    -> device class); the cost uses ``price_per_hour`` when given, else the plan's nodes,
    else the catalog price of the devices each run allocated.
    """
    if not records:
        raise InputError("a report needs at least one run record")
    labels = labels or default_labels(records)
    if len(labels) != len(records):
        raise InputError(f"{len(labels)} labels for {len(records)} run records; give one "
                         "label per record")
    known = known or catalog()
    stray = sorted(set(classes or {}) - {u.name for r in records for u in r.units})
    if stray:
        raise InputError(f"device classes given for units {', '.join(stray)}, which no run "
                         "record has")
    figures = figures or [_figures(r, plan, classes, known) for r in records]
    if len(figures) != len(records):
        raise InputError(f"{len(figures)} sets of figures for {len(records)} run records")
    colours = _unit_colours(records)
    x_max = max(r.wall_s for r in records) or 1.0
    title = title or "fitwork report: " + ", ".join(dict.fromkeys(r.pipeline for r in records))
    body = [
        f"<h1>{escape(title)}</h1>",
        _summary(records, labels),
        _timeline(records, labels, colours, x_max),
        _utilization(labels, figures, plan),
        _throughput(records, labels, plan, x_max),
        _queues(records, labels, colours, x_max),
        _cost(records, labels, figures, plan, price_per_hour, known),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
