"""The report's ``utilization`` and ``cost`` sections: fleet utilization, cores busy of the
host, MFU and server capacity (never mixed), and the cost per million items."""

from __future__ import annotations

from collections.abc import Sequence

from fitwork.fit.plan import Plan
from fitwork.hardware.catalog import Catalog, DeviceKind, device_kind
from fitwork.report.figures import cores_busy_of_host, cpu_seconds, host_cores
from fitwork.report.parts import (
    CHART_WIDTH,
    basis_note,
    html_section,
    html_table,
    money,
    pct,
    predicted_sides,
    side_colour,
)
from fitwork.report.svg import BarSeries, bar_chart, colour
from fitwork.telemetry.cost import cost_per_million, nodes_basis, run_price
from fitwork.telemetry.figures import share
from fitwork.telemetry.record import RunRecord
from fitwork.telemetry.utilization import RunFigures


def _host_use(records: Sequence[RunRecord], labels: Sequence[str],
              figures: Sequence[RunFigures], known: Catalog) -> list[str]:
    """Cores busy of the host beside fleet CPU utilization: a chart, a table, a caption.

    Cores allocated are at most the host's (what replicas declare beyond them does not
    exist); both shares are held to 100%, and each column says what it divides by.
    """
    rows, bars, notes = [], [], []
    for i, (label, r, f) in enumerate(zip(labels, records, figures, strict=True)):
        cpu_rows = [c for c in f.classes if device_kind(c.device_class, known) is DeviceKind.CPU]
        allocated = sum(c.allocated for c in cpu_rows)
        declared = sum(c.declared if c.declared is not None else c.allocated
                       for c in cpu_rows)
        fleet = share(sum(c.busy_s for c in cpu_rows), sum(c.allocated_s for c in cpu_rows))
        used = cpu_seconds(r)
        cores = host_cores(r.host)
        busy = cores_busy_of_host(used, cores, r.wall_s)
        busy = None if busy is None else min(1.0, busy)
        cells = f"{allocated:g}" + (f" (declared {declared:g})" if declared > allocated
                                    else "")
        over = any(c.under_allocated for c in cpu_rows)
        rows.append([label, f"{used:,.2f}", f"{r.wall_s:.2f}", cells,
                     "under-allocated" if over else pct(fleet if cpu_rows else None),
                     "-" if cores is None else f"{cores:g}",
                     pct(busy)])
        if busy is not None:
            bars.append(BarSeries(label, {"cores busy of the host": busy}, colour(i)))
        notes += [f"{label}: {c.note}" for c in cpu_rows if c.note]
    parts = []
    if bars:
        parts.append(bar_chart(["cores busy of the host"], bars, width=CHART_WIDTH,
                               label="Cores busy of the host",
                               caption="CPU seconds used / (host cores x wall seconds)"))
    parts.append(html_table(["run", "CPU s used", "wall s", "cores allocated (at most the host's)",
                             "fleet CPU: CPU s / (cores allocated x wall s)", "host cores",
                             "cores busy: CPU s / (host cores x wall s)"], rows))
    parts.append(basis_note(
        "Two different figures: fleet CPU is the share of the cores each run allocated that "
        "it kept busy; cores busy is the share of all the host's cores, the same "
        "denominator for every run on one host, so compare runs by it."
        + ("" if bars else " No record describes its host's cores, so there is no "
           "cores-busy figure.")))
    parts += [basis_note(note) for note in notes]
    return parts


def utilization_section(records: Sequence[RunRecord], labels: Sequence[str],
                        figures: Sequence[RunFigures], plan: Plan | None, known: Catalog) -> str:
    sides = predicted_sides(plan)
    fleet = [BarSeries(label, {c.device_class: c.utilization for c in f.classes}, colour(i))
             for i, (label, f) in enumerate(zip(labels, figures, strict=True))]
    fleet += [BarSeries(f"predicted: plan {side.label}",
                        {u.device_class: u.utilization for u in side.result.utilization},
                        side_colour(side, labels, grey), hatched=True)
              for side, grey in sides]
    classes = list(dict.fromkeys(name for s in fleet for name in s.values))
    parts = [bar_chart(classes, fleet, width=CHART_WIDTH, label="Fleet utilization per "
                       "device class", caption="busy device-seconds / allocated device-seconds"),
             basis_note("; ".join(sorted({f"{c.device_class}: {c.basis}" for f in figures
                                          for c in f.classes}))),
             *_host_use(records, labels, figures, known)]
    mfu = [BarSeries(label, {c.device_class: c.mfu for c in f.classes if c.mfu is not None},
                     colour(i)) for i, (label, f) in enumerate(zip(labels, figures, strict=True))]
    mfu += [BarSeries(f"predicted: plan {side.label}", dict(side.mfu),
                      side_colour(side, labels, grey), hatched=True) for side, grey in sides]
    mfu = [s for s in mfu if s.values]
    if mfu:
        names = list(dict.fromkeys(name for s in mfu for name in s.values))
        parts.append(bar_chart(names, mfu, width=CHART_WIDTH, label="Model-FLOPs utilization "
                               "(MFU) per device class",
                               caption="FLOPs the work needed / (peak FLOP/s x devices x s)"))
    else:
        parts.append(basis_note("MFU: no FLOPs per item were counted or declared for these units, "
                                "so no MFU is shown."))
    capacity = [BarSeries(label, {"server capacity": share}, colour(i))
                for i, (label, f) in enumerate(zip(labels, figures, strict=True))
                if (share := f.capacity_utilization) is not None]
    capacity += [BarSeries(f"predicted: plan {side.label}",
                           {"server capacity": side.capacity_utilization},
                           side_colour(side, labels, grey), hatched=True)
                 for side, grey in sides]
    if capacity:
        parts.append(bar_chart(["server capacity"], capacity, width=CHART_WIDTH,
                               label="Server-capacity utilization",
                               caption="achieved items/s / the most these servers sustain "
                                       "(at most 100%)"))
        parts.append(basis_note("; ".join(sorted({f.capacity_basis for f in figures
                                                  if f.capacity_basis}))))
        parts += [basis_note(f"{label}: {f.capacity_note}")
                  for label, f in zip(labels, figures, strict=True) if f.capacity_note]
    else:
        parts.append(basis_note("Server-capacity utilization: no plan or bound was given."))
    rows = [[label, c.device_class, f"{c.allocated:g}", f"{c.busy_s:,.2f}",
             f"{c.allocated_s:,.2f}", "under-allocated" if c.under_allocated
             else pct(c.utilization),
             "-" if c.flops is None else f"{c.flops:.3g}", pct(c.mfu),
             pct(f.capacity_utilization)]
            for label, f in zip(labels, figures, strict=True) for c in f.classes]
    parts.append(html_table(["run", "device class", "devices", "busy device-s",
                             "allocated device-s", "fleet utilization", "FLOPs needed", "MFU",
                             "server capacity"], rows, left=(0, 1)))
    parts += [basis_note(f"{label}, {c.device_class}: {c.note}")
              for label, f in zip(labels, figures, strict=True) for c in f.classes
              if c.note and device_kind(c.device_class, known) is not DeviceKind.CPU]
    return html_section("utilization", "Utilization: fleet, host, MFU, server capacity (never "
                        "mixed)", *parts)


def cost_section(records: Sequence[RunRecord], labels: Sequence[str], figures: Sequence[RunFigures],
                 plan: Plan | None, price_per_hour: float | None, known: Catalog) -> str:
    rows = []
    for label, record, f in zip(labels, records, figures, strict=True):
        price, basis = run_price(f, plan, price_per_hour, known)
        rows.append([label, f"{record.throughput:,.1f}",
                     "-" if price is None else f"${price:,.4f}", basis,
                     money(cost_per_million(price, record.throughput))])
    if plan is not None:
        rows += [[f"predicted: plan {side.label}", f"{side.throughput:,.1f}",
                  f"${side.result.cost_per_hour:,.4f}", nodes_basis(plan, side),
                  money(side.result.cost_per_million)] for side in (plan.monolithic, plan.fitted)]
    return html_section("cost", "Cost per million items", html_table(
        ["run", "items/s", "price per hour", "basis of the price", "cost per million items"],
        rows, left=(0, 3)),
        basis_note("cost per million items = price per hour / (items/s x 3600) x 1e6"))
