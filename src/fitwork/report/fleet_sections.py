"""The fleet page's sections over time and per epoch: shares, decisions, utilization, cost."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from fitwork.jobs.record import Decision, Epoch, FleetRecord
from fitwork.report.fleet_figures import (
    WINDOW_S,
    allocated_cores,
    cores_used,
    moves,
    planned_steps,
    run_seconds,
    share_checks,
    total_used,
)
from fitwork.report.parts import CHART_WIDTH, basis_note, html_section, html_table, pct
from fitwork.report.svg import (
    CHAR_PX,
    LEFT,
    RIGHT,
    BarSeries,
    LineSeries,
    Marker,
    bar_chart,
    colour,
    legend_height,
    line_chart,
    nice_ticks,
)

TOTAL = "#444444"


def span(epoch: Epoch) -> str:
    """An epoch's stretch in words: ``0.6-5.1 s``."""
    return f"{epoch.start_s:.1f}-{epoch.end_s:.1f} s"


def _cores_text(decision: Decision) -> str:
    return ", ".join(f"{n} {c:.2f}" for n, c in decision.cores.items()) or "none"


def decision_markers(record: FleetRecord, x_max: float) -> list[Marker]:
    """A marker per decision, labelled ``n: reason`` as far as the room to the next allows."""
    scale = (CHART_WIDTH - LEFT - RIGHT) / nice_ticks(x_max)[-1]
    edges = [d.at_s for d in record.decisions[1:]] + [nice_ticks(x_max)[-1]]
    markers = []
    for n, (d, edge) in enumerate(zip(record.decisions, edges, strict=True), start=1):
        room = max(1, int(((edge - d.at_s) * scale - 8) / CHAR_PX))
        label = f"{n}: {d.reason}"
        if len(label) > room:
            label = f"{n}" if room < len(f"{n}: ") + 4 else label[:room - 1] + "\u2026"
        markers.append(Marker(d.at_s, label, f"re-fit {n} at {d.at_s:.2f} s: {d.reason}; "
                                             f"cores {_cores_text(d)}"))
    return markers


def _names(record: FleetRecord) -> list[str]:
    return [o.name for o in record.jobs if any(o.name in s.cpu_s for s in record.samples)]


def _share_series(record: FleetRecord, names: Sequence[str]) -> list[LineSeries]:
    """Each pipeline's realized share of the cores used (solid) and planned share (dashed)."""
    totals = dict(total_used(record.samples, names))
    series = []
    for i, name in enumerate(names):
        points = [(t, 100 * c / totals[t]) for t, c in cores_used(record.samples, name)
                  if totals.get(t, 0.0) > 0]
        series.append(LineSeries(f"{name} realized", points, colour(i)))
        planned = [(d.at_s, 100 * d.cores[name] / sum(d.cores.values()))
                   for d in record.decisions if d.cores.get(name)]
        if planned:
            end = planned_steps(record, name)[-1][0]
            series.append(LineSeries(f"{name} planned", [*planned, (end, planned[-1][1])],
                                     colour(i), dashed=True, step=True, nudge=1.5 * i))
    return series


def _core_series(record: FleetRecord, names: Sequence[str]) -> list[LineSeries]:
    """Cores each pipeline used (solid) and was given (dashed), and all of them together."""
    series = []
    if len(names) > 1:
        series.append(LineSeries("all pipelines used", total_used(record.samples, names),
                                 TOTAL))
    for i, name in enumerate(names):
        team = record.teams.get(name, "")
        series.append(LineSeries(f"{name} [{team}] used" if team else f"{name} used",
                                 cores_used(record.samples, name), colour(i)))
        planned = planned_steps(record, name)
        if planned:
            series.append(LineSeries(f"{name} given", planned, colour(i), dashed=True,
                                     step=True, nudge=1.5 * i))
    return series


def shares_section(record: FleetRecord, x_max: float) -> str:
    """Shares and cores over time with the decisions marked; then the shares per epoch."""
    names = _names(record)
    if not names:
        return html_section("shares", "Shares of the cores over time", basis_note(
            "No samples of any pipeline's CPU seconds in this record, so no timeline."))
    markers = decision_markers(record, x_max)
    parts = []
    for series, label, caption, top in (
            (_share_series(record, names), "Each pipeline's share of the cores the fleet used",
             "% of cores used", 100.0),
            (_core_series(record, names), f"Cores used and given per pipeline (the host has "
             f"{record.host_cores})", "cores", None)):
        parts.append(line_chart(series, x_max, width=CHART_WIDTH,
                                height=300 + legend_height([s.name for s in series],
                                                           CHART_WIDTH),
                                label=label, x_caption="seconds from the fleet run's start",
                                y_caption=caption, y_max=top, markers=markers))
    parts.append(basis_note(
        f"Solid: measured, CPU seconds of each pipeline's processes over about {WINDOW_S:g} s "
        "between the coordinator's samples. Dashed: what each re-fit decision gave it "
        "(lines at one value drawn a few pixels apart). Red dashed verticals: the decisions, "
        "numbered as in the table below (hover for the reason and the cores)."))
    rows = [[span(e), c.name, pct(c.planned if c.planned else None), pct(c.realized),
             f"{c.ratio:.2f}\u00d7" if c.planned else "-",
             "on plan" if c.on_plan else "MISSED" if c.planned else "no plan",
             f"{e.cores_used.get(c.name, 0.0):.2f}"]
            for e in record.epochs for c in share_checks(e)]
    if rows:
        parts.append(html_table(["epoch", "pipeline", "planned share", "realized share",
                                 "realized / planned", "verdict", "cores used"], rows,
                                left=(0, 1, 5)))
    return html_section("shares", "Shares of the cores over time", *parts)


def decisions_section(record: FleetRecord) -> str:
    """Every re-fit decision: when, why, and what each running pipeline got."""
    if not record.decisions:
        return html_section("decisions", "Re-fit decisions", basis_note("No decisions."))
    rows = [[str(n), f"{d.at_s:.2f}", d.reason, ", ".join(d.running) or "none",
             _cores_text(d), ", ".join(f"{k} {v:,.1f}" for k, v in d.rates.items()) or "-",
             "; ".join(f"{k} " + ", ".join(f"{u} x{r}" for u, r in units.items())
                       for k, units in d.replicas.items()) or "-",
             f"{d.solve_s * 1000:,.1f}", _moves_text(record, d)]
            for n, d in enumerate(record.decisions, start=1)]
    return html_section("decisions", "Re-fit decisions", html_table(
        ["#", "at s", "reason", "running", "cores given", "predicted items/s", "replicas",
         "solve ms", "cores used, epoch before -> after"], rows, left=(2, 3, 4, 5, 6, 8)),
        basis_note(
        "The fleet plan is re-fitted on every arrival and departure; the freed cores go to "
        "the pipelines still running. The last column: each pipeline running on both sides "
        "of the decision, the cores it used in the epoch before and after, and how many "
        f"seconds after the decision its cores (over about {WINDOW_S:g} s) were halfway "
        "there."))


def _moves_text(record: FleetRecord, decision: Decision) -> str:
    return "; ".join(
        f"{m.name} {m.before:.2f} -> {m.after:.2f}"
        + (f" (halfway in {m.halfway_s:.1f} s)" if m.halfway_s is not None else "")
        for m in moves(record, decision)) or "-"


def _held(value: float | None) -> float | None:
    return None if value is None else min(1.0, value)


def utilization_section(record: FleetRecord) -> str:
    """Per epoch: allocated / owned, busy / owned (realized vs predicted), busy / allocated;
    each held to 100% in the figures, and a value beyond said as a finding below them."""
    cores = float(record.host_cores)
    rows, findings = [], []
    bars = {k: BarSeries(k, {}, c, hatched) for k, c, hatched in (
        ("busy / owned, realized", colour(0), False),
        ("busy / owned, predicted", colour(0), True),
        ("busy / allocated, realized", colour(2), False),
        ("allocated / owned", colour(1), True))}
    for e in record.epochs:
        allocated = allocated_cores(record, e)
        used = sum(e.cores_used.values())
        busy_of_alloc = used / allocated if allocated else None
        alloc_of_owned = allocated / cores if allocated is not None and cores else None
        figures = {"busy / owned, realized": e.realized_utilization,
                   "busy / owned, predicted": e.predicted_utilization,
                   "busy / allocated, realized": busy_of_alloc,
                   "allocated / owned": alloc_of_owned}
        for key, value in figures.items():
            if value is not None:
                bars[key].values[span(e)] = min(1.0, value)
        rows.append([span(e), ", ".join(e.running), f"{cores:g}",
                     "-" if allocated is None else f"{allocated:.2f}", f"{used:.2f}",
                     pct(_held(alloc_of_owned)), pct(_held(e.predicted_utilization)),
                     pct(_held(e.realized_utilization)), pct(_held(busy_of_alloc))])
        findings += _findings(e, used, allocated, cores)
    if not rows:
        return html_section("utilization", "Fleet utilization per epoch", basis_note(
            "No epochs in this record (fewer than two samples between decisions)."))
    categories = [span(e) for e in record.epochs]
    parts = [bar_chart(categories, list(bars.values()), width=CHART_WIDTH,
                       label="Fleet CPU utilization per epoch, realized vs predicted",
                       caption="share of the cores (held to 100%)"),
             html_table(["epoch", "running", "cores owned", "cores allocated", "cores used",
                         "allocated / owned", "busy / owned predicted",
                         "busy / owned realized", "busy / allocated realized"], rows,
                        left=(0, 1))]
    parts += [f'<p class="check warn">{escape(f)}</p>' for f in findings]
    parts.append(f'<p class="note">{escape(_whole_run(record))}</p>')
    parts.append(basis_note(
        "Owned: the host's cores. Allocated: the cores the decision in force gave the running "
        "pipelines. Busy: CPU seconds the pipelines' processes used per second of the epoch. "
        "Predicted busy / owned assumes the allocated cores are kept busy. No figure is shown "
        "above 100%: one that would be is stated as a finding."))
    return html_section("utilization", "Fleet utilization per epoch", *parts)


def _findings(epoch: Epoch, used: float, allocated: float | None, cores: float) -> list[str]:
    """What a figure above 100% means, in words, for ``epoch``."""
    found = []
    if allocated and used > allocated:
        found.append(f"Finding, {span(epoch)}: the pipelines used {used:.2f} cores, more than "
                     f"the {allocated:.2f} the plan allocated them ({used / allocated:.0%} of "
                     "it): the plan under-allocated, or its cores per replica are too low.")
    if cores and used > cores:
        found.append(f"Finding, {span(epoch)}: {used:.2f} cores used, more than the host's "
                     f"{cores:g}: a measurement error in the CPU-second readings.")
    return found


def cost_section(record: FleetRecord) -> str:
    """Each team's cost from the plan's prices, beside the CPU seconds its pipelines used."""
    if not record.cost_per_team:
        return html_section("cost", "Cost per team", basis_note(
            "No cost: the run was not planned (pass --plan to `fitwork run --jobs`), so no "
            "prices were set against its allocation."))
    cpu: dict[str, float] = {}
    for o in record.jobs:
        cpu[o.team] = cpu.get(o.team, 0.0) + o.cpu_s
    total_cost, total_cpu = sum(record.cost_per_team.values()), sum(cpu.values())
    rows = [[team, ", ".join(n for n, t in record.teams.items() if t == team),
             f"${cost:.3g}", pct(cost / total_cost if total_cost else None),
             f"{cpu.get(team, 0.0):,.1f}",
             pct(cpu.get(team, 0.0) / total_cpu if total_cpu else None)]
            for team, cost in record.cost_per_team.items()]
    chart = bar_chart(list(record.cost_per_team), [BarSeries(
        "cost (USD)", dict(record.cost_per_team), colour(0))], width=CHART_WIDTH,
        percent=False, label="Cost per team", caption="USD for the fleet run's wall time")
    return html_section("cost", "Cost per team", chart, html_table(
        ["team", "pipelines", "cost", "share of cost", "CPU s used", "share of CPU s"], rows,
        left=(0, 1)), basis_note(
        "Cost: each team's dollars per hour in the fleet plan (its allocation at the nodes' "
        "prices) times the fleet run's wall seconds; the CPU seconds its pipelines used are "
        "shown beside it so a team charged for more than it used can be seen."))


def _whole_run(record: FleetRecord) -> str:
    """The whole run's CPU seconds against the host's core-seconds, held to 100%."""
    seconds = run_seconds(record)
    used = sum(o.cpu_s for o in record.jobs)
    owned = record.host_cores * seconds
    if owned <= 0:
        return "Whole run: no wall time recorded."
    text = (f"Whole run: {used:,.1f} CPU s used of {owned:,.1f} core-seconds owned "
            f"({record.host_cores} cores x {seconds:.1f} s), {min(1.0, used / owned):.1%} busy")
    return text + (": more than the host has, a measurement error" if used > owned else "")
