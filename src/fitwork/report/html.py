"""One self-contained HTML report of run records: the verdict first, then the figures behind it.

``render_report`` returns a single page with inline CSS and inline SVG (no scripts, nothing
fetched when it is viewed).  Its sections carry stable ids::

    headline     one line: the compared run's items/s vs the baseline's, the ratio, its
                 basis (measured, same host?, same input?), latency when worse, the plan's
                 prediction; plainly marked when the compared (fitted) run loses
    correctness  items in / completed / outputs / failures per run; whether outputs match
    setup        the host each run had and the workload: pipeline, units, replicas, items
    summary      one row per run: status, items, wall seconds, items/s, latency, ratios
    throughput   measured source items/s over time per run (and the plan's prediction);
                 latency p50 / p95 per run beside it
    utilization  fleet utilization, cores busy of the host, MFU, server capacity; predicted
                 beside realized when a plan is given
    timeline     every worker's busy intervals per unit and run (grey where alive and idle)
    replicas     live replicas per unit over time, with each re-fit marked
    devices      accelerator utilization and memory over time, from device samples
    processes    memory, open files and shared memory of the run's processes over time
    queues       items waiting in front of each unit over time, per run
    cost         cost per million items per run, with the price's basis
    llm          (given an `LLMSection`) LLM serving plans beside their replays: planned and
                 replayed goodput, share within the SLOs, $/h and $/Mtok, TTFT and TPOT p90;
                 the TTFT and TPOT CDFs against the SLO; per plan the busy share of each
                 pool over time, its utilization figures, and where the replay departs

The run labelled ``monolithic`` (else the first) is the baseline; the others, those
labelled ``fitted`` first, are compared with it.  The arithmetic is in
`fitwork.report.figures`.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any, Literal

import numpy as np

from fitwork.errors import InputError
from fitwork.fit.monolithic import FUSED
from fitwork.fit.plan import Plan, PlanSide
from fitwork.hardware.catalog import Catalog, catalog
from fitwork.report.figures import (
    Refit,
    baseline_index,
    comparable,
    compare_hosts,
    compared,
    comparison_basis,
    completion_rates,
    cores_busy_of_host,
    cpu_seconds,
    device_figures,
    device_key,
    host_cores,
    outputs_match,
    refits,
    replica_steps,
    speedup,
)
from fitwork.report.svg import (
    BarSeries,
    GanttRow,
    LineSeries,
    Marker,
    bar_chart,
    colour,
    gantt,
    legend_height,
    line_chart,
)
from fitwork.telemetry.figures import merge_intervals, share
from fitwork.telemetry.record import DeviceSample, RunRecord
from fitwork.telemetry.utilization import RunFigures, run_figures

SECTIONS = ("headline", "correctness", "setup", "summary", "throughput", "utilization",
            "timeline", "replicas", "devices", "processes", "queues", "cost")
LLM_SECTION = "llm"
"""The id of the LLM serving section, after `SECTIONS` when the report is given one."""
CDF_POINTS = 200
THROUGHPUT_BUCKETS = 30
OFF_SCALE = 3.0  # a prediction above this many times the highest measured rate is not drawn
CHART_WIDTH = 1100
GIB = 2**30
MIB = 2**20
Tone = Literal["win", "lose", "mixed", "even", "doubt"]
ORDER: tuple[Tone, ...] = ("lose", "doubt", "mixed", "win")  # the tone of several comparisons
STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1180px;
       color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 32px; border-bottom: 1px solid #ccc; }
h3 { font-size: 14px; margin: 14px 0 4px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
p.basis { color: #555; font-size: 12px; margin: 4px 0 12px; }
p.verdict { font-size: 16px; margin: 8px 0; padding: 8px 12px;
            border-left: 6px solid #9a9a9a; background: #f6f6f6; }
p.verdict.win { border-color: #59a14f; background: #eef6ec; }
p.verdict.lose { border-color: #e15759; background: #fcebeb; }
p.verdict.doubt, p.verdict.mixed { border-color: #edc948; background: #fdf7e3; }
p.verdict strong { font-size: 17px; } span.details { color: #333; }
p.check { font-size: 14px; margin: 4px 0; padding: 6px 12px; border-left: 6px solid #59a14f;
          background: #f6f6f6; }
p.check.warn { border-color: #e15759; background: #fcebeb; }
p.check.unknown { border-color: #edc948; }
p.note { font-size: 13px; margin: 4px 0 8px; }
svg { display: block; margin: 6px 0; }
"""


def _fused(record: RunRecord) -> bool:
    """Whether the run ran its stages fused into one unit (a plan's fusion, or the
    monolithic baseline `Pipeline.fused` makes)."""
    if (record.placement or {}).get("fusion"):
        return True
    return len(record.units) == 1 and (FUSED in (record.pipeline, record.units[0].name)
                                       or record.units[0].name.endswith("_fused"))


def _side_of(record: RunRecord, plan: Plan) -> str | None:
    """The plan side a record ran (``fitted``, ``monolithic``), where its replicas tell."""
    if not _fused(record):
        names = {u.name for u in record.units}
        return "fitted" if names and names <= set(plan.units) else None
    replicas = record.units[0].replicas if record.units else 0
    fitted = sum(p.replicas for p in plan.fitted.result.replicas) if plan.fused else None
    mono = sum(p.replicas for p in plan.monolithic.result.replicas)
    if replicas == fitted and replicas != mono:
        return "fitted"
    if replicas == mono and replicas != fitted:
        return "monolithic"
    return None


def layout_label(record: RunRecord, plan: Plan | None = None) -> str:
    """The layout a run ran, in words: ``fitted`` or ``monolithic`` (a plan's side, where
    ``plan`` and the replicas tell), ``planned``, ``monolithic`` (fused, not planned) or
    ``split``; then what ran: the fused unit's replicas, or each unit's."""
    planned = (record.placement or {}).get("source") == "plan"
    fused = _fused(record)
    side = _side_of(record, plan) if plan is not None and planned else None
    if side is not None:
        kind = f"{side} (plan{', fused' if fused else ''})"
    elif planned:
        kind = "planned, fused" if fused else "planned"
    else:
        kind = "monolithic" if fused else "split"
    if fused:
        count = record.units[0].replicas if record.units else 0
        what = f"{count} replica{'s' if count != 1 else ''}"
    else:
        what = ", ".join(f"{u.name} x{u.replicas}" for u in record.units)
        what = f"{record.pipeline}: {what}" if what else record.pipeline
    return f"{kind} [{what}]"


def default_labels(records: Sequence[RunRecord], plan: Plan | None = None) -> list[str]:
    """Each record's layout (`layout_label`), with its engine where the runs' engines
    differ and its run id where two labels would be the same."""
    labels = [layout_label(r, plan) for r in records]
    if len({r.engine for r in records}) > 1:
        labels = [f"{label} on {r.engine}" for label, r in zip(labels, records, strict=True)]
    return [f"{label} ({r.run_id})" if labels.count(label) > 1 else label
            for label, r in zip(labels, records, strict=True)]


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


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.1f} ms"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}\u00d7"


def _rate(value: float) -> str:
    return f"{value:,.1f} items/s"


def _prediction(plan: Plan) -> str:
    predicted = speedup(plan.fitted.throughput, plan.monolithic.throughput)
    low, high = plan.fitted.throughput_range
    spread = f" (range {low:,.1f}-{high:,.1f})" if (low, high) != (
        plan.fitted.throughput, plan.fitted.throughput) else ""
    return (f"plan predicted {_times(predicted)}: fitted {_rate(plan.fitted.throughput)}"
            f"{spread} vs monolithic {_rate(plan.monolithic.throughput)}")


@dataclass(frozen=True)
class Headline:
    """The report's verdict: the comparison itself, the clauses that qualify it, its tone."""

    lead: str
    details: list[str]
    tone: Tone

    @property
    def text(self) -> str:
        """The verdict as one line."""
        return "; ".join([self.lead, *self.details])


def headline(records: Sequence[RunRecord], labels: Sequence[str],
             plan: Plan | None = None) -> Headline:
    """The report's verdict in one line, and its tone: ``win``, ``lose``, ``even``,
    ``mixed`` (more items/s but worse p95 latency), or ``doubt`` when the runs are not
    comparable at face value (see `comparable`).

    Each compared run against the baseline: items/s both, the ratio, and what it rests on;
    the compared run's p95 latency when it is worse; the plan's predicted ratio when given.
    """
    base = baseline_index(labels)
    b, b_label = records[base], labels[base]
    prediction = [_prediction(plan)] if plan is not None else []
    if len(records) == 1:
        if _empty(b):
            return Headline(f"{b_label}: {_empty_text(b)}; nothing measured to compare",
                            prediction, "doubt")
        return Headline(f"{b_label}: {_rate(b.throughput)} ({b.items_completed:,} items in "
                        f"{b.wall_s:.2f} s; measured, one run, nothing to compare with)",
                        prediction, "even")
    leads: list[str] = []
    details: list[str] = []
    tones: list[Tone] = []
    for index in compared(labels):
        c, c_label = records[index], labels[index]
        if _empty(b) or _empty(c):
            empty = [f"{label}: {_empty_text(r)}" for label, r in ((c_label, c), (b_label, b))
                     if _empty(r)]
            leads.append("NO COMPARISON: " + "; ".join(empty))
            tones.append("doubt")
            continue
        times = speedup(c.throughput, b.throughput)
        basis = ", ".join(comparison_basis(b, c))
        lead = (f"{c_label} {_rate(c.throughput)} vs {b_label} {_rate(b.throughput)}: "
                f"{_times(times)} ({basis})")
        if times is not None and 0 < times < 1:
            lead = f"{c_label} LOSES to {b_label}, {1 / times:.2f}\u00d7 slower: " + lead
            tones.append("lose")
        elif not comparable(b, c):
            lead = f"NOT LIKE FOR LIKE: {lead}"
            tones.append("doubt")
        else:
            tones.append("win" if times is not None and times > 1 else "even")
        leads.append(lead)
        worse = speedup(c.latency_p95_s, b.latency_p95_s)
        if worse is not None and worse > 1:
            if tones[-1] == "win":
                tones[-1] = "mixed"
            details.append(f"{c_label}'s p95 latency is {worse:.2f}\u00d7 worse "
                           f"({_ms(c.latency_p95_s)} vs {_ms(b.latency_p95_s)})")
    tone: Tone = next((t for t in ORDER if t in tones), "even")
    return Headline("; ".join(leads), details + prediction, tone)


def _empty(record: RunRecord) -> bool:
    """A run that settled no item or measured no time: nothing to take a rate from."""
    return record.items_completed <= 0 or record.wall_s <= 0 or record.throughput <= 0


def _empty_text(record: RunRecord) -> str:
    """What an empty or stopped run did, in words."""
    status = "run " + record.status.upper() if record.status != "completed" else "run ended"
    why = f" ({record.error})" if record.error else ""
    return (f"{status}{why} with {record.items_completed:,} of {record.items_in:,} items "
            f"completed in {record.wall_s:.2f} s, so no rate to compare")


def _headline(records: Sequence[RunRecord], labels: Sequence[str], plan: Plan | None,
              given: Headline | None = None) -> str:
    verdict = given or headline(records, labels, plan)
    details = "".join(f"; {escape(d)}" for d in verdict.details)
    return (f'<section id="headline"><p class="verdict {verdict.tone}">'
            f"<strong>{escape(verdict.lead)}</strong>"
            f'<span class="details">{details}</span></p></section>')


def correctness(records: Sequence[RunRecord], labels: Sequence[str]) -> tuple[str, str]:
    """What each run did with its items and whether the outputs match, in one line; and
    its tone: ``ok``, ``warn`` (a run failed items, stopped early or outputs differ) or
    ``unknown`` (outputs not checked)."""
    runs, trouble = [], False
    for label, r in zip(labels, records, strict=True):
        text = (f"{label} {r.items_in:,} in, {r.items_completed:,} completed, {r.outputs:,} "
                f"outputs, {r.failures:,} failures")
        if r.status != "completed":
            text += f" (run {r.status.upper()}" + (f": {r.error}" if r.error else "") + ")"
        trouble |= r.status != "completed" or r.failures > 0 or r.items_completed < r.items_in
        runs.append(text)
    check = outputs_match([r.output_digest for r in records])
    if check == "same":
        digest = records[0].output_digest or ""
        outputs = f"same outputs (digest {digest[:12]}{'...' if len(digest) > 12 else ''})"
    elif check == "different":
        outputs = "DIFFERENT OUTPUTS: " + ", ".join(
            f"{label} {(r.output_digest or 'none')[:12]}" for label, r in
            zip(labels, records, strict=True))
        trouble = True
    else:
        missing = [label for label, r in zip(labels, records, strict=True)
                   if not r.output_digest]
        outputs = ("outputs not checked (" + ("one run" if len(records) < 2 else
                   "no output digest recorded for " + ", ".join(missing)) + ")")
    tone = "warn" if trouble else "ok" if check == "same" else "unknown"
    return "Correctness: " + "; ".join(runs) + "; " + outputs, tone


def _correctness(records: Sequence[RunRecord], labels: Sequence[str]) -> str:
    text, tone = correctness(records, labels)
    mark = "\u26a0 " if tone == "warn" else ""
    return (f'<section id="correctness"><p class="check {tone}">{escape(mark + text)}</p>'
            "</section>")


def _memory(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value / GIB:,.1f} GiB" if value >= 2**20 else f"{value:g}"
    return "-" if value is None else str(value)


def _gpus(value: Any) -> str:
    """GPUs as a host lists them (names, or dicts with a name and memory), counted."""
    if not value:
        return "none"
    if not isinstance(value, list):
        return str(value)
    counts: dict[str, int] = {}
    for gpu in value:
        if isinstance(gpu, Mapping):
            name = str(gpu.get("name") or gpu.get("device_class") or "GPU")
            if gpu.get("memory") or gpu.get("memory_total"):
                name += f" ({_memory(gpu.get('memory') or gpu.get('memory_total'))})"
        else:
            name = str(gpu)
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} x {name}" for name, n in counts.items())


def _cpu(host: Mapping[str, Any]) -> str:
    model, kind = host.get("cpu_model"), host.get("cpu_class")
    if model and kind:
        return f"{model} ({kind})"
    return str(model or kind or "-")


def _replicas_text(record: RunRecord, unit: str, planned: int) -> str:
    counts = record.replicas.counts.get(unit) or []
    low, high = (min(counts), max(counts)) if counts else (planned, planned)
    return f"{planned}" if low == high == planned else f"{planned} ({low}-{high} over the run)"


def _setup(records: Sequence[RunRecord], labels: Sequence[str]) -> str:
    hosts = []
    for label, r in zip(labels, records, strict=True):
        started = datetime.datetime.fromtimestamp(r.started_at, datetime.UTC)
        h = r.host or {}
        cores = host_cores(r.host)
        hosts.append([label, str(h.get("name") or "not recorded"),
                      "-" if cores is None else f"{cores:g}", _memory(h.get("memory")),
                      _cpu(h), _gpus(h.get("gpus")) if h else "-", r.engine,
                      started.strftime("%Y-%m-%d %H:%M:%S UTC")])
    same = compare_hosts([r.host for r in records]) if len(records) > 1 else ""
    units = []
    for label, r in zip(labels, records, strict=True):
        placed = str((r.placement or {}).get("source") or "-")
        for u in r.units:
            units.append([label, u.name, u.kind, _replicas_text(r, u.name, u.replicas),
                          "-" if u.batch_size is None else f"{u.batch_size:,}",
                          f"{u.resources.get('cpu', 0.0):g}", f"{u.resources.get('gpu', 0.0):g}",
                          f"{u.items_in:,}", f"{u.items_out:,}", placed])
    items = ", ".join(f"{label} {r.items_in:,}" for label, r in zip(labels, records,
                                                                       strict=True))
    pipelines = ", ".join(dict.fromkeys(r.pipeline for r in records))
    return _section(
        "setup", "Host and workload",
        "<h3>Host</h3>",
        _table(["run", "host", "cores", "memory", "CPU", "GPUs", "engine", "started"], hosts,
               left=(0, 1, 4, 5, 6, 7)),
        _basis(f"Runs compared: {same}." if same else "As the run record describes its host."),
        "<h3>Workload</h3>",
        f'<p class="note">Pipeline {escape(pipelines)}; source items: {escape(items)}.</p>',
        _table(["run", "unit", "kind", "replicas", "batch size", "cores each", "GPU share each",
                "items in", "items out", "placement"], units, left=(0, 1, 2, 9)),
        _basis("Replicas as placed at the start; a range where re-fits changed them."))


def _summary(records: Sequence[RunRecord], labels: Sequence[str]) -> str:
    base = records[baseline_index(labels)]
    rows = []
    for label, r in zip(labels, records, strict=True):
        is_base = r is base
        rows.append([label, r.status, f"{r.items_completed:,}", f"{r.outputs:,}",
                     f"{r.wall_s:.2f}", f"{r.throughput:,.1f}",
                     "baseline" if is_base else _times(speedup(r.throughput, base.throughput)),
                     _ms(r.latency_p50_s), _ms(r.latency_p95_s),
                     "baseline" if is_base else
                     _times(speedup(r.latency_p95_s, base.latency_p95_s)),
                     f"{r.failures} ({r.poisoned} poison)"])
    return _section("summary", "Runs", _table(
        ["run", "status", "items", "outputs", "wall s", "items/s", "items/s vs baseline",
         "latency p50", "latency p95", "p95 vs baseline", "failures"], rows, left=(0, 1)),
        _basis("Ratios are each run's figure over the baseline's: above 1 is more items/s, "
               "or for latency, slower items."))


def _throughput(records: Sequence[RunRecord], labels: Sequence[str], plan: Plan | None,
                x_max: float) -> str:
    width = x_max / THROUGHPUT_BUCKETS
    series, notes = [], []
    for i, (label, record) in enumerate(zip(labels, records, strict=True)):
        done = record.completions
        if not done.times_s:
            notes.append(f"{label}: the record has no measured completions, so no curve.")
            continue
        points = [p for start, end, rate in completion_rates(done.times_s, done.completed,
                                                              width, record.wall_s)
                  for p in ((start, rate), (end, rate))]
        series.append(LineSeries(f"{label} ({record.throughput:,.1f} items/s overall)",
                                 points, colour(i)))
    peak = max([0.0] + [y for s in series for _, y in s.points])
    off_scale = []
    for side, grey in _predicted_sides(plan):
        if peak and side.throughput > OFF_SCALE * peak:
            off_scale.append(f"{side.label} {_rate(side.throughput)}")
            continue
        series.append(LineSeries(f"predicted: plan {side.label} ({side.throughput:,.1f})",
                                 [(0.0, side.throughput), (x_max, side.throughput)],
                                 _side_colour(side, labels, grey), dashed=True))
    chart = line_chart(series, x_max, width=CHART_WIDTH,
                       height=260 + legend_height([s.name for s in series], CHART_WIDTH),
                       label="Throughput over time (measured completions)",
                       x_caption="seconds from the start", y_caption="source items/s")
    parts = [chart, _basis(
        f"Source items settled per second in {width:.3g} s buckets, counted from each run's "
        "measured completions (the moments its feed frames settled).")]
    if off_scale:
        notes.append(f"The plan predicts {' and '.join(off_scale)}: more than {OFF_SCALE:g}"
                     f"\u00d7 the highest measured rate ({peak:,.1f} items/s), so the "
                     "prediction is left off this chart rather than flatten the measured "
                     "curves.")
    parts += [f'<p class="note">{escape(note)}</p>' for note in notes]
    latency = [BarSeries(label, {name: value * 1000 for name, value in
                                 (("p50", r.latency_p50_s), ("p95", r.latency_p95_s))
                                 if value is not None}, colour(i))
               for i, (label, r) in enumerate(zip(labels, records, strict=True))]
    latency = [s for s in latency if s.values]
    if latency:
        parts.append(bar_chart(["p50", "p95"], latency, width=CHART_WIDTH, percent=False,
                               unit=" ms", label="Item latency per run",
                               caption="milliseconds from an item's feed to its settling"))
        parts.append(f'<p class="note">{escape(_latency_line(records, labels))}</p>')
    else:
        parts.append(_basis("No latency figures in these records."))
    return _section("throughput", "Throughput and latency", *parts)


def _latency_line(records: Sequence[RunRecord], labels: Sequence[str]) -> str:
    base = baseline_index(labels)
    b, b_label = records[base], labels[base]
    lines = []
    for index in compared(labels):
        c = records[index]
        times = speedup(c.latency_p95_s, b.latency_p95_s)
        if times is None:
            continue
        verdict = (f"{times:.2f}\u00d7 WORSE" if times > 1 else
                   f"{1 / times:.2f}\u00d7 better" if 0 < times < 1 else "the same")
        lines.append(f"p95 latency: {labels[index]} {_ms(c.latency_p95_s)} vs {b_label} "
                     f"{_ms(b.latency_p95_s)}, {verdict} for {labels[index]} (p50 ratio "
                     f"{_times(speedup(c.latency_p50_s, b.latency_p50_s))})")
    return "; ".join(lines) or "One run: no latency ratio."


def _is_cpu_class(name: str, known: Catalog) -> bool:
    return known.get(name).is_cpu if name in known else name.startswith("cpu-")


def _host_use(records: Sequence[RunRecord], labels: Sequence[str],
              figures: Sequence[RunFigures], known: Catalog) -> list[str]:
    """Cores busy of the host beside fleet CPU utilization: a chart, a table, a caption.

    Cores allocated are at most the host's (what replicas declare beyond them does not
    exist); both shares are held to 100%, and each column says what it divides by.
    """
    rows, bars, notes = [], [], []
    for i, (label, r, f) in enumerate(zip(labels, records, figures, strict=True)):
        cpu_rows = [c for c in f.classes if _is_cpu_class(c.device_class, known)]
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
        rows.append([label, f"{used:,.2f}", f"{r.wall_s:.2f}", cells,
                     _pct(fleet if cpu_rows else None), "-" if cores is None else f"{cores:g}",
                     _pct(busy)])
        if busy is not None:
            bars.append(BarSeries(label, {"cores busy of the host": busy}, colour(i)))
        notes += [f"{label}: {c.note}" for c in cpu_rows if c.note]
    parts = []
    if bars:
        parts.append(bar_chart(["cores busy of the host"], bars, width=CHART_WIDTH,
                               label="Cores busy of the host",
                               caption="CPU seconds used / (host cores x wall seconds)"))
    parts.append(_table(["run", "CPU s used", "wall s", "cores allocated (at most the host's)",
                         "fleet CPU: CPU s / (cores allocated x wall s)", "host cores",
                         "cores busy: CPU s / (host cores x wall s)"], rows))
    parts.append(_basis(
        "Two different figures: fleet CPU is the share of the cores each run allocated that "
        "it kept busy; cores busy is the share of all the host's cores, the same "
        "denominator for every run on one host, so compare runs by it."
        + ("" if bars else " No record describes its host's cores, so there is no "
           "cores-busy figure.")))
    parts += [_basis(note) for note in notes]
    return parts


def _replicas(records: Sequence[RunRecord], labels: Sequence[str], colours: dict[str, str],
              x_max: float) -> str:
    parts, table = [], []
    for label, record in zip(labels, records, strict=True):
        found = refits(record)
        series = [LineSeries(unit, replica_steps(record.replicas.times_s, counts,
                                                 record.wall_s),
                             colours.get(unit, "#777777"), step=True, nudge=2.5 * i)
                  for i, (unit, counts) in enumerate(
                      (u, c) for u, c in record.replicas.counts.items() if c)]
        if not series:
            parts.append(_basis(f"{label}: no replica series in the record."))
            continue
        markers = [Marker(f.t_s, f"re-fit {n}", _refit_text(f))
                   for n, f in enumerate(found, start=1)]
        peak = max(y for s in series for _, y in s.points)
        parts.append(line_chart(series, x_max, width=CHART_WIDTH,
                                height=184 + legend_height([s.name for s in series],
                                                           CHART_WIDTH),
                                label=f"{label}: live replicas per unit"
                                + (f", {len(found)} re-fits" if found else ""),
                                x_caption="seconds from the start", y_caption="replicas",
                                y_max=peak + 1, markers=markers))
        table += [[label, f"{n}", f"{f.t_s:.2f}", f.reason,
                   ", ".join(f"{u} {a}->{b}" for u, (a, b) in f.changes().items()) or "none",
                   "-" if f.predicted_before is None else f"{f.predicted_before:,.1f}",
                   "-" if f.predicted_after is None else f"{f.predicted_after:,.1f}"]
                  for n, f in enumerate(found, start=1)]
    if table:
        parts.append(_table(["run", "re-fit", "at s", "reason", "replicas changed",
                             "predicted items/s before", "after"], table, left=(0, 3, 4)))
        parts.append(_basis("Dashed red lines mark re-fits (hover for the reason and the "
                            "prediction). Lines at one count are drawn a few pixels apart."))
    else:
        parts.append(_basis("No re-fits recorded: each unit kept the replicas it was placed "
                            "with, apart from restarts. Lines at one count are drawn a few "
                            "pixels apart."))
    return _section("replicas", "Replicas per unit over time", *parts)


def _refit_text(refit: Refit) -> str:
    changes = ", ".join(f"{u} {a} -> {b}" for u, (a, b) in refit.changes().items())
    predicted = ""
    if refit.predicted_before is not None or refit.predicted_after is not None:
        predicted = (f"; predicted {refit.predicted_before or 0:,.1f} -> "
                     f"{refit.predicted_after or 0:,.1f} items/s")
    return f"re-fit at {refit.t_s:.2f} s: {refit.reason}; {changes or 'no change'}{predicted}"


def _device_name(sample: DeviceSample) -> str:
    where = f"{sample.node} " if sample.node else ""
    return f"{where}GPU {sample.device} ({sample.name})"


def _devices(records: Sequence[RunRecord], labels: Sequence[str], x_max: float) -> str:
    if not any(r.device_samples for r in records):
        return _section("devices", "Accelerators (device samples)", _basis(
            "No device samples in these records: no GPU was sampled (none visible, or NVML "
            "not installed: pip install 'fitwork[nvml]')."))
    parts, rows = [], []
    for label, record in zip(labels, records, strict=True):
        if not record.device_samples:
            parts.append(_basis(f"{label}: no device samples."))
            continue
        devices: dict[tuple[str, int], list[DeviceSample]] = {}
        for sample in sorted(record.device_samples, key=lambda s: s.t_s):
            devices.setdefault(device_key(sample), []).append(sample)
        ordered = sorted(devices.items())
        busy = [LineSeries(_device_name(s[0]), [(x.t_s, x.utilization * 100) for x in s],
                           colour(i)) for i, (_, s) in enumerate(ordered)]
        memory = [LineSeries(f"{_device_name(s[0])} used", [(x.t_s, x.memory_used / GIB)
                                                              for x in s], colour(i))
                  for i, (_, s) in enumerate(ordered)]
        total = max(x.memory_total for x in record.device_samples) / GIB
        height = 204 + legend_height([s.name for s in memory], CHART_WIDTH)
        parts.append(line_chart(busy, x_max, width=CHART_WIDTH, height=height,
                                label=f"{label}: GPU utilization", y_max=100.0,
                                x_caption="seconds from the start",
                                y_caption="% of time a kernel ran"))
        parts.append(line_chart(memory, x_max, width=CHART_WIDTH, height=height,
                                label=f"{label}: GPU memory used (of {total:,.1f} GiB)",
                                y_max=total or None, x_caption="seconds from the start",
                                y_caption="GiB"))
        rows += [[label, f"{'' if d.node is None else d.node + ' '}GPU {d.device}", d.name,
                  f"{d.samples:,}", _pct(d.mean_utilization),
                  f"{d.peak_memory / GIB:,.2f} of {d.memory_total / GIB:,.1f} GiB",
                  "-" if d.mean_power_w is None else f"{d.mean_power_w:,.0f} W"]
                 for d in device_figures(record.device_samples)]
    parts.append(_table(["run", "device", "name", "samples", "mean utilization",
                         "peak memory", "mean power"], rows, left=(0, 1, 2)))
    parts.append(_basis("Read through NVML while the run went on: utilization is the share "
                        "of each sample period in which a kernel ran; memory is what the "
                        "device held, from every process."))
    return _section("devices", "Accelerators (device samples)", *parts)


def _processes(records: Sequence[RunRecord], labels: Sequence[str], x_max: float) -> str:
    """Memory, open files and shared memory of each run's processes over time."""
    if not any(r.process_samples for r in records):
        return _section("processes", "Processes over time", _basis(
            "No process samples in these records (written before fitwork sampled them)."))
    parts = []
    for label, record in zip(labels, records, strict=True):
        samples = sorted(record.process_samples, key=lambda s: s.t_s)
        if not samples:
            parts.append(_basis(f"{label}: no process samples."))
            continue
        memory = [
            LineSeries("driver RSS", [(s.t_s, s.driver_rss / MIB) for s in samples], colour(0)),
            LineSeries("largest worker RSS", [(s.t_s, s.worker_rss_max / MIB)
                                              for s in samples], colour(1)),
            LineSeries("/dev/shm", [(s.t_s, s.shm_bytes / MIB) for s in samples], colour(2))]
        handles = [
            LineSeries("driver open files", [(s.t_s, s.driver_fds) for s in samples],
                       colour(0)),
            LineSeries("workers' open files", [(s.t_s, s.worker_fds) for s in samples],
                       colour(1)),
            LineSeries("workers", [(s.t_s, s.workers) for s in samples], colour(3))]
        height = 204 + legend_height([s.name for s in memory], CHART_WIDTH)
        parts.append(line_chart(memory, x_max, width=CHART_WIDTH, height=height,
                                label=f"{label}: memory", x_caption="seconds from the start",
                                y_caption="MiB"))
        parts.append(line_chart(handles, x_max, width=CHART_WIDTH, height=height,
                                label=f"{label}: open files and workers",
                                x_caption="seconds from the start", y_caption="count"))
    parts.append(_basis(
        "Sampled by the driver every half second or so (a long run keeps at most 1,000 "
        "samples, thinning older ones). A worker's RSS includes what it shares with the "
        "driver it was forked from; the memory watchdog judges a worker by its own memory. "
        "The last sample is taken after the run let its workers and shared memory go."))
    return _section("processes", "Processes over time", *parts)


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
            busy_share = share(w.busy_s, end - w.started_s)
            rows.append(GanttRow(
                label=f"{w.unit} #{w.worker_id}", group=w.unit, alive=(w.started_s, end),
                busy=busy, colour=colours[w.unit],
                tooltip=f"{w.unit} worker {w.worker_id} (pid {w.pid}"
                        + (f" on {w.node}" if w.node else "") + f"): busy {w.busy_s:.2f} s "
                        f"of {end - w.started_s:.2f} s alive ({busy_share:.0%}), "
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


def _utilization(records: Sequence[RunRecord], labels: Sequence[str],
                 figures: Sequence[RunFigures], plan: Plan | None, known: Catalog) -> str:
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
                                      for c in f.classes}))),
             *_host_use(records, labels, figures, known)]
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
                               caption="achieved items/s / the most these servers sustain "
                                       "(at most 100%)"))
        parts.append(_basis("; ".join(sorted({f.capacity_basis for f in figures
                                              if f.capacity_basis}))))
        parts += [_basis(f"{label}: {f.capacity_note}")
                  for label, f in zip(labels, figures, strict=True) if f.capacity_note]
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
    parts += [_basis(f"{label}, {c.device_class}: {c.note}")
              for label, f in zip(labels, figures, strict=True) for c in f.classes
              if c.note and not _is_cpu_class(c.device_class, known)]
    return _section("utilization", "Utilization: fleet, host, MFU, server capacity (never "
                    "mixed)", *parts)


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


@dataclass(frozen=True)
class LLMPool:
    """One pool of an LLM serving plan as replayed (``name`` e.g. ``decode A100-80GB TP2
    x26``): its busy share per time bin, and over the replay its fleet utilization
    (``busy``), MFU (``compute``), server capacity and HBM bandwidth over peak."""

    name: str
    busy_over_time: Sequence[float]
    busy: float
    compute: float
    capacity: float
    bandwidth: float


@dataclass(frozen=True)
class LLMRun:
    """One LLM serving plan beside its replay: GPUs and $/h, goodput (requests/s within
    both SLOs), the share of requests within both, $/Mtok, TTFT and TPOT p90 (seconds;
    ``None`` where not predicted), every request's TTFT and TPOT as replayed, the pools over
    time bins of ``bin_s`` seconds, ``notes`` on where the replay departs from the plan and
    the pools whose timings are ``transferred`` rather than measured."""

    label: str
    gpus: int
    cost_per_hour: float
    goodput_planned: float
    goodput_replayed: float
    attained: float
    cost_per_million_planned: float | None
    cost_per_million_replayed: float | None
    ttft_p90_planned: float | None
    ttft_p90_replayed: float | None
    tpot_p90_planned: float | None
    tpot_p90_replayed: float | None
    ttft_values: Sequence[float]
    tpot_values: Sequence[float]
    pools: Sequence[LLMPool]
    bin_s: float
    duration_s: float
    notes: Sequence[str] = ()
    transferred: Sequence[str] = ()


@dataclass(frozen=True)
class LLMSection:
    """What the ``llm`` section shows: ``model`` served on ``trace`` under the SLOs (p90
    seconds), one `LLMRun` per plan (`fitwork.llm.report.llm_report_section` builds it)."""

    model: str
    trace: str
    ttft_slo: float
    tpot_slo: float
    runs: Sequence[LLMRun] = field(default_factory=tuple)


def _cdf(values: Sequence[float]) -> list[tuple[float, float]]:
    """Up to ``CDF_POINTS`` points of the empirical CDF (x: value, y: share at or below)."""
    if not len(values):
        return []
    shares = np.linspace(0.0, 1.0, CDF_POINTS)
    xs = np.quantile(np.asarray(values, dtype=float), shares)
    return [(float(x), float(y)) for x, y in zip(xs, shares, strict=True)]


def _llm_money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.3f}"


def _pair(planned: float | None, replayed: float | None, scale: float, digits: int) -> str:
    def one(v: float | None) -> str:
        return "-" if v is None else f"{v * scale:.{digits}f}"

    return f"{one(planned)} / {one(replayed)}"


def _llm_cdf(section: LLMSection, key: str, name: str, scale: float, unit: str) -> str:
    slo = (section.ttft_slo if key == "ttft" else section.tpot_slo) * scale
    top = slo * 1.5
    series = []
    for i, run in enumerate(section.runs):
        points = [(x * scale, y) for x, y in
                  _cdf(run.ttft_values if key == "ttft" else run.tpot_values)]
        if points:
            top = max(top, min(points[-1][0], 4 * slo))
            series.append((run.label, points, colour(i)))
    lines = [LineSeries(label, [(min(x, top), y) for x, y in points], c)
             for label, points, c in series]
    return line_chart(lines, top, label=f"{name} CDF against the SLO",
                      height=240 + legend_height([s.name for s in lines]),
                      x_caption=f"{name} ({unit}), longer drawn at {top:.3g} {unit}",
                      y_caption="share of requests", y_max=1.0,
                      markers=[Marker(slo, f"SLO {slo:g} {unit}",
                                      f"{name} p90 target {slo:g} {unit}")])


def _llm_pools(run: LLMRun) -> str:
    lines = [LineSeries(pool.name, [((k + 0.5) * run.bin_s, min(1.0, max(0.0, v)))
                                    for k, v in enumerate(pool.busy_over_time)], colour(i))
             for i, pool in enumerate(run.pools)]
    chart = line_chart(lines, max(run.duration_s, run.bin_s),
                       label=f"{run.label}: busy share per pool",
                       height=240 + legend_height([s.name for s in lines]),
                       x_caption=f"time (s), bins of {run.bin_s:.3g} s",
                       y_caption="busy share", y_max=1.0)
    table = _table([f"{run.label}: pool", "busy (fleet utilization)", "MFU",
                    "server capacity", "HBM bandwidth of peak"],
                   [[p.name, *(f"{min(1.0, max(0.0, v)):.0%}" for v in
                               (p.busy, p.compute, p.capacity, p.bandwidth))]
                    for p in run.pools])
    notes = "<pre>" + escape("\n".join(run.notes)) + "</pre>" if run.notes else ""
    return f"<h3>{escape(run.label)}</h3>" + chart + table + notes


def llm_section(section: LLMSection) -> str:
    """The ``llm`` section: the cost table, the TTFT and TPOT CDFs against the SLO, and per
    plan the busy share of each pool over time with its utilization figures."""
    if not section.runs:
        raise InputError("an LLM section needs at least one plan and its replay")
    parts = [f'<p class="note">{escape(section.model)} on trace {escape(section.trace)}; '
             f"SLO TTFT p90 {section.ttft_slo:g} s, TPOT p90 {section.tpot_slo * 1e3:g} ms. "
             "Goodput: requests/s served within both SLOs; $/Mtok over prompt + output "
             "tokens.</p>"]
    parts += [_basis(f"{run.label}: not measured, transferred: {'; '.join(run.transferred)}")
              for run in section.runs if run.transferred]
    rows = [[run.label, f"{run.gpus}", f"${run.cost_per_hour:,.2f}",
             f"{run.goodput_planned:.3f}", f"{run.goodput_replayed:.3f}",
             f"{run.attained:.1%}", _llm_money(run.cost_per_million_planned),
             _llm_money(run.cost_per_million_replayed),
             _pair(run.ttft_p90_planned, run.ttft_p90_replayed, 1.0, 3),
             _pair(run.tpot_p90_planned, run.tpot_p90_replayed, 1e3, 1)]
            for run in section.runs]
    parts.append(_table(["plan", "GPUs", "$/h", "goodput plan", "goodput replay",
                         "within SLO", "$/Mtok plan", "$/Mtok replay",
                         "TTFT p90 plan / replay (s)", "TPOT p90 plan / replay (ms)"], rows))
    parts.append(_llm_cdf(section, "ttft", "TTFT", 1.0, "s"))
    parts.append(_llm_cdf(section, "tpot", "TPOT", 1e3, "ms"))
    parts += [_llm_pools(run) for run in section.runs]
    return _section(LLM_SECTION, "LLM serving: plan and replay", *parts)


def render_report(records: list[RunRecord], labels: list[str] | None = None,
                  plan: Plan | None = None, figures: list[RunFigures] | None = None, *,
                  price_per_hour: float | None = None,
                  classes: Mapping[str, str] | None = None, title: str | None = None,
                  known: Catalog | None = None, llm: LLMSection | None = None,
                  verdict: Headline | None = None) -> str:
    """The report of ``records`` (e.g. labels ``["monolithic", "fitted"]``) as one HTML page.

    ``verdict`` replaces the headline worked out from the records, for a caller whose
    verdict rests on more runs than the records shown (the demo's median of N trials), so
    that the page states the same verdict as the caller's other outputs.

    ``figures`` default to `run_figures` of each record with ``plan`` and ``classes`` (unit
    -> device class); the cost uses ``price_per_hour`` when given, else the plan's nodes,
    else the catalog price of the devices each run allocated.  ``llm`` adds the LLM serving
    section after the others; with it, ``records`` may be empty (a page of that section).
    """
    if not records and llm is not None:
        title = title or f"fitwork report: LLM serving, {llm.model} on {llm.trace}"
        return _page(title, [f"<h1>{escape(title)}</h1>", llm_section(llm)])
    if not records:
        raise InputError("a report needs at least one run record (or an LLM section)")
    labels = labels or default_labels(records, plan)
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
        _headline(records, labels, plan, verdict),
        _correctness(records, labels),
        _setup(records, labels),
        _summary(records, labels),
        _throughput(records, labels, plan, x_max),
        _utilization(records, labels, figures, plan, known),
        _timeline(records, labels, colours, x_max),
        _replicas(records, labels, colours, x_max),
        _devices(records, labels, x_max),
        _processes(records, labels, x_max),
        _queues(records, labels, colours, x_max),
        _cost(records, labels, figures, plan, price_per_hour, known),
    ]
    if llm is not None:
        body.append(llm_section(llm))
    return _page(title, body)


def _page(title: str, body: Sequence[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
